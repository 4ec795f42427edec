"""The tool-use reward model: named rewards that score a completion's tool calls against a row's gold calls.

Every reward has trl's signature (`completions` plus the dataset columns as keyword arguments) and returns one float
per completion, so each can be passed as `reward_funcs` to a plain `trl.GRPOTrainer`. Under the hood each is a
scorer `(ParseResult, Gold) -> Verdict`: the score and the error kinds that explain each lost credit. The exact
semantics are in DESIGN.md ("Reward semantics"); the short version is in each scorer's docstring.

A malformed *gold* row (answers, possible answers, tools) raises `GoldError` naming the row; a malformed *completion*
only ever scores lower.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from grpo_tools import fastjson
from grpo_tools.bfcl import BfclCall, check_bfcl, check_bfcl_irrelevance, prepare_bfcl
from grpo_tools.calls import ParseResult, ToolCall, parse_tool_calls


__all__ = [
    "ERROR_KINDS",
    "REWARDS",
    "Gold",
    "GoldError",
    "RewardSpec",
    "Verdict",
    "argument_checks",
    "get_reward_funcs",
    "make_gold",
    "score_completion",
    "tool_bfcl_reward",
    "tool_exact_reward",
    "tool_format_reward",
    "tool_partial_reward",
    "tool_schema_reward",
]

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


@dataclass(frozen=True, slots=True)
class Signature:
    """What the rewards need of one offered tool: its parameters and which are required."""

    params: dict[str, dict[str, Any]]  # parameter name -> its JSON Schema
    required: frozenset[str]


@dataclass(frozen=True)
class Gold:
    """A row's reference: the gold calls, and the raw `possible_answers` and `tools` columns, which are read lazily
    (a reward reads only what it needs: most never look at most tools)."""

    calls: tuple[ToolCall, ...]
    possible_answers: Any  # BFCL acceptable values as given, or None to derive them from `calls`
    tools: Any  # the row's tool list as given: a list of dicts, or a JSON string of one
    row: str = "row"
    # What the rewards read lazily, kept per row. (Not functools.cached_property: on Python 3.11 it takes a lock on
    # every first read, which shows at 100,000 completions a second.)
    _memo: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def possible(self) -> tuple[tuple[str, dict[str, list[Any]]], ...]:
        """BFCL acceptable values, one `(name, {param: [values]})` per gold call."""
        if "possible" not in self._memo:
            self._memo["possible"] = _possible(self.possible_answers, self.calls, self.row)
        return self._memo["possible"]

    @property
    def tool_list(self) -> list[Any]:
        """The offered tool definitions."""
        if "tools" not in self._memo:
            self._memo["tools"] = _tool_list(self.tools, self.row)
        return self._memo["tools"]

    def signature(self, name: str) -> Signature | None:
        """Parameter schemas and required names of the offered tool `name`; None when no such tool is offered."""
        key = "signature:" + name
        if key not in self._memo:
            self._memo[key] = _signature(self.tool_list, name, self.row)
        return self._memo[key]


# ---------------------------------------------------------------------------------------------------------------
# Reading gold rows and tools


def _tool_list(tools: Any, row: str) -> list[Any]:
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
    answers = _load_json(answers, "answers", row)
    if answers is None:
        raise GoldError(f"{row}: answers is missing (use [] when the right response calls no tool)")
    if not isinstance(answers, list):
        raise GoldError(f"{row}: answers must be a list of {{name, arguments}}, got {type(answers).__name__}")
    calls = []
    for index, answer in enumerate(answers):
        if not isinstance(answer, dict) or not isinstance(answer.get("name"), str):
            raise GoldError(f"{row}: answers[{index}] must be an object with a string 'name'")
        arguments = _load_json(answer.get("arguments", {}), f"answers[{index}].arguments", row)
        if not isinstance(arguments, dict):
            raise GoldError(f"{row}: answers[{index}].arguments must be an object")
        calls.append(ToolCall(answer["name"], arguments))
    return tuple(calls)


def _possible(possible_answers: Any, calls: tuple[ToolCall, ...], row: str) -> tuple[tuple[str, dict], ...]:
    """BFCL acceptable values; derived from the gold calls (each value the only one, each given param required)."""
    possible_answers = _load_json(possible_answers, "possible_answers", row)
    if possible_answers is None:
        return tuple(
            (call.name, {key: [_acceptable(value)] for key, value in call.arguments.items()}) for call in calls
        )
    if not isinstance(possible_answers, list):
        raise GoldError(f"{row}: possible_answers must be a list with one entry per gold call")
    entries = []
    for index, entry in enumerate(possible_answers):
        if not isinstance(entry, dict) or len(entry) != 1:
            raise GoldError(f"{row}: possible_answers[{index}] must be an object with exactly one function name")
        ((name, params),) = entry.items()
        if not isinstance(params, dict) or not all(isinstance(values, list) for values in params.values()):
            raise GoldError(f"{row}: possible_answers[{index}].{name} must map each parameter to a list of values")
        entries.append((name, params))
    if len(entries) != len(calls):
        raise GoldError(f"{row}: possible_answers has {len(entries)} entries but answers has {len(calls)} calls")
    return tuple(entries)


# Gold prepared per distinct row: a GRPO batch scores several completions of each prompt, and trl hands each one its
# own copy of the row's columns (JSON strings, see `prompts.prompt_dataset`). Keyed on those strings; bounded.
_GOLD_CACHE: dict[tuple[str, str, str | None], tuple[tuple[ToolCall, ...], dict[str, Any]]] = {}
_GOLD_CACHE_SIZE = 4096


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
    cached = _GOLD_CACHE.get(key)
    if cached is None:
        if len(_GOLD_CACHE) >= _GOLD_CACHE_SIZE:
            _GOLD_CACHE.clear()
        # A row whose gold is broken raises here, naming itself, and is not cached; what the rewards read later
        # (tools, possible answers) is memoised only when it reads without error, so errors name their own row.
        cached = _GOLD_CACHE[key] = (_gold_calls(answers, row), {})
    return Gold(cached[0], possible_answers, tools, row, cached[1])


_JSON_SCHEMA_TYPES = frozenset({"string", "integer", "number", "boolean", "array", "object", "null"})


_TYPE_SETS = {name: frozenset([name]) for name in _JSON_SCHEMA_TYPES}
_UNTYPED: frozenset[str] = frozenset()


def _types_of(schema: Any) -> frozenset[str] | None:
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


def _fast_signature(tool: dict[str, Any]) -> Signature | None:
    """Read a canonical (OpenAI, JSON Schema) tool directly: the common case, and a hot path during training."""
    function = tool.get("function", tool)
    parameters = function.get("parameters")
    if not isinstance(parameters, dict) or parameters.get("type") != "object":
        return None
    properties = parameters.get("properties", {})
    if not isinstance(properties, dict) or None in map(_types_of, properties.values()):
        return None
    return Signature(properties, frozenset(parameters.get("required", ())))


def _signature(tools: list[Any], name: str, row: str) -> Signature | None:
    """One tool's parameter specs; other dialects (BFCL, xLAM) go through full normalisation in `schemas`."""
    for tool in tools:
        function = tool.get("function", tool) if isinstance(tool, dict) else None
        if isinstance(function, dict) and function.get("name") == name:
            fast = _fast_signature(tool)
            if fast is not None:
                return fast
            break
    return _normalized_signatures(tools, row).get(name)


