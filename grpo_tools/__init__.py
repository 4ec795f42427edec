"""grpo-tools: GRPO fine-tuning for LLM tool calling.

The light, pure parts are importable from here: the tool-call parser, the reward model and the adaptive KL
controller. Each part is a subpackage (rewards, data, tools, evaluation, models, hub, training); training
(`grpo_tools.training.trainer`, `grpo_tools.training.configs`) imports torch and trl, so import it from its module.
"""

from grpo_tools.rewards import (
    ERROR_KINDS,
    REWARDS,
    DecisionValues,
    GoldError,
    Verdict,
    get_reward_funcs,
    get_tool_decision_reward,
    make_gold,
    score_completion,
    tool_bfcl_reward,
    tool_decision_reward,
    tool_exact_reward,
    tool_format_reward,
    tool_partial_reward,
    tool_schema_reward,
)
from grpo_tools.rewards.parsing import PARSERS, ParseResult, ToolCall, parse_tool_calls
from grpo_tools.training.kl import AdaptiveKLController


__version__ = "0.1.0"

__all__ = [
    "ERROR_KINDS",
    "PARSERS",
    "REWARDS",
    "AdaptiveKLController",
    "DecisionValues",
    "GoldError",
    "ParseResult",
    "ToolCall",
    "Verdict",
    "get_reward_funcs",
    "get_tool_decision_reward",
    "make_gold",
    "parse_tool_calls",
    "score_completion",
    "tool_bfcl_reward",
    "tool_decision_reward",
    "tool_exact_reward",
    "tool_format_reward",
    "tool_partial_reward",
    "tool_schema_reward",
]
