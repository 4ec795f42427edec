"""BFCL's multi-turn sets (`--from bfcl multi_turn_base`, `multi_turn_miss_func`, `multi_turn_miss_param`,
`multi_turn_long_context`): their API classes, function docs and ground-truth calls, read without running anything.

BFCL writes a call as Python source (`cd(folder='document')`, `sort('final_report.pdf')`) and its own checker runs it
with `eval`. Here a call is only parsed (`parse_call`): `ast.parse` reads the text, the tree must be one call of a
plain name whose arguments are literals (`ast.literal_eval` on each argument's node, which builds constants, lists,
tuples and dicts and nothing else). Nothing in this module executes a call; `grpo_tools.tools.bfcl` does, safely.

The API classes are imported from the installed bfcl-eval, never copied, through `grpo_tools.data.bfcl_backends`
(`api_class`, `bfcl_module`, `REFUSED_BACKENDS`, re-exported here), which also checks a row's `env`.
"""

from __future__ import annotations

import ast
import copy
import functools
import inspect
import json
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grpo_tools.data.bfcl_backends import (
    REFUSED_BACKENDS,
    UnsupportedBackend,
    api_class,
    bfcl_module,
    check_bfcl_env,
    is_stateless,
)
from grpo_tools.data.converters.base import ConversionError, SourceContext, canonical_row, canonical_tools, require
from grpo_tools.rewards.schemas import normalize_tools, validate_arguments


__all__ = [
    "MAX_CALL_CHARS",
    "MULTI_TURN_CATEGORIES",
    "REFUSED_BACKENDS",
    "CallSyntaxError",
    "ParsedCall",
    "UnsupportedBackend",
    "api_class",
    "bfcl_module",
    "bind_call",
    "convert_bfcl_multi_turn",
    "function_docs",
    "ground_truth_problems",
    "is_stateless",
    "parse_call",
    "scenario_of",
]


# BFCL's multi-turn categories; each row's id is `<category>_<scenario number>`.
MULTI_TURN_CATEGORIES = (
    "multi_turn_base",
    "multi_turn_miss_func",
    "multi_turn_miss_param",
    "multi_turn_long_context",
)
# A call's text longer than this is refused unread; BFCL's longest ground-truth call has 6,839 characters.
MAX_CALL_CHARS = 20_000


class CallSyntaxError(ValueError):
    """A call's text that is not one call of a plain name with literal arguments; the message says why."""


@dataclass(frozen=True)
class ParsedCall:
    """One call as BFCL writes it, read but not run: the function's name, its positional and keyword arguments."""

    name: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]


@functools.cache
def _function_docs(name: str) -> tuple[dict[str, Any], ...]:
    api_class(name)  # refuses what we do not run, and checks the name
    files = bfcl_module("bfcl_eval.constants.executable_backend_config").MULTI_TURN_FUNC_DOC_FILE_MAPPING
    path = Path(bfcl_module("bfcl_eval").__file__).parent / "data" / "multi_turn_func_doc" / files[name]
    return tuple(json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip())


def function_docs(name: str) -> list[dict[str, Any]]:
    """BFCL's own function docs of one API class (a copy), as its inference offers them to a model."""
    return copy.deepcopy(list(_function_docs(name)))


