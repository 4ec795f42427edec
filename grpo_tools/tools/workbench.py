"""The bundled multi-turn task's environment: a unit converter, a calendar over the row's events, a day counter and a
calculator that parses arithmetic with `ast` and walks a whitelist of node types (never `eval`)."""

from __future__ import annotations

import ast
import datetime
import math
import operator
import warnings
from collections.abc import Callable
from typing import Any, Literal

from grpo_tools.tools.base import ToolEnvironment


__all__ = [
    "UNITS",
    "WEEKDAYS",
    "ExpressionError",
    "WorkbenchEnvironment",
    "convert_quantity",
    "evaluate_expression",
    "format_number",
]


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
    grpo_tools.tools.workbench.ExpressionError: only numbers, + - * / **, and parentheses are allowed, not Call
    """
    if not isinstance(text, str) or not text.strip():
        raise ExpressionError("the expression is empty")
    if len(text) > MAX_EXPRESSION_CHARS:
        raise ExpressionError(f"the expression is longer than {MAX_EXPRESSION_CHARS} characters")
    try:
        with warnings.catch_warnings():  # an unknown escape in a string warns; the tree is refused further down
            warnings.simplefilter("ignore")
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
