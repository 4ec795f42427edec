"""NousResearch Hermes function-calling v1 (`--from hermes`)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from grpo_tools.data.converters.base import (
    ConversionError,
    SourceContext,
    assistant_message,
    canonical_tools,
    conversation_rows,
    load_literal,
    parsed_calls,
    sharegpt_turns,
    source_id,
)


def _hermes_tools(system: str) -> list[Any]:
    # The prompt names the tags in prose ("within <tools> </tools> XML tags") before the real block: skip empty ones.
    for match in re.finditer(r"<tools>(.*?)</tools>", system, re.DOTALL):
        body = match.group(1).strip()
        if not body:
            continue
        try:
            tools = load_literal(body, "system <tools>")
        except ConversionError:
            # Several definitions one per line rather than a list, in JSON or Python-literal syntax.
            parts = re.split(r"(?<=\})\s*\n\s*(?=\{)", body)
            if len(parts) == 1:
                raise
            tools = [load_literal(part, f"system <tools> definition {i}") for i, part in enumerate(parts)]
        return tools if isinstance(tools, list) else [tools]
    return []


def convert_hermes(row: Mapping[str, Any], index: int, context: SourceContext) -> list[dict[str, Any]]:
    """NousResearch Hermes function-calling v1: ShareGPT turns, `<tools>` in the system turn, `<tool_call>` blocks."""
    definitions: list[Any] = []
    messages: list[dict[str, Any]] = []
    for role, value in sharegpt_turns(row):
        if role == "system":
            definitions += _hermes_tools(value)
        elif role == "tool":
            responses = re.findall(r"<tool_response>(.*?)(?:</tool_response>|\Z)", value, re.DOTALL)
            messages += [{"role": "tool", "content": text.strip()} for text in responses or [value]]
        elif role == "assistant" and "<tool_call>" in value:
            where = f"assistant turn {sum(m['role'] == 'assistant' for m in messages)}"
            content = re.sub(r"<tool_call>.*?(?:</tool_call>|\Z)", "", value, flags=re.DOTALL).strip()
            messages.append(assistant_message(content, parsed_calls(value, "hermes", where)))
        else:
            messages.append({"role": role, "content": value.strip()})
    return conversation_rows(source_id(row, index), messages, canonical_tools(definitions, "system <tools>"))
