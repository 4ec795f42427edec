"""`grpo-tools score` at scale: rows per second and peak memory on generated files, one worker and all cores.

Data rows are the bundled synthetic rows repeated under fresh ids; predictions are their gold calls in the Hermes
format, one in four with a wrong value. Each configuration runs `grpo-tools score` as its own process; the peak memory
is the largest resident set of that process and its workers (`wait4`'s `ru_maxrss`), and its CPU seconds those of the
process and its workers together (on a shared machine a steadier figure than the wall clock). The reports of every
worker count are compared byte for byte (`identical_reports`).

    .venv/bin/python -m benchmarks.bench_score [--rows 200000] [--output benchmarks/results/score.json]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def write_files(folder: Path, rows: int, seed: int = 0) -> tuple[Path, Path]:
    """A data file and a predictions file of `rows` lines each."""
    from tasks.synthetic import generate_rows

    rng = random.Random(seed)
    base = generate_rows("train", 2000, seed=0)
    data, predictions = folder / "data.jsonl", folder / "predictions.jsonl"
    with data.open("w") as data_file, predictions.open("w") as prediction_file:
        for index in range(rows):
            row = {**base[index % len(base)], "id": f"row-{index}"}
            data_file.write(json.dumps(row) + "\n")
            calls = [dict(call, arguments=dict(call["arguments"])) for call in row["answers"]]
            if calls and rng.random() < 0.25:
                key = next(iter(calls[0]["arguments"]))
                calls[0]["arguments"][key] = "wrong"
            text = "".join(f"<tool_call>\n{json.dumps(call)}\n</tool_call>\n" for call in calls) or "No tool fits."
            prediction_file.write(json.dumps({"id": row["id"], "completion": text}) + "\n")
    return data, predictions


def run_score(data: Path, predictions: Path, workers: int, report: Path) -> tuple[float, int, float]:
    """Wall seconds, peak resident kilobytes and CPU seconds of one `grpo-tools score` process (with its workers)."""
    command = [sys.executable, "-m", "grpo_tools.cli", "score", "--data", str(data), "--predictions", str(predictions)]
    command += ["--workers", str(workers), "--quiet", "--output", str(report)]
    start = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(process.pid, 0)
    elapsed = time.perf_counter() - start
    if status != 0:
        raise SystemExit(f"grpo-tools score failed: {process.stderr.read().decode()[-2000:]}")
    return elapsed, usage.ru_maxrss, usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, nargs="+", default=[200_000], help="file sizes to score")
    parser.add_argument("--repeats", type=int, default=3, help="runs per configuration; the median is reported")
    parser.add_argument("--output", default="benchmarks/results/score.json")
    args = parser.parse_args()
    cores = os.cpu_count() or 1
    results = []
    identical: dict[int, bool] = {}
    print(f"grpo-tools score: rows/s and peak memory ({cores} cores on the machine), median of {args.repeats} runs\n")
    print(f"{'rows':>10} {'workers':>8} {'seconds':>9} {'rows/s':>10} {'peak MB':>9} {'CPU s':>9}")
    with tempfile.TemporaryDirectory() as folder:
        for rows in args.rows:
            data, predictions = write_files(Path(folder), rows)
            reports: dict[int, bytes] = {}
            for workers in sorted({1, cores}):
                runs = [
                    run_score(data, predictions, workers, Path(folder) / f"r{workers}.json")
                    for _ in range(args.repeats)
                ]
                seconds = statistics.median(run[0] for run in runs)
                peak_mb = max(run[1] for run in runs) / 1024
                cpu = statistics.median(run[2] for run in runs)
                reports[workers] = (Path(folder) / f"r{workers}.json").read_bytes()
                results.append({"rows": rows, "workers": workers, "seconds": seconds, "rows_per_second": rows / seconds,
                                "peak_mb": peak_mb, "cpu_seconds": cpu})  # fmt: skip
                print(f"{rows:>10} {workers:>8} {seconds:>9.1f} {rows / seconds:>10,.0f} {peak_mb:>9.0f} {cpu:>9.1f}")
            same = len(set(reports.values())) == 1
            identical[rows] = same
            print(f"{'':>10} reports byte-identical across worker counts: {same}")
    output = Path(args.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(
        json.dumps({"cores_on_machine": cores, "results": results, "identical_reports": identical}, indent=2) + "\n"
    )
    print(f"\nwrote {output}")


if __name__ == "__main__":
    main()
