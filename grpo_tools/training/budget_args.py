"""What one completion may cost where its calls run, a part of `ToolGRPOConfig` (which inherits these settings): each
field is a limit of `grpo_tools.rewards.budget.Budget`, used by the `bfcl_turn` reward (and, for one call's arguments,
by the MCP executor, through `MCPArguments.mcp_settings`). Past a limit the completion scores as wrong and the step
logs `budget/<kind>`. docs/multi-turn.md ("What one completion may cost") says what each bounds and why the defaults
are far beyond what a model doing its task writes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from grpo_tools.rewards.budget import BUDGET_KINDS, DEFAULT_BUDGET, Budget, take_hit_counts
from grpo_tools.training.errors import ConfigError


__all__ = ["BudgetArguments", "step_budget_hits"]


@dataclass
class BudgetArguments:
    """The limits of one completion's calls (see the module docstring)."""

    budget_calls_per_step: int = field(
        default=DEFAULT_BUDGET.calls_per_step, metadata={"help": "Most calls in one model response."}
    )
    budget_calls_per_turn: int = field(
        default=DEFAULT_BUDGET.calls_per_turn, metadata={"help": "Most calls in one user turn."}
    )
    budget_calls_per_conversation: int = field(
        default=DEFAULT_BUDGET.calls_per_conversation, metadata={"help": "Most calls in one completion."}
    )
    budget_argument_chars: int = field(
        default=DEFAULT_BUDGET.argument_chars,
        metadata={"help": "Largest size of one call's arguments, in characters of strings and keys plus one a value."},
    )
    budget_argument_depth: int = field(
        default=DEFAULT_BUDGET.argument_depth, metadata={"help": "Deepest nesting of one call's arguments."}
    )
    budget_integer_digits: int = field(
        default=DEFAULT_BUDGET.integer_digits,
        metadata={"help": "Most digits of an integer argument, or of a number written as text (at most 300)."},
    )
    budget_result_chars: int = field(
        default=DEFAULT_BUDGET.result_chars,
        metadata={"help": "Most characters all of one completion's calls may return."},
    )
    budget_seconds: float = field(
        default=DEFAULT_BUDGET.seconds, metadata={"help": "Most seconds all of one completion's calls may take."}
    )

    def completion_budget(self) -> Budget:
        """The limits as set here; `ConfigError` naming a limit that cannot hold."""
        try:
            return Budget(
                calls_per_step=self.budget_calls_per_step,
                calls_per_turn=self.budget_calls_per_turn,
                calls_per_conversation=self.budget_calls_per_conversation,
                argument_chars=self.budget_argument_chars,
                argument_depth=self.budget_argument_depth,
                integer_digits=self.budget_integer_digits,
                result_chars=self.budget_result_chars,
                seconds=self.budget_seconds,
            )
        except ValueError as error:
            raise ConfigError(str(error).replace("Budget.", "budget_")) from None


def step_budget_hits(accelerator: Any) -> dict[str, float]:
    """Completions past their budget since the last call, by kind and summed over processes (an executor's own kinds
    as `other`): what the trainer logs as `budget/<kind>` each step."""
    import torch

    hits = take_hit_counts()
    local = [*(hits.pop(kind, 0) for kind in BUDGET_KINDS), sum(hits.values())]
    counts = accelerator.reduce(torch.tensor(local, dtype=torch.float32, device=accelerator.device))  # (kinds + 1,)
    return dict(zip([*BUDGET_KINDS, "other"], counts.tolist(), strict=True))
