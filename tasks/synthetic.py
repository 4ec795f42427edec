"""Deterministic synthetic tool-calling data: the bundled train and eval splits the tiny offline model learns from.

Five tools with typed and enum arguments and entity pools (`catalog`), a few phrasings each. Every row is canonical (see
``data/README.md``). The eval split is held out by *combination*: each call ``(tool, arguments)`` is assigned to one
split by a stable hash, so no eval call occurs in train, while every entity on its own (a city, a currency, a unit) is
still seen in training. Regenerate the bundled files with ``python -m tasks.synthetic --out data``.
"""

from __future__ import annotations

import argparse
import json
import random
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tasks.catalog import (
    AMOUNTS,
    CITIES,
    CURRENCIES,
    DATES,
    LABELS,
    MINUTES,
    PERIODS,
    SYMBOLS,
    TOOLS,
    UNITS,
    UNRELATED_REQUESTS,
)


__all__ = [
    "BUNDLED_FILES",
    "CATEGORIES",
    "TOOLS",
    "UNRELATED_REQUESTS",
    "call_split",
    "generate_rows",
    "main",
    "minutes_text",
    "number_text",
    "parallel_request",
    "single_call",
    "single_request",
    "write_bundled_data",
    "write_splits",
]

SPLITS = ("train", "eval")
CATEGORIES = ("simple", "multiple", "parallel", "irrelevance")
# Share of each category in a split; the remainder of the rounding goes to the first categories.
CATEGORY_WEIGHTS = {"simple": 0.3, "multiple": 0.3, "parallel": 0.2, "irrelevance": 0.2}
# Percentage of all (tool, arguments) combinations reserved for the eval split.
EVAL_PERCENT = 15
BUNDLED_FILES = {"train": "tool_calls_train.jsonl", "eval": "tool_calls_eval.jsonl"}
BUNDLED_ROWS = {"train": 2000, "eval": 200}
BUNDLED_SEED = 0
# What the assistant says on an irrelevance row, so a warm start can teach "answer in words, call nothing".


def call_split(name: str, arguments: dict[str, Any]) -> str:
    """The split (`"train"` or `"eval"`) that owns the call `name(**arguments)`.

    A stable hash (crc32, not Python's salted `hash`) of the canonical JSON decides, so the partition is the same on
    every machine and does not depend on the order rows are drawn in.
    """
    key = json.dumps([name, arguments], sort_keys=True).encode()
    return "eval" if zlib.crc32(key) % 100 < EVAL_PERCENT else "train"


def number_text(value: float) -> str:
    """A number as it appears in a prompt: the same text as its JSON, so the model can copy it verbatim."""
    return json.dumps(value)


def minutes_text(value: int) -> str:
    """A number of minutes as a request writes it ("1 minute", "25 minutes")."""
    return "1 minute" if value == 1 else f"{value} minutes"


# Each tool has: sample(rng) -> arguments; phrase(rng, arguments) -> request; parallel(rng) -> (request, calls).
Arguments = dict[str, Any]


def _weather_sample(rng: random.Random) -> Arguments:
    arguments: Arguments = {"city": rng.choice(CITIES)}
    if rng.random() < 0.6:
        arguments["unit"] = rng.choice(UNITS)
    return arguments


def _weather_phrase(rng: random.Random, a: Arguments) -> str:
    if "unit" in a:
        return rng.choice(
            (
                f"What's the weather in {a['city']} in {a['unit']}?",
                f"Is it warm in {a['city']} today? Use {a['unit']}.",
                f"Tell me the temperature in {a['city']}, in {a['unit']} please.",
                f"How hot is it in {a['city']}? Answer in {a['unit']}.",
            )
        )
    return rng.choice(
        (
            f"What's the weather like in {a['city']}?",
            f"Weather for {a['city']}, please.",
            f"Do I need an umbrella in {a['city']} today?",
            f"How is the weather in {a['city']} right now?",
        )
    )


