"""Does GRPO teach a small model a user's own MCP tools, on new requests? The "own tools, new requests" case of
issue 73, on tasks/mcp_git.py (requests to mcp-server-git, judged by the repository's state after each rollout).

Three arms from one supervised warm start (the recipe's, on the training rows' gold trajectories run on the server):
- `warm`: the warm start alone;
- `grpo`: GRPO from it, the recipe's steps, at the learning rate that scores best on the dev split (seed 0);
- `sft`: supervised training from it on the same gold trajectories for as many CPU seconds of the training process as
  that seed's GRPO run took (CPU time, not wall time, so that other load on the machine favours neither arm; the MCP
  servers' own CPU time, which only GRPO's rollouts use, is not counted against GRPO).
Each is scored on the held-out test requests (new branch names and commit messages, the same tools) by greedy
rollouts against the real server (`grpo_tools.tools.rollouts.evaluate_multi_turn`): `state_check`, the share of
rollouts that leave the repository as asked (the measure), `call_accuracy` and the failures by kind. The dev split
chooses the learning rate and nothing else; the test split is read only for the table.

It needs a quiet 2-core machine for about an hour (SmolLM2-135M, 3 seeds; docs/mcp.md has the table). The run is

    python -m experiments.mcp_learning --seeds 0 1 2 --out outputs/mcp-learning

and `--smoke` runs its smallest configuration (the tiny model, one seed, one learning rate, a step, a few rows) to
check the path in minutes. Writes `OUT/result.json` and prints the table (mean and standard deviation over seeds).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

from benchmarks.bench_learning import parse_recipe, warm_start_once


REPO = Path(__file__).resolve().parent.parent
RECIPE = REPO / "recipes" / "SmolLM2-135M-Instruct" / "grpo" / "mcp.yaml"
SMOKE_RECIPE = REPO / "recipes" / "tiny" / "grpo" / "mcp-cpu.yaml"
SMOKE = ["--max_steps", "1", "--per_device_train_batch_size", "4", "--num_generations", "2", "--warmup_sft_epochs",
         "1", "--max_train_rows", "8", "--max_completion_length", "48"]  # fmt: skip


def _rows(path: Path, limit: int | None) -> list[dict[str, Any]]:
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return rows[:limit] if limit else rows


def evaluate(model: Any, tokenizer: Any, rows: list[dict], out: Path, label: str, training_args: Any) -> dict:
    """Greedy rollouts against the server, as `grpo-tools eval --mcp-config` runs them; the report's headline."""
    from grpo_tools.tools.rollouts import evaluate_multi_turn

    report = evaluate_multi_turn(
        model, tokenizer, rows, out, label=label, batch_size=len(rows), progress=False,
        max_new_tokens=training_args.max_completion_length,
        max_turns=training_args.max_tool_calling_iterations + 1,
    )  # fmt: skip
    keys = ("state_check", "call_accuracy", "accuracy")
    return {key: report.get(key, 0.0) for key in keys} | {"failures": report["tools"]["failure_counts"]}


def run_grpo(
    recipe: str, overrides: list[str], warm_dir: str, rows: dict, seed: int, rate: float, out: Path, split: str
) -> dict:
    """GRPO from the warm start at learning rate `rate`, then the rollouts on `split`; its training seconds."""
    from transformers import AutoTokenizer

    from grpo_tools.training import build_trainer

    name = f"grpo-lr{rate:g}-seed{seed}"
    arguments = [*overrides, "--seed", str(seed), "--learning_rate", str(rate), "--model_name_or_path", warm_dir,
                 "--output_dir", str(out / name), "--warmup_sft_epochs", "0", "--disable_tqdm", "true"]  # fmt: skip
    _, training_args, model_args = parse_recipe(recipe, arguments)
    tokenizer = AutoTokenizer.from_pretrained(warm_dir)
    trainer = build_trainer(warm_dir, tokenizer, rows["train"], training_args, model_args)
    start = time.process_time()
    trainer.train()
    seconds = time.process_time() - start
    scores = evaluate(trainer.model, tokenizer, rows[split], out / name, split, training_args)
    for environment in trainer.environments or []:
        environment._close()
    return {"arm": "grpo", "seed": seed, "learning_rate": rate, "split": split, "train_seconds": seconds, **scores}


def run_sft(
    recipe: str, overrides: list[str], warm_dir: str, rows: dict, seed: int, seconds: float, out: Path
) -> dict:
    """Supervised training from the warm start on the training rows' gold trajectories for `seconds`, then the
    rollouts on the test split."""
    from transformers import AutoTokenizer, TrainerCallback

    from grpo_tools.training.warm_start import sft_trainer, train_sft

    arguments = [*overrides, "--seed", str(seed), "--model_name_or_path", warm_dir, "--warmup_sft_peft", "true",
                 "--output_dir", str(out / f"sft-seed{seed}")]  # fmt: skip
    script_args, training_args, model_args = parse_recipe(recipe, arguments)
    training_args.disable_tqdm = True
    tokenizer = AutoTokenizer.from_pretrained(warm_dir)

    class Budget(TrainerCallback):
        def __init__(self) -> None:
            self.start, self.elapsed, self.steps = 0.0, 0.0, 0

        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.start = time.process_time()

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.elapsed, self.steps = time.process_time() - self.start, state.global_step
            control.should_training_stop = self.elapsed >= seconds

    budget = Budget()
    trainer = sft_trainer(
        warm_dir, tokenizer, rows["train"], script_args, training_args, str(out / f"sft-seed{seed}"), model_args,
        callbacks=[budget], num_train_epochs=1000, lr_scheduler_type="constant", warmup_steps=0, logging_steps=1,
    )  # fmt: skip
    train_sft(trainer, training_args.cpu_fast_path)
    scores = evaluate(trainer.model, tokenizer, rows["test"], out / f"sft-seed{seed}", "test", training_args)
    return {"arm": "sft", "seed": seed, "split": "test", "train_seconds": budget.elapsed, "steps": budget.steps,
            **scores}  # fmt: skip


