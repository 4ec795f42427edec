"""What one completion may cost an executor, a reward or a verdict: the limits (`Budget`), one completion's use of them
(`Meter`) and a per-process count of limits hit, by kind (`hit_counts`, `take_hit_counts`).

A model's output is never an error: a completion that breaks a limit scores as wrong, in training and in a verdict
alike, and the rest of the batch goes on. The defaults are far beyond anything a model doing its task writes (BFCL's
ground truth makes at most 13 calls in a turn, its longest call is 6,839 characters, its largest integer has 16 digits)
and small enough that no completion holds a process for long:

- `calls_per_step`, `calls_per_turn`, `calls_per_conversation`: calls in one model response, one user turn, one
  completion or conversation;
- `argument_chars`: the size of one call's arguments, characters of every string and key plus one per value;
- `argument_depth`: how deeply one call's arguments nest;
- `integer_digits`: the decimal digits of an integer, and of a number written as text (`"1e999..."`), which a library
  may convert; counted from the integer's bits, never by writing it out;
- `result_chars`: the characters of all results one completion's calls return (what a verdict holds: this bounds the
  memory a completion's reads take, while the call and argument limits bound what it can write);
- `seconds`: the time one completion's calls may take together in the executor.

Arguments are measured by `Budget.argument_hit` before anything formats, `repr`s or converts them. A `Meter` counts
one completion's calls and results against its budget; the first limit broken is kept in `Meter.exceeded`, every later
call is refused, and the kind is counted once in the process's hit counts (a trainer logs them as `budget/<kind>`).
Executors may add limits of their own (`Meter.refuse`), counted the same way.

>>> meter = Meter(Budget(calls_per_step=2))
>>> [meter.admit({"a": 1}) for _ in range(3)][-1].kind
'calls_per_step'
>>> Budget().argument_hit({"a": 16**3572}).kind
'integer_digits'
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any


__all__ = [
    "BUDGET_KINDS",
    "DEFAULT_BUDGET",
    "Budget",
    "BudgetHit",
    "Meter",
    "hit_counts",
    "record_hit",
    "take_hit_counts",
]

logger = logging.getLogger(__name__)

BUDGET_KINDS: tuple[str, ...] = (
    "calls_per_step",
    "calls_per_turn",
    "calls_per_conversation",
    "argument_chars",
    "argument_depth",
    "integer_digits",
    "result_chars",
    "seconds",
)
# A number written as text: digits, an optional fraction and exponent (what float(), Decimal and mpmath read).
_NUMBER_TEXT = re.compile(r"\s*[+-]?(?:\d[\d_]*\.?[\d_]*|\.\d[\d_]*)(?:[eE][+-]?\d[\d_]*)?\s*")


@dataclass(frozen=True)
class BudgetHit:
    """A limit broken: its kind (one of `BUDGET_KINDS`, or an executor's own) and a message for the model or a log."""

    kind: str
    message: str


@dataclass(frozen=True)
class Budget:
    """The limits on what one completion may cost (see the module's docstring for each). All must be positive."""

    calls_per_step: int = 128
    calls_per_turn: int = 256
    calls_per_conversation: int = 1024
    argument_chars: int = 100_000
    argument_depth: int = 32
    integer_digits: int = 100
    result_chars: int = 10_000_000
    seconds: float = 30.0

    def __post_init__(self) -> None:
        for item in fields(self):
            value = getattr(self, item.name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                raise ValueError(f"Budget.{item.name} must be a positive number, got {value!r}")
        if self.integer_digits > 300:  # a float parameter converts an integer: 10**308 is the largest float
            raise ValueError(f"Budget.integer_digits must be at most 300, got {self.integer_digits}")

    def argument_hit(self, value: Any) -> BudgetHit | None:
        """The first limit a call's arguments (`value`, usually the mapping of them by name, whose values are at depth
        1) break: size, nesting, integer digits; or None. Never formats, converts or hashes what it measures."""
        largest = 10**self.integer_digits
        size, stack = 0, [(value, 0)]
        while stack:
            item, depth = stack.pop()
            size += 1
            if depth > self.argument_depth:
                return BudgetHit("argument_depth", f"the arguments nest deeper than {self.argument_depth} levels")
            if isinstance(item, str | bytes):
                size += len(item)
                if len(item) > self.integer_digits and _NUMBER_TEXT.fullmatch(item if isinstance(item, str) else ""):
                    return BudgetHit(
                        "integer_digits", f"a number written as text has over {self.integer_digits} digits"
                    )
            elif isinstance(item, int) and not isinstance(item, bool):
                if abs(item) >= largest:
                    return BudgetHit("integer_digits", f"an integer has more than {self.integer_digits} digits")
            elif isinstance(item, Mapping):
                stack.extend((part, depth + 1) for pair in item.items() for part in pair)
            elif isinstance(item, list | tuple | set | frozenset):
                stack.extend((part, depth + 1) for part in item)
            if size > self.argument_chars:
                return BudgetHit("argument_chars", f"the arguments are longer than {self.argument_chars} characters")
        return None


DEFAULT_BUDGET = Budget()

_HITS: Counter[str] = Counter()
_HITS_LOCK = threading.Lock()


def record_hit(kind: str) -> None:
    """Count one completion that broke a limit of `kind` in this process."""
    with _HITS_LOCK:
        _HITS[kind] += 1


def hit_counts() -> dict[str, int]:
    """The completions that broke each kind of limit in this process so far."""
    with _HITS_LOCK:
        return dict(_HITS)


def take_hit_counts() -> dict[str, int]:
    """`hit_counts`, then start counting from zero (a trainer takes them once per logging step)."""
    with _HITS_LOCK:
        counts = dict(_HITS)
        _HITS.clear()
        return counts


class Meter:
    """One completion's (or conversation's) use of a `Budget`: `start_turn`/`start_step` mark where a model response
    or user turn begins, `admit` counts a call and measures its arguments before it runs, `spend` adds what it took and
    returned after. The first hit is kept in `exceeded` (counted once per completion) and refuses every later call."""

    def __init__(self, budget: Budget | None = None) -> None:
        self.budget = budget or DEFAULT_BUDGET
        self.exceeded: BudgetHit | None = None
        self.calls = self._turn_calls = self._step_calls = 0
        self.result_chars = 0
        self.seconds = 0.0
        self._started: float | None = None

    def start_turn(self) -> None:
        """A new user turn begins (and with it a new step)."""
        self._turn_calls = self._step_calls = 0

    def start_step(self) -> None:
        """A new model response begins within the turn."""
        self._step_calls = 0

    def refuse(self, kind: str, message: str) -> BudgetHit:
        """Record a broken limit (a budget's, or an executor's own kind) and return it; the first one is kept."""
        hit = BudgetHit(kind, message)
        if self.exceeded is None:
            self.exceeded = hit
            record_hit(kind)
            logger.debug("completion past its budget: %s: %s", kind, message)
        return self.exceeded

    def admit(self, arguments: Any = None) -> BudgetHit | None:
        """Count one call about to run and measure its arguments; the hit that refuses it, or None (it may run)."""
        if self.exceeded is not None:
            return self.exceeded
        self.calls += 1
        self._turn_calls += 1
        self._step_calls += 1
        budget = self.budget
        for kind, count, limit, where in (
            ("calls_per_step", self._step_calls, budget.calls_per_step, "one response"),
            ("calls_per_turn", self._turn_calls, budget.calls_per_turn, "one turn"),
            ("calls_per_conversation", self.calls, budget.calls_per_conversation, "one completion"),
        ):
            if count > limit:
                return self.refuse(kind, f"more than {limit} calls in {where}")
        hit = budget.argument_hit(arguments) if arguments is not None else None
        if hit is not None:
            return self.refuse(hit.kind, hit.message)
        self._started = time.perf_counter()
        return None

    def spend(self, result: str) -> BudgetHit | None:
        """Add the time since `admit` and the result's characters; the hit, or None."""
        if self._started is not None:
            self.seconds += time.perf_counter() - self._started
            self._started = None
        self.result_chars += len(result)
        if self.exceeded is not None:
            return self.exceeded
        if self.result_chars > self.budget.result_chars:
            return self.refuse("result_chars", f"the calls returned more than {self.budget.result_chars} characters")
        if self.seconds > self.budget.seconds:
            return self.refuse("seconds", f"the calls took more than {self.budget.seconds:g} s")
        return None
