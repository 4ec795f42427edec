"""BFCL's AST rules (the Berkeley Function Calling Leaderboard's `ast_checker`, bfcl-eval 2026.3.23), for `tool_bfcl`.

BFCL's checker is the definition: every rule here, quirks included, is there because BFCL's code has it, and the
comments cite the function of `bfcl_eval/eval_checker/ast_eval/ast_checker.py` it comes from. A row's gold is
prepared once (`prepare_bfcl`): the types BFCL checks, the acceptable values already normalised, and which
parameters must be given; `check_bfcl` then pairs a completion's calls with it.

The one gold that BFCL's data never has is a tool schema outside BFCL's type names (`anyOf`, type lists): there a
value of any declared type is accepted, and an untyped parameter is BFCL's `any`, which BFCL checks as a string.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any

from grpo_tools.rewards.parsing import ToolCall


__all__ = [
    "BfclCall",
    "accepted_arguments",
    "check_bfcl",
    "check_bfcl_irrelevance",
    "prepare_bfcl",
    "standardize",
]

# JSON Schema type -> the Python type BFCL checks (`PYTHON_TYPE_MAPPING`: float for number, dict for object).
_PYTHON_TYPES: dict[str, type] = {
    "string": str,
    "integer": int,
    "number": float,
    "boolean": bool,
    "array": list,
    "object": dict,
    "null": type(None),
}
_ONE_KIND = {name: (kind,) for name, kind in _PYTHON_TYPES.items()}
_SCALARS = frozenset({str, int, bool, float})  # the types `BfclCall.error` compares inline (`_exact`)
_SCALAR_KINDS = {name: kind for name, kind in _PYTHON_TYPES.items() if kind in _SCALARS}

# `standardize_string`: delete spaces and ,./-_*^, lowercase, and read ' as ". The same on bytes for ASCII text,
# about four times faster than `str.translate` with a mapping.
_STANDARD = str.maketrans({**dict.fromkeys(" ,./-_*^"), "'": '"'})
_ASCII_QUOTE, _ASCII_DROP = bytes.maketrans(b"'", b'"'), b" ,./-_*^"


# Strings already standardised: the completions of one prompt repeat most of their values. Bounded.
_STANDARDIZED: dict[str, str] = {}
_STANDARDIZED_SIZE = 1 << 16


def standardize(text: str) -> str:
    """BFCL's string normalisation (`standardize_string`).

    >>> standardize("New York, NY")
    'newyorkny'
    """
    standard = _STANDARDIZED.get(text)
    if standard is None:
        if len(_STANDARDIZED) >= _STANDARDIZED_SIZE:
            _STANDARDIZED.clear()
        if text.isascii():
            standard = text.encode().translate(_ASCII_QUOTE, _ASCII_DROP).lower().decode()
        else:
            standard = text.translate(_STANDARD).lower()
        _STANDARDIZED[text] = standard
    return standard


def _standard(value: Any) -> Any:
    return standardize(value) if type(value) is str else value


def _kinds(schema: Any) -> tuple[type, ...]:
    """The Python types BFCL would accept for a schema; BFCL's `any` (no type) is checked as a string."""
    declared = schema.get("type") if isinstance(schema, dict) else None
    if isinstance(declared, str):
        kinds = _ONE_KIND.get(declared)
        if kinds is not None:  # the common case: one of BFCL's type names
            return kinds
        declared = [declared]
    if isinstance(declared, list):
        kinds = tuple(_PYTHON_TYPES[name] for name in declared if name in _PYTHON_TYPES)
        return kinds or (str,)
    members = schema.get("anyOf") if isinstance(schema, dict) else None
    if isinstance(members, list) and members:
        kinds = tuple(kind for member in members for kind in _kinds(member))
        return tuple(dict.fromkeys(kinds))
    return (str,)


def _first_type(options: Sequence[Any]) -> type | None:
    """`get_possible_answer_type`: the type of the first acceptable value that is not "" (None when all are "")."""
    for option in options:
        if option != "":
            return type(option)
    return None


def _standard_list(option: Any) -> list[Any] | None:
    """An acceptable value as `list_checker` normalises it: strings in it standardised, one level deep. A string is
    read character by character and "" becomes [] (BFCL iterates `range(len(option))`); other values, which make
    BFCL raise, match nothing."""
    if isinstance(option, list | str):
        return [_standard(element) for element in option]
    return None


