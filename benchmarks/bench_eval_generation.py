"""Evaluation's greedy generation on the CPU: `generate_completions` (what `grpo-tools eval` and the evaluations
around `grpo-tools train` run) with the fast path (`cpu_fast_path: auto`: the prompts prefilled in one pass, each row
leaving the batch at its end of turn) against transformers' `generate` (`off`), on the same prompts.

The prompts go in chunks of `--batch-size`; for each chunk both sides run, in turn first (so a change in the machine's
load hits both alike), and the figures are the seconds of all chunks, their ratio, how many completions are the same
on both sides and the completions' mean length in tokens (their text encoded again). The fast path stops computing
each row at its end of turn, so a model whose completions end at different lengths gains the most; one that writes
to the limit on every row, little. A measurement, not a test:

    .venv/bin/python -m benchmarks.bench_eval_generation [--model outputs/smollm2-135m] [--adapter FOLDER]
        [--data outputs/bfcl-task/eval.jsonl] [--rows 80] [--batch-size 40] [--max-new-tokens 96] [--threads 0]

Needs the converted model and the BFCL task (`make train` builds both) or a model and rows of your own.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from typing import Any

from benchmarks.common import RESULTS, quiet, write_result


ROOT = Path(__file__).resolve().parent.parent
SIDES = ("auto", "off")


def run(
    model_dir: str,
    data: str,
    adapter: str | None = None,
    rows: int = 80,
    batch_size: int = 40,
    max_new_tokens: int = 96,
    threads: int | None = None,
) -> dict[str, Any]:
    """Seconds of greedy generation on `rows` of `data` (evenly spaced) with the fast path and without."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from grpo_tools.data.prompts import load_rows
    from grpo_tools.evaluation.generation import generate_completions, row_prompts

    quiet()
    if threads:
        torch.set_num_threads(threads)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    if adapter:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, adapter)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    every = load_rows(data)
    chosen = every[:: max(1, len(every) // rows)][:rows]
    prompts = [prompt for prompt in row_prompts(tokenizer, chosen)[0] if prompt is not None]
    seconds = dict.fromkeys(SIDES, 0.0)
    completions: dict[str, list[str]] = {side: [] for side in SIDES}
    for chunk, start in enumerate(range(0, len(prompts), batch_size)):
        for side in SIDES if chunk % 2 == 0 else SIDES[::-1]:
            began = time.perf_counter()
            completions[side] += generate_completions(
                model, tokenizer, prompts[start : start + batch_size], batch_size=batch_size,
                max_new_tokens=max_new_tokens, progress=False, cpu_fast_path=side,
            )  # fmt: skip
            seconds[side] += time.perf_counter() - began
    lengths = [len(tokenizer(text, add_special_tokens=False).input_ids) for text in completions["off"]]
    return {
        "model": model_dir,
        "adapter": adapter,
        "data": data,
        "rows": len(prompts),
        "batch_size": batch_size,
        "max_new_tokens": max_new_tokens,
        "torch_threads": torch.get_num_threads(),
        "cores_on_machine": os.cpu_count(),
        "seconds": seconds,
        "ratio": seconds["auto"] / seconds["off"],
        "same_completions": sum(a == b for a, b in zip(completions["auto"], completions["off"], strict=True)),
        "mean_completion_tokens": sum(lengths) / len(lengths),
        "completions_at_the_limit": sum(length >= max_new_tokens for length in lengths),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="outputs/smollm2-135m", help="a model folder")
    parser.add_argument("--adapter", default=None, help="a LoRA adapter folder to apply to the model")
    parser.add_argument("--data", default="outputs/bfcl-task/eval.jsonl", help="canonical rows (JSONL)")
    parser.add_argument("--rows", type=int, default=80, help="rows, evenly spaced over the file")
    parser.add_argument("--batch-size", type=int, default=40)
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    parser.add_argument("--output", default=str(RESULTS / "eval-generation.json"))
    args = parser.parse_args()
    for path, what in ((args.model, "--model"), (args.data, "--data"), (args.adapter, "--adapter")):
        if path is not None and not Path(path).exists():
            parser.error(f"{what} {path}: not found (make train converts the model and builds the BFCL task)")
    result = run(args.model, args.data, args.adapter, args.rows, args.batch_size, args.max_new_tokens,
                 args.threads or None)  # fmt: skip
    print(
        f"Greedy generation of {result['rows']} rows of {args.data}, {args.model}"
        f"{' + ' + args.adapter if args.adapter else ''}, batches of {args.batch_size}, up to {args.max_new_tokens} "
        f"new tokens, {result['torch_threads']} torch thread(s) ({result['cores_on_machine']} cores)\n"
    )
    print(f"{'generation':<34} {'seconds':>8}")
    print(f"{'fast path (cpu_fast_path: auto)':<34} {result['seconds']['auto']:>8.1f}")
    print(f"{'transformers generate (off)':<34} {result['seconds']['off']:>8.1f}")
    same, rows = result["same_completions"], result["rows"]
    print(
        f"\nratio {result['ratio']:.3f}; the same completion on {same} of {rows} rows; completions "
        f"{result['mean_completion_tokens']:.1f} tokens on average, {result['completions_at_the_limit']} at the limit"
    )
    print(f"\nwrote {write_result(args.output, result)}")


if __name__ == "__main__":
    main()
