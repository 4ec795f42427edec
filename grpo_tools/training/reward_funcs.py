"""Every reward `reward_funcs` can name, in one registry: the call rewards of `grpo_tools.rewards` (`REWARDS`, which
`score` and `eval` also read) and the multi-turn rewards of `grpo_tools.tools.trajectories`, which read a whole
trajectory and so live above the rewards layer. `ToolGRPOConfig.reward_funcs` builds its help and choices from
`REWARD_FUNCS`; `training_rewards` turns a configuration into the functions the trainer is given.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from grpo_tools.rewards import REWARDS, get_tool_decision_reward
from grpo_tools.tools.bfcl_turn_reward import bfcl_turn_reward, get_bfcl_turn_reward
from grpo_tools.tools.trajectories import extra_calls_reward, outcome_reward, trajectory_reward
from grpo_tools.training.errors import ConfigError


__all__ = ["REWARD_FUNCS", "RewardFunc", "check_reward_rows", "training_rewards"]


@dataclass(frozen=True)
class RewardFunc:
    """A reward `reward_funcs` can name: its trl reward function, one line for help texts, and whether it scores
    multi-turn trajectories only."""

    function: Callable[..., list[float]]
    description: str
    multi_turn_only: bool = False


REWARD_FUNCS: dict[str, RewardFunc] = {
    **{name: RewardFunc(spec.function, spec.description) for name, spec in REWARDS.items()},
    "outcome": RewardFunc(outcome_reward, "multi-turn: 1 when the final answer matches the row's `expected`", True),
    "extra_calls": RewardFunc(extra_calls_reward, "multi-turn: minus the calls beyond the row's gold calls", True),
    "bfcl_turn": RewardFunc(
        bfcl_turn_reward,
        "BFCL per-turn rows: BFCL's state and response checks on the turn after running its calls (1 or 0; "
        "options bfcl_partial_credit, bfcl_extra_call_cost)",
    ),
}


def training_rewards(
    training_args: Any, multi_turn: bool
) -> tuple[list[Callable[..., list[float]]], list[tuple[Callable[..., list[float]], float]]]:
    """The reward functions `training_args.reward_funcs` names (weighted by `reward_weights`), and the ones to add
    with their own weights (`ToolGRPOTrainer.add_reward_func`).

    On multi-turn rows each call reward scores all the calls of a trajectory (`trajectory_reward`), and the outcome
    reward (weight `outcome_reward_weight`) and the extra-call cost (`extra_call_cost`) are added unless the recipe
    names `outcome` or `extra_calls` itself (then its weight is its `reward_weights` entry). On single-turn rows a
    multi-turn reward is refused: there is no trajectory to score. `tool_decision` pays what the configuration's
    `decision_*` settings say (TruthRL's +1 / 0 / -1 where it has none)."""
    names = list(training_args.reward_funcs)
    unknown = [name for name in names if name not in REWARD_FUNCS]
    if unknown:
        raise ConfigError(f"unknown reward_funcs {unknown}; choose from {', '.join(REWARD_FUNCS)}")
    if not multi_turn:
        trajectory_only = [name for name in names if REWARD_FUNCS[name].multi_turn_only]
        if trajectory_only:
            raise ConfigError(
                f"reward_funcs {', '.join(trajectory_only)} scores multi-turn trajectories; these rows are single-turn "
                "(no `env`)"
            )
        return [_call_reward(name, training_args) for name in names], []
    if "bfcl_turn" in names:
        raise ConfigError(
            "reward_funcs bfcl_turn scores BFCL's per-turn rows; these rows are multi-turn conversations"
        )
    functions = [
        REWARD_FUNCS[name].function
        if REWARD_FUNCS[name].multi_turn_only
        else trajectory_reward(_call_reward(name, training_args))
        for name in names
    ]
    own_weights = {"outcome": training_args.outcome_reward_weight, "extra_calls": training_args.extra_call_cost}
    added = [(REWARD_FUNCS[name].function, weight) for name, weight in own_weights.items() if name not in names]
    return functions, added


def _call_reward(name: str, training_args: Any) -> Callable[..., list[float]]:
    if name == "bfcl_turn":
        partial_credit = getattr(training_args, "bfcl_partial_credit", "none")
        budget = training_args.completion_budget() if hasattr(training_args, "completion_budget") else None
        return get_bfcl_turn_reward(partial_credit, getattr(training_args, "bfcl_extra_call_cost", 0.0), budget)
    values = getattr(training_args, "decision_values", None)
    if name == "tool_decision" and values is not None:
        return get_tool_decision_reward(values())
    return REWARDS[name].function


def check_reward_rows(names: Any, rows: Any, source: str | None = None) -> None:
    """Refuse `bfcl_turn` on rows that are not BFCL's per-turn rows (`env.turn`, `env.ground_truth`), naming the file
    (`source`), the first such row and the field, before a model loads rather than at the first reward."""
    if "bfcl_turn" not in names:
        return
    for number, row in enumerate(rows, start=1):
        env = row.get("env")
        missing = [key for key in ("turn", "ground_truth") if not isinstance(env, dict) or key not in env]
        if missing:
            where = f"{source}: " if source else ""
            raise ConfigError(
                f"reward_funcs bfcl_turn: {where}row {number} (id={row.get('id')}): env.{missing[0]}: missing, so it "
                "is not a per-turn BFCL row; write them with `grpo-tools convert --from bfcl multi_turn_base --per-turn`"
            )
