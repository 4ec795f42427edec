"""The BFCL task: training rows from BFCL's live categories, held-out rows from its non-live ones.

`python -m tasks.bfcl --tokenizer outputs/smollm2-135m --out outputs/bfcl-task` reads the question and
possible-answer files that the installed bfcl-eval wheel ships (Apache-2.0) and writes, deterministically:

- `warmup.jsonl`, `train.jsonl`, `dev.jsonl`: disjoint splits of live_simple, live_multiple and live_irrelevance
  (user-contributed queries against real APIs), for the supervised warm start, GRPO and choosing settings;
- `eval.jsonl`: an evenly spaced sample of the held-out non-live categories simple_python, multiple and irrelevance
  (the same number of rows from each), and `eval_full.jsonl`: all their rows;
- `dev_swapped.jsonl`: 40 no-call rows made from dev's call rows, each question offered another dev API's tools
  (`tasks.swapped`; `--warmup-swapped-rows` and `--train-swapped-rows` add such rows to those splits);
- `manifest.json`: what each split holds by category and what was dropped, and why;
- with `--long-train-tokens N`, also `train_long.jsonl`: a GRPO split for a GPU, every live row kept under that longer
  prompt limit whose API is in neither dev nor the warm start (`long_train_split`).

A live row is dropped when it shares a function name or a question with any non-live AST row (so nothing held out is
seen in training), when its rendered prompt is longer than `--max-prompt-tokens`, or when its gold turn is longer
than `--max-completion-tokens` (a model limited to that many new tokens could never write it).
Gold turns give only what BFCL requires: a parameter whose acceptable values include "" (may be left out) is left
out, so the warm start does not teach the model to invent values the user never gave (data/README.md).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from grpo_tools.data.converters import bfcl_category, bfcl_files, convert_rows, load_ground_truth, read_source
from grpo_tools.data.rows import DataError, check_rows, write_jsonl


__all__ = [
    "DEFAULT_SIZES",
    "HELD_OUT",
    "NON_LIVE",
    "TRAIN_SOURCES",
    "add_swapped",
    "api_group",
    "breaks_schema",
    "build_task",
    "load_category",
    "long_train_split",
    "main",
    "minimal_answers",
    "spread",
]

# Where training rows come from, and what is held out (the rows `make train` reports on).
TRAIN_SOURCES = ("live_simple", "live_multiple", "live_irrelevance")
HELD_OUT = ("simple_python", "multiple", "irrelevance")
# Every non-live AST category: a live row that shares a function name or a question with any of them is dropped.
NON_LIVE = (
    "simple_python", "simple_java", "simple_javascript", "multiple", "parallel", "parallel_multiple", "irrelevance",
)  # fmt: skip
# Rows drawn from each live category into each split, in this order. dev comes first, so that a bigger warm start or
# GRPO split never changes the rows settings are chosen on; the warm start takes what is left (10_000: all of it).
# The no-call rows (live_irrelevance) are the ones that moved usable on dev: 250 of the warm start's 469 rows and 80
# of the GRPO split's 290 (experiments/record.md, "more no-call rows to teach the decision to call").
DEFAULT_SIZES = {
    "dev": {"live_simple": 40, "live_multiple": 40, "live_irrelevance": 40},
    "train": {"live_simple": 60, "live_multiple": 150, "live_irrelevance": 80},
    "warmup": {"live_simple": 10_000, "live_multiple": 120, "live_irrelevance": 250},
}

# Swapped no-call rows (tasks.swapped) added to each split, and written alone to `dev_swapped.jsonl` for dev.
DEFAULT_SWAPPED = {"warmup": 0, "train": 0, "dev": 40}

# live_irrelevance rows in train_long.jsonl (427 are left at 1,024 tokens): the CPU GRPO split's old share, 30 of 240;
# no GPU run has measured a larger one.
LONG_IRRELEVANCE_ROWS = 120


def load_category(category: str) -> list[dict[str, Any]]:
    """One BFCL category of the installed bfcl-eval as canonical rows; `DataError` if any row fails to convert."""
    questions, answers = bfcl_files(category)
    ground_truth = load_ground_truth(answers) if answers else None
    result = convert_rows("bfcl", read_source(questions), ground_truth=ground_truth, category=bfcl_category(questions))
    if result.failures:
        failure = result.failures[0]
        raise DataError(f"{questions}: row {failure.row}: {failure.reason} ({len(result.failures)} rows failed)")
    return result.rows


def minimal_answers(row: dict[str, Any]) -> list[dict[str, Any]]:
    """The row's gold calls with every parameter that BFCL lets be left out (`""` among its acceptable values)
    left out: the shortest right answer."""
    calls = []
    for call, possible in zip(row["answers"], row.get("possible_answers") or [{}] * len(row["answers"]), strict=True):
        acceptable = possible.get(call["name"], {})
        arguments = {
            name: value
            for name, value in call["arguments"].items()
            if not any(isinstance(option, str) and option == "" for option in acceptable.get(name, []))
        }
        calls.append({"name": call["name"], "arguments": arguments})
    return calls


def breaks_schema(row: dict[str, Any]) -> bool:
    """Whether a row that check-data accepts has gold calls its tools' JSON Schema refuses, or possible answers naming
    a parameter the tool does not declare. check-data takes such a row where BFCL's rules accept its gold (a `None`
    BFCL lists, a variable's name for an array); the task keeps it out: a gold turn teaches by imitation, and this is
    the rule its splits were drawn under, so the rows they hold do not move."""
    from grpo_tools.rewards.schemas import normalize_tools, validate_arguments

    tools = normalize_tools(row["tools"])
    if any(validate_arguments(tools[call["name"]], call["arguments"]) for call in row["answers"]):
        return True
    entries = row.get("possible_answers") or []
    return any(
        set(parameters) - set(tools[name].properties) for entry in entries for name, parameters in entry.items()
    )


def _fold(messages: list[dict[str, Any]]) -> str:
    """The user turns of a conversation, case and spacing folded, to compare questions across categories."""
    text = " ".join(str(message.get("content", "")) for message in messages if message.get("role") == "user")
    return " ".join(text.casefold().split())


def _names(row: dict[str, Any]) -> set[str]:
    return {tool["function"]["name"] for tool in row["tools"]}


def _non_live_names_and_questions() -> tuple[set[str], set[str]]:
    """Every function name and folded question of the non-live AST categories, read from BFCL's question files as they
    stand (a row our converter would refuse still counts)."""
    names, questions = set(), set()
    for category in NON_LIVE:
        path, _ = bfcl_files(category)
        for number, row in read_source(path):
            if isinstance(row, DataError):
                raise DataError(f"{path}: row {number}: {row}")
            names |= {function["name"] for function in row.get("function", []) if isinstance(function, dict)}
            for turn in row.get("question", []):
                questions.add(_fold(turn if isinstance(turn, list) else [{"role": "user", "content": turn}]))
    return names, questions


def spread(rows: list[dict[str, Any]], count: int) -> list[dict[str, Any]]:
    """`count` rows evenly spaced over `rows` (all of them when there are fewer)."""
    if count >= len(rows):
        return list(rows)
    return [rows[index * len(rows) // count] for index in range(count)]


def api_group(row_id: str) -> str:
    """The API a live row belongs to: BFCL numbers live rows `<category>_<index>-<function set>-<question>`, and rows
    with the same function set ask the same API (`live_simple_193-116-1` -> `live_simple-116`)."""
    category, _, number = row_id.rpartition("_")
    parts = number.split("-")
    return f"{category}-{parts[1]}" if len(parts) == 3 else row_id


def _draw(rows: list[dict[str, Any]], wanted: dict[str, int], seed: str) -> dict[str, list[dict[str, Any]]]:
    """`wanted[split]` rows for each split in turn, whole API groups at a time (in a seeded order), so that no API
    is in two splits: dev then measures what GRPO does on APIs it never saw, as the held-out rows do. A split takes
    groups until it has its rows, the last one cut short."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault(api_group(str(row["id"])), []).append(row)
    order = sorted(groups)
    random.Random(seed).shuffle(order)
    drawn: dict[str, list[dict[str, Any]]] = {split: [] for split in wanted}
    splits = iter(wanted)
    split = next(splits, None)
    for name in order:
        while split is not None and len(drawn[split]) >= wanted[split]:
            split = next(splits, None)
        if split is None:
            break
        drawn[split] += groups[name][: wanted[split] - len(drawn[split])]
    return drawn


