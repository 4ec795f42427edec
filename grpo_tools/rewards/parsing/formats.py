"""One parser per tool-call format (the formats are listed in `grpo_tools.rewards.parsing`, whose `PARSERS` registry
names them): each reads a completion's text into `(calls, errors)`."""

from __future__ import annotations

import ast
import re
from typing import Any

from grpo_tools.rewards.parsing.fastjson import orjson_reads_as_json
from grpo_tools.rewards.parsing.toolcall import (
    DECODER,
    MAX_CLOSE_CANDIDATES,
    NotALiteral,
    Parsed,
    ToolCall,
    call_arguments,
    calls_from_value,
    literal,
    load_json_or_literal,
    new_record,
    orjson_loads,
    parse_python,
    skip_whitespace,
    strip_code_fence,
)


__all__: list[str] = []  # read through `grpo_tools.rewards.parsing.PARSERS`

_set_name, _set_arguments = ToolCall.name.__set__, ToolCall.arguments.__set__
HERMES_OPEN, _HERMES_CLOSE = "<tool_call>", "</tool_call>"


_NOT_FLOATS = frozenset({str, int, bool, type(None)})  # argument values orjson reads exactly as `json` does
_MISTRAL_NAME = re.compile(r"\s*([\w.\-]+)\s*(?:\[CALL_ID\][^\[]*)?\[ARGS\]")


def well_formed_hermes_calls(text: str, unstripped: bool = False) -> tuple[ToolCall, ...] | None:
    """The common case, read by orjson alone (see `fastjson`): every block closed and holding exactly one
    `{"name", "arguments": {...}}` object. None for anything else, which the full reader below takes (a `</tool_call>`
    inside a string value cuts its block short, so it lands there too; so does a text orjson would read otherwise
    than `json`; so, when `unstripped`, does reasoning, which `_strip_reasoning` finds only before the first block)."""
    blocks = text.split(HERMES_OPEN)
    if len(blocks) == 1 or (unstripped and "think>" in blocks[0]):
        return None
    calls, floats = [], False  # floats: whether some arguments hold a float, or a list or object that may hold one
    for block in blocks[1:]:
        body, closed, _ = block.partition(_HERMES_CLOSE)
        if not closed:
            return None
        try:
            value = orjson_loads(body)
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
        call = new_record(ToolCall)
        _set_name(call, name)
        _set_arguments(call, arguments)
        calls.append(call)
    # orjson reads an integer beyond 64 bits as a float, and fails where `json` reads (NaN, a lone surrogate): only
    # arguments that hold a float, or a list or object that may hold one, can differ from what `json` reads.
    return None if floats and not orjson_reads_as_json(text) else tuple(calls)


def parse_hermes(text: str, tools: Any = None) -> Parsed:
    """`<tool_call>{...}</tool_call>` blocks, with anything around them; Qwen3-Coder XML inside a block is read too."""
    well_formed = well_formed_hermes_calls(text)
    if well_formed is not None:
        return list(well_formed), []
    calls: list[ToolCall] = []
    errors: list[str] = []
    position = 0
    while (start := text.find(HERMES_OPEN, position)) >= 0:
        body = skip_whitespace(text, start + len(HERMES_OPEN))
        if text.startswith("<function=", body):
            close = text.find(_HERMES_CLOSE, body)
            end = len(text) if close < 0 else close
            more_calls, more_errors = parse_qwen3_coder(text[body:end], tools)
            calls += more_calls
            errors += more_errors
            position = end + len(_HERMES_CLOSE)
            continue
        try:
            # raw_decode reads exactly one JSON value, so "</tool_call>" inside a string value does not end the block.
            value, after = DECODER.raw_decode(text, body)
        except (ValueError, RecursionError):
            position = _parse_literal_block(text, body, calls, errors)
            continue
        close = skip_whitespace(text, after)
        if text.startswith(_HERMES_CLOSE, close):
            position = close + len(_HERMES_CLOSE)
        elif close == len(text):  # the closing tag is missing but the call is complete: accept it
            position = close
        else:
            errors.append("unexpected text after the call inside <tool_call>")
            next_close = text.find(_HERMES_CLOSE, close)
            position = len(text) if next_close < 0 else next_close + len(_HERMES_CLOSE)
            continue
        calls_from_value(value, calls, errors)
    return calls, errors


