"""BFCL's own multi-turn checker and data, as the multi-turn parity test (`tests/tools/test_bfcl_verdict_parity.py`)
uses them, and the trajectories it checks.

`rows(category)` reads one multi-turn category of the installed bfcl-eval and converts it with
`convert_rows("bfcl", ...)`, keeping BFCL's own entry beside each canonical row. `trajectories(row)` builds the
ground truth and perturbations of it (a call dropped, an argument changed, calls reordered, an extra read-only call,
a turn cut short, a turn left empty, the last turn missing, a turn's calls made a turn early, an integer written as a
float, a number as a string, keyword arguments written positionally), each as BFCL's checker takes a model's decoded result:
per turn, per step, the call strings. `bfcl_checker_verdict` runs bfcl-eval's `multi_turn_checker` on one of them,
with the runner's own rules before it (`_evaluate_single_multi_turn_entry`: the number of turns, empty steps
dropped). BFCL's checker runs these strings with `eval`: they are BFCL's ground truth and our edits of it, never a
model's text. Each check uses a model name of its own and removes the instances BFCL left in its module's globals.
"""

from __future__ import annotations

import inspect
import itertools
import json
import random
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from grpo_tools.data.converters import bfcl_files, convert_rows, load_ground_truth, read_source
from grpo_tools.data.converters.bfcl_multi_turn import MULTI_TURN_CATEGORIES, api_class, bfcl_module, parse_call


__all__ = [
    "MULTI_TURN_CATEGORIES",
    "PAST_LIMITS",
    "PERTURBATIONS",
    "Row",
    "bfcl_checker_verdict",
    "past_limit_trajectories",
    "rows",
    "trajectories",
]

# A call of each API class that reads and changes nothing a state check compares.
READ_ONLY_CALLS = {
    "GorillaFileSystem": "pwd()",
    "MathAPI": "add(a=1, b=2)",
    "MessageAPI": "list_users()",
    "TwitterAPI": "posting_get_login_status()",
    "TicketAPI": "ticket_get_login_status()",
    "TradingBot": "get_current_time()",
    "TravelAPI": "list_all_airports()",
    "VehicleControlAPI": "check_tire_pressure()",
}
PERTURBATIONS = (
    "ground_truth",
    "one_call_per_step",
    "call_dropped",
    "argument_changed",
    "calls_reordered",
    "extra_read_only_call",
    "turn_cut_short",
    "turn_left_empty",
    "last_turn_missing",
    "calls_a_turn_early",
    "integer_as_float",
    "number_as_string",
    "keywords_as_positional",
)
_checks = itertools.count()


@dataclass
class Row:
    """One BFCL multi-turn row: BFCL's own entry (what its checker reads) and our canonical row converted from it."""

    entry: dict[str, Any]
    row: dict[str, Any]

    @property
    def ground_truth(self) -> list[list[str]]:
        return self.row["expected"]


def rows(category: str) -> list[Row]:
    """Every row of one multi-turn category of the installed bfcl-eval, converted with `convert_rows("bfcl", ...)`."""
    questions, answers = bfcl_files(category)
    truth = load_ground_truth(answers)
    entries = {entry["id"]: entry for _, entry in read_source(questions)}
    result = convert_rows("bfcl", read_source(questions), ground_truth=truth, category="multi_turn")
    if result.failures:
        raise ValueError(f"{category}: {len(result.failures)} rows did not convert: {result.failures[:3]}")
    return [Row(entries[row["id"]], row) for row in result.rows]


