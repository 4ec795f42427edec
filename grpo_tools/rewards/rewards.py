"""The tool-use reward model: named rewards that score a completion's tool calls against a row's gold calls.

The named rewards and their registry (`REWARDS`, `get_reward_funcs`); each reward's scorer is in
`grpo_tools.rewards.scorers` (the decision reward's in `grpo_tools.rewards.decision`), a row's gold reference is
prepared by `grpo_tools.rewards.gold`, calls are paired and compared by `grpo_tools.rewards.matching` and BFCL's rules
applied by `grpo_tools.rewards.bfcl`.

Every reward has trl's signature (`completions` plus the dataset columns as keyword arguments) and returns one float
per completion, so each can be passed as `reward_funcs` to a plain `trl.GRPOTrainer`. Under the hood each is a
scorer `(ParseResult, Gold) -> Verdict`: the score and the error kinds that explain each lost credit. The exact
semantics are in docs/rewards.md ("The rewards"); the short version is in each scorer's docstring.

A malformed *gold* row (answers, possible answers, tools) raises `GoldError` naming the row; a malformed *completion*
only ever scores lower.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from grpo_tools.rewards.decision import DecisionValues, score_decision
from grpo_tools.rewards.gold import ERROR_KINDS, Gold, GoldError, Verdict, make_gold
from grpo_tools.rewards.parsing import ParseResult
from grpo_tools.rewards.scorers import (
    argument_checks,
    parse_completion,
    score_bfcl,
    score_exact,
    score_format,
    score_partial,
    score_schema,
)


__all__ = [
    "ERROR_KINDS",
    "REWARDS",
    "Gold",
    "GoldError",
    "RewardSpec",
    "Verdict",
    "argument_checks",
    "get_reward_funcs",
    "get_tool_decision_reward",
    "make_gold",
    "score_completion",
    "tool_bfcl_reward",
    "tool_decision_reward",
    "tool_exact_reward",
    "tool_format_reward",
    "tool_partial_reward",
    "tool_schema_reward",
]


# ---------------------------------------------------------------------------------------------------------------
# trl-facing reward functions and the registry


Scorer = Callable[[ParseResult, Gold], Verdict]


def _row_name(index: int, ids: Sequence[Any] | None) -> str:
    return f"row {index} (id={ids[index]})" if ids is not None and index < len(ids) else f"row {index}"


def score_batch(
    scorer: Scorer,
    completions: Sequence[Any],
    tools: Sequence[Any],
    answers: Sequence[Any],
    possible_answers: Sequence[Any] | None,
    kwargs: dict[str, Any],
    name: str | None = None,
) -> list[float]:
    """Score a batch the way trl passes it; report the share of completions with each error kind via `log_metric`,
    under the reward's registry `name` (found from `scorer` when not given)."""
    ids = kwargs.get("id")
    possible = possible_answers if possible_answers is not None else [None] * len(completions)
    verdicts: list[Verdict] = []
    append = verdicts.append
    # Answers first: where consecutive rows differ, they differ there soonest (rows often share their tools).
    rows = list(zip(answers, possible, tools, strict=True))
    same, last = False, len(rows) - 1  # whether this row equals the last one; the last row's index
    for i, (completion, row) in enumerate(zip(completions, rows, strict=True)):
        # trl passes the completions of one prompt together: a row equal to the last one (a comparison, cheaper
        # than hashing its columns again) reuses its gold, and a gold the next completion reuses is marked `shared`,
        # so that a scorer prepares what it will read again (a row read once, as `score` reads it, prepares nothing).
        if not same:
            gold = make_gold(row[2], row[0], row[1], row=_row_name(i, ids))
            same = i < last and rows[i + 1] == row
            if same:
                gold.memoized["shared"] = True
        else:
            same = i < last and rows[i + 1] == row
        append(scorer(parse_completion(completion, gold), gold))
    log_metric = kwargs.get("log_metric")
    if log_metric is not None and verdicts:
        counts = Counter(kind for verdict in verdicts for kind in set(verdict.errors))
        name = name or next(name for name, spec in REWARDS.items() if spec.scorer is scorer)
        for kind in ERROR_KINDS[:-1]:
            log_metric(f"{name}/{kind}", counts[kind] / len(verdicts))
    return [verdict.score for verdict in verdicts]


def tool_format_reward(
    completions: Sequence[Any], tools: Sequence[Any], answers: Sequence[Any], possible_answers=None, **kwargs
) -> list[float]:
    """1.0 per completion whose calls all parse and name offered tools (see `score_format`).

    >>> tools = [[{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}]]
    >>> tool_format_reward(['<tool_call>{"name": "f", "arguments": {}}</tool_call>'], tools, [[{"name": "f"}]])
    [1.0]
    """
    return score_batch(score_format, completions, tools, answers, possible_answers, kwargs)


def tool_schema_reward(
    completions: Sequence[Any], tools: Sequence[Any], answers: Sequence[Any], possible_answers=None, **kwargs
) -> list[float]:
    """Fraction of each completion's calls whose arguments validate against the tool schema (see `score_schema`)."""
    return score_batch(score_schema, completions, tools, answers, possible_answers, kwargs)