def _normalized_signatures(tools: list[Any], row: str) -> dict[str, Signature]:
    from grpo_tools.schemas import SchemaError, normalize_tools

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


def _tool_names(gold: Gold) -> frozenset[str]:
    from grpo_tools.schemas import SchemaError, tool_names

    try:
        return tool_names(gold.tool_list)
    except SchemaError as error:
        raise GoldError(f"{gold.row}: {error}") from None


# ---------------------------------------------------------------------------------------------------------------
# Comparing values


def _json_equal(predicted: Any, gold: Any, schema: Any = None) -> bool:
    """Equal as JSON (so `True != 1` and `1 != 1.0`), except that an integer equals the same float where `schema`
    says `number`. `schema` follows the value down through `properties` and `items`."""
    kind = type(gold)
    if type(predicted) is not kind:
        if type(predicted) in (int, float) and kind in (int, float):
            return "number" in (_types_of(schema) or ()) and predicted == gold
        return False
    if kind is dict:
        if predicted.keys() != gold.keys():
            return False
        properties = schema.get("properties", {}) if isinstance(schema, dict) else {}
        for key, value in gold.items():
            other = predicted[key]
            # Scalars of the same type compare inline; this loop is the hot path of `tool_exact`.
            if type(other) is type(value) and type(value) in (str, int, bool):
                if other != value:
                    return False
            elif not _json_equal(other, value, properties.get(key)):
                return False
        return True
    if kind is list:
        items = schema.get("items") if isinstance(schema, dict) else None
        return len(predicted) == len(gold) and all(
            _json_equal(p, g, items) for p, g in zip(predicted, gold, strict=True)
        )
    return predicted == gold


