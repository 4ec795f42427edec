"""BFCL's multi-turn APIs as a tool environment, their calls run by a safe executor (never `eval`).

BFCL's own executor (`bfcl_eval.eval_checker.multi_turn_eval.multi_turn_utils.execute_multi_turn_func_call`) turns
each call into a string and runs it with `eval`, so `__import__('os').getcwd()` from a model executes; it keeps the
API instances in module globals keyed by model name and row id and never removes them. `BFCLSession` keeps what the
checker needs and nothing of that:

- the row's API classes are imported from the installed bfcl-eval (`api_class`; the memory and web-search backends
  are refused by name), instantiated fresh for each session, each loading a deep copy of the row's `initial_config`
  as BFCL does (`_load_scenario(config, long_context=...)`); the state lives on the session;
- a call is a name and arguments, read by our parser from a model's text or by `parse_call` (`ast`, literals only)
  from BFCL's call strings; only the functions the row offers at the current turn can be called (BFCL's function docs
  of its classes, a `miss_func` row's held-out functions from their turn on), arguments are bound by the method's
  signature and checked against BFCL's schema and size limits, and the method is called with keyword arguments;
- the result is serialised exactly as BFCL does: a string as it is, a dict as JSON (else `str`), anything else with
  `str`, an exception as `Error during execution: <message>`.

Two deliberate differences from BFCL's executor, both applied alike to a model's calls and the ground truth's (so the
verdict of `grpo_tools.tools.bfcl_verdict` is BFCL's on BFCL's rows, which its parity test checks): a parameter
BFCL's docs declare `float` receives a float (the API's own annotation; `power(base=10, exponent=10**9)` then
overflows at once instead of computing a billion-digit integer), and a name that is not a method of the row's classes
(a builtin, a private method) is refused where BFCL's `eval` would run it. In the environment a model acts in, a
`miss_func` row's held-out functions are refused before their turn and arguments that break BFCL's schema are refused
with the reason; the verdict runs both as BFCL's checker does (`from_env(env, as_checker=True)`).
"""

from __future__ import annotations

import copy
import functools
import json
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from grpo_tools.data.converters.bfcl_multi_turn import (
    MAX_CALL_CHARS,
    CallSyntaxError,
    ParsedCall,
    api_class,
    bind_call,
    function_docs,
    is_stateless,
    parse_call,
)
from grpo_tools.rewards.schemas import Tool, normalize_tools, validate_arguments
from grpo_tools.tools.base import ToolEnvironment, ToolRecord


__all__ = [
    "MAX_INTEGER",
    "MAX_PRECISION",
    "BFCLEnvironment",
    "BFCLSession",
    "CallOutcome",
    "serialize_result",
]


# The largest integer argument a call may give; BFCL's ground truth gives at most 987,654 (a ticket id).
MAX_INTEGER = 10**9
# The largest `precision` (MathAPI's `square_root` and `logarithm` compute that many digits: 10**6 takes 12 s);
# BFCL's ground truth asks for at most 10.
MAX_PRECISION = 1_000
_ERROR = "Error during execution: "


def serialize_result(value: Any) -> str:
    """A call's result as BFCL's executor writes it: a string as it is, a dict as JSON (or `str` when it holds what
    JSON cannot write), anything else with `str`.

    >>> serialize_result({"result": 8}), serialize_result(None), serialize_result([1, 2])
    ('{"result": 8}', 'None', '[1, 2]')
    """
    if type(value) is str:
        return value
    if type(value) is dict:
        try:
            return json.dumps(value)
        except (TypeError, ValueError):
            return str(value)
    return str(value)


@dataclass(frozen=True)
class CallOutcome:
    """One call a session received: the function, its arguments by name (as far as they could be read), how it ended
    (`ok`, `exception`, `validation`, `unknown_tool`, `parse_error`) and the result the model is shown."""

    name: str
    arguments: dict[str, Any]
    status: str
    result: str