def _call_text(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    return f"{name}({', '.join([repr(a) for a in args] + [f'{k}={v!r}' for k, v in kwargs.items()])})"


def _changed(value: Any) -> Any:
    """Another value of the same type."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int | float):
        return value + 1
    if isinstance(value, str):
        return value + "_x"
    if isinstance(value, list):
        return value[:-1] if value else ["x"]
    if isinstance(value, dict):
        return {**value, "x": 1}
    return "x"


def _change_argument(text: str, rng: random.Random) -> str | None:
    call = parse_call(text)
    slots = [("arg", i) for i in range(len(call.args))] + [("kw", key) for key in call.kwargs]
    if not slots:
        return None
    kind, key = rng.choice(slots)
    args, kwargs = list(call.args), dict(call.kwargs)
    if kind == "arg":
        args[key] = _changed(args[key])
    else:
        kwargs[key] = _changed(kwargs[key])
    return _call_text(call.name, tuple(args), kwargs)


def _retyped(text: str, kind: str) -> str | None:
    """The call with its first numeric keyword argument written as a model might: an integer as a float
    (`lines=20.0`), a number as a string (`value='36.0'`); None when it has no such argument."""
    call = parse_call(text)
    for key, value in call.kwargs.items():
        if isinstance(value, bool) or not isinstance(value, int | float):
            continue
        if kind == "integer_as_float" and isinstance(value, int):
            return _call_text(call.name, call.args, {**call.kwargs, key: float(value)})
        if kind == "number_as_string":
            return _call_text(call.name, call.args, {**call.kwargs, key: str(value)})
    return None


def _positional(text: str, classes: list[str]) -> str | None:
    """The call with its keyword arguments written positionally, where they come in the method's order."""
    call = parse_call(text)
    owner = next((api_class(name) for name in classes if hasattr(api_class(name), call.name)), None)
    if owner is None or not call.kwargs or call.args:
        return None
    order = list(inspect.signature(getattr(owner, call.name)).parameters)[1:]
    if list(call.kwargs) != order[: len(call.kwargs)]:
        return None
    return _call_text(call.name, tuple(call.kwargs.values()), {})


def trajectories(row: Row) -> Iterator[tuple[str, list[list[list[str]]]]]:
    """The ground truth and its perturbations as decoded results (per turn, per step, call strings), each with its
    name from `PERTURBATIONS`; a perturbation the row has no room for (reordering a turn of one call) is left out.
    Choices are drawn from a generator seeded by the row's id, so the set is the same on every run."""
    truth = row.ground_truth
    rng = random.Random(row.row["id"])
    whole = [[list(turn)] if turn else [] for turn in truth]
    yield "ground_truth", whole
    yield "one_call_per_step", [[[call] for call in turn] for turn in truth]
    busy = [t for t, turn in enumerate(truth) if turn]
    if busy:
        t = rng.choice(busy)
        calls = list(truth[t])
        del calls[rng.randrange(len(calls))]
        yield "call_dropped", [*whole[:t], [calls] if calls else [], *whole[t + 1 :]]
        changeable = [(t, i) for t in busy for i, text in enumerate(truth[t]) if parse_call(text).args or "=" in text]
        if changeable:
            t, i = rng.choice(changeable)
            changed = _change_argument(truth[t][i], rng)
            if changed is not None:
                calls = [*truth[t][:i], changed, *truth[t][i + 1 :]]
                yield "argument_changed", [*whole[:t], [calls], *whole[t + 1 :]]
        t = rng.choice(busy)
        held_out = {name for names in row.row["env"]["missed_function"].values() for name in names}
        options = [READ_ONLY_CALLS[c] for c in row.row["env"]["involved_classes"] if c in READ_ONLY_CALLS]
        options = [text for text in options if parse_call(text).name not in held_out]
        if options:
            yield "extra_read_only_call", [*whole[:t], [*whole[t], [rng.choice(options)]], *whole[t + 1 :]]
        yield "turn_left_empty", [*whole[:t], [], *whole[t + 1 :]]
    pairs = [(t, i) for t, turn in enumerate(truth) for i in range(len(turn) - 1) if turn[i] != turn[i + 1]]
    if pairs:
        t, i = rng.choice(pairs)
        calls = list(truth[t])
        calls[i], calls[i + 1] = calls[i + 1], calls[i]
        yield "calls_reordered", [*whole[:t], [calls], *whole[t + 1 :]]
    long_turns = [t for t, turn in enumerate(truth) if len(turn) >= 2]
    if long_turns:
        t = rng.choice(long_turns)
        yield "turn_cut_short", [*whole[:t], [truth[t][: len(truth[t]) // 2]], *whole[t + 1 :]]
    if len(truth) > 1:
        yield "last_turn_missing", whole[:-1]
    # A turn BFCL leaves without ground truth (a function held out, a parameter missing) answered with the next turn's
    # calls, made again in their own turn: a held-out function called before its turn.
    early = [t for t in range(len(truth) - 1) if not truth[t] and truth[t + 1]]
    if early:
        t = rng.choice(early)
        yield "calls_a_turn_early", [*whole[:t], whole[t + 1], *whole[t + 1 :]]
    classes = row.row["env"]["involved_classes"]
    edits = {
        "integer_as_float": lambda text: _retyped(text, "integer_as_float"),
        "number_as_string": lambda text: _retyped(text, "number_as_string"),
        "keywords_as_positional": lambda text: _positional(text, classes),
    }
    for label, edit in edits.items():
        options = [(t, i, new) for t, turn in enumerate(truth) for i, text in enumerate(turn) if (new := edit(text))]
        if options:
            t, i, new = rng.choice(options)
            yield label, [*whole[:t], [[*truth[t][:i], new, *truth[t][i + 1 :]]], *whole[t + 1 :]]


# Trajectories past the default `Budget` of grpo_tools.rewards.budget, each a state-changing call added to the ground
# truth's first turn with calls: a file name longer than `argument_chars`, as many new files as `calls_per_step` allows
# and one more, a file named by a number of more than `integer_digits` digits. BFCL's checker runs them and fails the row on the
# changed state; the verdict refuses them and fails the row on the budget.
PAST_LIMITS: dict[str, tuple[str, list[str]]] = {
    "argument_chars": ("GorillaFileSystem", ["touch(file_name='" + "x" * 100_001 + "')"]),
    "calls_per_step": ("GorillaFileSystem", [f"touch(file_name='new_{i}.txt')" for i in range(129)]),
    "integer_digits": ("GorillaFileSystem", ["touch(file_name='" + "1" * 101 + "')"]),  # a number written as text
}


def past_limit_trajectories(row: Row) -> Iterator[tuple[str, list[list[list[str]]]]]:
    """The row's ground truth with each of `PAST_LIMITS` whose API class the row involves, added to the first turn
    that has calls (as one step after the ground truth's), named by the limit it breaks."""
    truth = row.ground_truth
    busy = [t for t, turn in enumerate(truth) if turn]
    if not busy:
        return
    whole = [[list(turn)] if turn else [] for turn in truth]
    for kind, (class_name, calls) in PAST_LIMITS.items():
        if class_name in row.row["env"]["involved_classes"]:
            t = busy[0]
            yield kind, [*whole[:t], [*whole[t], calls], *whole[t + 1 :]]


def bfcl_checker_verdict(row: Row, trajectory: list[list[list[str]]]) -> tuple[bool, str | None]:
    """BFCL's own verdict and error type on a decoded result: the runner's checks, then `multi_turn_checker`.

    Each call gets a model name of its own, so that no instance of an earlier check is reused (BFCL keys them by model
    name and row id), and the instances it made are removed from the module's globals afterwards."""
    checker = bfcl_module("bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker")
    utils = bfcl_module("bfcl_eval.eval_checker.multi_turn_eval.multi_turn_utils")
    # `_evaluate_single_multi_turn_entry`: a result with another number of turns fails; an empty step is dropped.
    if len(trajectory) != len(row.ground_truth):
        return False, "multi_turn:force_terminated"
    decoded = [[step for step in turn if not utils.is_empty_execute_response(step)] for turn in trajectory]
    model_name = f"grpotools_parity_{next(_checks)}"
    entry = json.loads(json.dumps(row.entry))
    try:
        verdict = checker.multi_turn_checker(
            decoded, row.ground_truth, entry, entry["id"].rsplit("_", 1)[0], model_name
        )
    finally:
        prefix = re.sub(r"[-./:]", "_", model_name) + "_"
        for name in [name for name in vars(utils) if name.startswith(prefix)]:
            del vars(utils)[name]
    return verdict["valid"], verdict.get("error_type")