def _same_kind(predicted: Any, gold: Any, schema: Any) -> bool:
    """Whether two values have the same JSON type, to tell wrong_type from wrong_value; an integer and a float are
    the same kind only where the schema says `number`."""
    if type(predicted) is type(gold):
        return True
    numbers = (int, float)
    return type(predicted) in numbers and type(gold) in numbers and "number" in (_types_of(schema) or ())


# ---------------------------------------------------------------------------------------------------------------
# Pairing predicted and gold calls


def _best_pairs(credit: list[list[float]]) -> list[tuple[int, int]]:
    """Rows and columns of a maximum-total-credit assignment (Hungarian algorithm via scipy)."""
    if len(credit) == 1 and len(credit[0]) == 1:
        return [(0, 0)]
    from scipy.optimize import linear_sum_assignment

    rows, columns = linear_sum_assignment(credit, maximize=True)
    return list(zip(rows.tolist(), columns.tolist(), strict=True))


def _pair_credit(predicted: ToolCall, gold: ToolCall, params: dict[str, dict[str, Any]] | None) -> float:
    """`(1 + J + V) / 3` for calls to the same tool: J the Jaccard index of argument names, V the fraction of gold
    arguments whose values match; 0 for different tools."""
    if predicted.name != gold.name:
        return 0.0
    predicted_names, gold_names = predicted.arguments.keys(), gold.arguments.keys()
    union = len(predicted_names | gold_names)
    jaccard = len(predicted_names & gold_names) / union if union else 1.0
    if not gold_names:
        values = 1.0
    else:
        matched = sum(
            1
            for key, value in gold.arguments.items()
            if key in predicted.arguments
            and _json_equal(predicted.arguments[key], value, params.get(key) if params else None)
        )
        values = matched / len(gold_names)
    return (1.0 + jaccard + values) / 3.0


def _pair_errors(predicted: ToolCall, gold: ToolCall, params: dict[str, dict[str, Any]] | None) -> list[str]:
    """The error kinds that tell a predicted call from the gold call it was paired with."""
    if predicted.name != gold.name:
        return ["wrong_name"]
    errors = ["missing_argument" for key in gold.arguments if key not in predicted.arguments]
    errors += ["unexpected_argument" for key in predicted.arguments if key not in gold.arguments]
    for key, value in gold.arguments.items():
        if key in predicted.arguments:
            schema = params.get(key) if params else None
            if not _json_equal(predicted.arguments[key], value, schema):
                errors.append("wrong_value" if _same_kind(predicted.arguments[key], value, schema) else "wrong_type")
    return errors


