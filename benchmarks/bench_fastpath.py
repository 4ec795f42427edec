"""The CPU fast path against trl: seconds per GRPO step of the SmolLM2 recipe with `ToolGRPOTrainer` (its
`cpu_fast_path` on) and with trl's own `GRPOTrainer`, in one process, steps interleaved.

Both trainers read the recipe (recipes/SmolLM2-135M-Instruct/grpo/cpu.yaml): the same rows, seed, batch (8 prompts x 4
completions), LoRA, rewards and weights, model dtype and bf16 setting. trl's side gets the recipe's fixed `beta`; ours
adapts it as the recipe says, which costs nothing measurable. `gold_in_group` is off on both sides by default, so
both sample every completion (`--gold` puts the recipe's gold turns back on ours; trl has none). Steps alternate
between the two through the baton of bench_trainer.py, so a change in the machine's load hits both alike; the first
`--warmup` steps of each side are dropped and the ratio is of medians (goal: 0.5 or less). A few steps, not a test:

    .venv/bin/python -m benchmarks.bench_fastpath [--steps 3] [--warmup 1] [--threads 1] [--output ...]

Needs the converted model (`make bench` converts it: python -m tasks.smollm2 --out outputs/smollm2-135m).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import tempfile
from pathlib import Path
from typing import Any

import yaml

from benchmarks.bench_trainer import run_interleaved
from benchmarks.common import RESULTS, quiet, without_printer, write_result


ROOT = Path(__file__).resolve().parent.parent
RECIPE = ROOT / "recipes" / "SmolLM2-135M-Instruct" / "grpo" / "cpu.yaml"
GOAL = 0.5
SIDES = ("tool_grpo", "trl")


def build_trainers(
    recipe: Path, output_dir: str, steps: int, gold: bool, overrides: tuple[str, ...] = ()
) -> dict[str, Any]:
    """Our trainer as `grpo-tools train` builds it from `recipe` (and `overrides`, flags as on the command line),
    and trl's from the same settings."""
    from transformers import AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer, TrlParser, get_peft_config

    from grpo_tools.data.prompts import load_rows
    from grpo_tools.training import build_trainer
    from grpo_tools.training.configs import ModelConfig, ToolGRPOConfig, ToolScriptArguments, model_init_kwargs

    flags = ["--max_steps", str(steps), "--output_dir", f"{output_dir}/tool_grpo", "--disable_tqdm", "true"]
    flags += ["--gold_in_group", str(gold).lower(), *overrides]
    parser = TrlParser((ToolScriptArguments, ToolGRPOConfig, ModelConfig))
    script_args, ours, model_args = parser.parse_args_and_config(args=["--config", str(recipe), *flags])
    os.chdir(ROOT)  # the recipe's paths are relative to the repository
    ours.model_init_kwargs = model_init_kwargs(ours, model_args)
    tokenizer = AutoTokenizer.from_pretrained(model_args.model_name_or_path)
    rows = load_rows(script_args.dataset_name, script_args.max_train_rows)
    trainers = {"tool_grpo": build_trainer(model_args.model_name_or_path, tokenizer, rows, ours, model_args)}

    grpo_fields = {field.name for field in dataclasses.fields(GRPOConfig) if field.init}
    recipe_settings = yaml.safe_load(recipe.read_text())
    settings = {key: value for key, value in recipe_settings.items() if key in grpo_fields}
    overridden = {flag.removeprefix("--") for flag in overrides[::2]}
    settings.update({key: getattr(ours, key) for key in overridden if key in grpo_fields})
    settings.update(
        output_dir=f"{output_dir}/trl", max_steps=steps, disable_tqdm=True, bf16=ours.bf16,
        model_init_kwargs=ours.model_init_kwargs, reward_weights=ours.reward_weights,
    )  # fmt: skip
    trainers["trl"] = GRPOTrainer(
        model=model_args.model_name_or_path,
        reward_funcs=trainers["tool_grpo"].reward_funcs[: len(ours.reward_funcs)],
        args=GRPOConfig(**settings),
        train_dataset=trainers["tool_grpo"].train_dataset,
        processing_class=tokenizer,
        peft_config=get_peft_config(model_args),
    )
    return {name: without_printer(trainer) for name, trainer in trainers.items()}


