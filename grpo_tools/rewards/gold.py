"""A row's gold reference, as the rewards read it: the gold calls, BFCL's acceptable values and the offered tools'
signatures, prepared once per row (`make_gold`) and read lazily; and the records a reward gives back (`Verdict`,
`ERROR_KINDS`).

A malformed *gold* row (answers, possible answers, tools) raises `GoldError` naming the row.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from grpo_tools.rewards.parsing import ToolCall, fastjson
from grpo_tools.rewards.parsing.toolcall import new_record


_set_name, _set_arguments = ToolCall.name.__set__, ToolCall.arguments.__set__

# The public API; the other names without a leading underscore are shared with `matching`, `rewards` and benchmarks.
__all__ = ["ERROR_KINDS", "Gold", "GoldError", "Signature", "Verdict", "make_gold"]


# Why a completion lost credit. `missing_prediction` is only used by scoring (a data row with no prediction).
ERROR_KINDS: tuple[str, ...] = (
    "parse_error",
    "wrong_name",
    "missing_argument",
    "unexpected_argument",
    "wrong_value",
    "wrong_type",
    "wrong_count",
    "unexpected_call",
    "missed_call",
    "missing_prediction",
)


class GoldError(ValueError):
    """A gold row (answers, possible_answers or tools) that cannot be scored against; the message names the row."""


@dataclass(frozen=True, slots=True)
class Verdict:
    """One completion's score under one reward, and the error kinds behind each credit it lost."""

    score: float
    errors: tuple[str, ...] = ()

    @property
    def correct(self) -> bool:
        """Full credit."""
        return self.score >= 1.0


# `Signature` and `Gold` are made once per distinct row and never written to afterwards, but are not frozen: a frozen
# dataclass's `__init__` sets each field through `object.__setattr__`, which showed in the time to score a row once.
@dataclass(slots=True)
class Signature:
    """What the rewards need of one offered tool: its parameters and which are required."""

    params: dict[str, dict[str, Any]]  # parameter name -> its JSON Schema
    required: frozenset[str]


@dataclass(slots=True)
class Gold:
    """A row's reference: the gold calls, and the raw `possible_answers` and `tools` columns, which are read lazily
    (a reward reads only what it needs: most never look at most tools)."""

    calls: tuple[ToolCall, ...]
    possible_answers: Any  # BFCL acceptable values as given, or None to derive them from `calls`
    tools: Any  # the row's tool list as given: a list of dicts, or a JSON string of one
    row: str = "row"
    # What the rewards read lazily, kept per row. (Not functools.cached_property: on Python 3.11 it takes a lock on
    # every first read, which shows at 100,000 completions a second.)
    memoized: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def possible(self) -> tuple[tuple[str, dict[str, list[Any]]], ...]:
        """BFCL acceptable values, one `(name, {param: [values]})` per gold call."""
        if "possible" not in self.memoized:
            self.memoized["possible"] = _possible(self.possible_answers, self.calls, self.row)
        return self.memoized["possible"]

    @property
    def tool_list(self) -> list[Any]:
        """The offered tool definitions."""
        if "tools" not in self.memoized:
            self.memoized["tools"] = load_tool_list(self.tools, self.row)
        return self.memoized["tools"]

    def signature(self, name: str) -> Signature | None:
        """Parameter schemas and required names of the offered tool `name`; None when no such tool is offered."""
        key = "signature:" + name
        if key not in self.memoized:
            self.memoized[key] = tool_signature(self.tool_list, name, self.row)
        return self.memoized[key]


def load_tool_list(tools: Any, row: str) -> list[Any]:
    tools = _load_json(tools, "tools", row)
    if not isinstance(tools, list):
        raise GoldError(f"{row}: tools must be a list of tool definitions")
    return tools


def _load_json(value: Any, field: str, row: str) -> Any:
    """Columns may hold JSON strings (datasets stores heterogeneous nested values that way)."""
    if isinstance(value, str):
        try:
            return fastjson.loads(value)
        except ValueError as error:
            raise GoldError(f"{row}: {field} is a string but not valid JSON ({error})") from None
    return value