def _integers(value: Any) -> Iterable[int]:
    if isinstance(value, int) and not isinstance(value, bool):
        yield value
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _integers(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _integers(item)


def _limit_problem(arguments: Mapping[str, Any], size: int) -> str | None:
    """Why arguments are too big to run, or None: what keeps a hostile call from holding the process."""
    if size > MAX_CALL_CHARS:
        return f"the arguments are longer than {MAX_CALL_CHARS} characters"
    if any(abs(number) > MAX_INTEGER for number in _integers(dict(arguments))):
        return f"an integer argument is beyond +-{MAX_INTEGER}"
    precision = arguments.get("precision")
    if isinstance(precision, int | float) and not isinstance(precision, bool) and precision > MAX_PRECISION:
        return f"precision is above {MAX_PRECISION}"
    return None


# What the argument checks found, by function and the arguments' `repr` (which tells a tuple from a list and a set
# from a string, as the schema does): a verdict runs the same ground-truth calls for every trajectory of a row, a
# trainer for every sample of a group. Only short arguments are kept, at most 10,000 of them (about 10 MB at worst).
_CHECKED: dict[tuple[str, bool, str], str | None] = {}
_CHECKED_LIMIT = 10_000
_CHECKED_CHARS = 1_000


def _argument_problem(tool: Tool, arguments: dict[str, Any], check_types: bool) -> str | None:
    """Why a call's arguments cannot run (size limits, then BFCL's schema when `check_types`), or None."""
    try:
        key = (tool.name, check_types, repr(arguments))
    except RecursionError:
        return "the arguments are nested too deeply"
    if key in _CHECKED:
        return _CHECKED[key]
    problem = _limit_problem(arguments, len(key[2]))
    if problem is None and check_types:
        problems = validate_arguments(tool, arguments)
        problem = "; ".join(f"{p.path}: {p.message}" if p.path else p.message for p in problems) or None
    if len(key[2]) <= _CHECKED_CHARS:
        if len(_CHECKED) >= _CHECKED_LIMIT:
            _CHECKED.clear()
        _CHECKED[key] = problem
    return problem


@functools.cache
def _class_tools(class_name: str) -> dict[str, Tool]:
    """An API class's functions as BFCL's docs declare them, read once (a `Tool` is immutable)."""
    return normalize_tools(function_docs(class_name), where=class_name)


class BFCLSession:
    """The API instances of one BFCL row and the safe executor of calls on them, from a fresh start.

    `involved_classes`, `initial_config`, `long_context` and `missed_function` (turn index -> names held out until
    that turn) are the row's, as a `multi_turn` row's `env` holds them (`from_env`). `turn` is the current user turn;
    `start_turn` moves it on, which offers the functions held out until then.

    >>> session = BFCLSession(["MathAPI"])
    >>> session.call_text("add(a=2, b=3)").result
    '{"result": 5.0}'
    >>> session.call_text("__import__('os').getcwd()").status
    'parse_error'
    """

    def __init__(
        self,
        involved_classes: Iterable[str],
        initial_config: Mapping[str, Any] | None = None,
        long_context: bool = False,
        missed_function: Mapping[str, Iterable[str]] | None = None,
        check_types: bool = True,
    ) -> None:
        self.classes = list(involved_classes)
        self.check_types = check_types
        self.instances: dict[str, Any] = {}
        self.tools: dict[str, Tool] = {}
        self._owners: dict[str, str] = {}
        for class_name in self.classes:
            instance = api_class(class_name)()
            if not is_stateless(class_name):
                config = copy.deepcopy(dict(initial_config or {}).get(class_name, {}))
                instance._load_scenario(config, long_context=long_context)
            self.instances[class_name] = instance
            tools = _class_tools(class_name)
            self.tools.update(tools)
            self._owners.update(dict.fromkeys(tools, class_name))
        self.held_out = {int(turn): set(names) for turn, names in dict(missed_function or {}).items()}
        self.start_turn(0)

    @classmethod
    def from_env(cls, env: Mapping[str, Any], as_checker: bool = False) -> BFCLSession:
        """A fresh session from a `multi_turn` row's `env` (see `grpo_tools.data.converters.bfcl_multi_turn`).

        `as_checker=True` runs calls as BFCL's checker does, which is how the verdict replays a trajectory: a
        `miss_func` row's held-out functions at any turn (methods of the row's classes the model was not yet shown),
        and arguments of any type (BFCL runs `tail(lines=20.0)`). Calls are still parsed, never evaluated, only
        methods of the row's classes run, and the size limits hold.
        """
        return cls(
            env["involved_classes"],
            env.get("initial_config"),
            bool(env.get("long_context", False)),
            None if as_checker else env.get("missed_function"),
            check_types=not as_checker,
        )

    def start_turn(self, turn: int) -> None:
        """Move to user turn `turn` (from 0): the functions held out until then are offered from now on."""
        self.turn = turn
        later = {name for held, names in self.held_out.items() if held > turn for name in names}
        self._offered = frozenset(name for name in self._owners if name not in later)

    def offered(self) -> frozenset[str]:
        """The function names a call may use at the current turn."""
        return self._offered

    def call(self, name: Any, arguments: Any) -> CallOutcome:
        """Run one call given by name and keyword arguments (a model's call, read by our parser)."""
        if not isinstance(arguments, dict):
            return CallOutcome(str(name), {}, "validation", f"{_ERROR}the arguments of a call must be an object")
        return self._execute(name, (), arguments)

    def call_text(self, text: Any) -> CallOutcome:
        """Run one call written as BFCL writes it (`cd(folder='temp')`), read by `parse_call`, never evaluated."""
        try:
            call = parse_call(text)
        except CallSyntaxError as error:
            return CallOutcome("", {}, "parse_error", f"{_ERROR}{error}")
        return self._execute(call.name, call.args, call.kwargs)

    def _execute(self, name: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> CallOutcome:
        if not isinstance(name, str) or name not in self._offered:
            return CallOutcome(str(name), dict(kwargs), "unknown_tool", f"{_ERROR}name {str(name)!r} is not defined")
        method = getattr(self.instances[self._owners[name]], name)
        try:
            arguments = bind_call(method, ParsedCall(name, args, kwargs))
        except TypeError as error:
            return CallOutcome(name, dict(kwargs), "validation", f"{_ERROR}{name}: {error}")
        tool = self.tools[name]
        problem = _argument_problem(tool, arguments, self.check_types)
        if problem is not None:
            return CallOutcome(name, arguments, "validation", f"{_ERROR}invalid arguments for {name}: {problem}")
        for key, value in arguments.items():
            if tool.param_types(key) == {"number"} and isinstance(value, int) and not isinstance(value, bool):
                arguments[key] = float(value)
        try:
            value = method(**arguments)
        except Exception as error:  # the tool boundary: BFCL shows an API's exception to the model as its result
            return CallOutcome(name, arguments, "exception", f"{_ERROR}{error}")
        return CallOutcome(name, arguments, "ok", serialize_result(value))

    def state(self) -> dict[str, dict[str, Any]]:
        """Each instance's public attributes, which BFCL's state check compares."""
        return {
            class_name: {key: value for key, value in vars(instance).items() if not key.startswith("_")}
            for class_name, instance in self.instances.items()
        }


class BFCLEnvironment(ToolEnvironment):
    """BFCL's multi-turn APIs as a grpo-tools environment: `reset(env=...)` from a `multi_turn` row whose `env.name`
    is `bfcl` builds a fresh `BFCLSession` (new instances, a deep copy of the row's `initial_config`), and the tools
    offered are the row's functions at the current turn, each run by the session's safe executor and recorded in
    `records` like any environment's calls. BFCL's methods run in the calling thread, not under `timeout`: a thread
    cannot interrupt the C code behind a huge computation, so the executor's size limits keep every call short."""

    name = "bfcl"

    def __init__(self, timeout: float = 2.0) -> None:
        super().__init__(timeout=timeout)
        self.session: BFCLSession | None = None

    def _setup(self, state: dict[str, Any]) -> None:
        self.session = BFCLSession.from_env(state)

    def _tools(self) -> dict[str, Callable[..., Any]]:
        if self.session is None:
            return {}
        return {name: self._tool(name) for name in sorted(self.session.offered())}

    def _tool(self, name: str) -> Callable[..., str]:
        def tool(**arguments: Any) -> str:
            return self._run(name, arguments)

        tool.__name__ = name
        return tool

    def _run(self, name: str, arguments: dict[str, Any]) -> str:
        if self.session is None:
            raise RuntimeError("BFCLEnvironment: reset it from a row before calling its tools")
        start = time.perf_counter()
        outcome = self.session.call(name, arguments)
        seconds = time.perf_counter() - start
        self.records.append(ToolRecord(name, dict(arguments), outcome.status, outcome.result, seconds))
        return outcome.result