def parse_call(text: str, max_chars: int = MAX_CALL_CHARS) -> ParsedCall:
    """Read a call written as BFCL writes it, without running it; a text longer than `max_chars` is refused unread.

    >>> parse_call("mv(source='a.txt', destination='temp')")
    ParsedCall(name='mv', args=(), kwargs={'source': 'a.txt', 'destination': 'temp'})
    >>> parse_call("__import__('os').getcwd()")
    Traceback (most recent call last):
    ...
    grpo_tools.data.converters.bfcl_multi_turn.CallSyntaxError: a call must name a function directly, not an expression (Attribute)
    """
    if not isinstance(text, str):
        raise CallSyntaxError(f"a call must be text, got {type(text).__name__}")
    if len(text) > max_chars:
        raise CallSyntaxError(f"a call is longer than {max_chars} characters")
    try:
        with warnings.catch_warnings():  # an unknown escape in a string literal warns; it is still only text
            warnings.simplefilter("ignore")
            tree = ast.parse(text.strip(), mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as error:  # ValueError: null bytes
        raise CallSyntaxError(f"not a call ({getattr(error, 'msg', None) or type(error).__name__})") from None
    call = tree.body
    if not isinstance(call, ast.Call):
        raise CallSyntaxError(f"not a call but an expression ({type(call).__name__})")
    if not isinstance(call.func, ast.Name):
        raise CallSyntaxError(f"a call must name a function directly, not an expression ({type(call.func).__name__})")
    if any(isinstance(arg, ast.Starred) for arg in call.args) or any(kw.arg is None for kw in call.keywords):
        raise CallSyntaxError("a call cannot unpack arguments (* or **)")
    try:
        args = tuple(ast.literal_eval(arg) for arg in call.args)
        kwargs = {keyword.arg: ast.literal_eval(keyword.value) for keyword in call.keywords}
    except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
        raise CallSyntaxError(
            f"the arguments of {call.func.id} must be literals (strings, numbers, lists, ...)"
        ) from None
    return ParsedCall(call.func.id, args, kwargs)


def ground_truth_problems(expected: Any, field: str = "expected") -> list[tuple[str, str]]:
    """The problems of BFCL's ground truth as a row holds it (per turn, the calls as BFCL writes them), as
    `(field, message)` pairs: each turn a list, each call text `parse_call` reads. `[]` when every call can be read.

    >>> ground_truth_problems([["cd(folder='temp')"], ["ls(a=True", 7]])
    [('expected[1][0]', "not a call ('(' was never closed)"), ('expected[1][1]', 'a call must be text, got int')]
    """
    if not isinstance(expected, list):
        return [(field, "expected BFCL's ground truth: per turn, a list of calls")]
    problems = []
    for t, calls in enumerate(expected):
        if not isinstance(calls, list):
            problems.append((f"{field}[{t}]", "expected the turn's calls as a list"))
            continue
        for i, text in enumerate(calls):
            try:
                parse_call(text)
            except CallSyntaxError as error:
                problems.append((f"{field}[{t}][{i}]", str(error)))
    return problems


def bind_call(method: Any, call: ParsedCall) -> dict[str, Any]:
    """The call's arguments by parameter name, positional ones bound by the method's signature (BFCL's ground truth
    writes `sort('final_report.pdf')`); `TypeError` when they do not fit the signature."""
    function, bound = getattr(method, "__func__", method), getattr(method, "__self__", None)
    signature = _signature(function)
    if any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in signature.parameters.values()):
        raise TypeError(f"{call.name} takes variable arguments, which calls cannot be bound to")
    if bound is None:
        return dict(signature.bind(*call.args, **call.kwargs).arguments)
    arguments = signature.bind(bound, *call.args, **call.kwargs).arguments
    arguments.pop(next(iter(signature.parameters)))  # the instance
    return dict(arguments)


@functools.lru_cache(maxsize=1024)
def _signature(function: Any) -> inspect.Signature:
    """A function's signature, read once: the executor binds thousands of calls to the same few methods."""
    return inspect.signature(function)


def scenario_of(row_id: str) -> str:
    """The scenario a BFCL multi-turn row belongs to: the four categories ask about the same scenarios (row N of each
    starts from the same task), so splits go by this key, never by category. `multi_turn_miss_func_12` -> `bfcl-12`."""
    return f"bfcl-{row_id.rsplit('_', 1)[-1]}"


def _owner(classes: list[str], name: str) -> str:
    owners = [cls for cls in classes if any(doc["name"] == name for doc in _function_docs(cls))]
    if len(owners) != 1:
        raise ConversionError(f"function {name!r} belongs to {len(owners)} of the row's classes {classes}")
    return owners[0]


def _gold_call(text: str, classes: list[str], where: str) -> dict[str, Any]:
    """A ground-truth call as a canonical call: its arguments bound to parameter names by the method's signature."""
    try:
        call = parse_call(text)
        method = getattr(api_class(_owner(classes, call.name)), call.name)
        arguments = bind_call(method, ParsedCall(call.name, (None, *call.args), call.kwargs))
    except (CallSyntaxError, TypeError) as error:
        raise ConversionError(f"{where}: {text!r}: {error}") from None
    arguments.pop(next(iter(inspect.signature(method).parameters)))  # the instance (`self`)
    return {"name": call.name, "arguments": arguments}


