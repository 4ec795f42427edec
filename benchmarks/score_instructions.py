"""One in-process pass of `grpo-tools score` over generated files (`bench_score`'s), for counting its instructions with
valgrind's callgrind: this machine's wall-clock times swing by 10-20% between identical runs, instruction counts do
not. One worker; the pass runs inside `functools.reduce`, so that callgrind counts only it (after a warm-up pass):

    PYTHONHASHSEED=0 valgrind --tool=callgrind --callgrind-out-file=/dev/null --collect-atstart=no \\
        --toggle-collect=functools_reduce .venv/bin/python -m benchmarks.score_instructions [--rows 20000]

Instructions a row = callgrind's `Collected` / the rows this prints.
"""

from __future__ import annotations

import argparse
import functools
import json
import tempfile
from pathlib import Path

from benchmarks.bench_score import write_files
from grpo_tools.evaluation.scoring import score_files


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=20_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        data, predictions = write_files(Path(folder), args.rows)

        def run() -> dict:
            return score_files(data, predictions, "bfcl", workers=1, progress=False)[0]

        report = run()  # warm-up: imports, caches
        functools.reduce(lambda _, __: run(), [0, 0])  # the counted pass
    print(json.dumps({"rows": args.rows, "scored": report["rows"]["scored"]}))


if __name__ == "__main__":
    main()