def tool_exact_reward(
    completions: Sequence[Any], tools: Sequence[Any], answers: Sequence[Any], possible_answers=None, **kwargs
) -> list[float]:
    """1.0 per completion whose calls equal the gold calls as a multiset (see `score_exact`).

    >>> tools = [[{"type": "function", "function": {"name": "f", "parameters": {"type": "object",
    ...           "properties": {"x": {"type": "number"}}}}}]] * 2
    >>> answers = [[{"name": "f", "arguments": {"x": 2.0}}]] * 2
    >>> tool_exact_reward(["[f(x=2)]", "[f(x=3)]"], tools, answers)
    [1.0, 0.0]
    """
    return score_batch(score_exact, completions, tools, answers, possible_answers, kwargs)


def tool_partial_reward(
    completions: Sequence[Any], tools: Sequence[Any], answers: Sequence[Any], possible_answers=None, **kwargs
) -> list[float]:
    """Partial credit in [0, 1] for names, argument names and values (see `score_partial`).

    >>> tools = [[{"type": "function", "function": {"name": "f", "parameters": {"type": "object",
    ...           "properties": {"a": {"type": "string"}, "b": {"type": "string"}}}}}]]
    >>> tool_partial_reward(['[f(a="x", b="wrong")]'], tools, [[{"name": "f", "arguments": {"a": "x", "b": "y"}}]])
    [0.8333333333333334]
    """
    return score_batch(score_partial, completions, tools, answers, possible_answers, kwargs)


def tool_bfcl_reward(
    completions: Sequence[Any], tools: Sequence[Any], answers: Sequence[Any], possible_answers=None, **kwargs
) -> list[float]:
    """1.0 per completion correct under the BFCL AST rules (see `score_bfcl`)."""
    return score_batch(score_bfcl, completions, tools, answers, possible_answers, kwargs)


def get_tool_decision_reward(values: DecisionValues | None = None) -> Callable[..., list[float]]:
    """The decision reward as a trl reward function, paying `values` (TruthRL's +1 / 0 / -1 by default).

    >>> tools = [[{"type": "function", "function": {"name": "f", "parameters": {"type": "object",
    ...           "properties": {"x": {"type": "integer"}}, "required": ["x"]}}}]] * 4
    >>> answers = [[{"name": "f", "arguments": {"x": 1}}]] * 3 + [[]]
    >>> reward = get_tool_decision_reward(DecisionValues(abstain=0.0, wrong=-1.0))
    >>> reward(["[f(x=1)]", "I cannot tell.", "[f(x=2)]", "[f(x=1)]"], tools, answers)
    [1.0, 0.0, -1.0, -1.0]
    """
    scorer = partial(score_decision, values=values or DecisionValues())

    def tool_decision_reward(completions, tools, answers, possible_answers=None, **kwargs) -> list[float]:
        return score_batch(scorer, completions, tools, answers, possible_answers, kwargs, name="tool_decision")

    return tool_decision_reward


def tool_decision_reward(completions, tools, answers, possible_answers=None, **kwargs) -> list[float]:
    """The decision reward with TruthRL's values: on a row that needs a call, the right call +1, no call 0, a wrong
    call -1; on a row that needs none, no call +1 and any call -1 (see `score_decision`)."""
    return score_batch(score_decision, completions, tools, answers, possible_answers, kwargs, name="tool_decision")


@dataclass(frozen=True)
class RewardSpec:
    """A registered reward: the trl reward function, its scorer, and one line for help texts."""

    function: Callable[..., list[float]]
    scorer: Scorer
    description: str


REWARDS: dict[str, RewardSpec] = {
    "tool_format": RewardSpec(
        tool_format_reward, score_format, "every attempted call parses and names an offered tool"
    ),
    "tool_schema": RewardSpec(tool_schema_reward, score_schema, "fraction of calls whose arguments fit the schema"),
    "tool_exact": RewardSpec(tool_exact_reward, score_exact, "the calls equal the gold calls (any order)"),
    "tool_partial": RewardSpec(tool_partial_reward, score_partial, "partial credit for names, argument names, values"),
    "tool_bfcl": RewardSpec(tool_bfcl_reward, score_bfcl, "the Berkeley Function Calling Leaderboard's AST rules"),
    "tool_decision": RewardSpec(
        tool_decision_reward,
        score_decision,
        "the decision to call (TruthRL): right call +1, no call 0, wrong call -1; where no call is right, none +1, "
        "any -1",
    ),
}


def get_reward_funcs(names: Sequence[str]) -> list[Callable[..., list[float]]]:
    """The trl reward functions for registry names, e.g. `get_reward_funcs(["tool_format", "tool_exact"])`."""
    unknown = [name for name in names if name not in REWARDS]
    if unknown:
        raise ValueError(f"unknown reward(s) {', '.join(map(repr, unknown))}; choose from {', '.join(REWARDS)}")
    return [REWARDS[name].function for name in names]


def score_completion(reward: str, completion: Any, gold: Gold) -> Verdict:
    """Score one completion against one prepared gold row under a named reward (used by scoring and eval)."""
    return REWARDS[reward].scorer(parse_completion(completion, gold), gold)