def build_task(
    tokenizer: Any,
    sizes: dict[str, dict[str, int]],
    max_prompt_tokens: int,
    max_completion_tokens: int,
    eval_rows: int,
    seed: int = 0,
) -> tuple[dict[str, list[dict[str, Any]]], dict[str, Any]]:
    """The task's splits (`sizes[split][category]` rows drawn from each live category, in the order of `sizes`, after
    a seeded shuffle of BFCL's API groups, `_draw`; a split asking for more rows than are left gets what is left)
    and its manifest."""
    from grpo_tools.data.prompts import gold_completion, render_prompt

    held_out = {category: load_category(category) for category in HELD_OUT}
    names, questions = _non_live_names_and_questions()
    splits: dict[str, list[dict[str, Any]]] = {split: [] for split in sizes}
    dropped: dict[str, Counter] = {}
    kept_counts = {}
    for category in TRAIN_SOURCES:
        kept, reasons = [], Counter()
        for row in load_category(category):
            row = {**row, "answers": minimal_answers(row)}
            if _names(row) & names:
                reasons["shares a function name with a non-live row"] += 1
            elif _fold(row["messages"]) in questions:
                reasons["shares its question with a non-live row"] += 1
            elif len(tokenizer(render_prompt(tokenizer, row)).input_ids) > max_prompt_tokens:
                reasons[f"prompt over {max_prompt_tokens} tokens"] += 1
            elif len(tokenizer(gold_completion(tokenizer, row)).input_ids) > max_completion_tokens:
                reasons[f"gold turn over {max_completion_tokens} tokens"] += 1
            elif check_rows([row]):
                reasons["rejected by check-data"] += 1
            elif breaks_schema(row):
                reasons["gold breaks its tool's schema"] += 1
            else:
                kept.append(row)
        kept_counts[category] = len(kept)
        drawn = _draw(kept, {split: wanted.get(category, 0) for split, wanted in sizes.items()}, f"{seed}-{category}")
        for split, rows in drawn.items():
            splits[split] += rows
        reasons["not drawn into any split"] = len(kept) - sum(map(len, drawn.values()))
        dropped[category] = reasons
    # A held-out row that check-data rejects, or whose gold breaks its schema (simple_python_307 gives `True` for a
    # string parameter; BFCL scores it), is left out of both files, after the sample is spread, and named in the
    # manifest: the held-out rows stay those every earlier result was measured on.
    rejected = {
        category: [row["id"] for row in held_out[category] if check_rows([row]) or breaks_schema(row)]
        for category in HELD_OUT
    }
    splits["eval"] = [
        row
        for category in HELD_OUT
        for row in spread(held_out[category], eval_rows)
        if row["id"] not in rejected[category]
    ]
    splits["eval_full"] = [
        row for category in HELD_OUT for row in held_out[category] if row["id"] not in rejected[category]
    ]
    manifest = {
        "source": "bfcl-eval (Apache-2.0), BFCL v4 question and possible-answer files",
        "max_prompt_tokens": max_prompt_tokens,
        "max_completion_tokens": max_completion_tokens,
        "seed": seed,
        "kept": kept_counts,
        "dropped": {category: dict(reasons) for category, reasons in dropped.items()},
        "held_out_left_out": {category: ids for category, ids in rejected.items() if ids},
        "splits": {
            split: dict(Counter(str(row["id"]).rsplit("_", 1)[0] for row in rows)) for split, rows in splits.items()
        },
    }
    return splits, manifest


