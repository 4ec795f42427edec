"""Multi-turn tool use: environments whose tools really run during rollouts.

trl's `GRPOTrainer(environment_factory=...)` runs the loop: one environment per rollout, `reset` from the dataset
row, the environment's public methods offered as tools (schemas from `transformers.utils.get_json_schema`), every
call the model writes executed and its result appended as a tool message, then the model generates again; the tokens
of tool results are masked out of the loss (`tool_mask`). What trl lacks, `ToolEnvironment` adds at the tool
boundary: arguments are validated against the tool's schema before the tool runs, each call runs under a time limit,
and a validation error, an exception or a timeout becomes a tool message the model reads (never a crash), recorded in
`ToolEnvironment.records` so the trainer can log failure rates by kind.

What a model writes only ever reaches the Python tool functions, after validation: never `eval`, `exec`, a shell or
the filesystem. The calculator parses arithmetic with `ast` and walks a whitelist of node types (`calculate`).
The trajectory rewards live in `grpo_tools.tools.trajectories`, evaluation rollouts in `grpo_tools.tools.rollouts`, the bundled
task's data in `grpo_tools.tools.multiturn`.
"""

from __future__ import annotations

import ast
import datetime
import functools
import inspect
import json
import logging
import math
import operator
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from grpo_tools.schemas import Tool, normalize_tool, validate_arguments


__all__ = [
    "DEFAULT_TOOL_TIMEOUT",
    "ENVIRONMENTS",
    "FAILURE_KINDS",
    "UNITS",
    "WEEKDAYS",
    "ExpressionError",
    "ToolEnvironment",
    "ToolRecord",
    "WorkbenchEnvironment",
    "convert_quantity",
    "evaluate_expression",
    "format_number",
    "get_environment",
    "is_multi_turn",
    "make_environment_factory",
]

logger = logging.getLogger(__name__)

DEFAULT_TOOL_TIMEOUT = 2.0
# How a tool call can fail, each counted apart: arguments that do not fit the schema, an exception raised by the tool,
# a tool running past its time limit, and (counted by the trainer, since trl answers these itself) a call naming no
# offered tool or carrying arguments that are not an object.
FAILURE_KINDS: tuple[str, ...] = ("validation", "exception", "timeout", "unknown_tool")
# Members of an environment class that trl does not offer as tools.
_NOT_TOOLS = frozenset({"reset", "get_reward"})


@dataclass(frozen=True)
class ToolRecord:
    """One tool call an environment received: the tool, its arguments, how it ended (`"ok"` or one of
    `FAILURE_KINDS`) and what the model was shown."""

    name: str
    arguments: dict[str, Any]
    status: str
    result: str
    seconds: float


def _error(message: str) -> str:
    """A failed call's tool message: JSON, the same shape trl gives its own failures."""
    return json.dumps({"error": message})


