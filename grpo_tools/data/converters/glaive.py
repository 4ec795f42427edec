"""Glaive function-calling v2 (`--from glaive`)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from grpo_tools.data.converters.base import (
    DECODER,
    ConversionError,
    SourceContext,
    assistant_message,
    canonical_tools,
    conversation_rows,
    parsed_calls,
    require,
    source_id,
)


def _json_objects(text: str, where: str) -> list[Any]:
    """The JSON objects written one after another in free text, from the first `{` (Glaive's system prompt)."""
    objects: list[Any] = []
    position = text.find("{")
    while 0 <= position < len(text) and text[position] == "{":
        try:
            value, position = DECODER.raw_decode(text, position)
        except json.JSONDecodeError as error:
            raise ConversionError(f"{where}: tool definition {len(objects)} is not valid JSON ({error.msg})") from None
        objects.append(value)
        while position < len(text) and text[position].isspace():
            position += 1
    return objects


_GLAIVE_TURN = re.compile(r"(?:^|\n)[ \t]*(USER|ASSISTANT|FUNCTION RESPONSE):[ \t]?")


def convert_glaive(row: Mapping[str, Any], index: int, context: SourceContext) -> list[dict[str, Any]]:
    """Glaive function-calling v2: tools as JSON objects in `system`, `chat` as USER/ASSISTANT/FUNCTION RESPONSE."""
    tools = canonical_tools(_json_objects(require(row, "system", str), "system"), "system")
    parts = _GLAIVE_TURN.split(require(row, "chat", str))
    if parts[0].strip():
        raise ConversionError("chat: text before the first USER: or ASSISTANT: marker")
    messages: list[dict[str, Any]] = []
    for speaker, text in zip(parts[1::2], parts[2::2], strict=True):
        text = text.replace("<|endoftext|>", "").strip()
        if speaker == "USER":
            messages.append({"role": "user", "content": text})
        elif speaker == "FUNCTION RESPONSE":
            messages.append({"role": "tool", "content": text})
        elif "<functioncall>" in text:
            # The payload's `arguments` is a single-quoted JSON string; the json parser reads that form.
            before, payload = text.split("<functioncall>", 1)
            where = f"assistant turn {sum(m['role'] == 'assistant' for m in messages)}"
            calls = parsed_calls(payload, "json", where)
            if not calls:
                raise ConversionError(f"{where}: <functioncall> holds no call")
            messages.append(assistant_message(before.strip(), calls))
        else:
            messages.append({"role": "assistant", "content": text})
    return conversation_rows(source_id(row, index), messages, tools)