def _gold_calls(answers: Any, row: str) -> tuple[ToolCall, ...]:
    if isinstance(answers, str):
        answers = _load_json(answers, "answers", row)
    if answers is None:
        raise GoldError(f"{row}: answers is missing (use [] when the right response calls no tool)")
    if not isinstance(answers, list):
        raise GoldError(f"{row}: answers must be a list of {{name, arguments}}, got {type(answers).__name__}")
    calls = []
    for index, answer in enumerate(answers):
        name = answer.get("name") if isinstance(answer, dict) else None
        if not isinstance(name, str):
            raise GoldError(f"{row}: answers[{index}] must be an object with a string 'name'")
        arguments = answer.get("arguments", {})
        if type(arguments) is not dict:  # the common case first: a dict
            if isinstance(arguments, str):
                arguments = _load_json(arguments, f"answers[{index}].arguments", row)
            if not isinstance(arguments, dict):
                raise GoldError(f"{row}: answers[{index}].arguments must be an object")
        call = new_record(ToolCall)  # `new_call`, inline: this runs once per gold call of every row read
        _set_name(call, name)
        _set_arguments(call, arguments)
        calls.append(call)
    return tuple(calls)


def _possible(possible_answers: Any, calls: tuple[ToolCall, ...], row: str) -> tuple[tuple[str, dict], ...]:
    """BFCL acceptable values; derived from the gold calls (each value the only one, each given param required)."""
    if isinstance(possible_answers, str):
        possible_answers = _load_json(possible_answers, "possible_answers", row)
    if possible_answers is None:  # a scalar is its own acceptable value: read inline, the common case
        return tuple(
            (
                call.name,
                {
                    key: [value if type(value) in _SCALARS else _acceptable(value)]
                    for key, value in call.arguments.items()
                },
            )
            for call in calls
        )
    if not isinstance(possible_answers, list):
        raise GoldError(f"{row}: possible_answers must be a list with one entry per gold call")
    entries = []
    for index, entry in enumerate(possible_answers):
        if not isinstance(entry, dict) or len(entry) != 1:
            raise GoldError(f"{row}: possible_answers[{index}] must be an object with exactly one function name")
        ((name, params),) = entry.items()
        if isinstance(params, dict):
            for values in params.values():  # a loop: about twice as fast as all(...) at a few parameters
                if not isinstance(values, list):
                    break
            else:
                entries.append((name, params))
                continue
        raise GoldError(f"{row}: possible_answers[{index}].{name} must map each parameter to a list of values")
    if len(entries) != len(calls):
        raise GoldError(f"{row}: possible_answers has {len(entries)} entries but answers has {len(calls)} calls")
    return tuple(entries)


# Gold prepared per distinct row, for rows read again: each reward of a recipe reads the same batch, and trl hands
# every completion its own copy of the row's columns (JSON strings, see `prompts.prompt_dataset`). Keyed on those
# strings; bounded. A row is kept from its second reading on (None marks the first): the completions of one prompt,
# which come together, share one gold without it, and what a row read only once kept would only be walked by the
# garbage collector.
GOLD_CACHE: dict[tuple[str, str, str | None], tuple[tuple[ToolCall, ...], dict[str, Any]] | None] = {}
_GOLD_CACHE_SIZE = 4096
_UNSEEN = object()


_SCALARS = frozenset({str, int, float, bool, type(None)})


def _acceptable(value: Any) -> Any:
    """A gold value as BFCL writes an acceptable one: an object (also inside a list) maps each key to a list of
    acceptable values, one level deep; the inverse of what the BFCL converter reads."""
    if isinstance(value, dict):
        return {key: [sub] for key, sub in value.items()}
    if isinstance(value, list):
        return [_acceptable(element) if isinstance(element, dict) else element for element in value]
    return value