def _run_with_timeout(function: Callable[[], Any], timeout: float) -> tuple[str, Any]:
    """Run `function()` in a daemon thread; `("ok", value)`, `("exception", error)` or `("timeout", None)`.

    A Python thread cannot be killed: a tool that overruns keeps running in the background until it returns (the
    daemon flag only keeps it from blocking interpreter exit), and its result is dropped. Tools must therefore be
    cooperative: pure functions of their arguments and the environment's state, without side effects that matter
    after the deadline.
    """
    outcome: list[tuple[str, Any]] = []

    def target() -> None:
        try:
            outcome.append(("ok", function()))
        except Exception as error:  # the tool boundary: any failure of the tool becomes a message
            outcome.append(("exception", error))
        except BaseException as error:  # SystemExit raised by a tool ends the tool, never the training run
            outcome.append(("exception", RuntimeError(f"the tool tried to stop the program ({type(error).__name__})")))

    thread = threading.Thread(target=target, name="grpo-tools-tool", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        return "timeout", None
    if not outcome:
        return "exception", RuntimeError("the tool stopped without a result")
    return outcome[0]


def _guarded(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap a tool method so that a call validates, runs under the time limit and records its outcome.

    `functools.wraps` keeps the name, docstring, annotations and signature (through `__wrapped__`), which is all
    `get_json_schema` and trl read.
    """

    @functools.wraps(function)
    def tool(self: ToolEnvironment, **arguments: Any) -> str:
        return self._call(name, function, arguments)

    return tool


class ToolEnvironment:
    """Base class of multi-turn environments: subclass it and write each tool as a public method.

    A tool is a plain method with typed parameters and a Google-style docstring (an `Args:` entry per parameter;
    `Literal[...]` or `(choices: [...])` for enumerations), returning a string or a JSON-serialisable value. Its
    schema comes from `transformers.utils.get_json_schema`, computed when the class is defined, so a tool the
    schema reader cannot read fails at import time, not in the middle of training. Every public method except `reset`
    is a tool (that is how trl finds them); helpers must start with an underscore.

    Each rollout starts fresh: trl keeps a pool of instances, one per concurrent rollout, and calls `reset` before
    every rollout. `reset` reads the row's `env` (a JSON object, or its JSON text) and hands it to `_setup`. Each call is validated against the tool's
    schema, run with `timeout` seconds to finish, and recorded in `records`; any failure becomes an
    `{"error": "..."}` tool message.

    >>> class Echo(ToolEnvironment):
    ...     name = "echo"
    ...     def shout(self, text: str) -> str:
    ...         '''Shout a text.
    ...
    ...         Args:
    ...             text: What to shout.
    ...         '''
    ...         return text.upper()
    >>> env = Echo()
    >>> env.reset(env={"name": "echo"})
    >>> env.shout(text="hi"), env.shout(text=3)
    ('HI', '{"error": "invalid arguments for shout: text: 3 is not of type \\'string\\'"}')
    >>> [record.status for record in env.records]
    ['ok', 'validation']
    """

    name: ClassVar[str] = ""
    _tool_specs: ClassVar[dict[str, Tool]] = {}
    _tool_schemas: ClassVar[dict[str, dict[str, Any]]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        from transformers.utils import get_json_schema

        specs, schemas = dict(cls._tool_specs), dict(cls._tool_schemas)
        for member, value in list(vars(cls).items()):
            if member.startswith("_") or member in _NOT_TOOLS or not inspect.isfunction(value):
                continue
            schema = get_json_schema(value)
            # The method's own `self` is not an argument the model gives.
            schema["function"]["parameters"]["properties"].pop("self", None)
            required = schema["function"]["parameters"].get("required", [])
            schema["function"]["parameters"]["required"] = [name for name in required if name != "self"]
            schemas[member] = schema
            specs[member] = normalize_tool(schema, where=f"{cls.__name__}.{member}")
            setattr(cls, member, _guarded(member, value))
        cls._tool_specs, cls._tool_schemas = specs, schemas

    def __init__(self, timeout: float = DEFAULT_TOOL_TIMEOUT) -> None:
        if not timeout > 0:
            raise ValueError(f"timeout must be > 0 seconds, got {timeout}")
        self.timeout = timeout
        self.records: list[ToolRecord] = []

    @classmethod
    def tool_schemas(cls) -> list[dict[str, Any]]:
        """The tools in the OpenAI function format, as `get_json_schema` writes them and chat templates render them;
        a row's `tools` for this environment. Sorted by name, the order in which trl offers an environment's methods."""
        return [json.loads(json.dumps(cls._tool_schemas[name])) for name in sorted(cls._tool_schemas)]

    def reset(self, env: Any = None, **row: Any) -> None:
        """Start a rollout from a dataset row: forget earlier calls and set the state from the row's `env`.

        trl passes every column of the row as a keyword argument; only `env` is read. Returns None: the prompt is the
        row's messages as they are.
        """
        if isinstance(env, str):
            env = json.loads(env)
        if not isinstance(env, dict):
            raise ValueError(f"{type(self).__name__}.reset needs the row's `env` object, got {env!r}")
        self.records = []
        self._setup(env)

    def _setup(self, state: dict[str, Any]) -> None:
        """Read the row's `env` into the environment's state; subclasses with state override it."""

    def _tools(self) -> dict[str, Callable[..., Any]]:
        """The bound tool methods by name, sorted, as trl offers them (`inspect.getmembers` order)."""
        return {name: getattr(self, name) for name in sorted(self._tool_specs)}

    def _call(self, name: str, function: Callable[..., Any], arguments: dict[str, Any]) -> str:
        start = time.perf_counter()
        problems = validate_arguments(self._tool_specs[name], arguments)
        if problems:
            details = "; ".join(f"{item.path}: {item.message}" if item.path else item.message for item in problems)
            message = f"invalid arguments for {name}: {details}"
            return self._record(name, arguments, "validation", _error(message), start)
        status, value = _run_with_timeout(functools.partial(function, self, **arguments), self.timeout)
        if status == "timeout":
            return self._record(name, arguments, status, _error(f"{name} timed out after {self.timeout:g} s"), start)
        if status == "exception":
            message = str(value) or type(value).__name__
            return self._record(name, arguments, status, _error(f"{name} failed: {message}"), start)
        try:
            text = value if isinstance(value, str) else json.dumps(value)
        except TypeError:
            return self._record(
                name, arguments, "exception", _error(f"{name} returned {type(value).__name__}, not JSON"), start
            )
        return self._record(name, arguments, "ok", text, start)

    def _record(self, name: str, arguments: dict[str, Any], status: str, result: str, start: float) -> str:
        seconds = time.perf_counter() - start
        self.records.append(ToolRecord(name, dict(arguments), status, result, seconds))
        if status != "ok":
            logger.debug("tool %s(%s): %s: %s", name, arguments, status, result)
        return result


# ---------------------------------------------------------------------------------------------------------------
# A calculator over a safe expression grammar


class ExpressionError(ValueError):
    """An expression outside the calculator's grammar or limits; the message says which."""


MAX_EXPRESSION_CHARS = 100
MAX_EXPRESSION_NODES = 60
MAX_EXPONENT = 10
MAX_MAGNITUDE = 1e15
_BINARY: dict[type[ast.operator], Callable[[float, float], float]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.Pow: operator.pow,
}
_UNARY: dict[type[ast.unaryop], Callable[[float], float]] = {ast.USub: operator.neg, ast.UAdd: operator.pos}


def evaluate_expression(text: str) -> float:
    """The value of an arithmetic expression: numbers, `+ - * / **`, unary minus and parentheses, nothing else.

    `ast.parse` only reads the text; the tree is then walked over a whitelist of node types, so a name, a call, an
    attribute or a string is an error, never code that runs. Limits keep every answer cheap: at most 100 characters and
    60 syntax nodes, exponents within +-10, magnitudes up to 1e15.

    >>> evaluate_expression("(2 + 3) * -4 / 8")
    -2.5
    >>> evaluate_expression("__import__('os')")
    Traceback (most recent call last):
    ...
    grpo_tools.tools.environments.ExpressionError: only numbers, + - * / **, and parentheses are allowed, not Call
    """
    if not isinstance(text, str) or not text.strip():
        raise ExpressionError("the expression is empty")
    if len(text) > MAX_EXPRESSION_CHARS:
        raise ExpressionError(f"the expression is longer than {MAX_EXPRESSION_CHARS} characters")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except (SyntaxError, ValueError) as error:  # ValueError: null bytes
        raise ExpressionError(f"not an arithmetic expression ({getattr(error, 'msg', error)})") from None
    if sum(1 for _ in ast.walk(tree)) > MAX_EXPRESSION_NODES:
        raise ExpressionError(f"the expression has more than {MAX_EXPRESSION_NODES} parts")
    return _evaluate_node(tree.body)


def _evaluate_node(node: ast.AST) -> float:
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        value = float(node.value)
    elif isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        value = _UNARY[type(node.op)](_evaluate_node(node.operand))
    elif isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _evaluate_node(node.left), _evaluate_node(node.right)
        if isinstance(node.op, ast.Pow) and (abs(right) > MAX_EXPONENT or (left < 0 and right != int(right))):
            raise ExpressionError(f"exponents must be within +-{MAX_EXPONENT} (and whole for a negative base)")
        if isinstance(node.op, ast.Div) and right == 0:
            raise ExpressionError("division by zero")
        if isinstance(node.op, ast.Pow) and left == 0 and right < 0:
            raise ExpressionError("zero to a negative power")
        value = _BINARY[type(node.op)](left, right)
    else:
        raise ExpressionError(f"only numbers, + - * / **, and parentheses are allowed, not {type(node).__name__}")
    if not math.isfinite(value) or abs(value) > MAX_MAGNITUDE:
        raise ExpressionError(f"a result is larger than {MAX_MAGNITUDE:g}")
    return value


def format_number(value: float) -> str:
    """A result as the tools write it: rounded to 2 decimals, without trailing zeros (`26.1`, `395`, `-0.5`)."""
    value = round(float(value), 2)
    if value == int(value):
        return str(int(value))
    return f"{value:.2f}".rstrip("0").rstrip(".")


# ---------------------------------------------------------------------------------------------------------------
# The bundled environment: units, a calendar over the row's events, dates and a calculator

Unit = Literal["km", "mi", "m", "ft", "kg", "lb", "celsius", "fahrenheit", "l", "gal"]
# Each unit's dimension and its size in the dimension's base unit (temperatures convert by formula).
UNITS: dict[str, tuple[str, float]] = {
    "km": ("length", 1000.0),
    "mi": ("length", 1609.344),
    "m": ("length", 1.0),
    "ft": ("length", 0.3048),
    "kg": ("mass", 1.0),
    "lb": ("mass", 0.45359237),
    "l": ("volume", 1.0),
    "gal": ("volume", 3.785411784),
    "celsius": ("temperature", 1.0),
    "fahrenheit": ("temperature", 1.0),
}
WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")


def convert_quantity(value: float, from_unit: str, to_unit: str) -> float:
    """`value` in `from_unit` expressed in `to_unit` (unrounded); ValueError across dimensions."""
    (from_dimension, from_size), (to_dimension, to_size) = UNITS[from_unit], UNITS[to_unit]
    if from_dimension != to_dimension:
        raise ValueError(f"cannot convert {from_unit} ({from_dimension}) to {to_unit} ({to_dimension})")
    if from_dimension == "temperature":
        celsius = value if from_unit == "celsius" else (value - 32) * 5 / 9
        return celsius if to_unit == "celsius" else celsius * 9 / 5 + 32
    return value * from_size / to_size


def _parse_date(text: str, argument: str) -> datetime.date:
    try:
        return datetime.date.fromisoformat(text)
    except ValueError:
        raise ValueError(f"{argument} must be a date written YYYY-MM-DD, got {text!r}") from None


class WorkbenchEnvironment(ToolEnvironment):
    """The bundled task's tools: a unit converter, a calendar over the row's events, a day counter and a calculator.

    The row's `env` is `{"name": "workbench", "events": [{"name": ..., "date": "YYYY-MM-DD"}, ...]}` (events may be
    left out when a task needs no calendar); every tool computes its answer, so the model must read the results.
    """

    name = "workbench"

    def _setup(self, state: dict[str, Any]) -> None:
        events = state.get("events", [])
        self._events = {str(event["name"]).lower(): _parse_date(event["date"], "date") for event in events}

    def convert_units(self, value: float, from_unit: Unit, to_unit: Unit) -> str:
        """Convert a quantity between units of length, mass, volume or temperature.

        Args:
            value: The quantity to convert.
            from_unit: The unit the quantity is in.
            to_unit: The unit to convert it to.
        """
        return f"{format_number(convert_quantity(value, from_unit, to_unit))} {to_unit}"

    def find_event(self, name: str) -> str:
        """Look up an event in the user's calendar: its date and day of the week.

        Args:
            name: The event's name, as the user calls it.
        """
        date = self._events.get(name.strip().lower())
        if date is None:
            known = ", ".join(sorted(self._events)) or "no events"
            raise LookupError(f"no event named {name!r}; the calendar has {known}")
        return f"{name}: {date.isoformat()} ({WEEKDAYS[date.weekday()]})"

    def days_between(self, start: str, end: str) -> str:
        """Count the days from one date to another (negative when end comes first).

        Args:
            start: The first date, YYYY-MM-DD.
            end: The second date, YYYY-MM-DD.
        """
        return str((_parse_date(end, "end") - _parse_date(start, "start")).days)

    def calculate(self, expression: str) -> str:
        """Evaluate an arithmetic expression with + - * / ** and parentheses; the result is rounded to 2 decimals.

        Args:
            expression: The expression, e.g. "(12 + 30) * 4".
        """
        return format_number(evaluate_expression(expression))


# Environments by the name a row's `env` gives; the single source of environment names.
ENVIRONMENTS: dict[str, type[ToolEnvironment]] = {WorkbenchEnvironment.name: WorkbenchEnvironment}


def _env_state(row: dict[str, Any]) -> dict[str, Any]:
    env = row.get("env")
    return json.loads(env) if isinstance(env, str) else env


def get_environment(row: dict[str, Any]) -> type[ToolEnvironment]:
    """The environment class a multi-turn row names in `env.name`; ValueError naming the row otherwise."""
    state = _env_state(row)
    name = state.get("name") if isinstance(state, dict) else None
    if name not in ENVIRONMENTS:
        raise ValueError(f"row id={row.get('id')}: env.name must be one of {', '.join(ENVIRONMENTS)}, got {name!r}")
    return ENVIRONMENTS[name]


def is_multi_turn(rows: Sequence[dict[str, Any]]) -> bool:
    """True when every row is multi-turn (has `env` and `expected`), False when none is; a mix is an error, since
    one training run either executes tools or scores single calls."""
    from grpo_tools.data.rows import DataError

    flags = {"env" in row and "expected" in row for row in rows}
    if len(flags) > 1:
        first = next(row for row in rows if ("env" in row) != ("env" in rows[0]))
        raise DataError(
            f"rows mix multi-turn rows (with env and expected) and single-turn rows, e.g. id={rows[0].get('id')} "
            f"and id={first.get('id')}; train on one kind at a time"
        )
    return flags == {True}


def make_environment_factory(
    rows: Sequence[dict[str, Any]], timeout: float = DEFAULT_TOOL_TIMEOUT
) -> Callable[[], ToolEnvironment] | dict[str, Callable[[], ToolEnvironment]]:
    """What `GRPOTrainer(environment_factory=...)` takes for these rows: one factory when every row names the same
    environment, else a dict by name (trl then routes each row by its `environment` column)."""
    classes = {get_environment(row) for row in rows}
    factories = {cls.name: functools.partial(cls, timeout=timeout) for cls in classes}
    return next(iter(factories.values())) if len(factories) == 1 else factories