def long_train_split(
    tokenizer: Any,
    splits: dict[str, list[dict[str, Any]]],
    max_prompt_tokens: int,
    max_completion_tokens: int,
    seed: int = 0,
    irrelevance_rows: int = LONG_IRRELEVANCE_ROWS,
) -> list[dict[str, Any]]:
    """A longer GRPO split, for a GPU: every live row the task keeps under `max_prompt_tokens` (the same drops as
    `build_task`, the longer prompt limit aside) whose API group is in neither `splits["dev"]` nor `splits["warmup"]`,
    so dev still measures APIs that training never saw. The rows that need a call come first, in `build_task`'s
    seeded order; live_irrelevance is spread to `irrelevance_rows` after them. It holds the GRPO split's rows that
    need a call whenever `max_prompt_tokens` is at least the task's own limit."""
    pool = dict.fromkeys(TRAIN_SOURCES, 10_000)
    drawn, _ = build_task(tokenizer, {"pool": pool}, max_prompt_tokens, max_completion_tokens, eval_rows=0, seed=seed)
    seen = {api_group(str(row["id"])) for split in ("dev", "warmup") for row in splits[split]}
    rows = [row for row in drawn["pool"] if api_group(str(row["id"])) not in seen]
    irrelevance = [row for row in rows if str(row["id"]).startswith("live_irrelevance")]
    return [row for row in rows if not str(row["id"]).startswith("live_irrelevance")] + spread(
        irrelevance, irrelevance_rows
    )


def add_swapped(
    splits: dict[str, list[dict[str, Any]]],
    manifest: dict[str, Any],
    counts: dict[str, int],
    tokenizer: Any,
    max_prompt_tokens: int,
    seed: int = 0,
) -> None:
    """Add `counts[split]` swapped no-call rows (`tasks.swapped`) made from each split's call rows to that split, or
    for dev into a split of their own, `dev_swapped`, so dev.jsonl stays the rows settings were chosen on; the
    manifest names the question's and the tools' row of each."""
    from grpo_tools.data.prompts import render_prompt
    from tasks.swapped import swapped_rows

    def fits(row: dict[str, Any]) -> bool:
        return len(tokenizer(render_prompt(tokenizer, row)).input_ids) <= max_prompt_tokens

    manifest["swapped"] = {}
    for split, count in counts.items():
        if not count:
            continue
        rows, pairs = swapped_rows(splits.get(split, []), count, seed, api_group, fits)
        target = "dev_swapped" if split == "dev" else split
        splits[target] = splits.get(target, []) + rows
        manifest["swapped"][target] = pairs
        manifest["splits"][target] = dict(Counter(str(row["id"]).rsplit("_", 1)[0] for row in splits[target]))