def make_gold(tools: Any, answers: Any, possible_answers: Any = None, row: str = "row") -> Gold:
    """Read a row's gold columns; `row` (e.g. "row 17 (id=weather-0007)") names the row in errors.

    Rows whose columns are JSON strings share what the rewards prepare (gold calls, tool schemas, BFCL's acceptable
    values) with every row of the same content, so a batch prepares each distinct row once."""
    if not (isinstance(tools, str) and isinstance(answers, str) and isinstance(possible_answers, str | None)):
        return Gold(_gold_calls(answers, row), possible_answers, tools, row)
    key = (tools, answers, possible_answers)
    cached = GOLD_CACHE.get(key, _UNSEEN)
    if cached is _UNSEEN or cached is None:
        if len(GOLD_CACHE) >= _GOLD_CACHE_SIZE:
            GOLD_CACHE.clear()
        # A row whose gold is broken raises here, naming itself, and is not cached; what the rewards read later
        # (tools, possible answers) is memoised only when it reads without error, so errors name their own row.
        calls = _gold_calls(answers, row)
        if cached is _UNSEEN:
            GOLD_CACHE[key] = None
            return Gold(calls, possible_answers, tools, row)
        cached = GOLD_CACHE[key] = (calls, {})
    return Gold(cached[0], possible_answers, tools, row, cached[1])


_JSON_SCHEMA_TYPES = frozenset({"string", "integer", "number", "boolean", "array", "object", "null"})


_TYPE_SETS = {name: frozenset([name]) for name in _JSON_SCHEMA_TYPES}
_UNTYPED: frozenset[str] = frozenset()


def types_of(schema: Any) -> frozenset[str] | None:
    """The JSON Schema type names of a schema; None when it is not standard JSON Schema (BFCL, xLAM)."""
    if not isinstance(schema, dict):
        return None
    declared = schema.get("type")
    if declared is None:
        return _UNTYPED
    if isinstance(declared, str):
        return _TYPE_SETS.get(declared)  # the common case: one type, a dict hit
    names = frozenset(declared)
    return names if names <= _JSON_SCHEMA_TYPES else None


def _fast_parameters(function: dict[str, Any]) -> tuple[dict[str, Any], Collection[str]] | None:
    """Read a canonical (OpenAI, JSON Schema) tool's parameters directly: the common case, and a hot path during
    training. None when some parameter's schema is not standard JSON Schema. The required names are as the tool
    gives them (a list), not made into a set: BFCL's checker only iterates over them."""
    parameters = function.get("parameters")
    if not isinstance(parameters, dict) or parameters.get("type") != "object":
        return None
    properties = parameters.get("properties", {})
    if not isinstance(properties, dict):
        return None
    for schema in properties.values():
        # `types_of(schema) is None`, with the common case (one standard type name) read inline.
        declared = schema.get("type") if type(schema) is dict else None
        if not (type(declared) is str and declared in _TYPE_SETS) and types_of(schema) is None:
            return None
    return properties, parameters.get("required", ())


def tool_parameters(tools: list[Any], name: str, row: str) -> tuple[dict[str, Any], Collection[str]] | None:
    """The parameter schemas and required names of the offered tool `name`, as `tool_signature` reads them, without
    making a `Signature`; None when no such tool is offered."""
    for tool in tools:
        function = tool.get("function", tool) if isinstance(tool, dict) else None
        if isinstance(function, dict) and function.get("name") == name:
            fast = _fast_parameters(function)
            if fast is not None:
                return fast
            break
    signature = _normalized_signatures(tools, row).get(name)
    return None if signature is None else (signature.params, signature.required)


def tool_signature(tools: list[Any], name: str, row: str) -> Signature | None:
    """One tool's parameter specs; other dialects (BFCL, xLAM) go through full normalisation in `schemas`."""
    found = tool_parameters(tools, name, row)
    return None if found is None else Signature(found[0], frozenset(found[1]))


def _normalized_signatures(tools: list[Any], row: str) -> dict[str, Signature]:
    from grpo_tools.rewards.schemas import SchemaError, normalize_tools

    try:
        normalized = normalize_tools(tools)
    except SchemaError as error:
        raise GoldError(f"{row}: {error}") from None
    return {
        name: Signature(
            dict(tool.properties),
            frozenset(tool.required),
        )
        for name, tool in normalized.items()
    }


def offered_tool_names(gold: Gold) -> frozenset[str]:
    from grpo_tools.rewards.schemas import SchemaError, tool_names

    try:
        return tool_names(gold.tool_list)
    except SchemaError as error:
        raise GoldError(f"{gold.row}: {error}") from None