def convert_bfcl_multi_turn(row: Mapping[str, Any], index: int, context: SourceContext) -> list[dict[str, Any]]:
    """One BFCL multi-turn entry, joined with its ground truth, as one canonical `multi_turn` row.

    `messages` are the first turn's; `tools` every function the row offers at some turn, in BFCL's function docs;
    `answers` every ground-truth call in order, arguments by name. `env` holds what the environment needs to reset
    and the conversation needs to go on: `name` ("bfcl"), `category` (BFCL's), `scenario` (`scenario_of`),
    `involved_classes`, `initial_config`, `long_context`, `turns` (each turn's user messages, `[]` for a turn that
    only brings held-out functions) and `missed_function` (turn index -> names held out until that turn). `expected`
    is BFCL's ground truth, per turn the calls as BFCL writes them: the verdict compares a trajectory with it.
    """
    row_id = require(row, "id", str)
    category = row_id.rsplit("_", 1)[0]
    if category not in MULTI_TURN_CATEGORIES:
        raise ConversionError(f"id {row_id!r}: not one of BFCL's multi-turn categories {MULTI_TURN_CATEGORIES}")
    turns = require(row, "question", list)
    classes = require(row, "involved_classes", list)
    truth = context.ground_truth.get(row_id)
    if truth is None:
        raise ConversionError(f"no possible answer with id {row_id!r} in the answers file")
    ground_truth = require(truth, "ground_truth", list)
    if len(ground_truth) != len(turns):
        raise ConversionError(f"ground_truth: {len(ground_truth)} turns, but the question has {len(turns)}")
    for t, turn in enumerate(turns):
        if not isinstance(turn, list) or not all(
            isinstance(m, dict) and isinstance(m.get("content"), str) for m in turn
        ):
            raise ConversionError(f"question[{t}]: expected a list of messages {{role, content}}")
    if not turns or not turns[0]:
        raise ConversionError("question[0]: the first turn has no message")
    try:
        docs = [doc for cls in classes for doc in _function_docs(cls)]
    except UnsupportedBackend as error:
        raise ConversionError(f"involved_classes: {error}") from None
    missed = row.get("missed_function", {})
    if not isinstance(missed, dict) or not all(isinstance(v, list) for v in missed.values()):
        raise ConversionError("missed_function: expected {turn index: [function names]}")
    answers = [
        _gold_call(text, classes, f"ground_truth[{t}][{i}]")
        for t, turn in enumerate(ground_truth)
        for i, text in enumerate(turn)
    ]
    messages = [{"role": m.get("role", "user"), "content": m["content"]} for m in turns[0]]
    tools = canonical_tools(docs, "function docs")
    # BFCL's ground truth once gives a value its schema refuses (`close_ticket(ticket_id='ticket_001')`, an integer
    # parameter). Such a row states each gold value as its only acceptable one, BFCL's layout, which `check-data`
    # accepts where the schema disagrees; the executor refuses the call, as the checker's API fails it.
    specs = normalize_tools(tools)
    possible = None
    if any(validate_arguments(specs[call["name"]], call["arguments"]) for call in answers):
        possible = [{call["name"]: {k: [v] for k, v in call["arguments"].items()}} for call in answers]
    out = canonical_row(row_id, messages, tools, answers, possible_answers=possible, category="multi_turn")
    out["env"] = {
        "name": "bfcl",
        "category": category,
        "scenario": scenario_of(row_id),
        "involved_classes": list(classes),
        "initial_config": row.get("initial_config", {}),
        "long_context": "long_context" in category,
        "turns": [[{"role": m.get("role", "user"), "content": m["content"]} for m in turn] for turn in turns],
        "missed_function": {str(turn): list(names) for turn, names in missed.items()},
    }
    problems = check_bfcl_env(out["env"])  # a state BFCL's classes cannot load, a misspelt class name
    if problems:
        field, message = problems[0]
        raise ConversionError(f"{field.removeprefix('env.')}: {message}")
    out["expected"] = ground_truth
    return [out]
