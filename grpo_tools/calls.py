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

import ast
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from grpo_tools.fastjson import orjson_reads_as_json


__all__ = ["PARSERS", "ParseResult", "ToolCall", "load_json_or_literal", "parse_tool_calls"]


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One call a model made: the tool's name and its arguments as a JSON-like dict."""

    name: str
    arguments: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ParseResult:
    """What `parse_tool_calls` found: the calls that parsed, in order, and one message per attempted call that did not."""

    calls: tuple[ToolCall, ...] = ()
    errors: tuple[str, ...] = ()
    format: str | None = None

    @property
    def attempted(self) -> bool:
        """Whether the text tried to call any tool at all (successfully or not)."""
        return bool(self.calls or self.errors)


# A frozen dataclass's `__init__` sets each field through `object.__setattr__`; the hot path below fills the slots
# through their descriptors instead, in about half the time (it builds one record per call of every completion).
_new_record = object.__new__
_set_name, _set_arguments = ToolCall.name.__set__, ToolCall.arguments.__set__
_set_calls, _set_errors, _set_format = (
    ParseResult.calls.__set__,
    ParseResult.errors.__set__,
    ParseResult.format.__set__,
)


class _NotALiteral(ValueError):
    """Raised inside this module when Python-literal text holds something other than a literal."""


_DECODER = json.JSONDecoder()
_orjson_loads = orjson.loads
_WHITESPACE = re.compile(r"\s*")
_OPEN, _CLOSE = "<tool_call>", "</tool_call>"
# How many `</tool_call>` candidates a Python-literal block may be tried against; a bound keeps hostile inputs linear.
_MAX_CLOSE_CANDIDATES = 4
_JSON_NAMES = {"true": True, "false": False, "null": None}
_NOT_FLOATS = frozenset({str, int, bool, type(None)})  # argument values orjson reads exactly as `json` does
_MISTRAL_NAME = re.compile(r"\s*([\w.\-]+)\s*(?:\[CALL_ID\][^\[]*)?\[ARGS\]")

# What a parser returns: the calls it read and one message per attempt that failed.
Parsed = tuple[list[ToolCall], list[str]]


def _literal(node: ast.AST) -> Any:
    """Convert an `ast` node made only of literals to JSON-like Python values (tuples and sets become lists)."""
    if isinstance(node, ast.Constant):
        if node.value is None or isinstance(node.value, (str, bool, int, float)):
            return node.value
        raise _NotALiteral(f"unsupported constant {type(node.value).__name__}")
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return [_literal(element) for element in node.elts]
    if isinstance(node, ast.Dict):
        result = {}
        for key, value in zip(node.keys, node.values, strict=True):
            if key is None:
                raise _NotALiteral("'**' unpacking in a dict")
            key_value = _literal(key)
            if not isinstance(key_value, str):
                raise _NotALiteral("dict keys must be strings")
            result[key_value] = _literal(value)
        return result
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        operand = _literal(node.operand)
        if isinstance(operand, (int, float)) and not isinstance(operand, bool):
            return -operand if isinstance(node.op, ast.USub) else operand
    if isinstance(node, ast.Name) and node.id in _JSON_NAMES:
        return _JSON_NAMES[node.id]  # models mixing JSON into Python syntax: `f(flag=true)`
    raise _NotALiteral(f"not a literal: {type(node).__name__}")


def _parse_python(text: str) -> ast.expr:
    """Parse text as one Python expression, turning every failure (including pathological nesting) into ValueError."""
    try:
        return ast.parse(text.strip(), mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError) as error:
        raise _NotALiteral(f"invalid syntax: {error.__class__.__name__}") from None


def load_json_or_literal(text: str) -> Any:
    """Read JSON, falling back to a Python literal (single-quoted dicts, True/False/None), literals only: nothing is
    evaluated. Raises ValueError when the text is neither.

    >>> load_json_or_literal("{'city': 'Lyon', 'ok': True}")
    {'city': 'Lyon', 'ok': True}
    """
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return _literal(_parse_python(text))


