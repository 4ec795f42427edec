"""How fast `bfcl_verdict` gives BFCL's multi-turn verdict, against bfcl-eval's own `multi_turn_checker` on the same
trajectories: every row of the four multi-turn categories with the ground truth and the perturbations of
`bfcl_multi_turn_reference.trajectories` (the parity test's set).

Both sides run each trajectory from nothing: ours builds two fresh sessions a verdict (model and ground truth);
BFCL's checker gets a model name of its own a verdict and its instances are removed from its module's globals after
it, which is what keeps one check from changing the next (the runner's turn-count check is included). Each side is
warmed once, then timed `--repeats` times, interleaved so that a busy machine slows both alike; the best pass counts.
The figure is a ratio measured in one run, so it does not depend on how fast the machine is; a verdict that differs
from BFCL's exits 1.

    .venv/bin/python -m benchmarks.bench_bfcl_multi_turn [--repeats 3] [--every 1]
        [--output benchmarks/results/bfcl_multi_turn.json]
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time

from benchmarks import bfcl_multi_turn_reference as reference
from benchmarks.common import write_result
from grpo_tools.tools.bfcl_verdict import bfcl_verdict


def _time(function, items) -> tuple[float, list[bool]]:
    start = time.perf_counter()
    verdicts = [function(row, trajectory) for row, trajectory in items]
    return time.perf_counter() - start, verdicts


def _ours(row: reference.Row, trajectory: list) -> bool:
    return bfcl_verdict(row.row["env"], row.ground_truth, trajectory).valid


def _theirs(row: reference.Row, trajectory: list) -> bool:
    return reference.bfcl_checker_verdict(row, trajectory)[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3, help="timed passes a side; the best counts")
    parser.add_argument("--every", type=int, default=1, help="take every n-th row of each category (1: all)")
    parser.add_argument("--output", default="benchmarks/results/bfcl_multi_turn.json")
    args = parser.parse_args()

    rows = [row for category in reference.MULTI_TURN_CATEGORIES for row in reference.rows(category)[:: args.every]]
    items = [(row, trajectory) for row in rows for _, trajectory in reference.trajectories(row)]
    _time(_ours, items[:50]), _time(_theirs, items[:50])  # warm: imports, docs, signatures
    seconds: dict[str, list[float]] = {"ours": [], "bfcl": []}
    verdicts: dict[str, list[bool]] = {}
    for _ in range(args.repeats):
        for name, function in (("bfcl", _theirs), ("ours", _ours)):
            elapsed, verdicts[name] = _time(function, items)
            seconds[name].append(elapsed)
    best = {name: min(values) for name, values in seconds.items()}
    rates = {name: len(items) / value for name, value in best.items()}
    differ = sum(a != b for a, b in zip(verdicts["ours"], verdicts["bfcl"], strict=True))
    print(f"BFCL multi-turn: {len(rows)} rows, {len(items):,} trajectories; best of {args.repeats} passes a side")
    print(f"{'':>24}{'verdicts/s':>12}{'ms each':>10}")
    for name, label in (("bfcl", "BFCL multi_turn_checker"), ("ours", "bfcl_verdict")):
        print(f"{label:>24}{rates[name]:>12,.0f}{1000 / rates[name]:>10.2f}")
    ratio = rates["ours"] / rates["bfcl"]
    print(f"ratio (ours / BFCL's): {ratio:.2f}x; verdicts that differ: {differ}")
    write_result(
        args.output,
        {
            "rows": len(rows),
            "trajectories": len(items),
            "repeats": args.repeats,
            "seconds": seconds,
            "verdicts_per_second": rates,
            "ratio": ratio,
            "disagreements": differ,
            "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform()},
        },
    )
    print(f"wrote {args.output}")
    if differ:
        sys.exit(1)


if __name__ == "__main__":
    main()
