"""The bundled task `make train-mapping` runs on SmolLM2: literal calls among several tools, requests no tool fits, and
held-out calls whose arguments need mapping.

The same five tools as `tasks.synthetic`, in three splits with different jobs:
- `warmup` (supervised warm start): literal requests ("Convert 50 EUR to JPY", "a 20 minute timer") for one tool
  or one among several, and a quarter of the rows need no call. It teaches the call format and that not calling is a
  possible answer; it has no currency named in words and no timer given in hours.
- `train` (GRPO): literal requests like the warm start's and, in a third of the rows, none a tool fits (an unrelated
  request, or one for a tool that is not offered). Its mapped rows are drawn and dropped (`DROPS_MAPPED`).
- `eval` (held out): a quarter need no call, with calls whose (tool, arguments) combination occurs in no other split
  (`synthetic.call_split`); a third of its call rows name currencies in words ("50 euros in yen" -> `EUR`, `JPY`) or
  give timers in hours ("an hour and a half" -> `minutes: 90`), and all its requests, literal, mapped and unrelated,
  are worded by templates no other split uses.
Regenerate the bundled files with `python -m tasks.mapping --out data`.
"""

from __future__ import annotations

import argparse
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tasks.catalog import PERIODS
from tasks.synthetic import (
    AMOUNTS,
    CURRENCIES,
    LABELS,
    TOOLS,
    UNRELATED_REQUESTS,
    call_split,
    minutes_text,
    number_text,
    single_call,
    single_request,
    write_splits,
)


__all__ = [
    "EVAL_REQUEST_TEMPLATES",
    "MAPPING_FILES",
    "MAPPING_ROWS",
    "generate_mapping_rows",
    "main",
    "write_mapping_data",
]

SPLITS = ("warmup", "train", "eval")
MAPPING_FILES = {split: f"mapping_{split}.jsonl" for split in SPLITS}
MAPPING_ROWS = {"warmup": 96, "train": 292, "eval": 80}  # rows written
MAPPING_SEED = 0
# Category counts per 16 rows of each split. No parallel calls: two calls take about 95 tokens, over the 64 that
# keep a GRPO step on SmolLM2 under a minute on a 2-core CPU.
PLAN = {
    "warmup": {"simple": 6, "multiple": 6, "irrelevance": 4},
    "train": {"simple": 6, "multiple": 6, "irrelevance": 4},
    "eval": {"simple": 6, "multiple": 6, "irrelevance": 4},
}
MAPPED_SHARE = 0.35  # share of the call rows of `train` and `eval` drawn with words to map
# Splits whose mapped rows are drawn (so that the other rows stay the same draws) and then dropped: the warm-started
# model almost never maps in its samples, so those rows give GRPO no exact-call signal, and without them every GRPO
# prompt comes from a row its samples can get right (docs/findings.md, "What GRPO does not teach").
DROPS_MAPPED = ("train",)
DRAWN_ROWS = {"train": 400}  # rows drawn before the mapped ones are dropped
# How people name each currency; the enum code is what the call must carry.
CURRENCY_NAMES = {
    "USD": ("US dollars", "dollars"),
    "EUR": ("euros", "euro"),
    "GBP": ("British pounds", "pounds sterling"),
    "JPY": ("Japanese yen", "yen"),
    "CHF": ("Swiss francs", "francs"),
    "CAD": ("Canadian dollars",),
    "AUD": ("Australian dollars",),
    "INR": ("Indian rupees", "rupees"),
}
# How people give a duration in hours; the integer is the `minutes` the call must carry.
HOURS = {30: "half an hour", 60: "an hour", 90: "an hour and a half", 120: "two hours", 180: "three hours"}
# Sentence templates of the mapped requests, disjoint between train and eval (the eval phrasings are unseen).
CURRENCY_TEMPLATES = {
    "train": ("Convert {amount} {source} to {target}.", "How many {target} is {amount} {source}?"),
    "eval": ("I'd like to exchange {amount} {source} for {target}.", "What do {amount} {source} come to in {target}?"),
}
TIMER_TEMPLATES = {
    "train": ("Set a timer for {hours}.", "Set a {label} timer for {hours}."),
    "eval": ("Wake me in {hours}.", "Give me {hours} on the clock for the {label}."),
}
# Sentence templates of the held-out literal requests, by tool and by the arguments the call carries. The warm start
# and GRPO word theirs with `tasks.synthetic`'s templates, so no held-out request is worded as one they saw.
EVAL_REQUEST_TEMPLATES = {
    "get_weather": {
        ("city",): ("Check the conditions in {city} for me.", "Is it raining in {city} at the moment?"),
        ("city", "unit"): (
            "Give me the {city} forecast in {unit}.",
            "I'm heading to {city}; how warm is it there in {unit}?",
        ),
    },
    "convert_currency": {
        ("amount", "from_currency", "to_currency"): (
            "What's {amount} {from_currency} worth in {to_currency}?",
            "Turn {amount} {from_currency} into {to_currency} for me.",
        ),
    },
    "set_timer": {
        ("minutes",): ("Alert me after {minutes}.", "Put {minutes} on the clock."),
        ("label", "minutes"): ("I need a {label} timer of {minutes}.", "Please time my {label}: {minutes}."),
    },
    "search_flights": {
        ("date", "destination", "origin"): (
            "Look up flights leaving {origin} for {destination} on {date}.",
            "What flights go from {origin} to {destination} on {date}?",
        ),
    },
    "get_stock_price": {
        ("period", "symbol"): ("Pull up {symbol} shares {period}.", "Where has {symbol} traded {period}?"),
    },
}
EVAL_UNRELATED = (
    "What's a good name for a golden retriever?",
    "Explain how rainbows form.",
    "Order a large pepperoni pizza to my flat.",
    "Call my sister and tell her I'm on my way.",
    "Which planet is closest to the sun?",
    "Write a limerick about a cat.",
    "Vacuum the living room.",
    "What's the square root of 144?",
)


