"""Dev-split sweep of GRPO settings on one GPU, many runs at once, from a warm start made on the CPU.

For a lent GPU machine (docs/gpu.md): the warm start's LoRA adapter (`WARM/lora`, made by `make bench-learning` or
bench_learning's dev runs, experiments/record.md) is merged into the base model converted there, and each arm x seed
is the BFCL recipe's GRPO from it, evaluated on the dev split before and after (`after_report.json`). Each finished
run appends one JSON line to `--results`, so a sweep cut short by its time limit keeps what it finished. A ranking
tool, not a measurement: GPU numerics differ from the CPU's, so what it ranks first is checked on the CPU after.
Each arm overrides the recipe as it stands. The record's 30 runs (2026-11-28) ran on the recipe before e9e3009, with
the earlier rewards and no anchor: there `recipe` meant those rewards and every arm without `--gold_anchor` had none;
since e9e3009 the recipe is the decision reward with `gold_anchor: 3.0`, which those arms now inherit.

    python -m experiments.gpu_sweep --base outputs/smollm2-135m --warm .gpu/warm --out /tmp/sweep \
        --results $OUT/sweep.jsonl --parallel 8 --seeds 0 1 2
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path


RECIPE = "recipes/SmolLM2-135M-Instruct/grpo/bfcl.yaml"
DECISION = ["--reward_funcs", "tool_decision", "--reward_weights", "1.0", "--no_call_share", "0.5"]
BINARY = [*DECISION, "--decision_wrong", "0"]
# In the order they are run: what matters most first, so that a sweep cut short still ranks it.
ARMS = {
    "binary-class": [*BINARY, "--advantage_baseline", "class"],
    "binary-group": BINARY,
    "binary-class-anchor0.1": [*BINARY, "--advantage_baseline", "class", "--gold_anchor", "0.1"],
    "wrong-0.1-class": [*DECISION, "--decision_wrong", "-0.1", "--advantage_baseline", "class"],
    "truthrl-class": [*DECISION, "--advantage_baseline", "class"],
    "recipe": [],
    "accuracy-class": [*BINARY, "--decision_unexpected", "0", "--advantage_baseline", "class"],
    "binary-batch": [*BINARY, "--advantage_baseline", "batch"],
    "binary-class-anchor0.5": [*BINARY, "--advantage_baseline", "class", "--gold_anchor", "0.5"],
    "recipe-anchor0.1": ["--gold_anchor", "0.1"],
    "binary-class-natural-mix": ["--reward_funcs", "tool_decision", "--reward_weights", "1.0", "--decision_wrong",
                                 "0", "--advantage_baseline", "class"],
}  # fmt: skip


def merge_warm_start(base: Path, warm: Path) -> None:
    """`warm/model.safetensors`: the base model with the warm start's LoRA adapter (`warm/lora`) merged in."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    if (warm / "model.safetensors").exists():
        return
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    merged = PeftModel.from_pretrained(model, warm / "lora").merge_and_unload()
    merged.save_pretrained(warm)


def command(arm: str, seed: int, warm: Path, out: Path, task: Path, device: str, extra: list[str]) -> list[str]:
    return [
        sys.executable, "-m", "grpo_tools.cli", "train", "--config", RECIPE, "--model_name_or_path", str(warm),
        "--warmup_sft_epochs", "0", "--dataset_name", str(task / "train.jsonl"),
        "--eval_data", str(task / "dev.jsonl"), "--output_dir", str(out / f"{arm}-seed{seed}"), "--seed", str(seed),
        "--disable_tqdm", "true", "--save_strategy", "no",
        *(["--use_cpu", "false", "--bf16", "true"] if device == "gpu" else []), *ARMS[arm], *extra,
    ]  # fmt: skip


def summary(run_dir: Path) -> dict:
    """Dev calls (the mean of live_simple and live_multiple), live_irrelevance and usable, before and after."""
    result = {}
    for label in ("before", "after"):
        report = json.loads((run_dir / f"{label}_report.json").read_text())
        by = {name: value["accuracy"] for name, value in report["by_category"].items()}  # dev's live_ rows
        calls = (by.get("simple", 0.0) + by.get("multiple", 0.0)) / 2
        irrelevance = by.get("irrelevance", 0.0)
        result[label] = {"calls": 100 * calls, "irrelevance": 100 * irrelevance,
                         "usable": 100 * (calls + irrelevance) / 2, "by_category": by}  # fmt: skip
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", type=Path, required=True)
    parser.add_argument("--warm", type=Path, required=True)
    parser.add_argument("--task", type=Path, default=Path("outputs/bfcl-task"))
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--results", type=Path, required=True)
    parser.add_argument("--arms", nargs="+", choices=list(ARMS), default=list(ARMS))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--parallel", type=int, default=8)
    parser.add_argument("--device", choices=["gpu", "cpu"], default="gpu")
    parser.add_argument("--threads", type=int, default=2, help="OMP threads per run")
    args, extra = parser.parse_known_args()
    merge_warm_start(args.base, args.warm)
    queue = [(arm, seed) for arm in args.arms for seed in args.seeds]
    running: dict[tuple[str, int], tuple[subprocess.Popen, float]] = {}
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "PYTHONUNBUFFERED": "1"}
    args.out.mkdir(parents=True, exist_ok=True)

    def stop(*_: object) -> None:  # a time limit's SIGTERM: end the runs too, so that nothing outlives the sweep
        for process, _started in running.values():
            process.terminate()
        sys.exit(1)

    signal.signal(signal.SIGTERM, stop)
    finished = failed = 0
    while queue or running:
        while queue and len(running) < args.parallel:
            arm, seed = queue.pop(0)
            log = open(args.out / f"{arm}-seed{seed}.log", "w")  # noqa: SIM115 (closed with the process)
            argv = command(arm, seed, args.warm, args.out, args.task, args.device, extra)
            running[arm, seed] = (subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env), time.time())
        time.sleep(2)
        for (arm, seed), (process, started) in list(running.items()):
            if process.poll() is None:
                continue
            del running[arm, seed]
            line = {"arm": arm, "seed": seed, "rc": process.returncode, "seconds": round(time.time() - started)}
            if process.returncode == 0:
                line.update(summary(args.out / f"{arm}-seed{seed}"))
            with open(args.results, "a") as handle:
                handle.write(json.dumps(line) + "\n")
            print(json.dumps(line), flush=True)
            finished, failed = finished + 1, failed + (process.returncode != 0)
            if failed >= 3 and failed == finished:  # the setup is broken, not one run
                stop()


if __name__ == "__main__":
    main()
