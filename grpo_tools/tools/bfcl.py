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
  signature, measured against the session's budget and checked against BFCL's schema, and the method is called with
  keyword arguments;
- the result is serialised exactly as BFCL does: a string as it is, a dict as JSON (else `str`), anything else with
  `str`, an exception as `Error during execution: <message>`.

Two deliberate differences from BFCL's executor, both applied alike to a model's calls and the ground truth's (so the
verdict of `grpo_tools.tools.bfcl_verdict` is BFCL's on BFCL's rows, which its parity test checks): a parameter
BFCL's docs declare `float` receives a float (the API's own annotation; `power(base=10, exponent=10**9)` then
overflows at once instead of computing a billion-digit integer), and a name that is not a method of the row's classes
(a builtin, a private method) is refused where BFCL's `eval` would run it. In the environment a model acts in, a
`miss_func` row's held-out functions are refused before their turn and arguments that break BFCL's schema are refused
with the reason; the verdict runs both as BFCL's checker does (`from_env(env, as_checker=True)`).

What a session's calls may cost is bounded by its `Budget` (`grpo_tools.rewards.budget`: calls per step, turn and
session, argument size and nesting, integer digits, result characters, seconds), measured before a call's arguments are
formatted or converted, plus BFCL's own `MAX_PRECISION`: past a limit the call is refused (status `budget`), every
later call too, and `exceeded` says which limit broke, so that the reward and the verdict score the completion as
wrong. Each session owns deep copies of everything its instances hold, including what BFCL's classes take from
module globals (TravelAPI's long-context credit cards); each call runs inside its own `decimal` context, with
`mpmath`'s precision restored after it, so no call changes the process's numeric settings.
"""

from __future__ import annotations

import contextlib
import copy
import decimal
import functools
import json
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from grpo_tools.data.converters.bfcl_multi_turn import (
    CallSyntaxError,
    ParsedCall,
    api_class,
    bind_call,
    function_docs,
    is_stateless,
    parse_call,
)
from grpo_tools.rewards.budget import Budget, BudgetHit, Meter
from grpo_tools.rewards.schemas import Tool, normalize_tools, validate_arguments
from grpo_tools.tools.base import ToolEnvironment, ToolRecord


__all__ = [
    "MAX_PRECISION",
    "BFCLEnvironment",
    "BFCLSession",
    "CallOutcome",
    "serialize_result",
]


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
    (`ok`, `exception`, `validation`, `unknown_tool`, `parse_error`, `budget`: refused, past the session's budget) and the result the model is shown."""

    name: str
    arguments: dict[str, Any]
    status: str
    result: str


@contextlib.contextmanager
def _own_numeric_contexts() -> Iterator[None]:
    """Run a call in a `decimal` context of its own and restore `mpmath`'s precision after it: MathAPI sets both
    process-wide (`getcontext().prec = precision`, `mpmath.mp.dps = precision`)."""
    mpmath = sys.modules.get("mpmath")
    precision = mpmath.mp.prec if mpmath is not None else None
    try:
        with decimal.localcontext():
            yield
    finally:
        if mpmath is not None:
            mpmath.mp.prec = precision


# What the argument checks found, by function and the arguments' `repr` (which tells a tuple from a list and a set
# from a string, as the schema does): a verdict runs the same ground-truth calls for every trajectory of a row, a
# trainer for every sample of a group. Only short arguments are kept, at most 10,000 of them (about 10 MB at worst).
_CHECKED: dict[tuple[str, str], str | None] = {}
_CHECKED_LIMIT = 10_000
_CHECKED_CHARS = 1_000


def _argument_problem(tool: Tool, arguments: dict[str, Any], check_types: bool) -> str | None:
    """Why a call's arguments do not fit BFCL's schema (only when `check_types`), or None. The arguments have passed
    the budget, so their `repr` is short and cannot fail."""
    if not check_types:
        return None
    key = (tool.name, repr(arguments))
    if key in _CHECKED:
        return _CHECKED[key]
    problems = validate_arguments(tool, arguments)
    problem = "; ".join(f"{p.path}: {p.message}" if p.path else p.message for p in problems) or None
    if len(key[1]) <= _CHECKED_CHARS:
        if len(_CHECKED) >= _CHECKED_LIMIT:
            _CHECKED.clear()
        _CHECKED[key] = problem
    return problem


def _name(name: Any) -> str:
    """A call's name as text, whatever the model wrote there (`str` of a huge integer would raise)."""
    return name if isinstance(name, str) else f"<{type(name).__name__}>"


def _refused(name: Any, hit: BudgetHit) -> CallOutcome:
    """A call the budget refused: not run, its arguments not kept (they may be what broke the limit)."""
    return CallOutcome(_name(name), {}, "budget", f"{_ERROR}over the budget: {hit.message}")


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
        budget: Budget | None = None,
    ) -> None:
        self.classes = list(involved_classes)
        self.check_types = check_types
        self.meter = Meter(budget)
        self.instances: dict[str, Any] = {}
        self.tools: dict[str, Tool] = {}
        self._owners: dict[str, str] = {}
        for class_name in self.classes:
            instance = api_class(class_name)()
            if not is_stateless(class_name):
                config = copy.deepcopy(dict(initial_config or {}).get(class_name, {}))
                instance._load_scenario(config, long_context=long_context)
                # What `_load_scenario` took from module globals (TravelAPI's long-context cards) becomes the session's.
                vars(instance).update(copy.deepcopy(vars(instance)))
            self.instances[class_name] = instance
            tools = _class_tools(class_name)
            self.tools.update(tools)
            self._owners.update(dict.fromkeys(tools, class_name))
        self.held_out = {int(turn): set(names) for turn, names in dict(missed_function or {}).items()}
        self.start_turn(0)

    @classmethod
    def from_env(cls, env: Mapping[str, Any], as_checker: bool = False, budget: Budget | None = None) -> BFCLSession:
        """A fresh session from a `multi_turn` row's `env` (see `grpo_tools.data.converters.bfcl_multi_turn`).

        `as_checker=True` runs calls as BFCL's checker does, which is how the verdict replays a trajectory: a
        `miss_func` row's held-out functions at any turn (methods of the row's classes the model was not yet shown),
        and arguments of any type (BFCL runs `tail(lines=20.0)`). Calls are still parsed, never evaluated, only
        methods of the row's classes run, and the budget holds.
        """
        return cls(
            env["involved_classes"],
            env.get("initial_config"),
            bool(env.get("long_context", False)),
            None if as_checker else env.get("missed_function"),
            check_types=not as_checker,
            budget=budget,
        )

    @property
    def exceeded(self) -> BudgetHit | None:
        """The first limit the session's calls broke (every later call was refused), or None."""
        return self.meter.exceeded

    def start_turn(self, turn: int) -> None:
        """Move to user turn `turn` (from 0): the functions held out until then are offered from now on."""
        self.turn = turn
        self.meter.start_turn()
        later = {name for held, names in self.held_out.items() if held > turn for name in names}
        self._offered = frozenset(name for name in self._owners if name not in later)

    def start_step(self) -> None:
        """A new model response begins within the turn (the budget counts calls per step)."""
        self.meter.start_step()

    def offered(self) -> frozenset[str]:
        """The function names a call may use at the current turn."""
        return self._offered

    def call(self, name: Any, arguments: Any) -> CallOutcome:
        """Run one call given by name and keyword arguments (a model's call, read by our parser)."""
        if not isinstance(arguments, dict):
            hit = self.meter.admit()
            if hit is not None:
                return _refused(name, hit)
            return CallOutcome(_name(name), {}, "validation", f"{_ERROR}the arguments of a call must be an object")
        return self._execute(name, (), arguments)

    def call_text(self, text: Any) -> CallOutcome:
        """Run one call written as BFCL writes it (`cd(folder='temp')`), read by `parse_call`, never evaluated."""
        limit = self.meter.budget.argument_chars
        if isinstance(text, str) and len(text) > limit:
            self.meter.admit()
            return _refused("", self.meter.refuse("argument_chars", f"a call is longer than {limit} characters"))
        try:
            call = parse_call(text, max_chars=limit)
        except CallSyntaxError as error:
            hit = self.meter.admit()
            if hit is not None:
                return _refused("", hit)
            return CallOutcome("", {}, "parse_error", f"{_ERROR}{error}")
        return self._execute(call.name, call.args, call.kwargs)

    def _execute(self, name: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> CallOutcome:
        hit = self.meter.admit({**dict(enumerate(args)), **kwargs})  # measured before anything formats them
        if hit is not None:
            return _refused(name, hit)
        if not isinstance(name, str) or name not in self._offered:
            outcome = CallOutcome(
                _name(name), dict(kwargs), "unknown_tool", f"{_ERROR}name {_name(name)!r} is not defined"
            )
            return self._spent(outcome)
        method = getattr(self.instances[self._owners[name]], name)
        try:
            arguments = bind_call(method, ParsedCall(name, args, kwargs))
        except TypeError as error:
            return self._spent(CallOutcome(name, dict(kwargs), "validation", f"{_ERROR}{name}: {error}"))
        precision = arguments.get("precision")
        if isinstance(precision, int | float) and not isinstance(precision, bool) and precision > MAX_PRECISION:
            return _refused(name, self.meter.refuse("precision", f"precision is above {MAX_PRECISION}"))
        tool = self.tools[name]
        problem = _argument_problem(tool, arguments, self.check_types)
        if problem is not None:
            message = f"{_ERROR}invalid arguments for {name}: {problem}"
            return self._spent(CallOutcome(name, arguments, "validation", message))
        for key, value in arguments.items():
            if tool.param_types(key) == {"number"} and isinstance(value, int) and not isinstance(value, bool):
                arguments[key] = float(value)
        try:
            with _own_numeric_contexts():  # the result is written at the precision the call set, as BFCL writes it
                outcome = CallOutcome(name, arguments, "ok", serialize_result(method(**arguments)))
        except Exception as error:  # the tool boundary: BFCL shows an API's exception to the model as its result
            outcome = CallOutcome(name, arguments, "exception", f"{_ERROR}{error}")
        return self._spent(outcome)

    def _spent(self, outcome: CallOutcome) -> CallOutcome:
        self.meter.spend(outcome.result)
        return outcome

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
    cannot interrupt the C code behind a huge computation, so the budget's limits on argument size and integer
    digits keep every call short."""

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
