"""The scorers behind the named rewards: `(ParseResult, Gold) -> Verdict`, one per reward, each giving the score and
the error kinds that explain each lost credit (docs/rewards.md, "The rewards"); `parse_completion` reads a completion
as every reward reads it. `grpo_tools.rewards.rewards` turns them into trl reward functions.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from functools import lru_cache
from typing import Any

from grpo_tools.rewards.bfcl import BfclCall, check_bfcl, check_bfcl_irrelevance, prepare_bfcl
from grpo_tools.rewards.bfcl_once import OnceGold, check_once
from grpo_tools.rewards.gold import (
    ERROR_KINDS,
    Gold,
    GoldError,
    Verdict,
    load_tool_list,
    offered_tool_names,
    tool_parameters,
)
from grpo_tools.rewards.matching import (
    diagnose,
    irrelevance,
    json_equal,
    pairing,
    params_by_name,
)
from grpo_tools.rewards.parsing import ParseResult, ToolCall, parse_tool_calls


__all__ = [
    "argument_checks",
    "parse_completion",
    "score_bfcl",
    "score_exact",
    "score_format",
    "score_partial",
    "score_schema",
]


# ---------------------------------------------------------------------------------------------------------------
# Scorers: (ParseResult, Gold) -> Verdict


def argument_checks(completion: Any, gold: Gold) -> list[tuple[str, bool]]:
    """`("tool.argument", right)` for every argument of every gold call that the completion called the same tool for
    (calls paired as in `tool_partial`): a diagnostic of which values a model gets wrong, not a reward. An argument
    left out counts as wrong; gold calls with no call to their tool, and rows that call nothing, give no checks."""
    parsed = parse_completion(completion, gold)
    if not gold.calls or not parsed.calls:
        return []
    params, _, pairs = pairing(parsed, gold)
    checks = []
    for p, g in pairs:
        predicted, expected = parsed.calls[p], gold.calls[g]
        if predicted.name != expected.name:
            continue
        schemas = params[expected.name] or {}
        checks += [
            (
                f"{expected.name}.{key}",
                key in predicted.arguments and json_equal(predicted.arguments[key], value, schemas.get(key)),
            )
            for key, value in expected.arguments.items()
        ]
    return checks


def score_format(parsed: ParseResult, gold: Gold) -> Verdict:
    """1 when there is at least one call, every attempted call parses, and each names an offered tool."""
    if not gold.calls:
        return irrelevance(parsed)
    if not parsed.attempted:
        return Verdict(0.0, ("missed_call",))
    names = offered_tool_names(gold)
    errors = ("parse_error",) * len(parsed.errors) + tuple("wrong_name" for c in parsed.calls if c.name not in names)
    return Verdict(0.0 if errors or not parsed.calls else 1.0, errors)


@lru_cache(maxsize=4096)
def _normalized_tools(tools_json: str) -> dict[str, Any]:
    """Normalised tools (with their compiled validators) per distinct tool list: rows share few tool lists, and
    building a validator costs far more than serialising the list to look it up."""
    from grpo_tools.rewards.schemas import normalize_tools

    return normalize_tools(tools_json)


def score_schema(parsed: ParseResult, gold: Gold) -> Verdict:
    """The fraction of attempted calls whose arguments validate against their tool's JSON Schema (a call that did
    not parse counts as invalid)."""
    if not gold.calls:
        return irrelevance(parsed)
    if not parsed.attempted:
        return Verdict(0.0, ("missed_call",))
    from grpo_tools.rewards.schemas import SchemaError, validate_arguments

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
        return irrelevance(parsed)
    if not parsed.attempted:
        return Verdict(0.0, ("missed_call",))
    predicted, expected = parsed.calls, gold.calls
    if not parsed.errors and len(predicted) == len(expected):
        # Fast path: strict JSON equality needs no schema; the number rule is only consulted on a mismatch.
        single = len(expected) == 1 and predicted[0].name == expected[0].name
        if single and json_equal(predicted[0].arguments, expected[0].arguments):
            return Verdict(1.0)
        if _multiset_equal(predicted, gold):
            return Verdict(1.0)
    _, errors = diagnose(parsed, gold)
    return Verdict(0.0, tuple(errors or ["wrong_value"]))


def _multiset_equal(predicted: tuple[ToolCall, ...], gold: Gold) -> bool:
    # Equality (with the number rule) is an equivalence relation, so greedy matching finds a perfect one if any exists.
    unmatched = list(predicted)
    for expected in gold.calls:
        params = params_by_name(gold, expected.name) or {}
        schema = {"properties": params}
        for index, call in enumerate(unmatched):
            if call.name == expected.name and json_equal(call.arguments, expected.arguments, schema):
                del unmatched[index]
                break
        else:
            return False
    return True


def score_partial(parsed: ParseResult, gold: Gold) -> Verdict:
    """Pair predicted and gold calls by an optimal assignment; each pair earns `(1 + J + V) / 3` (0 across different
    tools); the total is divided by `max(#predicted, #gold)`, so extra and missing calls both cost credit."""
    if not gold.calls:
        return irrelevance(parsed)
    if not parsed.attempted:
        return Verdict(0.0, ("missed_call",))
    total, errors = diagnose(parsed, gold)
    attempted = len(parsed.calls) + len(parsed.errors)
    return Verdict(total / max(attempted, len(gold.calls)), tuple(errors))


# ---------------------------------------------------------------------------------------------------------------
# BFCL AST rules (Berkeley Function Calling Leaderboard, `ast_checker`): see `grpo_tools.rewards.bfcl`


_RIGHT = Verdict(1.0)
_WRONG = {kind: Verdict(0.0, (kind,)) for kind in ERROR_KINDS}  # one record per error kind, not per completion


_UNREAD = object()


def _gold_tool(gold: Gold, tools: list[Any], name: str) -> tuple[dict[str, Any], Collection[str]]:
    """The parameter schemas and required names of a gold call's tool (none when it is not offered)."""
    signature = gold.memoized.get("signature:" + name, _UNREAD)
    if signature is _UNREAD:
        return tool_parameters(tools, name, gold.row) or _NOT_OFFERED
    return _NOT_OFFERED if signature is None else (signature.params, signature.required)


