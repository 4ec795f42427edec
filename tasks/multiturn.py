"""The bundled multi-turn task: requests whose answers need the results of the workbench tools.

Six templates, each solved by one to three calls over one or two turns, then a final answer that repeats what the
tools computed (so no answer can be given without reading the results):
- `convert` (one call): "How many miles is 42 kilometers?" -> `convert_units`;
- `calculate` (one call): "What is 17 * 23 + 4?" -> `calculate`;
- `weekday`, `date` (one call): "What day of the week is my dentist appointment?" -> `find_event` over the row's own
  calendar, whose dates are drawn per row;
- `days_between` (three calls, two turns): two `find_event` calls, then `days_between` on the dates they return;
- `convert_sum` (two calls, two turns): `convert_units`, then `calculate` to add the converted value to another.

Rows are canonical multi-turn rows (`data/README.md`): `env` holds the environment's name, the task, the calendar and
how the gold calls split into turns; `expected` the final answer. The eval split is held out by combination, as in
`tasks.synthetic`: a stable hash of each row's task, gold calls and calendar decides its split. Regenerate the
bundled files with `python -m tasks.multiturn --out data`.
"""

from __future__ import annotations

import argparse
import datetime
import random
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from grpo_tools.tools.environments import (
    UNITS,
    WEEKDAYS,
    WorkbenchEnvironment,
    convert_quantity,
    evaluate_expression,
    format_number,
)
from tasks.synthetic import call_split


__all__ = ["BUNDLED_FILES", "BUNDLED_ROWS", "TASKS", "generate_rows", "main", "write_bundled_data"]

SPLITS = ("train", "eval")
BUNDLED_FILES = {"train": "multi_turn_train.jsonl", "eval": "multi_turn_eval.jsonl"}
BUNDLED_ROWS = {"train": 600, "eval": 100}
BUNDLED_SEED = 0
# Share of each task in a split; the remainder of the rounding goes to the first tasks.
TASK_WEIGHTS = {
    "convert": 0.2,
    "calculate": 0.2,
    "weekday": 0.15,
    "date": 0.1,
    "days_between": 0.15,
    "convert_sum": 0.2,
}
TASKS = tuple(TASK_WEIGHTS)

UNIT_NAMES = {
    "km": "kilometers", "mi": "miles", "m": "meters", "ft": "feet", "kg": "kilograms", "lb": "pounds",
    "l": "liters", "gal": "gallons", "celsius": "degrees celsius", "fahrenheit": "degrees fahrenheit",
}  # fmt: skip
DIMENSIONS = {
    "length": ("km", "mi", "m", "ft"),
    "mass": ("kg", "lb"),
    "volume": ("l", "gal"),
    "temperature": ("celsius", "fahrenheit"),
}
VALUES = (*range(1, 41), 45, 50, 60, 75, 80, 100, 120, 150, 200, 250, 300, 500, 2.5, 7.5, 12.5)
TEMPERATURES = (-10, -5, 0, 5, 10, 15, 18, 20, 22, 25, 30, 35, 37, 40, 50, 68, 72, 80, 90, 100)
EVENTS = (
    "dentist appointment", "concert", "team meeting", "job interview", "yoga class", "book club", "birthday party",
    "piano lesson", "car service", "school play",
)  # fmt: skip
YEAR = 2025

Call = dict[str, Any]


def _call(tool: str, **arguments: Any) -> Call:
    return {"name": tool, "arguments": arguments}


def _number(value: float) -> float | int:
    """A value as JSON writes it in a prompt and a call: an int when whole, so `42` reads the same in both."""
    return int(value) if float(value).is_integer() else value


def _unit_phrase(rng: random.Random, unit: str) -> str:
    return unit if rng.random() < 0.3 and unit not in ("celsius", "fahrenheit") else UNIT_NAMES[unit]


