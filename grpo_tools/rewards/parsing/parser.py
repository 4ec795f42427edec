"""Read the tool calls out of a model's completion, in every format the common model families write.

`parse_tool_calls(text)` returns the calls it found, in order, and one message for each attempted call that did
not parse. A model's output is never an error here: malformed, truncated or hostile text only yields parse errors.
Nothing a model wrote is ever evaluated; Python-literal syntax is read by walking `ast` nodes for literals only.

Formats (the registry `PARSERS` is the single list of names):
- `hermes`: Hermes / Qwen2.5 / Qwen3 `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` blocks;
- `llama`: Llama 3.x `{"name": ..., "parameters": {...}}`, optionally after `<|python_tag|>`, several joined by `;`;
- `mistral`: `[TOOL_CALLS][{...}, ...]` and `[TOOL_CALLS]name[ARGS]{...}`;
- `pythonic`: `[get_weather(city="Paris"), ...]` (Llama 3.2 / 4, ToolACE, BFCL);
- `qwen3_coder`: `<function=name><parameter=p>value</parameter></function>`, values cast by the tool schema;
- `json`: a bare JSON object or list of calls;
- `openai`: a message dict with `tool_calls` (arguments as a dict or a JSON-encoded string).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from grpo_tools.rewards.parsing.formats import (
    HERMES_OPEN,
    parse_hermes,
    parse_json,
    parse_llama,
    parse_mistral,
    parse_pythonic,
    parse_qwen3_coder,
    well_formed_hermes_calls,
)
from grpo_tools.rewards.parsing.toolcall import (
    Parsed,
    ParseResult,
    ToolCall,
    calls_from_value,
    load_json_or_literal,
    new_record,
    skip_whitespace,
    strip_code_fence,
)


__all__ = ["PARSERS", "ParseResult", "ToolCall", "load_json_or_literal", "parse_tool_calls"]


_set_calls, _set_errors, _set_format = (
    ParseResult.calls.__set__,
    ParseResult.errors.__set__,
    ParseResult.format.__set__,
)


def _parse_openai(message: Any, tools: Any = None) -> Parsed:
    """An OpenAI / transformers assistant message dict with `tool_calls`; its text content is parsed when it has none."""
    if isinstance(message, str):
        return parse_json(message)
    if not isinstance(message, dict):
        return [], [f"expected a message dict, got {type(message).__name__}"]
    tool_calls = message.get("tool_calls")
    if tool_calls:
        calls: list[ToolCall] = []
        errors: list[str] = []
        calls_from_value(tool_calls if isinstance(tool_calls, list) else [tool_calls], calls, errors)
        return calls, errors
    result = _parse_text_auto(_message_text(message), tools)
    return list(result.calls), list(result.errors)


def _message_text(message: dict) -> str:
    """The text of a message's `content`, which may be a string or a list of `{"type": "text"}` parts."""
    content = message.get("content")
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return content if isinstance(content, str) else ""


PARSERS: dict[str, Callable[[Any, Any], Parsed]] = {
    "hermes": parse_hermes,
    "llama": parse_llama,
    "mistral": parse_mistral,
    "pythonic": parse_pythonic,
    "qwen3_coder": parse_qwen3_coder,
    "json": parse_json,
    "openai": _parse_openai,
}
FORMATS: tuple[str, ...] = ("auto", *PARSERS)


def _strip_reasoning(text: str) -> str:
    """Drop leading `<think>...</think>` reasoning: calls a model only thought about are not calls.

    Only a leading block counts (or one whose `<think>` was opened by the prompt, as Qwen3's template does, when its
    `</think>` comes before any call), so that the same tags inside a call's string value are left alone."""
    if "think>" not in text:
        return text
    if text.startswith("<think>", skip_whitespace(text, 0)):
        end = text.find("</think>")
        return "" if end < 0 else text[end + len("</think>") :]  # unclosed: all of it was reasoning
    end = text.find("</think>")
    if end >= 0:
        first_call = text.find(HERMES_OPEN)
        if first_call < 0 or end < first_call:
            return text[end + len("</think>") :]
    return text


