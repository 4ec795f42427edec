"""What a 1 MB hostile completion costs: the per-turn BFCL reward, the multi-turn verdict and every call reward on lines
of about 1 MB a hostile model could write (tens of thousands of calls, deep nesting, repeated tags, a huge string),
each timed beside a baseline run in the same process: `json.loads` of a 1 MB JSON list, the cost of reading such a
line at all. Prints seconds (median of `--repeats`) and the ratio to the baseline, and writes them to `--output`.

    .venv/bin/python -m benchmarks.bench_hostile [--repeats 3] [--size 1000000]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable

from benchmarks.common import RESULTS, write_result
from grpo_tools.rewards import REWARDS
from grpo_tools.tools.bfcl_turn_reward import bfcl_turn_reward
from grpo_tools.tools.bfcl_verdict import bfcl_verdict


SIZE = 1_000_000
TOOLS = [{"type": "function", "function": {"name": "add", "parameters": {"type": "object", "properties": {
    "a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}}}]  # fmt: skip
ANSWERS = [{"name": "add", "arguments": {"a": 1, "b": 2}}]
FILES = {"involved_classes": ["GorillaFileSystem"], "initial_config": {"GorillaFileSystem": {"root": {"alex": {
    "type": "directory", "contents": {"f.txt": {"type": "file", "content": "x" * 20_000}}}}}},
    "turn": 0, "ground_truth": [["cat(file_name='f.txt')"]]}  # fmt: skip


def hostile_lines(size: int) -> dict[str, str]:
    """Lines of about `size` characters a hostile model could write, by what makes each one hard."""

    def repeated(call: str) -> str:
        return "[" + ", ".join([call] * (size // (len(call) + 2))) + "]"

    depth = size // 2 - 10
    hermes = '<tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}}</tool_call>'
    return {
        f"cat x {size // 24:,} (pythonic)": repeated("cat(file_name='f.txt')"),
        f"add x {size // 15:,} (pythonic)": repeated("add(a=1, b=2)"),
        f"add x {size // len(hermes):,} (hermes)": hermes * (size // len(hermes)),
        f"nesting {depth:,}": "[add(a=" + "[" * depth + "]" * depth + ", b=1)]",
        "unclosed tags": "<tool_call>" * (size // 11),
        f"one string of {size:,}": '[add(a="' + "x" * size + '", b=1)]',
    }


def _seconds(function: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--size", type=int, default=SIZE, help="characters of each hostile line")
    parser.add_argument("--output", default=str(RESULTS / "hostile.json"))
    args = parser.parse_args()
    baseline_line = json.dumps([{"name": "add", "arguments": {"a": 1, "b": 2}}] * (args.size // 40))
    baseline = _seconds(lambda: json.loads(baseline_line), args.repeats)
    print(f"baseline: json.loads of a {len(baseline_line):,}-character line: {baseline:.3f} s")
    bfcl_turn_reward(["[cat(file_name='f.txt')]"], env=[FILES])  # the row's state before the turn, prepared once
    table: dict[str, dict[str, float]] = {}
    for label, line in hostile_lines(args.size).items():
        runs: dict[str, Callable[[], object]] = {
            "bfcl_turn": lambda line=line: bfcl_turn_reward([line], env=[FILES]),
            "verdict": lambda line=line: bfcl_verdict(FILES, FILES["ground_truth"], [[line]]),
        }
        runs.update({name: (lambda spec=spec, line=line: spec.function([line], [TOOLS], [ANSWERS]))
                     for name, spec in REWARDS.items()})  # fmt: skip
        for name, run in runs.items():
            seconds = _seconds(run, args.repeats)
            table.setdefault(label, {})[name] = seconds / baseline
            print(f"{label:>26} {name:>14}: {seconds:7.3f} s  {seconds / baseline:7.1f} x baseline")
    path = write_result(args.output, {"size": args.size, "baseline_seconds": baseline, "ratio_to_baseline": table})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