def table(runs: list[dict]) -> list[dict]:
    """Per arm on the test split: mean and standard deviation over seeds of each score."""
    lines = []
    for arm in ("warm", "grpo", "sft"):
        chosen = [run for run in runs if run["arm"] == arm and run["split"] == "test"]
        if not chosen:
            continue
        line: dict[str, Any] = {"arm": arm, "seeds": len(chosen)}
        for key in ("state_check", "call_accuracy", "train_seconds"):
            values = [run.get(key, 0.0) for run in chosen]
            line[key] = statistics.mean(values)
            line[f"{key}_sd"] = statistics.stdev(values) if len(values) > 1 else 0.0
        lines.append(line)
    return lines


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--recipe", default=None, help=f"default {RECIPE.relative_to(REPO)} ({SMOKE_RECIPE.name} "
                        "with --smoke)")  # fmt: skip
    parser.add_argument("--task", default="outputs/mcp-git", help="tasks.mcp_git's folder (built when missing)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--learning-rates", type=float, nargs="+", default=[2e-4, 1e-3])
    parser.add_argument("--dev-rows", type=int, default=16)
    parser.add_argument("--test-rows", type=int, default=32)
    parser.add_argument("--model", default=None, help="override the recipe's model_name_or_path")
    parser.add_argument("--out", default="outputs/mcp-learning")
    parser.add_argument("--smoke", action="store_true", help="the smallest configuration: a check of the path")
    args, extra = parser.parse_known_args(argv)
    from grpo_tools.tools.mcp_config import prepare_mcp
    from tasks.mcp_git import write_task

    task, out = Path(args.task), Path(args.out)
    if not (task / "train.jsonl").is_file():
        write_task(task)
    recipe = args.recipe or str(SMOKE_RECIPE if args.smoke else RECIPE)
    overrides = [*(SMOKE if args.smoke else []), "--dataset_name", str(task / "train.jsonl"), "--mcp_template",
                 str(task / "template"), *(["--model_name_or_path", args.model] if args.model else []), *extra]  # fmt: skip
    if args.smoke:
        args.seeds, args.learning_rates, args.dev_rows, args.test_rows = args.seeds[:1], args.learning_rates[:1], 2, 2
    script_args, training_args, _ = parse_recipe(recipe, [*overrides, "--output_dir", str(out)])
    train = _rows(task / "train.jsonl", script_args.max_train_rows)
    rows = {"train": train, "dev": _rows(task / "dev.jsonl", args.dev_rows),
            "test": _rows(task / "test.jsonl", args.test_rows)}  # fmt: skip
    prepare_mcp(training_args, train)

    from transformers import AutoModelForCausalLM, AutoTokenizer

    warm_dir, warm_seconds = warm_start_once(recipe, overrides, out, train, fresh=False)
    tokenizer = AutoTokenizer.from_pretrained(warm_dir)
    warm_model = AutoModelForCausalLM.from_pretrained(warm_dir)
    runs = [{"arm": "warm", "seed": None, "split": split, "train_seconds": warm_seconds or 0.0,
             **evaluate(warm_model, tokenizer, rows[split], out / "warm", split, training_args)}
            for split in ("dev", "test")]  # fmt: skip
    del warm_model
    # The learning rate, on dev with the first seed; the test split plays no part in it. One rate leaves no choice.
    rate = args.learning_rates[0]
    if len(args.learning_rates) > 1:
        dev = [
            run_grpo(recipe, overrides, warm_dir, rows, args.seeds[0], lr, out, "dev") for lr in args.learning_rates
        ]
        runs += dev
        rate = max(dev, key=lambda run: (run["state_check"], run["call_accuracy"]))["learning_rate"]
    for seed in args.seeds:
        grpo = run_grpo(recipe, overrides, warm_dir, rows, seed, rate, out, "test")
        runs += [grpo, run_sft(recipe, overrides, warm_dir, rows, seed, grpo["train_seconds"], out)]
    result = {"recipe": recipe, "task": str(task), "seeds": args.seeds, "learning_rate": rate,
              "rows": {split: len(value) for split, value in rows.items()}, "runs": runs, "table": table(runs)}  # fmt: skip
    out.mkdir(parents=True, exist_ok=True)
    (out / "result.json").write_text(json.dumps(result, indent=2) + "\n")
    chosen = "chosen on dev" if len(args.learning_rates) > 1 else "the only one tried"
    print(f"held-out requests ({len(rows['test'])}), GRPO learning rate {rate:g} ({chosen})")
    for line in result["table"]:
        print(f"{line['arm']:<5} state {line['state_check']:.3f} ± {line['state_check_sd']:.3f}  calls "
              f"{line['call_accuracy']:.3f} ± {line['call_accuracy_sd']:.3f}  {line['train_seconds']:.0f} s "
              f"({line['seeds']} seeds)")  # fmt: skip
    return result


if __name__ == "__main__":
    main()