# The prepared records are not frozen: a frozen dataclass's `__init__` sets each field through `object.__setattr__`,
# which showed in the time to prepare a row. Nothing writes to them after `prepare_bfcl`.
@dataclass(slots=True)
class _DictOption:
    """One acceptable object (`dict_checker`): each key's acceptable values standardised, and the keys that must be
    given (their list lacks "")."""

    values: dict[str, list[Any]]
    required: tuple[str, ...]

    def matches(self, value: dict[str, Any]) -> bool:
        for key, given in value.items():
            options = self.values.get(key)
            if options is None or _standard(given) not in options:
                return False
        return all(key in value for key in self.required)


def _dict_option(option: Any) -> _DictOption | None:
    """Prepare one acceptable object; None for "" (which `dict_checker` skips) and for values BFCL cannot read."""
    if not isinstance(option, dict) or not all(isinstance(values, list | str) for values in option.values()):
        return None
    values = {key: [_standard(value) for value in options] for key, options in option.items()}
    # `"" not in options` on a string is always False ("" is in every string): such a key is optional.
    required = tuple(key for key, options in option.items() if isinstance(options, list) and "" not in options)
    return _DictOption(values, required)


@dataclass(slots=True)
class _Param:
    """One parameter of one gold call, prepared: what `simple_function_checker` checks of its value."""

    kinds: tuple[type, ...]  # the types the schema allows
    items: tuple[type, ...] | None  # for arrays, the element types (`nested_type_converted`)
    options: list[Any]  # the acceptable values as given
    answer_type: type | None  # `get_possible_answer_type`
    is_variable: bool  # the acceptable values are of another type than the schema's
    item_types: tuple[tuple[bool, type | None], ...]  # per option: whether it is a list, and its elements' type
    strings: frozenset[str]  # standardised string options (`string_checker`)
    lists: tuple[list[Any], ...]  # standardised list options (`list_checker`)
    dicts: tuple[_DictOption | None, ...]  # prepared object options, None where "" (`dict_checker`)
    list_dicts: tuple[tuple[_DictOption | None, ...], ...]  # per list option, its objects (`list_dict_checker`)

    def error(self, value: Any) -> str | None:
        """Why BFCL rejects a value, as a reward error kind; None when it accepts it."""
        if float in self.kinds and type(value) is int:
            value = float(value)  # "Allow python auto conversion from int to float"
        kind = type(value)
        # `type_checker`: the schema's type, or (`is_variable`) the type of the acceptable values.
        if kind in self.kinds:
            if kind is list and self.items is not None and not self._items_ok(value):
                return "wrong_type"
            variable = self.is_variable
        elif kind is self.answer_type:
            variable = True
        else:
            return "wrong_type"
        # `simple_function_checker`: a "variable" is compared as is; otherwise by the checker for its type.
        if variable:
            matched = value in self.options
        elif kind is dict:
            matched = any(option is not None and option.matches(value) for option in self.dicts)
        elif kind is list and self.items == (dict,):
            matched = any(self._list_dict_matches(value, option) for option in self.list_dicts)
        elif kind is str:
            matched = _standard(value) in self.strings
        elif kind is list:
            matched = [_standard(element) for element in value] in self.lists
        else:
            matched = value in self.options
        return None if matched else "wrong_value"

    def _items_ok(self, value: list[Any]) -> bool:
        """`type_checker`'s one-level check of array elements: some acceptable value is not a list (BFCL then checks
        nothing), or every element has the element type or the type of that list's first acceptable element."""
        for is_list, element_type in self.item_types:
            if not is_list:
                return True
            if all(type(element) in self.items or type(element) is element_type for element in value):
                return True
        return False

    @staticmethod
    def _list_dict_matches(value: list[Any], option: tuple[_DictOption | None, ...]) -> bool:
        """`list_dict_checker`: as many objects as the acceptable list, each matching its own, in order."""
        if len(value) != len(option):
            return False
        return all(
            isinstance(element, dict) and prepared is not None and prepared.matches(element)
            for element, prepared in zip(value, option, strict=True)
        )


