"""Team-ACE ToolACE (`--from toolace`)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from grpo_tools.data.converters.base import (
    DECODER,
    SourceContext,
    assistant_message,
    canonical_tools,
    conversation_rows,
    parsed_calls,
    require,
    sharegpt_turns,
    source_id,
)
from grpo_tools.rewards.parsing import ToolCall


def _json_list(text: str) -> list[Any]:
    """The first JSON list of objects in free text (ToolACE's system prompt); [] when there is none."""
    for match in re.finditer(r"\[", text):
        try:
            value, _ = DECODER.raw_decode(text, match.start())
        except json.JSONDecodeError:
            continue
        if isinstance(value, list) and value and all(isinstance(item, dict) for item in value):
            return value
    return []


_DOTTED_NAME = re.compile(r"[A-Za-z_][\w.]*")


def _pythonic_calls(text: str, tools: list[dict[str, Any]], where: str) -> list[ToolCall]:
    """Read `[f(a=1), g(b="x")]`, also when a tool's name is no Python name (ToolACE has "Get Weather")."""
    aliases: dict[str, str] = {}
    names = [tool["function"]["name"] for tool in tools]
    # Longest first, so that "Get Weather Now(" is not half-replaced by "Get Weather(".
    for name in sorted((n for n in names if not _DOTTED_NAME.fullmatch(n)), key=len, reverse=True):
        alias = f"_tool_{len(aliases)}"
        text = text.replace(f"{name}(", f"{alias}(")
        aliases[alias] = name
    calls = parsed_calls(text, "pythonic", where)
    return [ToolCall(aliases.get(call.name, call.name), call.arguments) for call in calls]


def convert_toolace(row: Mapping[str, Any], index: int, context: SourceContext) -> list[dict[str, Any]]:
    """Team-ACE ToolACE: tools as a JSON list inside `system`, assistant calls as `[f(a=1), g(b="x")]`."""
    tools = canonical_tools(_json_list(require(row, "system", str)), "system")
    messages: list[dict[str, Any]] = []
    for role, value in sharegpt_turns(row):
        text = value.strip()
        if role == "system":
            continue  # a second system prompt would be an instruction like the first, which is dropped too
        if role == "assistant" and text.startswith("[") and text.endswith("]"):
            where = f"assistant turn {sum(m['role'] == 'assistant' for m in messages)}"
            messages.append(assistant_message("", _pythonic_calls(text, tools, where)))
        else:
            messages.append({"role": role, "content": text})
    return conversation_rows(source_id(row, index), messages, tools)