def _arguments(value: Any) -> dict[str, Any]:
    """Normalise a call's arguments: a dict, a JSON/Python-literal string of a dict, or null for none."""
    if value is None:
        return {}
    if isinstance(value, str):
        try:
            value = load_json_or_literal(value) if value.strip() else {}
        except _NotALiteral:
            raise _NotALiteral("arguments is a string but not valid JSON") from None
    if not isinstance(value, dict):
        raise _NotALiteral(f"arguments must be an object, got {type(value).__name__}")
    return value


def _call_from_object(obj: Any) -> ToolCall:
    """Build a ToolCall from the object layouts models write (`arguments`, `parameters` or OpenAI's `function`)."""
    if not isinstance(obj, dict):
        raise _NotALiteral(f"a call must be an object, got {type(obj).__name__}")
    if isinstance(obj.get("function"), dict):  # OpenAI: {"type": "function", "function": {"name", "arguments"}}
        obj = obj["function"]
    name = obj.get("name")
    if not isinstance(name, str) or not name.strip():
        raise _NotALiteral("the call has no 'name'")
    for key in ("arguments", "parameters", "args"):
        if key in obj:
            return ToolCall(name.strip(), _arguments(obj[key]))
    return ToolCall(name.strip(), {})


def _calls_from_value(value: Any, calls: list[ToolCall], errors: list[str]) -> None:
    """Append the call(s) a decoded JSON value holds: one call object, a list of them, or a `tool_calls` message."""
    if isinstance(value, dict) and isinstance(value.get("tool_calls"), list):
        value = value["tool_calls"]
    for item in value if isinstance(value, list) else [value]:
        try:
            calls.append(_call_from_object(item))
        except _NotALiteral as error:
            errors.append(str(error))


def _skip_whitespace(text: str, index: int) -> int:
    if index < len(text) and not text[index].isspace():
        return index  # the usual case, without a regex call
    return _WHITESPACE.match(text, index).end()


def _strip_code_fence(text: str) -> str:
    """Drop a Markdown code fence (```json ... ```) around the whole text."""
    text = text.strip()
    if text.startswith("```"):
        newline = text.find("\n")
        text = text[newline + 1 :] if newline >= 0 else ""
        if text.rstrip().endswith("```"):
            text = text.rstrip()[:-3]
    return text.strip()


def _well_formed_hermes_calls(text: str, unstripped: bool = False) -> tuple[ToolCall, ...] | None:
    """The common case, read by orjson alone (see `grpo_tools.fastjson`): every block closed and holding exactly one
    `{"name", "arguments": {...}}` object. None for anything else, which the full reader below takes (a `</tool_call>`
    inside a string value cuts its block short, so it lands there too; so does a text orjson would read otherwise
    than `json`; so, when `unstripped`, does reasoning, which `_strip_reasoning` finds only before the first block)."""
    blocks = text.split(_OPEN)
    if len(blocks) == 1 or (unstripped and "think>" in blocks[0]):
        return None
    calls, floats = [], False  # floats: whether some arguments hold a float, or a list or object that may hold one
    for block in blocks[1:]:
        body, closed, _ = block.partition(_CLOSE)
        if not closed:
            return None
        try:
            value = _orjson_loads(body)
            # orjson gives only dicts, lists and scalars: subscripting any but a dict raises TypeError.
            name, arguments = value["name"], value["arguments"]
        except (ValueError, KeyError, TypeError):  # orjson.JSONDecodeError, also for nesting past its depth limit
            return None
        if type(name) is not str or type(arguments) is not dict:
            return None
        if len(value) > 2 and ("function" in value or "tool_calls" in value):
            return None
        name = name.strip()
        if not name:
            return None
        floats = floats or not _NOT_FLOATS.issuperset(map(type, arguments.values()))
        call = _new_record(ToolCall)
        _set_name(call, name)
        _set_arguments(call, arguments)
        calls.append(call)
    # orjson reads an integer beyond 64 bits as a float, and fails where `json` reads (NaN, a lone surrogate): only
    # arguments that hold a float, or a list or object that may hold one, can differ from what `json` reads.
    return None if floats and not orjson_reads_as_json(text) else tuple(calls)