def _weather_parallel(rng: random.Random) -> tuple[str, list[Arguments]]:
    first, second = rng.sample(CITIES, 2)
    if rng.random() < 0.5:
        unit = rng.choice(UNITS)
        text = rng.choice(
            (
                f"What's the weather in {first} and in {second}, in {unit}?",
                f"Compare the temperature in {first} and {second} in {unit}.",
            )
        )
        return text, [{"city": first, "unit": unit}, {"city": second, "unit": unit}]
    text = rng.choice(
        (f"What's the weather like in {first} and in {second}?", f"Weather for {first} and {second}, please.")
    )
    return text, [{"city": first}, {"city": second}]


def _currency_sample(rng: random.Random) -> Arguments:
    source, target = rng.sample(CURRENCIES, 2)
    return {"amount": rng.choice(AMOUNTS), "from_currency": source, "to_currency": target}


def _currency_phrase(rng: random.Random, a: Arguments) -> str:
    amount, source, target = number_text(a["amount"]), a["from_currency"], a["to_currency"]
    return rng.choice(
        (
            f"Convert {amount} {source} to {target}.",
            f"How much is {amount} {source} in {target}?",
            f"I have {amount} {source}. What is that in {target}?",
            f"Change {amount} {source} into {target}, please.",
        )
    )


def _currency_parallel(rng: random.Random) -> tuple[str, list[Arguments]]:
    if rng.random() < 0.5:
        source, first, second = rng.sample(CURRENCIES, 3)
        amount = rng.choice(AMOUNTS)
        text = f"Convert {number_text(amount)} {source} to {first} and to {second}."
        calls = [{"amount": amount, "from_currency": source, "to_currency": target} for target in (first, second)]
        return text, calls
    one, two = _currency_sample(rng), _currency_sample(rng)
    (a1, f1, t1), (a2, f2, t2) = ((number_text(c["amount"]), c["from_currency"], c["to_currency"]) for c in (one, two))
    text = rng.choice(
        (f"Convert {a1} {f1} to {t1} and {a2} {f2} to {t2}.", f"How much is {a1} {f1} in {t1}, and {a2} {f2} in {t2}?")
    )
    return text, [one, two]


def _timer_sample(rng: random.Random) -> Arguments:
    arguments: Arguments = {"minutes": rng.choice(MINUTES)}
    if rng.random() < 0.6:
        arguments["label"] = rng.choice(LABELS)
    return arguments


def _timer_phrase(rng: random.Random, a: Arguments) -> str:
    minutes = a["minutes"]
    if "label" in a:
        return rng.choice(
            (
                f"Set a timer for {minutes_text(minutes)} for {a['label']}.",
                f"Start a {minutes} minute {a['label']} timer.",
                f"Remind me about the {a['label']} in {minutes_text(minutes)}.",
                f"Timer for {a['label']}: {minutes_text(minutes)}.",
            )
        )
    return rng.choice(
        (
            f"Set a timer for {minutes_text(minutes)}.",
            f"Start a {minutes} minute timer.",
            f"Count down {minutes_text(minutes)} for me.",
        )
    )


def _timer_parallel(rng: random.Random) -> tuple[str, list[Arguments]]:
    (m1, m2), (l1, l2) = rng.sample(MINUTES, 2), rng.sample(LABELS, 2)
    text = rng.choice(
        (
            f"Set two timers: {minutes_text(m1)} for {l1} and {minutes_text(m2)} for {l2}.",
            f"Start a {m1} minute {l1} timer and a {m2} minute {l2} timer.",
        )
    )
    return text, [{"minutes": m1, "label": l1}, {"minutes": m2, "label": l2}]


def _flights_sample(rng: random.Random) -> Arguments:
    origin, destination = rng.sample(CITIES, 2)
    return {"origin": origin, "destination": destination, "date": rng.choice(DATES)}


