"""The settings of the decision to call, a part of `ToolGRPOConfig` (which inherits them): what the `tool_decision`
reward pays for each outcome, the advantage's baseline, and the share of prompts that need no call.

docs/rewards.md ("The decision to call") and docs/configuration.md say what each does and where it comes from.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Literal

from grpo_tools.rewards.decision import DECISION_JUDGES, DecisionValues
from grpo_tools.training.errors import ConfigError


__all__ = ["DecisionArguments"]

logger = logging.getLogger(__name__)

# Rewards that pay a wrong call on a call row more than an abstention (an abstention earns 0 from each).
_PAY_WRONG_CALLS = ("tool_format", "tool_schema", "tool_partial")


@dataclass
class DecisionArguments:
    """What `tool_decision` pays, the advantage's baseline and balanced sampling (see the module docstring)."""

    decision_right: float = field(
        default=1.0, metadata={"help": "tool_decision: a row that needs a call, answered with the right call."}
    )
    decision_abstain: float = field(
        default=0.0, metadata={"help": "tool_decision: a row that needs a call, answered with no call."}
    )
    decision_wrong: float = field(
        default=-1.0,
        metadata={
            "help": "tool_decision: a row that needs a call, answered with a wrong call (wrong function, arguments or "
            "count, or a call that does not parse). TruthRL (arXiv 2509.25760): +1 / 0 / -1."
        },
    )
    decision_quiet: float = field(
        default=1.0, metadata={"help": "tool_decision: a row that needs no call, answered with no call."}
    )
    decision_unexpected: float = field(
        default=-1.0, metadata={"help": "tool_decision: a row that needs no call, answered with a call."}
    )
    decision_partial: float = field(
        default=0.0,
        metadata={
            "help": "tool_decision: the share, in [0, 1], of the gap from decision_wrong to decision_abstain that a "
            "wrong call's partial credit (tool_partial) fills; never above abstaining."
        },
    )
    decision_judge: Literal["bfcl", "exact"] = field(
        default="bfcl",
        metadata={"help": "What decides that a call is right, for tool_decision and the decision/ metrics."},
    )
    advantage_baseline: Literal["group", "batch", "class"] = field(
        default="group",
        metadata={
            "help": "What each completion's reward is measured against: `group` (trl's: its prompt's samples), "
            "`batch` (every completion of the step, as REINFORCE++, arXiv 2501.03262) or `class` (the completions of "
            "rows of its class: needs a call, needs none; it reads `answers`). Under `batch` a group whose samples "
            "agree still teaches; under `class` only where its class's other rows earn otherwise. With "
            "`scale_rewards` other than none, divided by the batch's std."
        },
    )
    no_call_share: float | None = field(
        default=None,
        metadata={
            "help": "Share of the prompts drawn from rows that need no call, exact over a run (a batch that cannot "
            "hold it in whole prompts holds it rounded down or up, in turn); unset: trl's uniform shuffle."
        },
    )

    def decision_values(self) -> DecisionValues:
        """What `tool_decision` pays, as set here."""
        return DecisionValues(
            right=self.decision_right,
            abstain=self.decision_abstain,
            wrong=self.decision_wrong,
            quiet=self.decision_quiet,
            unexpected=self.decision_unexpected,
            partial=self.decision_partial,
            judge=self.decision_judge,
        )

    def check_decision_arguments(self: Any) -> None:
        """Refuse settings that cannot work together; warn where other rewards pay a wrong call above abstaining."""
        if self.decision_judge not in DECISION_JUDGES:
            raise ConfigError(
                f"decision_judge must be one of {', '.join(DECISION_JUDGES)}, got {self.decision_judge!r}"
            )
        try:
            values = self.decision_values()
        except ValueError as error:
            raise ConfigError(str(error)) from None
        if self.advantage_baseline not in ("group", "batch", "class"):
            raise ConfigError(f"advantage_baseline must be group, batch or class, got {self.advantage_baseline!r}")
        if self.advantage_baseline != "group":
            if self.skip_zero_std_groups:
                raise ConfigError(
                    f"skip_zero_std_groups drops the groups whose samples agree, which advantage_baseline "
                    f"{self.advantage_baseline} is there to teach; turn one of them off"
                )
            if self.multi_objective_aggregation != "sum_then_normalize":
                raise ConfigError(
                    f"advantage_baseline {self.advantage_baseline} needs multi_objective_aggregation "
                    f"sum_then_normalize, got {self.multi_objective_aggregation}"
                )
        if self.no_call_share is not None and not 0.0 <= self.no_call_share <= 1.0:
            raise ConfigError(f"no_call_share must lie in [0, 1], got {self.no_call_share}")
        if "tool_decision" in self.reward_funcs:
            self._warn_wrong_calls_paid(values)

    def _warn_wrong_calls_paid(self: Any, values: DecisionValues) -> None:
        weights = self.reward_weights or [1.0] * len(self.reward_funcs)
        weight = dict(zip(self.reward_funcs, weights, strict=True))
        decision = weight["tool_decision"]
        extra = sum(max(weight[name], 0.0) for name in _PAY_WRONG_CALLS if name in weight)
        # The most a wrong call can earn against what an abstention earns, both weighted.
        worst_gap = decision * (values.abstain - values.wrong) * (1.0 - values.partial)
        if extra > worst_gap:
            logger.warning(
                "reward_funcs %s pay a wrong call up to %.3g more than tool_decision's gap to abstaining (%.3g): a "
                "well-formed wrong call can earn more than no call, which teaches calling when unsure",
                [name for name in _PAY_WRONG_CALLS if name in weight],
                extra,
                worst_gap,
            )