def _parse_hermes(text: str, tools: Any = None) -> Parsed:
    """`<tool_call>{...}</tool_call>` blocks, with anything around them; Qwen3-Coder XML inside a block is read too."""
    well_formed = _well_formed_hermes_calls(text)
    if well_formed is not None:
        return list(well_formed), []
    calls: list[ToolCall] = []
    errors: list[str] = []
    position = 0
    while (start := text.find(_OPEN, position)) >= 0:
        body = _skip_whitespace(text, start + len(_OPEN))
        if text.startswith("<function=", body):
            close = text.find(_CLOSE, body)
            end = len(text) if close < 0 else close
            more_calls, more_errors = _parse_qwen3_coder(text[body:end], tools)
            calls += more_calls
            errors += more_errors
            position = end + len(_CLOSE)
            continue
        try:
            # raw_decode reads exactly one JSON value, so "</tool_call>" inside a string value does not end the block.
            value, after = _DECODER.raw_decode(text, body)
        except (ValueError, RecursionError):
            position = _parse_literal_block(text, body, calls, errors)
            continue
        close = _skip_whitespace(text, after)
        if text.startswith(_CLOSE, close):
            position = close + len(_CLOSE)
        elif close == len(text):  # the closing tag is missing but the call is complete: accept it
            position = close
        else:
            errors.append("unexpected text after the call inside <tool_call>")
            next_close = text.find(_CLOSE, close)
            position = len(text) if next_close < 0 else next_close + len(_CLOSE)
            continue
        _calls_from_value(value, calls, errors)
    return calls, errors


def _parse_literal_block(text: str, body: int, calls: list[ToolCall], errors: list[str]) -> int:
    """Read a `<tool_call>` block that is not JSON as a Python literal; return where parsing resumes."""
    if not text.startswith(("{", "["), body):
        errors.append("<tool_call> block does not hold a JSON object")
        close = text.find(_CLOSE, body)
        return len(text) if close < 0 else close + len(_CLOSE)
    # A single-quoted string value may itself hold "</tool_call>": try the next few closing tags in turn.
    close = text.find(_CLOSE, body)
    for _ in range(_MAX_CLOSE_CANDIDATES):
        end = len(text) if close < 0 else close
        try:
            value = _literal(_parse_python(text[body:end]))
        except _NotALiteral:
            if close < 0:
                break
            close = text.find(_CLOSE, close + len(_CLOSE))
            continue
        _calls_from_value(value, calls, errors)
        return len(text) if close < 0 else close + len(_CLOSE)
    errors.append("<tool_call> block is not valid JSON (truncated or malformed)")
    close = text.find(_CLOSE, body)
    return len(text) if close < 0 else close + len(_CLOSE)


def _parse_json_sequence(text: str) -> Parsed:
    """One or more JSON values (call objects or lists of them) separated by whitespace or `;` (Llama 3.x)."""
    calls: list[ToolCall] = []
    errors: list[str] = []
    position = _skip_whitespace(text, 0)
    while position < len(text):
        try:
            value, position = _DECODER.raw_decode(text, position)
        except (ValueError, RecursionError):
            try:  # Python-literal syntax (single quotes) for the rest of the text
                _calls_from_value(_literal(_parse_python(text[position:].rstrip().rstrip(";"))), calls, errors)
            except _NotALiteral:
                errors.append(f"invalid JSON at character {position}")
            break
        _calls_from_value(value, calls, errors)
        position = _skip_whitespace(text, position)
        if text.startswith(";", position):
            position = _skip_whitespace(text, position + 1)
    return calls, errors


def _parse_json(text: str, tools: Any = None) -> Parsed:
    """A bare JSON object or list of calls, possibly inside a Markdown code fence."""
    return _parse_json_sequence(_strip_code_fence(text))


def _parse_llama(text: str, tools: Any = None) -> Parsed:
    """Llama 3.x: JSON calls after an optional `<|python_tag|>`, joined by `;`; pythonic calls are read too."""
    for tag in ("<|python_tag|>", "<|python_start|>"):
        if tag in text:
            text = text.split(tag, 1)[1]
    for tag in ("<|python_end|>", "<|eom_id|>", "<|eot_id|>"):
        text = text.split(tag, 1)[0]
    text = _strip_code_fence(text)
    if text.startswith("{") or (text.startswith("[") and text[1:].lstrip().startswith(("{", "]"))):
        return _parse_json_sequence(text)
    return _parse_pythonic(text)