def main(argv: list[str] | None = None) -> int:
    """`python -m tasks.bfcl --tokenizer MODEL --out FOLDER`; exit 2 with one message on bad input."""
    parser = argparse.ArgumentParser(
        prog="python -m tasks.bfcl",
        description="Build the BFCL task from the installed bfcl-eval: warm-start, GRPO and dev splits from the live "
        "categories, held-out rows from the non-live ones.",
    )
    parser.add_argument("--tokenizer", required=True, help="model folder whose chat template renders the prompts")
    parser.add_argument("--out", required=True, help="folder to write the splits and manifest.json into")
    parser.add_argument(
        "--max-prompt-tokens", type=int, default=192, help="longest rendered prompt kept (%(default)s)"
    )
    parser.add_argument(
        "--max-completion-tokens", type=int, default=96, help="longest gold turn kept (%(default)s tokens)"
    )
    parser.add_argument("--eval-rows", type=int, default=80, help="rows of each held-out category in eval.jsonl")
    parser.add_argument("--seed", type=int, default=0, help="the shuffle of each live category (%(default)s)")
    for split in ("warmup", "train"):
        parser.add_argument(
            f"--{split}-no-call-rows",
            type=int,
            metavar="N",
            help=f"live_irrelevance rows (no call is right) in {split}.jsonl "
            f"(default {DEFAULT_SIZES[split].get('live_irrelevance', 0)})",
        )
    for split in ("warmup", "train", "dev"):
        parser.add_argument(
            f"--{split}-swapped-rows",
            type=int,
            metavar="N",
            default=DEFAULT_SWAPPED[split],
            help=f"no-call rows made from {split}'s call rows by offering each question another API's tools "
            + ("(written to dev_swapped.jsonl; " if split == "dev" else "(")
            + "default %(default)s)",
        )
    parser.add_argument(
        "--long-train-tokens",
        type=int,
        metavar="N",
        help="also write train_long.jsonl: every kept live row with a prompt of at most N tokens whose API is in "
        f"neither dev nor the warm start, live_irrelevance spread to {LONG_IRRELEVANCE_ROWS} rows (a GPU's GRPO split)",
    )
    args = parser.parse_args(argv)
    if args.long_train_tokens is not None and args.long_train_tokens < 1:
        parser.error(f"--long-train-tokens must be a positive number of tokens, got {args.long_train_tokens}")
    # dev is drawn first, so these never change the rows settings are chosen on.
    sizes = {split: dict(counts) for split, counts in DEFAULT_SIZES.items()}
    for split, count in (("warmup", args.warmup_no_call_rows), ("train", args.train_no_call_rows)):
        if count is not None and count < 0:
            parser.error(f"--{split}-no-call-rows must be a number of rows, 0 or more, got {count}")
        if count is not None:
            sizes[split]["live_irrelevance"] = count
    swapped = {split: getattr(args, f"{split}_swapped_rows") for split in ("warmup", "train", "dev")}
    for split, count in swapped.items():
        if count < 0:
            parser.error(f"--{split}-swapped-rows must be a number of rows, 0 or more, got {count}")
    from grpo_tools.models.loading import load_tokenizer

    try:
        tokenizer = load_tokenizer(args.tokenizer)
        splits, manifest = build_task(
            tokenizer, sizes, args.max_prompt_tokens, args.max_completion_tokens, args.eval_rows, args.seed
        )
        add_swapped(splits, manifest, swapped, tokenizer, args.max_prompt_tokens, args.seed)
        if args.long_train_tokens is not None:
            splits["train_long"] = long_train_split(
                tokenizer, splits, args.long_train_tokens, args.max_completion_tokens, args.seed
            )
            manifest["max_prompt_tokens_train_long"] = args.long_train_tokens
            manifest["splits"]["train_long"] = dict(
                Counter(str(row["id"]).rsplit("_", 1)[0] for row in splits["train_long"])
            )
    except (DataError, OSError) as error:
        print(f"{parser.prog}: {error}", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for split, rows in splits.items():
        write_jsonl(out / f"{split}.jsonl", rows)
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    for split, counts in manifest["splits"].items():
        print(f"{out / split}.jsonl: {sum(counts.values())} rows ({', '.join(f'{k} {v}' for k, v in counts.items())})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