def _flights_phrase(rng: random.Random, a: Arguments) -> str:
    origin, destination, date = a["origin"], a["destination"], a["date"]
    return rng.choice(
        (
            f"Find flights from {origin} to {destination} on {date}.",
            f"I need to fly to {destination} from {origin} on {date}.",
            f"Are there flights on {date} from {origin} to {destination}?",
            f"Search {origin} to {destination} flights for {date}.",
        )
    )


def _flights_parallel(rng: random.Random) -> tuple[str, list[Arguments]]:
    if rng.random() < 0.5:
        (origin, destination), (out, back) = rng.sample(CITIES, 2), sorted(rng.sample(DATES, 2))
        text = f"Find flights from {origin} to {destination} on {out} and back on {back}."
        return text, [
            {"origin": origin, "destination": destination, "date": out},
            {"origin": destination, "destination": origin, "date": back},
        ]
    one, two = _flights_sample(rng), _flights_sample(rng)
    text = (
        f"Search flights from {one['origin']} to {one['destination']} on {one['date']} "
        f"and from {two['origin']} to {two['destination']} on {two['date']}."
    )
    return text, [one, two]


def _stock_sample(rng: random.Random) -> Arguments:
    return {"symbol": rng.choice(SYMBOLS), "period": rng.choice(list(PERIODS))}


def _stock_phrase(rng: random.Random, a: Arguments) -> str:
    symbol, when = a["symbol"], rng.choice(PERIODS[a["period"]])
    return rng.choice(
        (
            f"What is the price of {symbol} {when}?",
            f"How did {symbol} stock do {when}?",
            f"Show me {symbol} {when}.",
            f"Get the {symbol} share price {when}.",
        )
    )


def _stock_parallel(rng: random.Random) -> tuple[str, list[Arguments]]:
    (first, second), period = rng.sample(SYMBOLS, 2), rng.choice(list(PERIODS))
    when = rng.choice(PERIODS[period])
    text = rng.choice(
        (f"What are the prices of {first} and {second} {when}?", f"Compare {first} and {second} {when}.")
    )
    return text, [{"symbol": first, "period": period}, {"symbol": second, "period": period}]


@dataclass(frozen=True)
class _Template:
    """How to draw calls to one tool and how a user asks for them."""

    sample: Callable[[random.Random], Arguments]
    phrase: Callable[[random.Random, Arguments], str]
    parallel: Callable[[random.Random], tuple[str, list[Arguments]]]


_TEMPLATES = {
    "get_weather": _Template(_weather_sample, _weather_phrase, _weather_parallel),
    "convert_currency": _Template(_currency_sample, _currency_phrase, _currency_parallel),
    "set_timer": _Template(_timer_sample, _timer_phrase, _timer_parallel),
    "search_flights": _Template(_flights_sample, _flights_phrase, _flights_parallel),
    "get_stock_price": _Template(_stock_sample, _stock_phrase, _stock_parallel),
}


def single_call(rng: random.Random, name: str, split: str) -> Arguments:
    """The arguments of one call to `name` whose combination belongs to `split` (rejection sampling)."""
    while True:
        arguments = _TEMPLATES[name].sample(rng)
        if call_split(name, arguments) == split:
            return arguments


def single_request(rng: random.Random, name: str, split: str) -> tuple[str, list[Arguments]]:
    """A request for one call to `name` whose combination belongs to `split`, in one of this module's phrasings."""
    arguments = single_call(rng, name, split)
    return _TEMPLATES[name].phrase(rng, arguments), [arguments]


def parallel_request(rng: random.Random, name: str, split: str) -> tuple[str, list[Arguments]]:
    """A request for two distinct calls to `name`, both owned by `split`."""
    template = _TEMPLATES[name]
    while True:
        text, calls = template.parallel(rng)
        if calls[0] != calls[1] and all(call_split(name, arguments) == split for arguments in calls):
            return text, calls


