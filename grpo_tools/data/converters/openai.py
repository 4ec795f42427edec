"""OpenAI-style chat rows (`--from openai`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from grpo_tools.data.converters.base import (
    ConversionError,
    SourceContext,
    assistant_message,
    canonical_tools,
    conversation_rows,
    parsed_calls,
    require,
    source_id,
)


def _openai_message(message: Any, where: str) -> dict[str, Any]:
    if not isinstance(message, dict) or message.get("role") not in ("system", "user", "assistant", "tool"):
        raise ConversionError(f"{where}: expected a message with role system, user, assistant or tool")
    content = message.get("content")
    if isinstance(content, list):  # content parts: keep the text ones
        content = "".join(part.get("text", "") for part in content if isinstance(part, dict))
    elif content is None:
        content = ""
    elif not isinstance(content, str):
        raise ConversionError(f"{where}.content: expected a string, got {type(content).__name__}")
    if message["role"] == "assistant":
        raw_calls = message.get("tool_calls") or []
        calls = parsed_calls({"tool_calls": raw_calls}, "openai", where) if raw_calls else []
        converted = assistant_message(content, calls)
        for raw, call in zip(raw_calls, converted.get("tool_calls", []), strict=True):
            if isinstance(raw, dict) and "id" in raw:
                # Templates that pair each result with its call (Mistral's) need the call ids.
                call |= {"id": raw["id"], "type": call.pop("type"), "function": call.pop("function")}
        return converted
    converted = {"role": message["role"], "content": content}
    # The keys chat templates read to pair a result with its call; everything else the API dumps is dropped.
    converted |= {key: message[key] for key in ("tool_call_id", "name") if key in message}
    return converted


def convert_openai(row: Mapping[str, Any], index: int, context: SourceContext) -> list[dict[str, Any]]:
    """OpenAI-style chat rows: `messages` with assistant `tool_calls`, and `tools` in the OpenAI format."""
    messages = [_openai_message(m, f"messages[{i}]") for i, m in enumerate(require(row, "messages", list))]
    return conversation_rows(source_id(row, index), messages, canonical_tools(row.get("tools") or [], "tools"))
