"""One pass of `bench_bfcl`'s measurement, on one side, for counting its instructions with valgrind's callgrind: on a
shared machine, wall-clock ratios swing by 10% and more between runs, instruction counts do not. The pass runs inside
`functools.reduce`, so that callgrind counts only it (after a warm-up pass, as `bench_bfcl` warms each side):

    PYTHONHASHSEED=0 valgrind --tool=callgrind --callgrind-out-file=/dev/null --collect-atstart=no \\
        --toggle-collect=functools_reduce .venv/bin/python -m benchmarks.bfcl_instructions [--side tool_bfcl|bfcl] \\
        [--group 1] [--form rows|json]

Instructions an output = callgrind's `Collected` / the outputs this prints. Our side's caches are emptied and its row
columns made anew before the pass, as `bench_bfcl` does before each of its passes.
"""

from __future__ import annotations

import argparse
import functools
import gc
import json

from benchmarks import bench_bfcl, bfcl_reference
from grpo_tools.rewards import bfcl, gold, scorers, tool_bfcl_reward


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--side", choices=("tool_bfcl", "bfcl"), default="tool_bfcl")
    parser.add_argument("--group", type=int, default=1, help="outputs a row")
    parser.add_argument("--form", choices=("rows", "json"), default="rows", help="how the row columns reach tool_bfcl")
    parser.add_argument("--batch", type=int, default=64)
    args = parser.parse_args()

    checker = bfcl_reference.load_ast_checker()
    reference, columns = bench_bfcl.grouped(bench_bfcl.load_cases(bfcl_reference.AST_CATEGORIES), args.group)
    texts = {key: columns[key] for key in bench_bfcl.COLUMNS}
    size = len(reference)

    def fresh() -> dict[str, list]:
        gold.GOLD_CACHE.clear()
        bfcl._STANDARDIZED.clear()
        scorers._normalized_tools.cache_clear()
        made = bench_bfcl._parsed if args.form == "rows" else bench_bfcl._copy
        return {**columns, **{key: [made(text) for text in texts[key]] for key in bench_bfcl.COLUMNS}}

    def run(row_columns: dict[str, list] | None) -> None:
        if row_columns is None:
            for case, decoded in reference:
                bfcl_reference.bfcl_verdict(checker, case, decoded)
            return
        for start in range(0, size, args.batch):
            tool_bfcl_reward(**{key: values[start : start + args.batch] for key, values in row_columns.items()})

    ours = args.side == "tool_bfcl"
    run(fresh() if ours else None)  # warm-up
    row_columns = fresh() if ours else None
    gc.collect()
    gc.freeze()
    functools.reduce(lambda _, __: run(row_columns), [0, 0])  # the counted pass
    print(json.dumps({"side": args.side, "group": args.group, "form": args.form, "outputs": size}))


if __name__ == "__main__":
    main()
