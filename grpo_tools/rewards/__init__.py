"""The tool-use reward model: parsing tool calls, tool schemas, matching calls against gold calls (BFCL's rules
included) and the named rewards trl calls. It imports nothing else of grpo_tools.

- `parsing`: the tool-call parser: `ToolCall`, `parse_tool_calls(text, format="auto")` for every format in `PARSERS`.
- `schemas`: tool definitions (OpenAI, BFCL, xLAM) -> JSON Schema; argument validation.
- `gold`: a row's gold reference (`make_gold`), `Verdict` and `ERROR_KINDS`.
- `matching`: value comparison and the optimal pairing of predicted and gold calls; `bfcl`: BFCL's `ast_checker` rules.
- `scorers`: each reward's scorer, `(ParseResult, Gold) -> Verdict`.
- `budget`: what one completion may cost where its calls run (`Budget`, `Meter`, hit counts by kind).
- `decision`: the decision to call (`decision_outcome`) and the scorer that ranks its outcomes (`DecisionValues`).
- `rewards`: the six rewards (trl's signature; `get_tool_decision_reward` for the decision reward with values of your
  own), the registry `REWARDS` and `get_reward_funcs`.
"""

from grpo_tools.rewards.decision import OUTCOMES, DecisionValues, decision_outcome
from grpo_tools.rewards.gold import ERROR_KINDS, Gold, GoldError, Verdict, make_gold
from grpo_tools.rewards.parsing import FORMATS, PARSERS, ParseResult, ToolCall, parse_tool_calls
from grpo_tools.rewards.rewards import (
    REWARDS,
    RewardSpec,
    argument_checks,
    get_reward_funcs,
    get_tool_decision_reward,
    score_completion,
    tool_bfcl_reward,
    tool_decision_reward,
    tool_exact_reward,
    tool_format_reward,
    tool_partial_reward,
    tool_schema_reward,
)
from grpo_tools.rewards.schemas import SchemaError, Tool, normalize_tools, validate_arguments


__all__ = [
    "ERROR_KINDS",
    "FORMATS",
    "OUTCOMES",
    "PARSERS",
    "REWARDS",
    "DecisionValues",
    "Gold",
    "GoldError",
    "ParseResult",
    "RewardSpec",
    "SchemaError",
    "Tool",
    "ToolCall",
    "Verdict",
    "argument_checks",
    "decision_outcome",
    "get_reward_funcs",
    "get_tool_decision_reward",
    "make_gold",
    "normalize_tools",
    "parse_tool_calls",
    "score_completion",
    "tool_bfcl_reward",
    "tool_decision_reward",
    "tool_exact_reward",
    "tool_format_reward",
    "tool_partial_reward",
    "tool_schema_reward",
    "validate_arguments",
]