def _irrelevance(parsed: ParseResult) -> Verdict:
    """Rows whose gold calls nothing: 1 for calling nothing, 0 for any call, in every reward."""
    if not parsed.attempted:
        return Verdict(1.0)
    return Verdict(0.0, ("unexpected_call",) + ("parse_error",) * len(parsed.errors))


def _params_by_name(gold: Gold, name: str) -> dict[str, dict[str, Any]] | None:
    signature = gold.signature(name)
    return signature.params if signature else None


def _pairing(
    parsed: ParseResult, gold: Gold
) -> tuple[dict[str, dict[str, dict[str, Any]] | None], list[list[float]], list[tuple[int, int]]]:
    """The parameter schemas of each gold tool, the credit of every (predicted, gold) pair, and the pairs of the
    maximum-total-credit assignment."""
    params = {call.name: _params_by_name(gold, call.name) for call in gold.calls}
    credit = [[_pair_credit(p, g, params[g.name]) for g in gold.calls] for p in parsed.calls]
    return params, credit, _best_pairs(credit)


def _diagnose(parsed: ParseResult, gold: Gold) -> tuple[float, list[str]]:
    """Total pair credit of the best pairing, and the error kinds of every imperfect pair or unpaired call."""
    errors = ["parse_error"] * len(parsed.errors)
    predicted, expected = parsed.calls, gold.calls
    if len(predicted) + len(parsed.errors) != len(expected):
        errors.append("wrong_count")
    if not predicted:
        return 0.0, errors
    params, credit, pairs = _pairing(parsed, gold)
    total = 0.0
    for p, g in pairs:
        total += credit[p][g]
        errors += _pair_errors(predicted[p], expected[g], params[expected[g].name])
    return total, errors


def argument_checks(completion: Any, gold: Gold) -> list[tuple[str, bool]]:
    """`("tool.argument", right)` for every argument of every gold call that the completion called the same tool for
    (calls paired as in `tool_partial`): a diagnostic of which values a model gets wrong, not a reward. An argument
    left out counts as wrong; gold calls with no call to their tool, and rows that call nothing, give no checks."""
    parsed = _parse(completion, gold)
    if not gold.calls or not parsed.calls:
        return []
    params, _, pairs = _pairing(parsed, gold)
    checks = []
    for p, g in pairs:
        predicted, expected = parsed.calls[p], gold.calls[g]
        if predicted.name != expected.name:
            continue
        schemas = params[expected.name] or {}
        checks += [
            (
                f"{expected.name}.{key}",
                key in predicted.arguments and _json_equal(predicted.arguments[key], value, schemas.get(key)),
            )
            for key, value in expected.arguments.items()
        ]
    return checks


# ---------------------------------------------------------------------------------------------------------------
# Scorers: (ParseResult, Gold) -> Verdict


def score_format(parsed: ParseResult, gold: Gold) -> Verdict:
    """1 when there is at least one call, every attempted call parses, and each names an offered tool."""
    if not gold.calls:
        return _irrelevance(parsed)
    if not parsed.attempted:
        return Verdict(0.0, ("missed_call",))
    names = _tool_names(gold)
    errors = ("parse_error",) * len(parsed.errors) + tuple("wrong_name" for c in parsed.calls if c.name not in names)
    return Verdict(0.0 if errors or not parsed.calls else 1.0, errors)


@lru_cache(maxsize=4096)
def _normalized_tools(tools_json: str) -> dict[str, Any]:
    """Normalised tools (with their compiled validators) per distinct tool list: rows share few tool lists, and
    building a validator costs far more than serialising the list to look it up."""
    from grpo_tools.schemas import normalize_tools

    return normalize_tools(tools_json)