def _quantity(rng: random.Random, dimensions: Sequence[str]) -> tuple[float | int, str, str]:
    """A value and two units of one dimension whose conversion survives rounding to 2 decimals (6 ft is 0.00 km)."""
    while True:
        dimension = rng.choice(dimensions)
        from_unit, to_unit = rng.sample(DIMENSIONS[dimension], 2)
        value = _number(rng.choice(TEMPERATURES if dimension == "temperature" else VALUES))
        if dimension == "temperature" or abs(convert_quantity(value, from_unit, to_unit)) >= 0.1:
            return value, from_unit, to_unit


def _convert(rng: random.Random, events: list[dict[str, str]]) -> tuple[str, list[list[Call]], Any]:
    value, from_unit, to_unit = _quantity(rng, list(DIMENSIONS))
    source, target = _unit_phrase(rng, from_unit), _unit_phrase(rng, to_unit)
    text = rng.choice(
        (
            f"How many {UNIT_NAMES[to_unit]} is {value} {source}?",
            f"Convert {value} {source} to {target}.",
            f"What is {value} {source} in {target}?",
        )
    )
    result = float(format_number(convert_quantity(value, from_unit, to_unit)))
    return text, [[_call("convert_units", value=value, from_unit=from_unit, to_unit=to_unit)]], _number(result)


def _calculate(rng: random.Random, events: list[dict[str, str]]) -> tuple[str, list[list[Call]], Any]:
    a, b, c = (rng.randint(2, 99) for _ in range(3))
    expression = rng.choice(
        (
            f"{a} * {b} + {c}",
            f"({a} + {b}) * {c}",
            f"{a} * {b} - {c}",
            f"{a} / {b}",
            f"{a} ** 2 + {b}",
            f"{a} - {b} * {c}",
        )
    )
    text = rng.choice((f"What is {expression}?", f"Compute {expression}.", f"Calculate {expression} for me."))
    result = float(format_number(evaluate_expression(expression)))
    return text, [[_call("calculate", expression=expression)]], _number(result)


def _date(event: dict[str, str]) -> datetime.date:
    return datetime.date.fromisoformat(event["date"])


def _weekday(rng: random.Random, events: list[dict[str, str]]) -> tuple[str, list[list[Call]], Any]:
    event = rng.choice(events)
    name = event["name"]
    text = rng.choice((f"What day of the week is my {name}?", f"On which weekday is the {name}?"))
    return text, [[_call("find_event", name=name)]], WEEKDAYS[_date(event).weekday()]


def _day(rng: random.Random, events: list[dict[str, str]]) -> tuple[str, list[list[Call]], Any]:
    event = rng.choice(events)
    name = event["name"]
    text = rng.choice((f"What date is my {name}? Answer as YYYY-MM-DD.", f"When is the {name}, as YYYY-MM-DD?"))
    return text, [[_call("find_event", name=name)]], event["date"]


def _days_between(rng: random.Random, events: list[dict[str, str]]) -> tuple[str, list[list[Call]], Any]:
    first, second = rng.sample(events, 2)
    text = rng.choice(
        (
            f"How many days are there from my {first['name']} to my {second['name']}?",
            f"How many days after the {first['name']} is the {second['name']}?",
        )
    )
    turns = [
        [_call("find_event", name=first["name"]), _call("find_event", name=second["name"])],
        [_call("days_between", start=first["date"], end=second["date"])],
    ]
    return text, turns, (_date(second) - _date(first)).days


def _convert_sum(rng: random.Random, events: list[dict[str, str]]) -> tuple[str, list[list[Call]], Any]:
    first, from_unit, to_unit = _quantity(rng, ("length", "length", "mass", "volume"))
    dimension = UNITS[from_unit][0]
    second = _number(rng.choice(VALUES))
    source, target = UNIT_NAMES[from_unit], UNIT_NAMES[to_unit]
    text = {
        "length": f"I walked {first} {source} and then {second} {target}. How far is that in total, in {target}?",
        "mass": f"I have {first} {source} of apples and {second} {target} of pears. How many {target} is that in all?",
        "volume": f"One tank holds {first} {source} and another {second} {target}. How many {target} is that together?",
    }[dimension]
    converted = format_number(convert_quantity(first, from_unit, to_unit))
    expression = f"{converted} + {second}"
    result = float(format_number(evaluate_expression(expression)))
    turns = [
        [_call("convert_units", value=first, from_unit=from_unit, to_unit=to_unit)],
        [_call("calculate", expression=expression)],
    ]
    return text, turns, _number(result)