def _param(schema: Any, options: list[Any]) -> _Param:
    """Prepare one parameter; only what its types can use (this runs once per distinct row, but for rows given as
    Python lists rather than JSON strings, once per completion)."""
    kinds = _kinds(schema)
    items = _kinds(schema["items"]) if list in kinds and isinstance(schema.get("items"), dict) else None
    answer_type = _first_type(options)
    lists: tuple[list[Any], ...] = ()
    list_dicts: tuple[tuple[_DictOption | None, ...], ...] = ()
    if list in kinds:
        lists = tuple(prepared for prepared in map(_standard_list, options) if prepared is not None)
        # `list_dict_checker` compares lengths first, so "" (length 0) accepts exactly the empty list.
        list_dicts = tuple(
            tuple(_dict_option(element) for element in option) if isinstance(option, list) else ()
            for option in options
            if option == "" or isinstance(option, list)
        )
    return _Param(
        kinds=kinds,
        items=items,
        options=options,
        answer_type=answer_type,
        is_variable=answer_type is not None and answer_type not in kinds,
        item_types=()
        if items is None
        else tuple((True, _first_type(option)) if type(option) is list else (False, None) for option in options),
        strings=frozenset(standardize(option) for option in options if type(option) is str)
        if str in kinds
        else frozenset(),
        lists=lists,
        dicts=tuple(_dict_option(option) for option in options if option != "") if dict in kinds else (),
        list_dicts=list_dicts,
    )


@dataclass(slots=True)
class BfclCall:
    """One gold call prepared for BFCL's checker: the tool's name, the parameters the tool requires, each parameter's
    schema and acceptable values, and what has been prepared from them so far.

    A parameter's rules are prepared the first time a value of it is checked, and only as far as that value needs:
    most values are settled by comparing them with the acceptable values as given (`_exact`); their standardised
    spellings are computed only for a string that equals none of them, and a parameter's full rules (`_param`) only
    for types a comparison cannot settle. A row scored once, as `grpo-tools score` scores it, prepares only what its
    one verdict reads."""

    name: str
    required: Collection[str]  # the parameters the tool requires
    properties: dict[str, Any]  # the tool's parameter schemas
    acceptable: dict[str, list[Any]]  # the possible answer's acceptable values
    # Per parameter checked so far: `(type, acceptable values, standardised)` when comparing settles its values
    # (`_exact`; `standardised` is None until a value needs it), else its `_Param`.
    checks: dict[str, Any]
    non_optional: list[str] | None  # parameters whose acceptable values lack "", once a call reaches them

    def error(self, call: ToolCall) -> str | None:
        """`simple_function_checker`: why BFCL rejects this call for this gold call; None when it accepts it."""
        if call.name != self.name:
            return "wrong_name"
        arguments = call.arguments
        for name in self.required:
            if name not in arguments:
                return "missing_argument"
        checks = self.checks
        for name, value in arguments.items():
            check = checks.get(name)
            if check is None:
                # Declared by the tool and in the possible answer, or unexpected (`simple_function_checker`).
                options = self.acceptable.get(name)  # a list: `Gold.possible` checks them
                if options is None or name not in self.properties:
                    return "unexpected_argument"
                schema = self.properties[name]
                check = checks[name] = _exact(schema, options) or _param(schema, options)
            if type(check) is not tuple:
                error = check.error(value)
                if error is not None:
                    return error
                continue
            # The common case, inline: a parameter of one type whose acceptable values are of that type.
            kind, written, standardised = check
            if type(value) is not kind:
                if kind is float and type(value) is int:
                    value = float(value)  # "Allow python auto conversion from int to float", as `_Param.error`
                else:
                    # What `_Param.error` says of any other type, the acceptable values being of `kind`.
                    return "wrong_type"
            if value in written:
                continue
            if kind is not str:
                return "wrong_value"
            if standardised is None:
                standardised = {standardize(option) for option in written if type(option) is str}
                checks[name] = (kind, written, standardised)
            if standardize(value) not in standardised:
                return "wrong_value"
        non_optional = self.non_optional
        if non_optional is None:
            non_optional = self.non_optional = [key for key, options in self.acceptable.items() if "" not in options]
        for name in non_optional:
            if name not in arguments:
                return "missing_argument"
        return None