def score_schema(parsed: ParseResult, gold: Gold) -> Verdict:
    """The fraction of attempted calls whose arguments validate against their tool's JSON Schema (a call that did
    not parse counts as invalid)."""
    if not gold.calls:
        return _irrelevance(parsed)
    if not parsed.attempted:
        return Verdict(0.0, ("missed_call",))
    from grpo_tools.schemas import SchemaError, validate_arguments

    key = gold.tools if isinstance(gold.tools, str) else json.dumps(gold.tool_list, sort_keys=True)
    try:
        tools = _normalized_tools(key)
    except SchemaError as error:
        raise GoldError(f"{gold.row}: {error}") from None
    errors = ["parse_error"] * len(parsed.errors)
    valid = 0
    for call in parsed.calls:
        tool = tools.get(call.name)
        if tool is None:
            errors.append("wrong_name")
            continue
        problems = validate_arguments(tool, call.arguments)
        errors += [problem.kind for problem in problems]
        valid += not problems
    return Verdict(valid / (len(parsed.calls) + len(parsed.errors)), tuple(errors))


def score_exact(parsed: ParseResult, gold: Gold) -> Verdict:
    """1 when the predicted calls equal the gold calls as a multiset (any order), values equal as JSON except that an
    integer equals the same float where the schema says `number`; else 0."""
    if not gold.calls:
        return _irrelevance(parsed)
    if not parsed.attempted:
        return Verdict(0.0, ("missed_call",))
    predicted, expected = parsed.calls, gold.calls
    if not parsed.errors and len(predicted) == len(expected):
        # Fast path: strict JSON equality needs no schema; the number rule is only consulted on a mismatch.
        single = len(expected) == 1 and predicted[0].name == expected[0].name
        if single and _json_equal(predicted[0].arguments, expected[0].arguments):
            return Verdict(1.0)
        if _multiset_equal(predicted, gold):
            return Verdict(1.0)
    _, errors = _diagnose(parsed, gold)
    return Verdict(0.0, tuple(errors or ["wrong_value"]))


def _multiset_equal(predicted: tuple[ToolCall, ...], gold: Gold) -> bool:
    # Equality (with the number rule) is an equivalence relation, so greedy matching finds a perfect one if any exists.
    unmatched = list(predicted)
    for expected in gold.calls:
        params = _params_by_name(gold, expected.name) or {}
        schema = {"properties": params}
        for index, call in enumerate(unmatched):
            if call.name == expected.name and _json_equal(call.arguments, expected.arguments, schema):
                del unmatched[index]
                break
        else:
            return False
    return True


def score_partial(parsed: ParseResult, gold: Gold) -> Verdict:
    """Pair predicted and gold calls by an optimal assignment; each pair earns `(1 + J + V) / 3` (0 across different
    tools); the total is divided by `max(#predicted, #gold)`, so extra and missing calls both cost credit."""
    if not gold.calls:
        return _irrelevance(parsed)
    if not parsed.attempted:
        return Verdict(0.0, ("missed_call",))
    total, errors = _diagnose(parsed, gold)
    attempted = len(parsed.calls) + len(parsed.errors)
    return Verdict(total / max(attempted, len(gold.calls)), tuple(errors))


# ---------------------------------------------------------------------------------------------------------------
# BFCL AST rules (Berkeley Function Calling Leaderboard, `ast_checker`): see `grpo_tools.bfcl`


_RIGHT = Verdict(1.0)
_WRONG = {kind: Verdict(0.0, (kind,)) for kind in ERROR_KINDS}  # one record per error kind, not per completion


def _bfcl_gold(gold: Gold) -> tuple[BfclCall, ...]:
    memo = gold._memo
    if "bfcl" not in memo:
        # The tools are read here without being kept (unless another reward keeps them): the prepared calls are all
        # that `score_bfcl` reads afterwards, and each object a cached row keeps is walked by every full garbage
        # collection; at BFCL's sizes a parsed tool list is most of a row's objects.
        tools = memo["tools"] if "tools" in memo else _tool_list(gold.tools, gold.row)
        prepared = []
        for name, acceptable in gold.possible:
            key = "signature:" + name
            signature = memo[key] if key in memo else _signature(tools, name, gold.row)
            properties, required = (signature.params, signature.required) if signature else (None, ())
            prepared.append(prepare_bfcl(name, acceptable, properties, sorted(required)))
        memo["bfcl"] = tuple(prepared)
    return memo["bfcl"]