def _parse_mistral(text: str, tools: Any = None) -> Parsed:
    """`[TOOL_CALLS][{...}]` (v3 tokenizers) and `[TOOL_CALLS]name[ARGS]{...}` (v11+), one or several."""
    calls: list[ToolCall] = []
    errors: list[str] = []
    for segment in text.split("[TOOL_CALLS]")[1:]:
        segment = segment.lstrip()
        if segment.startswith(("[", "{")):
            try:
                value, _ = _DECODER.raw_decode(segment)
            except (ValueError, RecursionError):
                errors.append("[TOOL_CALLS] is not followed by valid JSON")
                continue
            _calls_from_value(value, calls, errors)
            continue
        match = _MISTRAL_NAME.match(segment)
        if match is None:
            errors.append("[TOOL_CALLS] is followed by neither JSON nor name[ARGS]")
            continue
        try:
            arguments, _ = _DECODER.raw_decode(segment, _skip_whitespace(segment, match.end()))
            calls.append(ToolCall(match.group(1), _arguments(arguments)))
        except (ValueError, RecursionError):
            errors.append(f"[ARGS] of {match.group(1)!r} is not valid JSON")
    return calls, errors


def _dotted_name(node: ast.expr) -> str | None:
    """`f` -> "f", `math.factorial` -> "math.factorial"; anything else -> None."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        prefix = _dotted_name(node.value)
        return None if prefix is None else f"{prefix}.{node.attr}"
    return None


def _parse_pythonic(text: str, tools: Any = None) -> Parsed:
    """`[f(a=1), g(b="x")]` or a single `f(a=1)`: keyword arguments with literal values only."""
    text = _strip_code_fence(text)
    for tag in ("<|python_start|>", "<|python_end|>"):
        text = text.replace(tag, "")
    if not text.strip():
        return [], []
    try:
        node = _parse_python(text)
    except _NotALiteral as error:
        return [], [f"not a list of Python calls ({error})"]
    nodes = node.elts if isinstance(node, (ast.List, ast.Tuple)) else [node]
    calls: list[ToolCall] = []
    errors: list[str] = []
    for call in nodes:
        name = _dotted_name(call.func) if isinstance(call, ast.Call) else None
        if name is None:
            errors.append("expected a call like name(arg=value)")
            continue
        if call.args or any(keyword.arg is None for keyword in call.keywords):
            errors.append(f"{name}: only keyword arguments can be matched to parameters")
            continue
        try:
            calls.append(ToolCall(name, {keyword.arg: _literal(keyword.value) for keyword in call.keywords}))
        except _NotALiteral as error:
            errors.append(f"{name}: {error}")
    return calls, errors


def _schema_types(tools: Any, tool_name: str, parameter: str) -> frozenset[str]:
    """The JSON Schema types declared for one parameter of one offered tool (empty when unknown)."""
    if not tools:
        return frozenset()
    from grpo_tools.schemas import SchemaError, normalize_tools

    try:
        tool = normalize_tools(tools).get(tool_name)
    except SchemaError:
        return frozenset()  # a broken tool list is reported by the rewards; here it only means "no schema"
    return tool.param_types(parameter) if tool is not None else frozenset()


def _cast(value: str, types: frozenset[str]) -> Any:
    """Cast an XML parameter's text by its schema types; text that does not fit stays a string for scoring."""
    stripped = value.strip()
    if "integer" in types and re.fullmatch(r"[-+]?\d+", stripped):
        return int(stripped)
    if "number" in types:
        try:
            number = float(stripped)
            return int(stripped) if re.fullmatch(r"[-+]?\d+", stripped) else number
        except ValueError:
            pass
    if "boolean" in types and stripped.lower() in ("true", "false"):
        return stripped.lower() == "true"
    if "null" in types and stripped.lower() in ("null", "none"):
        return None
    if types & {"object", "array"}:
        try:
            return load_json_or_literal(stripped)
        except _NotALiteral:
            pass
    return value