def _currency_row(rng: random.Random, split: str) -> tuple[str, dict[str, Any]]:
    while True:
        source, target = rng.sample(CURRENCIES, 2)
        arguments = {"amount": rng.choice(AMOUNTS), "from_currency": source, "to_currency": target}
        if call_split("convert_currency", arguments) == ("eval" if split == "eval" else "train"):
            break
    text = rng.choice(CURRENCY_TEMPLATES[split]).format(
        amount=arguments["amount"],
        source=rng.choice(CURRENCY_NAMES[source]),
        target=rng.choice(CURRENCY_NAMES[target]),
    )
    return text, arguments


def _timer_row(rng: random.Random, split: str) -> tuple[str, dict[str, Any]]:
    while True:
        minutes, label = rng.choice(list(HOURS)), rng.choice(LABELS)
        template = rng.choice(TIMER_TEMPLATES[split])
        arguments = {"minutes": minutes, "label": label} if "{label}" in template else {"minutes": minutes}
        if call_split("set_timer", arguments) == ("eval" if split == "eval" else "train"):
            return template.format(hours=HOURS[minutes], label=label), arguments


def _literal_request(rng: random.Random, name: str, split: str) -> tuple[str, list[dict[str, Any]]]:
    """A literal request for one call to `name`; the held-out split words it with `EVAL_REQUEST_TEMPLATES`."""
    if split != "eval":
        return single_request(rng, name, "train")
    arguments = single_call(rng, name, "eval")
    template = rng.choice(EVAL_REQUEST_TEMPLATES[name][tuple(sorted(arguments))])
    words = {**arguments}
    if "amount" in words:
        words["amount"] = number_text(words["amount"])
    if "minutes" in words:
        words["minutes"] = minutes_text(words["minutes"])
    if "period" in words:
        words["period"] = rng.choice(PERIODS[words["period"]])
    return template.format(**words), [arguments]


def _row(rng: random.Random, split: str, category: str) -> tuple[dict[str, Any], bool]:
    """A row of `split` in `category`, and whether its request needs words mapped."""
    names = list(TOOLS)
    mapped = split != "warmup" and category in ("simple", "multiple") and rng.random() < MAPPED_SHARE
    target = rng.choice(("convert_currency", "set_timer")) if mapped else rng.choice(names)
    others = [name for name in names if name != target]
    offered = [target]
    if category == "multiple":
        offered += rng.sample(others, rng.randint(1, 2))
        rng.shuffle(offered)
    if category == "irrelevance":
        offered = rng.sample(others, rng.randint(1, 3))
        unrelated = EVAL_UNRELATED if split == "eval" else UNRELATED_REQUESTS
        text = rng.choice(unrelated) if rng.random() < 0.5 else _literal_request(rng, target, split)[0]
        calls: list[dict[str, Any]] = []
    elif mapped:
        text, arguments = (_currency_row if target == "convert_currency" else _timer_row)(rng, split)
        calls = [arguments]
    else:
        text, calls = _literal_request(rng, target, split)
    row = {
        "messages": [{"role": "user", "content": text}],
        "tools": [TOOLS[name] for name in offered],
        "answers": [{"name": target, "arguments": arguments} for arguments in calls],
        "category": category,
    }
    return row, mapped


def generate_mapping_rows(split: str, num_rows: int, seed: int = MAPPING_SEED) -> list[dict[str, Any]]:
    """`num_rows` canonical rows of `split` ("warmup", "train" or "eval") are drawn, the same rows for the same
    arguments; a split in `DROPS_MAPPED` returns those that need no mapping.

    >>> rows = generate_mapping_rows("eval", 16)
    >>> sorted({row["category"] for row in rows})
    ['irrelevance', 'multiple', 'simple']
    """
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    rng = random.Random(f"grpo-tools-mapping:{split}:{seed}")
    plan: list[str] = []
    while len(plan) < num_rows:
        block = [category for category, count in PLAN[split].items() for _ in range(count)]
        rng.shuffle(block)
        plan += block
    drawn = [_row(rng, split, category) for category in plan[:num_rows]]
    kept = [row for row, mapped in drawn if not (mapped and split in DROPS_MAPPED)]
    return [{"id": f"{split}-{index:04d}", **row} for index, row in enumerate(kept)]


def write_mapping_data(out_dir: str | Path) -> dict[str, Path]:
    """Write the three splits as JSONL into `out_dir`; return the path of each."""
    return write_splits(
        out_dir, MAPPING_FILES, lambda split: generate_mapping_rows(split, DRAWN_ROWS.get(split, MAPPING_ROWS[split]))
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: `python -m tasks.mapping --out data` regenerates the bundled files."""
    parser = argparse.ArgumentParser(prog="python -m tasks.mapping", description=main.__doc__)
    parser.add_argument("--out", default="data", help="Directory to write the JSONL files into (default: data).")
    args = parser.parse_args(argv)
    for split, path in write_mapping_data(args.out).items():
        print(f"{split}: {MAPPING_ROWS[split]} rows -> {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