def run(
    steps: int = 3, warmup: int = 1, threads: int | None = 1, gold: bool = False, overrides: tuple[str, ...] = ()
) -> dict[str, Any]:
    import torch

    if steps <= warmup:
        raise ValueError(f"steps ({steps}) must be larger than warmup ({warmup})")
    quiet()
    if threads:
        torch.set_num_threads(threads)
    with tempfile.TemporaryDirectory() as folder:
        trainers = build_trainers(RECIPE, folder, steps, gold, overrides)
        load_before = os.getloadavg()[0]
        seconds = run_interleaved(trainers)
        load_after = os.getloadavg()[0]
    sides = {}
    for name, trainer in trainers.items():
        lengths = [entry["completions/mean_length"] for entry in trainer.state.log_history if "reward" in entry]
        sides[name] = {
            "wall_seconds": seconds[name]["wall"],
            "cpu_seconds": seconds[name]["cpu"],
            "median_wall": statistics.median(seconds[name]["wall"][warmup:]),
            "median_cpu": statistics.median(seconds[name]["cpu"][warmup:]),
            "mean_completion_length": statistics.mean(lengths),
        }
    ratio = {
        clock: sides["tool_grpo"][f"median_{clock}"] / sides["trl"][f"median_{clock}"] for clock in ("wall", "cpu")
    }
    return {
        "recipe": str(RECIPE.relative_to(ROOT)),
        "cores_on_machine": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "load_average_1min": [load_before, load_after],
        "settings": {"steps": steps, "warmup": warmup, "gold_in_group": gold},
        "sides": sides,
        "ratio": ratio,
        "goal": GOAL,
        "met": ratio["wall"] <= GOAL,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=3, help="optimizer steps per side, warm-up included")
    parser.add_argument("--warmup", type=int, default=1, help="first steps of each side left out of the figures")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (0: torch's default)")
    parser.add_argument("--gold", action="store_true", help="the recipe's gold turns in our groups (trl has none)")
    parser.add_argument("--output", default=str(RESULTS / "fastpath.json"))
    parser.add_argument(
        "--smoke",
        metavar="MODEL",
        help="the recipe on this model folder (the tiny model), 2 steps of 4 short completions: runs, figures mean "
        "nothing",
    )
    args = parser.parse_args()
    overrides: tuple[str, ...] = ()
    if args.smoke:
        args.steps, args.warmup = 2, 1
        overrides = ("--model_name_or_path", args.smoke, "--per_device_train_batch_size", "4", "--num_generations",
                     "2", "--max_completion_length", "8", "--max_train_rows", "16", "--lora_target_modules", "all-linear")  # fmt: skip
    result = run(steps=args.steps, warmup=args.warmup, threads=args.threads or None, gold=args.gold,
                 overrides=overrides)  # fmt: skip
    print(
        f"CPU fast path against trl: seconds per GRPO step, {result['recipe']}, {result['torch_threads']} torch "
        f"thread(s) ({result['cores_on_machine']} cores), steps interleaved, median of "
        f"{args.steps - args.warmup} after {args.warmup} warm-up\n"
    )
    labels = {"tool_grpo": "ToolGRPOTrainer (fast path)", "trl": "trl GRPOTrainer"}
    print(f"{'trainer':<28} {'wall s':>8} {'CPU s':>8} {'tokens':>7}  every step's wall s")
    for name in SIDES:
        side = result["sides"][name]
        steps = " ".join(f"{value:.1f}" for value in side["wall_seconds"])
        print(
            f"{labels[name]:<28} {side['median_wall']:>8.2f} {side['median_cpu']:>8.2f} "
            f"{side['mean_completion_length']:>7.1f}  {steps}"
        )
    print(
        f"\nratio (wall) {result['ratio']['wall']:.3f}, (CPU) {result['ratio']['cpu']:.3f}; goal <= {GOAL}: ", end=""
    )
    print("met" if result["met"] else "NOT MET")
    before, after = result["load_average_1min"]
    print(f"load average (1 min) before/after: {before:.2f} / {after:.2f}")
    print(f"\nwrote {write_result(args.output, result)}")


if __name__ == "__main__":
    main()