_NOT_OFFERED: tuple[dict[str, Any], Collection[str]] = ({}, ())


def _bfcl_gold(
    gold: Gold, possible: tuple[tuple[str, dict[str, list[Any]]], ...], prepared: list[OnceGold] | None
) -> tuple[BfclCall, ...] | list[OnceGold]:
    """The row's gold calls for `check_bfcl`: as they stand (`OnceGold`) the first time the row is checked, as
    `BfclCall`s, prepared and kept, from the second time on, or from the first where more completions share the row
    (`shared`); `prepared` is what the row keeps so far (`memoized["bfcl"]`), short of `BfclCall`s. A row scored
    once, as `grpo-tools score` scores each data row, reads its rules once; the outputs of a GRPO group share them."""
    memo = gold.memoized
    if prepared is None:
        # The tools are read here without being kept (unless another reward keeps them): the gold calls are all
        # that `score_bfcl` reads afterwards, and each object a cached row keeps is walked by every full garbage
        # collection; at BFCL's sizes a parsed tool list is most of a row's objects.
        tools = memo["tools"] if "tools" in memo else load_tool_list(gold.tools, gold.row)
        prepared = [(name, acceptable, *_gold_tool(gold, tools, name)) for name, acceptable in possible]
        if "shared" not in memo:  # read once (`rewards.score_batch` marks a row that more completions share)
            memo["bfcl"] = prepared
            return prepared
    prepared = memo["bfcl"] = tuple(prepare_bfcl(*gold_call) for gold_call in prepared)
    return prepared


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
    calls = parsed.calls
    if not calls:
        return _WRONG["missed_call"]
    # `check_bfcl`'s first rule, decided before the row's tools are read (the possible answers are, so that a row
    # whose possible answers do not match its answers raises here as on every other output).
    possible = gold.possible
    if len(calls) != len(possible):
        return _WRONG["wrong_count"]
    prepared = gold.memoized.get("bfcl")
    if type(prepared) is not tuple:  # the row's first output, or a row read once
        prepared = _bfcl_gold(gold, possible, prepared)
    if type(prepared) is tuple:
        # One gold call and one call: `simple_function_checker` alone (what `check_bfcl` does there), one call less.
        error = prepared[0].error(calls[0]) if len(calls) == 1 else check_bfcl(calls, prepared)
    else:
        error = check_once(prepared[0], calls[0]) if len(calls) == 1 else check_bfcl(calls, prepared, check_once)
    return _RIGHT if error is None else _WRONG[error]


def parse_completion(completion: Any, gold: Gold) -> ParseResult:
    """Parse a completion; Qwen3-Coder's XML values are text, so those are read again with the tools to cast them."""
    parsed = parse_tool_calls(completion)
    if parsed.format == "qwen3_coder":
        return parse_tool_calls(completion, tools=gold.tool_list)
    return parsed