_TEMPLATES: dict[str, Callable[[random.Random, list[dict[str, str]]], tuple[str, list[list[Call]], Any]]] = {
    "convert": _convert,
    "calculate": _calculate,
    "weekday": _weekday,
    "date": _day,
    "days_between": _days_between,
    "convert_sum": _convert_sum,
}
_CALENDAR_TASKS = frozenset({"weekday", "date", "days_between"})


def _calendar(rng: random.Random) -> list[dict[str, str]]:
    """Three events on distinct days of the year, in date order."""
    days = sorted(rng.sample(range(365), 3))
    names = rng.sample(EVENTS, 3)
    start = datetime.date(YEAR, 1, 1)
    return [{"name": name, "date": (start + datetime.timedelta(days=day)).isoformat()} for name, day in zip(names, days, strict=True)]  # fmt: skip


def _task_plan(rng: random.Random, num_rows: int) -> list[str]:
    counts = {task: int(num_rows * weight) for task, weight in TASK_WEIGHTS.items()}
    for task in TASKS[: num_rows - sum(counts.values())]:
        counts[task] += 1
    plan = [task for task in TASKS for _ in range(counts[task])]
    rng.shuffle(plan)
    return plan


def _row(rng: random.Random, split: str, task: str) -> dict[str, Any]:
    """One row of `task` owned by `split` (rejection sampling on the hash of its task, calls and calendar)."""
    while True:
        events = _calendar(rng) if task in _CALENDAR_TASKS else []
        text, turns, expected = _TEMPLATES[task](rng, events)
        answers = [call for turn in turns for call in turn]
        if call_split(task, {"answers": answers, "events": events}) == split:
            break
    env: dict[str, Any] = {"name": WorkbenchEnvironment.name, "task": task}
    if events:
        env["events"] = events
    env["turns"] = [len(turn) for turn in turns]
    return {
        "messages": [{"role": "user", "content": text}],
        "tools": WorkbenchEnvironment.tool_schemas(),
        "answers": answers,
        "category": "multi_turn",
        "env": env,
        "expected": expected,
    }


def generate_rows(split: str, num_rows: int, seed: int = BUNDLED_SEED) -> list[dict[str, Any]]:
    """Generate `num_rows` multi-turn rows of `split` ("train" or "eval"), the same rows for the same arguments.

    >>> rows = generate_rows("eval", 2, seed=0)
    >>> sorted(rows[0]), rows[0]["category"]
    (['answers', 'category', 'env', 'expected', 'id', 'messages', 'tools'], 'multi_turn')
    """
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    if num_rows < 0:
        raise ValueError(f"num_rows must be >= 0, got {num_rows}")
    rng = random.Random(f"grpo-tools-multiturn:{split}:{seed}")
    return [
        {"id": f"mt-{split}-{index:05d}", **_row(rng, split, task)}
        for index, task in enumerate(_task_plan(rng, num_rows))
    ]


def write_bundled_data(out_dir: str | Path) -> dict[str, Path]:
    """Write the bundled multi-turn train and eval splits as JSONL into `out_dir`; return the path of each."""
    from tasks.synthetic import write_splits

    return write_splits(out_dir, BUNDLED_FILES, lambda split: generate_rows(split, BUNDLED_ROWS[split], BUNDLED_SEED))


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: `python -m tasks.multiturn --out data` regenerates the bundled multi-turn files."""
    parser = argparse.ArgumentParser(prog="python -m tasks.multiturn", description=main.__doc__)
    parser.add_argument("--out", default="data", help="Directory to write the JSONL files into (default: data).")
    args = parser.parse_args(argv)
    for split, path in write_bundled_data(args.out).items():
        print(f"{split}: {BUNDLED_ROWS[split]} rows -> {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
