"""The tool-call parser: `parse_tool_calls(completion)` reads the calls a model wrote, in every format of `PARSERS`,
into `ParseResult` (the `ToolCall`s that parsed and one message per attempted call that did not).

- `parser`: `parse_tool_calls`, format detection and the registry `PARSERS`;
- `formats`: one reader per format; `toolcall`: the `ToolCall` and `ParseResult` records and the readers' shared steps;
- `fastjson`: JSON read by orjson where it gives exactly what `json` gives.
"""

from grpo_tools.rewards.parsing.parser import (
    FORMATS,
    PARSERS,
    ParseResult,
    ToolCall,
    load_json_or_literal,
    parse_tool_calls,
)


__all__ = ["FORMATS", "PARSERS", "ParseResult", "ToolCall", "load_json_or_literal", "parse_tool_calls"]