def _parse_literal_block(text: str, body: int, calls: list[ToolCall], errors: list[str]) -> int:
    """Read a `<tool_call>` block that is not JSON as a Python literal; return where parsing resumes."""
    if not text.startswith(("{", "["), body):
        errors.append("<tool_call> block does not hold a JSON object")
        close = text.find(_HERMES_CLOSE, body)
        return len(text) if close < 0 else close + len(_HERMES_CLOSE)
    # A single-quoted string value may itself hold "</tool_call>": try the next few closing tags in turn.
    close = text.find(_HERMES_CLOSE, body)
    for _ in range(MAX_CLOSE_CANDIDATES):
        end = len(text) if close < 0 else close
        try:
            value = literal(parse_python(text[body:end]))
        except NotALiteral:
            if close < 0:
                break
            close = text.find(_HERMES_CLOSE, close + len(_HERMES_CLOSE))
            continue
        calls_from_value(value, calls, errors)
        return len(text) if close < 0 else close + len(_HERMES_CLOSE)
    errors.append("<tool_call> block is not valid JSON (truncated or malformed)")
    close = text.find(_HERMES_CLOSE, body)
    return len(text) if close < 0 else close + len(_HERMES_CLOSE)


def _parse_json_sequence(text: str) -> Parsed:
    """One or more JSON values (call objects or lists of them) separated by whitespace or `;` (Llama 3.x)."""
    calls: list[ToolCall] = []
    errors: list[str] = []
    position = skip_whitespace(text, 0)
    while position < len(text):
        try:
            value, position = DECODER.raw_decode(text, position)
        except (ValueError, RecursionError):
            try:  # Python-literal syntax (single quotes) for the rest of the text
                calls_from_value(literal(parse_python(text[position:].rstrip().rstrip(";"))), calls, errors)
            except NotALiteral:
                errors.append(f"invalid JSON at character {position}")
            break
        calls_from_value(value, calls, errors)
        position = skip_whitespace(text, position)
        if text.startswith(";", position):
            position = skip_whitespace(text, position + 1)
    return calls, errors


def parse_json(text: str, tools: Any = None) -> Parsed:
    """A bare JSON object or list of calls, possibly inside a Markdown code fence."""
    return _parse_json_sequence(strip_code_fence(text))


def parse_llama(text: str, tools: Any = None) -> Parsed:
    """Llama 3.x: JSON calls after an optional `<|python_tag|>`, joined by `;`; pythonic calls are read too."""
    for tag in ("<|python_tag|>", "<|python_start|>"):
        if tag in text:
            text = text.split(tag, 1)[1]
    for tag in ("<|python_end|>", "<|eom_id|>", "<|eot_id|>"):
        text = text.split(tag, 1)[0]
    text = strip_code_fence(text)
    if text.startswith("{") or (text.startswith("[") and text[1:].lstrip().startswith(("{", "]"))):
        return _parse_json_sequence(text)
    return parse_pythonic(text)


def parse_mistral(text: str, tools: Any = None) -> Parsed:
    """`[TOOL_CALLS][{...}]` (v3 tokenizers) and `[TOOL_CALLS]name[ARGS]{...}` (v11+), one or several."""
    calls: list[ToolCall] = []
    errors: list[str] = []
    for segment in text.split("[TOOL_CALLS]")[1:]:
        segment = segment.lstrip()
        if segment.startswith(("[", "{")):
            try:
                value, _ = DECODER.raw_decode(segment)
            except (ValueError, RecursionError):
                errors.append("[TOOL_CALLS] is not followed by valid JSON")
                continue
            calls_from_value(value, calls, errors)
            continue
        match = _MISTRAL_NAME.match(segment)
        if match is None:
            errors.append("[TOOL_CALLS] is followed by neither JSON nor name[ARGS]")
            continue
        try:
            arguments, _ = DECODER.raw_decode(segment, skip_whitespace(segment, match.end()))
            calls.append(ToolCall(match.group(1), call_arguments(arguments)))
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


def parse_pythonic(text: str, tools: Any = None) -> Parsed:
    """`[f(a=1), g(b="x")]` or a single `f(a=1)`: keyword arguments with literal values only."""
    text = strip_code_fence(text)
    for tag in ("<|python_start|>", "<|python_end|>"):
        text = text.replace(tag, "")
    if not text.strip():
        return [], []
    try:
        node = parse_python(text)
    except NotALiteral as error:
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
            calls.append(ToolCall(name, {keyword.arg: literal(keyword.value) for keyword in call.keywords}))
        except NotALiteral as error:
            errors.append(f"{name}: {error}")
    return calls, errors


def _schema_types(tools: Any, tool_name: str, parameter: str) -> frozenset[str]:
    """The JSON Schema types declared for one parameter of one offered tool (empty when unknown)."""
    if not tools:
        return frozenset()
    from grpo_tools.rewards.schemas import SchemaError, normalize_tools

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
        except NotALiteral:
            pass
    return value


def parse_qwen3_coder(text: str, tools: Any = None) -> Parsed:
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