def score_bfcl(parsed: ParseResult, gold: Gold) -> Verdict:
    """BFCL's verdict (`ast_checker`), quirks included: equal counts, then each gold call in order pairs with the
    first unused call that has its name, only declared parameters, every required (or non-optional) parameter, and
    values of the schema's type (or of the acceptable values' type) among the acceptable ones. Where no call is
    right, an output that does not parse counts as no call, as in BFCL. Binary."""
    if not gold.calls:
        if check_bfcl_irrelevance(len(parsed.calls), decoded=not parsed.errors):
            return _RIGHT
        return _WRONG["unexpected_call"]
    if parsed.errors:
        return Verdict(0.0, ("parse_error",) * len(parsed.errors))
    if not parsed.calls:
        return _WRONG["missed_call"]
    memo = gold._memo
    prepared = memo["bfcl"] if "bfcl" in memo else _bfcl_gold(gold)
    calls = parsed.calls
    # One gold call and one call: `simple_function_checker` alone (what `check_bfcl` does there), one call less.
    error = prepared[0].error(calls[0]) if len(calls) == 1 == len(prepared) else check_bfcl(calls, prepared)
    return _RIGHT if error is None else _WRONG[error]


# ---------------------------------------------------------------------------------------------------------------
# trl-facing reward functions and the registry


Scorer = Callable[[ParseResult, Gold], Verdict]


def _row_name(index: int, ids: Sequence[Any] | None) -> str:
    return f"row {index} (id={ids[index]})" if ids is not None and index < len(ids) else f"row {index}"


def _parse(completion: Any, gold: Gold) -> ParseResult:
    """Parse a completion; Qwen3-Coder's XML values are text, so those are read again with the tools to cast them."""
    parsed = parse_tool_calls(completion)
    if parsed.format == "qwen3_coder":
        return parse_tool_calls(completion, tools=gold.tool_list)
    return parsed


def _score_batch(
    scorer: Scorer,
    completions: Sequence[Any],
    tools: Sequence[Any],
    answers: Sequence[Any],
    possible_answers: Sequence[Any] | None,
    kwargs: dict[str, Any],
) -> list[float]:
    """Score a batch the way trl passes it; report the share of completions with each error kind via `log_metric`."""
    ids = kwargs.get("id")
    possible = possible_answers if possible_answers is not None else [None] * len(completions)
    verdicts: list[Verdict] = []
    append = verdicts.append
    last_row: tuple[Any, Any, Any] | None = None
    rows = zip(tools, answers, possible, strict=True)
    for i, (completion, row) in enumerate(zip(completions, rows, strict=True)):
        # trl passes the completions of one prompt together: a row equal to the last one (a comparison, cheaper
        # than hashing its columns again) reuses its gold.
        if row != last_row:
            gold, last_row = make_gold(*row, row=_row_name(i, ids)), row
        parsed = parse_tool_calls(completion)
        if parsed.format == "qwen3_coder":  # as `_parse`, inline: this loop runs once per completion
            parsed = parse_tool_calls(completion, tools=gold.tool_list)
        append(scorer(parsed, gold))
    log_metric = kwargs.get("log_metric")
    if log_metric is not None and verdicts:
        counts = Counter(kind for verdict in verdicts for kind in set(verdict.errors))
        name = next(name for name, spec in REWARDS.items() if spec.scorer is scorer)
        for kind in ERROR_KINDS[:-1]:
            log_metric(f"{name}/{kind}", counts[kind] / len(verdicts))
    return [verdict.score for verdict in verdicts]


def tool_format_reward(
    completions: Sequence[Any], tools: Sequence[Any], answers: Sequence[Any], possible_answers=None, **kwargs
) -> list[float]:
    """1.0 per completion whose calls all parse and name offered tools (see `score_format`).

    >>> tools = [[{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}]]
    >>> tool_format_reward(['<tool_call>{"name": "f", "arguments": {}}</tool_call>'], tools, [[{"name": "f"}]])
    [1.0]
    """
    return _score_batch(score_format, completions, tools, answers, possible_answers, kwargs)


