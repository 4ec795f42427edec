"""The records of a parsed completion (`ToolCall`, `ParseResult`) and reading call objects written as JSON or as
Python literals (walking `ast` nodes for literals only: nothing a model wrote is ever evaluated). The parsers of
`grpo_tools.rewards.parsing.formats` build on these; `grpo_tools.rewards.parsing` is the entry point."""

from __future__ import annotations

import ast
import json
import re
import warnings
from dataclasses import dataclass, field
from typing import Any

import orjson


# The public API; the other names without a leading underscore are helpers shared with `formats` and `calls`.
__all__ = ["ParseResult", "ToolCall", "load_json_or_literal"]


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
new_record = object.__new__
_set_name, _set_arguments = ToolCall.name.__set__, ToolCall.arguments.__set__


def new_call(name: str, arguments: dict[str, Any]) -> ToolCall:
    """`ToolCall(name, arguments)`, built through the slots' descriptors (see `new_record`)."""
    call = new_record(ToolCall)
    _set_name(call, name)
    _set_arguments(call, arguments)
    return call


class NotALiteral(ValueError):
    """Raised inside this module when Python-literal text holds something other than a literal."""


DECODER = json.JSONDecoder()
orjson_loads = orjson.loads
_WHITESPACE = re.compile(r"\s*")


# How many `</tool_call>` candidates a Python-literal block may be tried against; a bound keeps hostile inputs linear.
MAX_CLOSE_CANDIDATES = 4
_JSON_NAMES = {"true": True, "false": False, "null": None}


# What a parser returns: the calls it read and one message per attempt that failed.
Parsed = tuple[list[ToolCall], list[str]]


def literal(node: ast.AST) -> Any:
    """Convert an `ast` node made only of literals to JSON-like Python values (tuples and sets become lists)."""
    if isinstance(node, ast.Constant):
        if node.value is None or isinstance(node.value, (str, bool, int, float)):
            return node.value
        raise NotALiteral(f"unsupported constant {type(node.value).__name__}")
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return [literal(element) for element in node.elts]
    if isinstance(node, ast.Dict):
        result = {}
        for key, value in zip(node.keys, node.values, strict=True):
            if key is None:
                raise NotALiteral("'**' unpacking in a dict")
            key_value = literal(key)
            if not isinstance(key_value, str):
                raise NotALiteral("dict keys must be strings")
            result[key_value] = literal(value)
        return result
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        operand = literal(node.operand)
        if isinstance(operand, (int, float)) and not isinstance(operand, bool):
            return -operand if isinstance(node.op, ast.USub) else operand
    if isinstance(node, ast.Name) and node.id in _JSON_NAMES:
        return _JSON_NAMES[node.id]  # models mixing JSON into Python syntax: `f(flag=true)`
    raise NotALiteral(f"not a literal: {type(node).__name__}")


def parse_python(text: str) -> ast.expr:
    """Parse text as one Python expression, turning every failure (including pathological nesting) into ValueError.
    A string with an escape Python does not know (a regular expression's backslash-d, say) keeps its backslash, as
    Python reads it, and the warning Python gives for it is silenced: a model's text never writes to the console
    (Python 3.12 prints a SyntaxWarning), and a program run with warnings as errors would otherwise refuse the call."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return ast.parse(text.strip(), mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError) as error:
        raise NotALiteral(f"invalid syntax: {error.__class__.__name__}") from None


def load_json_or_literal(text: str) -> Any:
    """Read JSON, falling back to a Python literal (single-quoted dicts, True/False/None), literals only: nothing is
    evaluated. Raises ValueError when the text is neither.

    >>> load_json_or_literal("{'city': 'Lyon', 'ok': True}")
    {'city': 'Lyon', 'ok': True}
    """
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return literal(parse_python(text))


def call_arguments(value: Any) -> dict[str, Any]:
    """Normalise a call's arguments: a dict, a JSON/Python-literal string of a dict, or null for none."""
    if value is None:
        return {}
    if isinstance(value, str):
        try:
            value = load_json_or_literal(value) if value.strip() else {}
        except NotALiteral:
            raise NotALiteral("arguments is a string but not valid JSON") from None
    if not isinstance(value, dict):
        raise NotALiteral(f"arguments must be an object, got {type(value).__name__}")
    return value


def _call_from_object(obj: Any) -> ToolCall:
    """Build a ToolCall from the object layouts models write (`arguments`, `parameters` or OpenAI's `function`)."""
    if not isinstance(obj, dict):
        raise NotALiteral(f"a call must be an object, got {type(obj).__name__}")
    if isinstance(obj.get("function"), dict):  # OpenAI: {"type": "function", "function": {"name", "arguments"}}
        obj = obj["function"]
    name = obj.get("name")
    if not isinstance(name, str) or not name.strip():
        raise NotALiteral("the call has no 'name'")
    for key in ("arguments", "parameters", "args"):
        if key in obj:
            return ToolCall(name.strip(), call_arguments(obj[key]))
    return ToolCall(name.strip(), {})


def calls_from_value(value: Any, calls: list[ToolCall], errors: list[str]) -> None:
    """Append the call(s) a decoded JSON value holds: one call object, a list of them, or a `tool_calls` message."""
    if isinstance(value, dict) and isinstance(value.get("tool_calls"), list):
        value = value["tool_calls"]
    for item in value if isinstance(value, list) else [value]:
        try:
            calls.append(_call_from_object(item))
        except NotALiteral as error:
            errors.append(str(error))


def skip_whitespace(text: str, index: int) -> int:
    if index < len(text) and not text[index].isspace():
        return index  # the usual case, without a regex call
    return _WHITESPACE.match(text, index).end()


def strip_code_fence(text: str) -> str:
    """Drop a Markdown code fence (```json ... ```) around the whole text."""
    text = text.strip()
    if text.startswith("```"):
        newline = text.find("\n")
        text = text[newline + 1 :] if newline >= 0 else ""
        if text.rstrip().endswith("```"):
            text = text.rstrip()[:-3]
    return text.strip()
