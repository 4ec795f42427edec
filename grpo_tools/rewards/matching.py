"""Matching predicted calls against gold calls: value comparison as JSON (an integer equals the same float where the
schema says `number`), the optimal pairing of predicted and gold calls with partial credit, and the error kinds
behind each lost credit. BFCL's own rules are in `grpo_tools.rewards.bfcl`.
"""

from __future__ import annotations

from typing import Any

from grpo_tools.rewards.gold import (
    Gold,
    Verdict,
    types_of,
)
from grpo_tools.rewards.parsing import ParseResult, ToolCall


__all__: list[str] = []  # the rewards module reads these helpers; nothing here is public API


def json_equal(predicted: Any, gold: Any, schema: Any = None) -> bool:
    """Equal as JSON (so `True != 1` and `1 != 1.0`), except that an integer equals the same float where `schema`
    says `number`. `schema` follows the value down through `properties` and `items`."""
    kind = type(gold)
    if type(predicted) is not kind:
        if type(predicted) in (int, float) and kind in (int, float):
            return "number" in (types_of(schema) or ()) and predicted == gold
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
            elif not json_equal(other, value, properties.get(key)):
                return False
        return True
    if kind is list:
        items = schema.get("items") if isinstance(schema, dict) else None
        return len(predicted) == len(gold) and all(
            json_equal(p, g, items) for p, g in zip(predicted, gold, strict=True)
        )
    return predicted == gold


def _same_kind(predicted: Any, gold: Any, schema: Any) -> bool:
    """Whether two values have the same JSON type, to tell wrong_type from wrong_value; an integer and a float are
    the same kind only where the schema says `number`."""
    if type(predicted) is type(gold):
        return True
    numbers = (int, float)
    return type(predicted) in numbers and type(gold) in numbers and "number" in (types_of(schema) or ())


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
            and json_equal(predicted.arguments[key], value, params.get(key) if params else None)
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
            if not json_equal(predicted.arguments[key], value, schema):
                errors.append("wrong_value" if _same_kind(predicted.arguments[key], value, schema) else "wrong_type")
    return errors


def irrelevance(parsed: ParseResult) -> Verdict:
    """Rows whose gold calls nothing: 1 for calling nothing, 0 for any call, in every reward."""
    if not parsed.attempted:
        return Verdict(1.0)
    return Verdict(0.0, ("unexpected_call",) + ("parse_error",) * len(parsed.errors))


def params_by_name(gold: Gold, name: str) -> dict[str, dict[str, Any]] | None:
    signature = gold.signature(name)
    return signature.params if signature else None


def pairing(
    parsed: ParseResult, gold: Gold
) -> tuple[dict[str, dict[str, dict[str, Any]] | None], list[list[float]], list[tuple[int, int]]]:
    """The parameter schemas of each gold tool, the credit of every (predicted, gold) pair, and the pairs of the
    maximum-total-credit assignment."""
    params = {call.name: params_by_name(gold, call.name) for call in gold.calls}
    credit = [[_pair_credit(p, g, params[g.name]) for g in gold.calls] for p in parsed.calls]
    return params, credit, _best_pairs(credit)


def diagnose(parsed: ParseResult, gold: Gold) -> tuple[float, list[str]]:
    """Total pair credit of the best pairing, and the error kinds of every imperfect pair or unpaired call."""
    errors = ["parse_error"] * len(parsed.errors)
    predicted, expected = parsed.calls, gold.calls
    if len(predicted) + len(parsed.errors) != len(expected):
        errors.append("wrong_count")
    if not predicted:
        return 0.0, errors
    params, credit, pairs = pairing(parsed, gold)
    total = 0.0
    for p, g in pairs:
        total += credit[p][g]
        errors += _pair_errors(predicted[p], expected[g], params[expected[g].name])
    return total, errors