def prepare_bfcl(
    name: str, acceptable: dict[str, list[Any]], properties: dict[str, Any] | None, required: Collection[str]
) -> BfclCall:
    """Prepare one gold call: its possible-answer entry and its tool's parameter schemas (None when the tool is not
    offered: then every given parameter is unexpected). Nothing is read from them until a call is checked."""
    return BfclCall(name, required, properties or {}, acceptable, {}, None)


def _exact(schema: Any, options: list[Any]) -> tuple[type, list[Any], None] | None:
    """What `BfclCall.error` checks inline for a parameter whose one type is a string, integer, boolean or number
    (an integer given for a number is read as a float first) and whose acceptable values are of that type (not
    `is_variable`): the type, the acceptable values as given (a value of that type is accepted as written when it
    equals one), and, for strings, a slot for their standardised spellings (`string_checker`), filled in when a value
    needs them. None for any other parameter."""
    declared = schema.get("type") if type(schema) is dict else None
    kind = _SCALAR_KINDS.get(declared) if type(declared) is str else None  # the common case: one type, a dict hit
    if kind is None:
        kinds = _kinds(schema)
        if len(kinds) != 1 or kinds[0] not in _SCALARS:
            return None
        kind = kinds[0]
    # `_first_type`, with the common case (a first option that is not "") read inline.
    answer_type = type(options[0]) if options and options[0] != "" else _first_type(options)
    if answer_type is not None and answer_type is not kind:  # `is_variable`
        return None
    # Acceptable values of other types need no care: `_Param.error` too compares a value of `kind` with them as given.
    return kind, options, None


def accepted_arguments(arguments: dict[str, Any], acceptable: Any, properties: dict[str, Any]) -> frozenset[str]:
    """The names of a call's arguments whose values BFCL's checker accepts, each on its own: declared by the tool
    (`properties`: its parameter schemas), in the possible answer (`acceptable`: BFCL's `{parameter: [values]}`; none
    when it is not a dict), of the schema's type or (`is_variable`) of the acceptable values' type, and among the
    acceptable values (the per-parameter checks of `simple_function_checker`). The linter reads gold calls with it.

    >>> schemas = {"keys": {"type": "array"}, "n": {"type": "integer"}}
    >>> sorted(accepted_arguments({"keys": "myKeys", "n": 2}, {"keys": ["myKeys"], "n": [1]}, schemas))
    ['keys']
    """
    if not isinstance(acceptable, dict):
        return frozenset()
    return frozenset(
        name
        for name, value in arguments.items()
        if name in properties
        and isinstance(acceptable.get(name), list)
        and _param(properties[name], acceptable[name]).error(value) is None
    )


def check_bfcl(
    calls: Sequence[ToolCall], gold: Sequence[Any], error_of: Callable[[Any, ToolCall], str | None] = BfclCall.error
) -> str | None:
    """BFCL's verdict on decoded calls, as the error kind of the first failure (None when correct).

    Counts must be equal; then, taking the gold calls in order, each pairs with the first unused call it accepts
    (`parallel_function_checker_no_order`: first fit, so a call that fits two gold calls goes to the earlier one even
    where another pairing would accept all). With one gold call this is `simple_function_checker`, as BFCL's simple
    and multiple checkers run it. `error_of(gold call, call)` checks one pair: the gold calls are `BfclCall`s, or
    what another checker of one pair reads (`bfcl_once.check_once`)."""
    if len(calls) != len(gold):
        return "wrong_count"
    if len(gold) == 1:
        return error_of(gold[0], calls[0])
    unused = list(calls)
    for expected in gold:
        errors = []
        for index, call in enumerate(unused):
            error = error_of(expected, call)
            if error is None:
                del unused[index]
                break
            errors.append(error)
        else:
            # Report the reason of a call to the right tool, when there is one.
            return next((error for error in errors if error != "wrong_name"), "wrong_name")
    return None


def check_bfcl_irrelevance(num_calls: int, decoded: bool) -> bool:
    """BFCL's verdict where no call is right (`_evaluate_single_relevance_entry`): correct unless the output decodes
    to at least one call; an output that fails to decode counts as no call."""
    return not decoded or num_calls == 0
