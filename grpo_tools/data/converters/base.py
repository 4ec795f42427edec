"""What every converter shares: the records of a conversion, and helpers that read source fields into canonical
rows (tools, gold calls, assistant turns, one row per assistant turn of a conversation)."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from grpo_tools.data.rows import derive_category
from grpo_tools.rewards.parsing import ToolCall, load_json_or_literal, parse_tool_calls
from grpo_tools.rewards.schemas import normalize_tools


class ConversionError(ValueError):
    """A source row that cannot be converted; the message says why."""


@dataclass(frozen=True)
class SourceContext:
    """What a converter may need besides the row: BFCL's possible answers by id and the category its file names."""

    ground_truth: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    category: str | None = None


@dataclass(frozen=True)
class Converter:
    """A source format: `function(row, index, context) -> canonical rows` and a one-line description for `--help`."""

    function: Callable[[Mapping[str, Any], int, SourceContext], list[dict[str, Any]]]
    description: str


@dataclass(frozen=True)
class RowFailure:
    """A source row that could not be converted: its row number (from 1) and why."""

    row: int
    reason: str


@dataclass
class ConversionResult:
    """What `convert_rows` did: the canonical rows (unless a sink took them) and every source row it could not use."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    failures: list[RowFailure] = field(default_factory=list)
    source_rows: int = 0
    converted: int = 0  # canonical rows made, whether kept in `rows` or given to a sink
    no_tool_rows: int = 0  # source rows that offer no tool and make no call, so give no row

    def summary(self) -> str:
        """One line: rows converted from how many source rows, and how many gave nothing and why."""

        def plural(count: int, noun: str) -> str:
            return f"{count} {noun}" if count == 1 else f"{count} {noun}s"

        parts = [f"converted {plural(self.converted, 'row')} from {plural(self.source_rows, 'source row')}"]
        if self.no_tool_rows:
            parts.append(f"{plural(self.no_tool_rows, 'source row')} offered no tool and made no call")
        if self.failures:
            parts.append(f"{plural(len(self.failures), 'source row')} could not be converted (see above)")
        return "; ".join(parts)


def require(row: Mapping[str, Any], key: str, kind: type | tuple[type, ...]) -> Any:
    value = row.get(key)
    if not isinstance(value, kind):
        names = " or ".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
        raise ConversionError(f"{key}: expected {names}, got {type(value).__name__}")
    return value


def source_id(row: Mapping[str, Any], index: int) -> str:
    row_id = row.get("id")
    return str(index) if row_id is None or row_id == "" else str(row_id)


def canonical_tools(definitions: Any, where: str) -> list[dict[str, Any]]:
    """Tool definitions in any supported format -> the OpenAI format; SchemaError (a ValueError) names the field."""
    return [tool.to_openai() for tool in normalize_tools(definitions, where=where).values()]


def gold_call(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict) or not isinstance(value.get("name"), str):
        raise ConversionError(f'{where}: expected a call {{"name", "arguments"}}, got {value!r}')
    arguments = value.get("arguments", {})
    if isinstance(arguments, str):
        arguments = load_json(arguments, f"{where}.arguments")
    if not isinstance(arguments, dict):
        raise ConversionError(f"{where}.arguments: expected an object, got {type(arguments).__name__}")
    return {"name": value["name"], "arguments": arguments}


def load_json(text: str, where: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise ConversionError(f"{where}: not valid JSON ({error.msg} at character {error.pos})") from None


def load_literal(text: str, where: str) -> Any:
    """JSON, else a Python literal (single-quoted dicts, True/None), as some datasets write their tool lists."""
    try:
        return load_json_or_literal(text)
    except ValueError:
        raise ConversionError(f"{where}: neither JSON nor a Python literal") from None


DECODER = json.JSONDecoder()


def assistant_message(content: str, calls: Sequence[ToolCall]) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = [
            {"type": "function", "function": {"name": call.name, "arguments": call.arguments}} for call in calls
        ]
    return message


def parsed_calls(text: Any, format: str, where: str) -> list[ToolCall]:
    result = parse_tool_calls(text, format=format)
    if result.errors:
        raise ConversionError(f"{where}: cannot read the tool call ({'; '.join(result.errors)})")
    return list(result.calls)


def canonical_row(
    row_id: str,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]],
    answers: list[dict[str, Any]],
    possible_answers: list[Any] | None = None,
    category: str | None = None,
) -> dict[str, Any]:
    offered = [tool["function"]["name"] for tool in tools]
    for call in answers:
        if call["name"] not in offered:
            listing = ", ".join(repr(name) for name in offered) or "none"
            raise ConversionError(f"a call names {call['name']!r}, which is not an offered tool (offered: {listing})")
    row = {"id": row_id, "messages": messages, "tools": tools, "answers": answers}
    if possible_answers is not None:
        row["possible_answers"] = possible_answers
    row["category"] = category or derive_category(answers, tools)
    return row


def conversation_rows(base_id: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> list[dict]:
    """One canonical row per assistant turn that calls tools, or answers without calling while tools are offered."""
    if not any(message["role"] == "assistant" for message in messages):
        raise ConversionError("the conversation has no assistant turn")
    rows, turn = [], 0
    for position, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        calls = [
            {"name": call["function"]["name"], "arguments": call["function"]["arguments"]}
            for call in message.get("tool_calls", [])
        ]
        if calls or tools:
            if position == 0:
                raise ConversionError(f"assistant turn {turn} comes before any other message")
            try:
                history, offered = copy.deepcopy(messages[:position]), copy.deepcopy(tools)
                rows.append(canonical_row(f"{base_id}-{turn}", history, offered, calls))
            except ConversionError as error:
                raise ConversionError(f"assistant turn {turn}: {error}") from None
        turn += 1
    return rows


_SHAREGPT_ROLES = {
    "system": "system",
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "assistant": "assistant",
    "tool": "tool",
}


def sharegpt_turns(row: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    for i, turn in enumerate(require(row, "conversations", list)):
        if not isinstance(turn, dict) or not isinstance(turn.get("value"), str):
            raise ConversionError(f'conversations[{i}]: expected {{"from", "value"}}, got {turn!r}')
        role = _SHAREGPT_ROLES.get(turn.get("from"))
        if role is None:
            raise ConversionError(f"conversations[{i}].from: unknown speaker {turn.get('from')!r}")
        yield role, turn["value"]
