"""How fast `tool_bfcl` scores BFCL's own rows, against BFCL's own checker on the same outputs, in one run.

Every case of the AST categories of the installed bfcl-eval, with the model outputs of `bfcl_reference.model_outputs`
(the gold answer, every acceptable value, wrong types, string variants, dropped and extra parameters and calls). BFCL's
`ast_checker` checks the decoded calls, as its evaluation does after its decoder; `tool_bfcl` reads each output as
Hermes text through the trl reward function, parsing included, in batches as `GRPOTrainer` passes them: the
completions of one prompt together, each with its own copy of the row's JSON columns, as trl fetches them. Times are
medians of repeated runs, the two sides interleaved so that a busy machine slows both alike.

    .venv/bin/python benchmarks/bench_bfcl.py [--repeats 5] [--batch 64] [--output benchmarks/results/bfcl.json]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path


sys.path.insert(0, str(Path(__file__).resolve().parent))
import bfcl_reference

from grpo_tools.rewards import gold, tool_bfcl_reward


TARGET_RATIO = 2.0  # issue 14: at least twice BFCL's checker, parsing included


def _copy(text: str | None) -> str | None:
    """A new string object with the same text, as each row trl fetches from the dataset is."""
    return None if text is None else "".join([text[:1], text[1:]])


def build(categories: tuple[str, ...]) -> tuple[list, dict[str, list]]:
    """BFCL's inputs (case, decoded calls) and the reward function's columns, output by output, grouped by row."""
    reference, columns = [], {"completions": [], "tools": [], "answers": [], "possible_answers": []}
    for category in categories:
        for case in bfcl_reference.cases(category):
            row = case.row
            tools, answers = json.dumps(row["tools"]), json.dumps(row["answers"])
            possible = json.dumps(row["possible_answers"]) if "possible_answers" in row else None
            for decoded in bfcl_reference.model_outputs(case):
                if decoded is None:  # BFCL's checker never sees an output its decoder rejected
                    continue
                reference.append((case, decoded))
                columns["completions"].append(bfcl_reference.hermes(decoded))
                columns["tools"].append(_copy(tools))
                columns["answers"].append(_copy(answers))
                columns["possible_answers"].append(_copy(possible))
    return reference, columns


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--batch", type=int, default=64, help="completions per reward call, as trl's batch")
    parser.add_argument("--output", default="benchmarks/results/bfcl.json")
    args = parser.parse_args()

    checker = bfcl_reference.load_ast_checker()
    reference, columns = build(bfcl_reference.AST_CATEGORIES)
    size = len(reference)

    def run_bfcl() -> list[bool]:
        return [bfcl_reference.bfcl_verdict(checker, case, decoded) for case, decoded in reference]

    def run_ours() -> list[float]:
        scores: list[float] = []
        for start in range(0, size, args.batch):
            batch = {key: values[start : start + args.batch] for key, values in columns.items()}
            scores += tool_bfcl_reward(**batch)
        return scores

    gc.freeze()  # the benchmark's own inputs are not garbage: no collection on either side walks them
    theirs, ours = run_bfcl(), run_ours()  # warm both, and check they agree on what is timed
    disagreements = sum((score == 1.0) != verdict for score, verdict in zip(ours, theirs, strict=True))
    times: dict[str, list[float]] = {"bfcl": [], "tool_bfcl": []}
    for _ in range(args.repeats):
        for name, run in (("bfcl", run_bfcl), ("tool_bfcl", run_ours)):
            if name == "tool_bfcl":
                # Each repeat prepares every row again from new string objects, as a fresh process reads them.
                gold.GOLD_CACHE.clear()
                for key in ("tools", "answers", "possible_answers"):
                    columns[key] = [_copy(text) for text in columns[key]]
            start = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - start)
    rates = {name: size / statistics.median(values) for name, values in times.items()}
    ratio = rates["tool_bfcl"] / rates["bfcl"]

    print(f"BFCL rows: {size:,} outputs of {len(bfcl_reference.AST_CATEGORIES)} AST categories")
    print(f"{'checker':<42}{'checks/s':>12}")
    print(f"{'BFCL ast_checker (decoded calls)':<42}{rates['bfcl']:>12,.0f}")
    print(f"{'tool_bfcl (Hermes text, trl reward fn)':<42}{rates['tool_bfcl']:>12,.0f}")
    print(f"ratio {ratio:.2f}x (target >= {TARGET_RATIO}x); verdicts that differ: {disagreements}")

    result = {
        "outputs": size,
        "categories": list(bfcl_reference.AST_CATEGORIES),
        "batch": args.batch,
        "repeats": args.repeats,
        "checks_per_second": rates,
        "ratio": ratio,
        "target_ratio": TARGET_RATIO,
        "disagreements": disagreements,
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform()},
    }
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(json.dumps(result, indent=2) + "\n")
    if ratio < TARGET_RATIO or disagreements:
        sys.exit(1)


if __name__ == "__main__":
    main()