def _category_plan(rng: random.Random, num_rows: int) -> list[str]:
    """Exact category counts from `CATEGORY_WEIGHTS`, in a shuffled order."""
    counts = {category: int(num_rows * weight) for category, weight in CATEGORY_WEIGHTS.items()}
    for category in CATEGORIES[: num_rows - sum(counts.values())]:
        counts[category] += 1
    plan = [category for category in CATEGORIES for _ in range(counts[category])]
    rng.shuffle(plan)
    return plan


def _row(rng: random.Random, split: str, category: str) -> dict[str, Any]:
    names = list(TOOLS)
    target = rng.choice(names)
    others = [name for name in names if name != target]
    if category == "simple":
        offered = [target]
        text, calls = single_request(rng, target, split)
    elif category == "multiple":
        offered = [target, *rng.sample(others, rng.randint(1, 2))]
        rng.shuffle(offered)
        text, calls = single_request(rng, target, split)
    elif category == "parallel":
        offered = [target]
        text, calls = parallel_request(rng, target, split)
    else:
        # Half the irrelevant requests ask for a tool that is not on offer, so the model must read the tool list.
        offered = rng.sample(others, rng.randint(1, 3))
        text = single_request(rng, target, split)[0] if rng.random() < 0.5 else rng.choice(UNRELATED_REQUESTS)
        calls = []
    return {
        "messages": [{"role": "user", "content": text}],
        "tools": [TOOLS[name] for name in offered],
        "answers": [{"name": target, "arguments": arguments} for arguments in calls],
        "category": category,
    }


def generate_rows(split: str, num_rows: int, seed: int) -> list[dict[str, Any]]:
    """Generate `num_rows` canonical rows of `split` ("train" or "eval"), the same rows for the same arguments.

    Every call in a row belongs to `split` under `call_split`, so train and eval never share a (tool, arguments)
    combination. Category shares follow `CATEGORY_WEIGHTS`.

    >>> rows = generate_rows("eval", 4, seed=0)
    >>> sorted(rows[0])
    ['answers', 'category', 'id', 'messages', 'tools']
    """
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    if num_rows < 0:
        raise ValueError(f"num_rows must be >= 0, got {num_rows}")
    # A string seed is hashed with SHA-512 by `random`, so it is stable across runs and machines.
    rng = random.Random(f"grpo-tools-synthetic:{split}:{seed}")
    return [
        {"id": f"{split}-{index:05d}", **_row(rng, split, category)}
        for index, category in enumerate(_category_plan(rng, num_rows))
    ]


def write_splits(
    out_dir: str | Path, files: dict[str, str], rows_of: Callable[[str], list[dict[str, Any]]]
) -> dict[str, Path]:
    """Write each split's rows (`rows_of(split)`) as JSONL into `out_dir / files[split]`; return the path of each."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {}
    for split, filename in files.items():
        path = out_dir / filename
        # Explicit "\n" and utf-8 so the bytes are identical on every platform (a test compares them).
        with path.open("w", encoding="utf-8", newline="\n") as handle:
            handle.writelines(json.dumps(row, ensure_ascii=False) + "\n" for row in rows_of(split))
        paths[split] = path
    return paths


def write_bundled_data(out_dir: str | Path) -> dict[str, Path]:
    """Write the bundled train and eval splits as JSONL into `out_dir`; return the path of each split."""
    return write_splits(out_dir, BUNDLED_FILES, lambda split: generate_rows(split, BUNDLED_ROWS[split], BUNDLED_SEED))


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: `python -m tasks.synthetic --out data` regenerates the bundled files."""
    parser = argparse.ArgumentParser(prog="python -m tasks.synthetic", description=main.__doc__)
    parser.add_argument("--out", default="data", help="Directory to write the JSONL files into (default: data).")
    args = parser.parse_args(argv)
    for split, path in write_bundled_data(args.out).items():
        print(f"{split}: {BUNDLED_ROWS[split]} rows -> {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
