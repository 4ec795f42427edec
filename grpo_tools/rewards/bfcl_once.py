"""BFCL's rules (`grpo_tools.rewards.bfcl`) applied to a gold call checked once, with nothing prepared or kept.

`BfclCall` prepares a parameter's rules the first time a value of it is checked and keeps them for the next output
against the same row: worth it where the outputs of a prompt share their row (GRPO groups), but a row scored once, as
`grpo-tools score` scores each data row, reads them once. `check_once` gives `BfclCall.error`'s answer, the same rules
in the same order, comparing each value with the acceptable values where they stand; `tool_bfcl` uses it for the
first output against a row of one gold call (`scorers.score_bfcl`).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from grpo_tools.rewards.bfcl import _SCALAR_KINDS, _dict_option, _exact, _first_type, _kinds, _standard, standardize
from grpo_tools.rewards.parsing import ToolCall


__all__ = ["OnceGold", "check_once"]


_UNDECLARED = object()

# A gold call as `check_once` reads it: the tool's name, the possible answer's acceptable values, the tool's parameter
# schemas and the names it requires (what `prepare_bfcl` takes).
OnceGold = tuple[str, dict[str, Any], dict[str, Any], Collection[str]]


def check_once(gold: OnceGold, call: ToolCall) -> str | None:
    """`simple_function_checker` as `prepare_bfcl(*gold).error(call)` gives it: why BFCL rejects the call, as a reward
    error kind, or None when it accepts it. Pairs with `check_bfcl` as its `error_of`."""
    name, acceptable, properties, required = gold
    if call.name != name:
        return "wrong_name"
    arguments = call.arguments
    for key in required:
        if key not in arguments:
            return "missing_argument"
    for key, value in arguments.items():
        options = acceptable.get(key)
        schema = properties.get(key, _UNDECLARED)
        if options is None or schema is _UNDECLARED:
            return "unexpected_argument"
        # `_exact`'s common case read inline: one scalar type, and a first acceptable value of that type.
        declared = schema.get("type") if type(schema) is dict else None
        kind = _SCALAR_KINDS.get(declared) if type(declared) is str else None
        if kind is None or not options or type(options[0]) is not kind or options[0] == "":
            exact = _exact(schema, options)
            if exact is None:
                error = _value_error(schema, options, value)
                if error is not None:
                    return error
                continue
            kind = exact[0]
        if type(value) is not kind:
            if kind is float and type(value) is int:
                value = float(value)  # "Allow python auto conversion from int to float"
            else:
                return "wrong_type"
        if value not in options and (kind is not str or not _standard_in(value, options)):
            return "wrong_value"
    for key, options in acceptable.items():
        if key not in arguments and "" not in options:
            return "missing_argument"
    return None


def _standard_in(text: str, options: list[Any]) -> bool:
    """Whether a string equals a string option once both are standardised (`string_checker`)."""
    standard = standardize(text)
    return any(type(option) is str and standardize(option) == standard for option in options)


def _value_error(schema: Any, options: list[Any], value: Any) -> str | None:
    """`_param(schema, options).error(value)`, preparing only what this value reads."""
    kinds = _kinds(schema)
    if float in kinds and type(value) is int:
        value = float(value)
    kind = type(value)
    answer_type = _first_type(options)
    items = None
    if kind in kinds:
        if kind is list and isinstance(schema.get("items"), dict):
            items = _kinds(schema["items"])
            if not _items_ok(items, options, value):
                return "wrong_type"
        variable = answer_type is not None and answer_type not in kinds
    elif kind is answer_type:
        variable = True
    else:
        return "wrong_type"
    if variable:
        return None if value in options else "wrong_value"
    # A string or a list equal to an acceptable value is accepted: standardising equal values keeps them equal.
    if kind is dict:
        matched = any(_dict_matches(option, value) for option in options if option != "")
    elif kind is list and items == (dict,):
        matched = any(
            _list_dict_matches(option, value) for option in options if option == "" or isinstance(option, list)
        )
    elif kind is str:
        matched = value in options or _standard_in(value, options)
    elif kind is list:
        standard = [_standard(element) for element in value]
        matched = value in options or any(
            isinstance(option, list | str) and [_standard(element) for element in option] == standard
            for option in options
        )
    else:
        matched = value in options
    return None if matched else "wrong_value"


def _items_ok(items: tuple[type, ...], options: list[Any], value: list[Any]) -> bool:
    """`_Param._items_ok`: some acceptable value is not a list, or every element has an element type or the type of
    that list's first acceptable element."""
    for option in options:
        if type(option) is not list:
            return True
        element_type = _first_type(option)
        if all(type(element) in items or type(element) is element_type for element in value):
            return True
    return False


def _dict_matches(option: Any, value: dict[str, Any]) -> bool:
    prepared = _dict_option(option)
    return prepared is not None and prepared.matches(value)


def _list_dict_matches(option: Any, value: list[Any]) -> bool:
    """`_Param._list_dict_matches` against one acceptable list ("" is the empty list)."""
    if len(value) != len(option):
        return False
    return all(
        isinstance(element, dict) and _dict_matches(sub, element) for element, sub in zip(value, option, strict=True)
    )