def _parse_qwen3_coder(text: str, tools: Any = None) -> Parsed:
    """Qwen3-Coder `<function=name><parameter=p>value</parameter></function>` blocks."""
    calls: list[ToolCall] = []
    errors: list[str] = []
    position = 0
    while (start := text.find("<function=", position)) >= 0:
        name_end = text.find(">", start)
        close = text.find("</function>", start)
        if name_end < 0 or close < 0:
            errors.append("unterminated <function=...> block")
            break
        name = text[start + len("<function=") : name_end].strip()
        body, position = text[name_end + 1 : close], close + len("</function>")
        arguments: dict[str, Any] = {}
        cursor = 0
        while (param_start := body.find("<parameter=", cursor)) >= 0:
            param_name_end = body.find(">", param_start)
            param_close = body.find("</parameter>", param_start)
            if param_name_end < 0 or param_close < 0:
                errors.append(f"{name}: unterminated <parameter=...>")
                break
            parameter = body[param_start + len("<parameter=") : param_name_end].strip()
            raw = body[param_name_end + 1 : param_close]
            # The format puts the value on its own line; drop exactly that framing newline on each side.
            raw = raw.removeprefix("\n").removesuffix("\n")
            arguments[parameter] = _cast(raw, _schema_types(tools, name, parameter))
            cursor = param_close + len("</parameter>")
        else:
            if name:
                calls.append(ToolCall(name, arguments))
            else:
                errors.append("<function=> without a name")
    return calls, errors


def _parse_openai(message: Any, tools: Any = None) -> Parsed:
    """An OpenAI / transformers assistant message dict with `tool_calls`; its text content is parsed when it has none."""
    if isinstance(message, str):
        return _parse_json(message)
    if not isinstance(message, dict):
        return [], [f"expected a message dict, got {type(message).__name__}"]
    tool_calls = message.get("tool_calls")
    if tool_calls:
        calls: list[ToolCall] = []
        errors: list[str] = []
        _calls_from_value(tool_calls if isinstance(tool_calls, list) else [tool_calls], calls, errors)
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
    "hermes": _parse_hermes,
    "llama": _parse_llama,
    "mistral": _parse_mistral,
    "pythonic": _parse_pythonic,
    "qwen3_coder": _parse_qwen3_coder,
    "json": _parse_json,
    "openai": _parse_openai,
}
FORMATS: tuple[str, ...] = ("auto", *PARSERS)


def _strip_reasoning(text: str) -> str:
    """Drop leading `<think>...</think>` reasoning: calls a model only thought about are not calls.

    Only a leading block counts (or one whose `<think>` was opened by the prompt, as Qwen3's template does, when its
    `</think>` comes before any call), so that the same tags inside a call's string value are left alone."""
    if "think>" not in text:
        return text
    if text.startswith("<think>", _skip_whitespace(text, 0)):
        end = text.find("</think>")
        return "" if end < 0 else text[end + len("</think>") :]  # unclosed: all of it was reasoning
    end = text.find("</think>")
    if end >= 0:
        first_call = text.find(_OPEN)
        if first_call < 0 or end < first_call:
            return text[end + len("</think>") :]
    return text


def _detect(text: str) -> str | None:
    """Pick the format a text is written in from its markers; None when it makes no call attempt."""
    start = text.find(_OPEN)
    if start >= 0:
        # Qwen3-Coder wraps its XML calls in <tool_call>; their values need the tool schema, as bare ones do.
        return "qwen3_coder" if text.startswith("<function=", _skip_whitespace(text, start + len(_OPEN))) else "hermes"
    if "<function=" in text:
        return "qwen3_coder"
    if "[TOOL_CALLS]" in text:
        return "mistral"
    if "<|python_tag|>" in text or "<|python_start|>" in text:
        return "llama"
    body = _strip_code_fence(text)
    if body.startswith("{"):
        return "json"
    if body.startswith("["):
        return "json" if body[1:].lstrip().startswith(("{", "]")) or body == "[" else "pythonic"
    if re.match(r"[A-Za-z_][\w.]*\(", body) and body.endswith(")"):
        return "pythonic"
    return None


def _parse_text_auto(text: str, tools: Any) -> ParseResult:
    well_formed = _well_formed_hermes_calls(text, unstripped=True)  # the hot path: read without detection
    if well_formed:
        result = _new_record(ParseResult)  # ParseResult(well_formed, (), "hermes"), faster
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