def _detect(text: str) -> str | None:
    """Pick the format a text is written in from its markers; None when it makes no call attempt."""
    start = text.find(HERMES_OPEN)
    if start >= 0:
        # Qwen3-Coder wraps its XML calls in <tool_call>; their values need the tool schema, as bare ones do.
        return (
            "qwen3_coder"
            if text.startswith("<function=", skip_whitespace(text, start + len(HERMES_OPEN)))
            else "hermes"
        )
    if "<function=" in text:
        return "qwen3_coder"
    if "[TOOL_CALLS]" in text:
        return "mistral"
    if "<|python_tag|>" in text or "<|python_start|>" in text:
        return "llama"
    body = strip_code_fence(text)
    if body.startswith("{"):
        return "json"
    if body.startswith("["):
        return "json" if body[1:].lstrip().startswith(("{", "]")) or body == "[" else "pythonic"
    if re.match(r"[A-Za-z_][\w.]*\(", body) and body.endswith(")"):
        return "pythonic"
    return None


def _parse_text_auto(text: str, tools: Any) -> ParseResult:
    well_formed = well_formed_hermes_calls(text, unstripped=True)  # the hot path: read without detection
    if well_formed:
        result = new_record(ParseResult)  # ParseResult(well_formed, (), "hermes"), faster
        _set_calls(result, well_formed)
        _set_errors(result, ())
        _set_format(result, "hermes")
        return result
    text = _strip_reasoning(text)
    detected = _detect(text)
    if detected is None:
        return ParseResult(format=None)
    calls, errors = PARSERS[detected](text, tools)
    if detected == "json" and not calls and not errors:
        return ParseResult(format=None)  # `[]`: the model says it calls nothing
    return ParseResult(tuple(calls), tuple(errors), detected)


def parse_tool_calls(completion: Any, format: str = "auto", tools: Any = None) -> ParseResult:
    """Parse the tool calls in a completion.

    `completion` is the text a model wrote, an assistant message dict (OpenAI / transformers layout, `tool_calls`
    or `content`), or a list of messages as trl passes conversational completions (the assistant messages are read
    in order). `format` is "auto" (detect from markers) or one of `PARSERS`. `tools`, the offered tool definitions,
    is only needed to cast Qwen3-Coder XML values to the schema's types.

    >>> parse_tool_calls('<tool_call>{"name": "get_weather", "arguments": {"city": "Lyon"}}</tool_call>').calls
    (ToolCall(name='get_weather', arguments={'city': 'Lyon'}),)
    >>> parse_tool_calls("[get_weather(city='Lyon')]").calls
    (ToolCall(name='get_weather', arguments={'city': 'Lyon'}),)
    >>> parse_tool_calls('<tool_call>{"name": "get_weather", "argu').errors
    ('<tool_call> block is not valid JSON (truncated or malformed)',)
    """
    if type(completion) is str and format == "auto":  # the common case first
        return _parse_text_auto(completion, tools)
    if format != "auto" and format not in PARSERS:
        raise ValueError(f"unknown tool-call format {format!r}; choose one of {', '.join(FORMATS)}")
    if isinstance(completion, list):  # trl's conversational completions: a list of messages
        calls: list[ToolCall] = []
        errors: list[str] = []
        formats = set()
        for message in completion:
            if isinstance(message, dict) and message.get("role", "assistant") == "assistant":
                result = parse_tool_calls(message, format, tools)
                calls += result.calls
                errors += result.errors
                formats.add(result.format)
        formats.discard(None)
        return ParseResult(tuple(calls), tuple(errors), formats.pop() if len(formats) == 1 else None)
    if isinstance(completion, dict):
        if completion.get("tool_calls"):
            calls, errors = _parse_openai(completion, tools)
            return ParseResult(tuple(calls), tuple(errors), "openai")
        completion = _message_text(completion)
    if not isinstance(completion, str):
        return ParseResult(errors=(f"expected text or a message, got {type(completion).__name__}",))
    if format == "auto":
        return _parse_text_auto(completion, tools)
    calls, errors = PARSERS[format](_strip_reasoning(completion), tools)
    return ParseResult(tuple(calls), tuple(errors), format if calls or errors else None)