def tool_schema_reward(
    completions: Sequence[Any], tools: Sequence[Any], answers: Sequence[Any], possible_answers=None, **kwargs
) -> list[float]:
    """Fraction of each completion's calls whose arguments validate against the tool schema (see `score_schema`)."""
    return _score_batch(score_schema, completions, tools, answers, possible_answers, kwargs)


def tool_exact_reward(
    completions: Sequence[Any], tools: Sequence[Any], answers: Sequence[Any], possible_answers=None, **kwargs
) -> list[float]:
    """1.0 per completion whose calls equal the gold calls as a multiset (see `score_exact`).

    >>> tools = [[{"type": "function", "function": {"name": "f", "parameters": {"type": "object",
    ...           "properties": {"x": {"type": "number"}}}}}]] * 2
    >>> answers = [[{"name": "f", "arguments": {"x": 2.0}}]] * 2
    >>> tool_exact_reward(["[f(x=2)]", "[f(x=3)]"], tools, answers)
    [1.0, 0.0]
    """
    return _score_batch(score_exact, completions, tools, answers, possible_answers, kwargs)


def tool_partial_reward(
    completions: Sequence[Any], tools: Sequence[Any], answers: Sequence[Any], possible_answers=None, **kwargs
) -> list[float]:
    """Partial credit in [0, 1] for names, argument names and values (see `score_partial`).

    >>> tools = [[{"type": "function", "function": {"name": "f", "parameters": {"type": "object",
    ...           "properties": {"a": {"type": "string"}, "b": {"type": "string"}}}}}]]
    >>> tool_partial_reward(['[f(a="x", b="wrong")]'], tools, [[{"name": "f", "arguments": {"a": "x", "b": "y"}}]])
    [0.8333333333333334]
    """
    return _score_batch(score_partial, completions, tools, answers, possible_answers, kwargs)


def tool_bfcl_reward(
    completions: Sequence[Any], tools: Sequence[Any], answers: Sequence[Any], possible_answers=None, **kwargs
) -> list[float]:
    """1.0 per completion correct under the BFCL AST rules (see `score_bfcl`)."""
    return _score_batch(score_bfcl, completions, tools, answers, possible_answers, kwargs)


@dataclass(frozen=True)
class RewardSpec:
    """A registered reward: the trl reward function, its scorer, and one line for help texts."""

    function: Callable[..., list[float]]
    scorer: Scorer
    description: str


REWARDS: dict[str, RewardSpec] = {
    "tool_format": RewardSpec(
        tool_format_reward, score_format, "every attempted call parses and names an offered tool"
    ),
    "tool_schema": RewardSpec(tool_schema_reward, score_schema, "fraction of calls whose arguments fit the schema"),
    "tool_exact": RewardSpec(tool_exact_reward, score_exact, "the calls equal the gold calls (any order)"),
    "tool_partial": RewardSpec(tool_partial_reward, score_partial, "partial credit for names, argument names, values"),
    "tool_bfcl": RewardSpec(tool_bfcl_reward, score_bfcl, "the Berkeley Function Calling Leaderboard's AST rules"),
}


def get_reward_funcs(names: Sequence[str]) -> list[Callable[..., list[float]]]:
    """The trl reward functions for registry names, e.g. `get_reward_funcs(["tool_format", "tool_exact"])`."""
    unknown = [name for name in names if name not in REWARDS]
    if unknown:
        raise ValueError(f"unknown reward(s) {', '.join(map(repr, unknown))}; choose from {', '.join(REWARDS)}")
    return [REWARDS[name].function for name in names]


def score_completion(reward: str, completion: Any, gold: Gold) -> Verdict:
    """Score one completion against one prepared gold row under a named reward (used by scoring and eval)."""
    return REWARDS[reward].scorer(_parse(completion, gold), gold)
