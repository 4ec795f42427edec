"""Learning: held-out exact-call accuracy and mean reward against optimizer steps and training wall time for a
recipe (the tiny one by default; `make bench-learning` passes SmolLM2's), adaptive KL against fixed coefficients (0,
the recipe's initial beta, 10x that), several seeds each; plotted to PNG.

Every run is the recipe (`recipes/tiny/grpo/cpu.yaml` by default, read by trl's `TrlParser` as `grpo-tools train`
reads it) with command-line overrides: `--adaptive_kl false --beta B` for the fixed arms, `--seed S`, `--max_steps N`.
The supervised warm start does not depend on the KL setting, so it runs once (the recipe's seed, as `grpo-tools
train` runs it: on `warmup_sft_data` where the recipe names one) and every GRPO run starts from it; it is kept in the
work folder and reused by later invocations (`--fresh` redoes it). The seeds vary GRPO's sampling, data order and
LoRA initialisation.

Every `--eval-every` steps a callback generates greedily for the held-out rows (`generate_completions`, as
`grpo-tools eval` does) and scores them: accuracy is `tool_exact` (the recipe's `eval_scorer`), mean reward the
weighted sum of the rewards the arm trains with, as `grpo-tools train` builds them (`training_rewards`: the arm's
`reward_funcs`, `reward_weights` and `decision_*` values), the quantity its GRPO maximises. The arms train with
different rewards, so each curve is in its own arm's units (the `sft` arm's in the recipe's). The time spent
evaluating is taken out of the wall-time axis. Step 0 is the warm-started model (a fresh LoRA adapter is the
identity): its completions are generated once and scored by each arm with its own rewards.
Training reward, KL and the KL coefficient come from trl's per-step logs. Torch runs on one thread (`--threads`), as
in the other CPU benchmarks: on a shared 2-core machine a second intra-op thread mostly fights the other load, and
small-model steps then slow down many-fold and unevenly, which would make the wall-time axis say more about the
neighbours than about the arms.

`--jobs N` runs N GRPO runs at once, each in its own process on `--threads` threads: on 2 cores, two one-thread
runs side by side finish the whole benchmark in about half the time, and every arm runs under the same conditions.
Each run prints a line at each quarter of its steps (step, training seconds, training reward) and one at its end.

    make bench-learning
    .venv/bin/python -m benchmarks.bench_learning [--max-steps 150] [--seeds 0 1 2] [--eval-every 10] [--jobs 1] \\
        [--arms adaptive fixed-0 fixed-init fixed-10x] [--output benchmarks/results/learning.json] [RECIPE OVERRIDES]

Any other `--key value` is passed to the recipe parser, e.g. `--warmup_sft_epochs 1` for a quick look.

A long benchmark can run in parts, some seeds at a time from the same warm start, each part to its own `--output`;
`--merge` then trains nothing and writes one table and plot for all of them:

    .venv/bin/python -m benchmarks.bench_learning --merge part1.json part2.json --output learning.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from benchmarks.common import RESULTS, quiet, write_result


REPO = Path(__file__).resolve().parent.parent
RECIPE = REPO / "recipes" / "tiny" / "grpo" / "cpu.yaml"
OLD_REWARDS = ["--reward_funcs", "tool_format", "tool_bfcl", "tool_partial", "--reward_weights", "0.2", "1.0", "0.5",
               "--advantage_baseline", "group", "--gold_anchor", "0"]  # fmt: skip
NO_GOLD = ["--gold_in_group", "false", "--gold_anchor", "0"]
GOLD_ANCHOR = "1.0"
# Each arm: recipe overrides, as a function of the recipe's beta. The fixed arms turn the adaptive controller off.
ARMS = {
    "adaptive": lambda beta: ["--adaptive_kl", "true", "--beta", str(beta)],
    "fixed-0": lambda beta: ["--adaptive_kl", "false", "--beta", "0"],
    "fixed-init": lambda beta: ["--adaptive_kl", "false", "--beta", str(beta)],
    "fixed-10x": lambda beta: ["--adaptive_kl", "false", "--beta", str(10 * beta)],
    # Without the gold turn there is nothing to anchor on: GRPO alone.
    "no-gold": lambda beta: ["--adaptive_kl", "true", "--beta", str(beta), *NO_GOLD],
    # The BFCL recipe's rewards before the decision reward (issue 60): format, BFCL's verdict and partial credit, trl's
    # group baseline, trl's uniform shuffle (`no_call_share` unset, see OLD_REWARDS_UNSET), no supervised anchor.
    "old-rewards": lambda beta: ["--adaptive_kl", "true", "--beta", str(beta), *OLD_REWARDS],
    # GRPO plus a supervised term (issue 60): the recipe with the gold turns' negative log-likelihood added to the
    # loss at GOLD_ANCHOR, never reported as GRPO alone.
    "anchored": lambda beta: ["--adaptive_kl", "true", "--beta", str(beta), "--gold_anchor", GOLD_ANCHOR],
    # Not GRPO: supervised fine-tuning from the same warm start on the GRPO split's gold turns, a fresh LoRA adapter
    # of the recipe's shape, the warm start's learning rate and batch size, stopped after as many training seconds
    # as the `adaptive` run of the same seed took (run after it; without an adaptive arm, the first GRPO arm named).
    "sft": lambda beta: [],
}
GRPO_ARMS = tuple(arm for arm in ARMS if arm != "sft")
ARM_COLORS = dict(zip(ARMS, ["tab:blue", "tab:gray", "tab:orange", "tab:red", "tab:purple", "tab:green", "tab:olive",
                             "tab:brown"], strict=True))  # fmt: skip
WARM_COLOR = "tab:cyan"
# Settings the old-rewards arm leaves unset, which no command-line value can express.
OLD_REWARDS_UNSET = ("no_call_share",)


def parse_recipe(recipe: str | os.PathLike[str], overrides: list[str]) -> tuple[Any, Any, Any]:
    """The recipe with command-line overrides, parsed as `grpo-tools train` parses it."""
    from trl import TrlParser

    from grpo_tools.training.configs import ModelConfig, ToolGRPOConfig, ToolScriptArguments

    parser = TrlParser((ToolScriptArguments, ToolGRPOConfig, ModelConfig))
    return parser.parse_args_and_config(args=["--config", str(recipe), *overrides])


def held_out_completions(
    model: Any, tokenizer: Any, rows: list[dict], script_args: Any, training_args: Any
) -> list[str]:
    """Greedy completions for the held-out rows, as `grpo-tools eval` generates them."""
    from grpo_tools.data.prompts import render_prompt
    from grpo_tools.evaluation.generation import generate_completions

    return generate_completions(
        model,
        tokenizer,
        [render_prompt(tokenizer, row) for row in rows],
        batch_size=script_args.eval_batch_size,
        max_new_tokens=training_args.max_completion_length,
        progress=False,
    )


def score_held_out(completions: list[str], rows: list[dict], script_args: Any, training_args: Any) -> dict:
    """Held-out completions scored: exact-call accuracy (the recipe's `eval_scorer`) and the weighted reward the run
    trains with (`training_rewards`, so `tool_decision` pays the run's `decision_*` values)."""
    from grpo_tools.rewards import REWARDS
    from grpo_tools.training.reward_funcs import training_rewards

    columns = {
        "tools": [row["tools"] for row in rows],
        "answers": [row["answers"] for row in rows],
        "possible_answers": [row.get("possible_answers") for row in rows],
    }
    correct = REWARDS[f"tool_{script_args.eval_scorer}"].function(completions=completions, **columns)
    weights = training_args.reward_weights or [1.0] * len(training_args.reward_funcs)
    functions, _ = training_rewards(training_args, multi_turn=False)
    total = [0.0] * len(rows)
    for weight, function in zip(weights, functions, strict=True):
        total = [
            sum_ + weight * score
            for sum_, score in zip(total, function(completions=completions, **columns), strict=True)
        ]
    by_category: dict[str, list[float]] = {}
    for row, score in zip(rows, correct, strict=True):
        by_category.setdefault(_category(row), []).append(score)
    categories = {name: statistics.mean(scores) for name, scores in by_category.items()}
    calls = [value for name, value in categories.items() if "irrelevance" not in name]
    irrelevance = [value for name, value in categories.items() if "irrelevance" in name]
    call_mean = statistics.mean(calls) if calls else None  # the categories that need a call, each counted once
    return {
        "accuracy": statistics.mean(correct),
        "mean_reward": statistics.mean(total),
        "by_category": categories,
        "calls": call_mean,
        # calls and abstaining together: a model that never calls scores 0.5 (grpo_tools.evaluation.usable)
        "usable": (call_mean + statistics.mean(irrelevance)) / 2 if calls and irrelevance else None,
    }


def held_out_scores(model: Any, tokenizer: Any, rows: list[dict], script_args: Any, training_args: Any) -> dict:
    """Greedy completions for the held-out rows, scored (`score_held_out`) with the run's own rewards."""
    completions = held_out_completions(model, tokenizer, rows, script_args, training_args)
    return score_held_out(completions, rows, script_args, training_args)


def _category(row: dict) -> str:
    """A row's BFCL category where its id names one (`simple_python_17`), else its canonical category."""
    from grpo_tools.evaluation.leaderboard import source_category

    try:
        return source_category(row["id"])
    except ValueError:
        return row.get("category") or "all"


def _eval_callback(
    tokenizer: Any, rows: list[dict], script_args: Any, training_args: Any, every: int, label: str = ""
) -> Any:
    from transformers import TrainerCallback

    class HeldOutEval(TrainerCallback):
        """Scores the held-out rows every `every` steps and at the end; keeps a training clock without the evals. With
        a `label`, prints a line at each quarter of the run (before the last step, which the run's summary line
        reports): a SmolLM2 run trains for a quarter of an hour, and its worker says nothing else meanwhile."""

        def __init__(self) -> None:
            self.points: list[dict[str, Any]] = []
            self.step_seconds: list[float] = []  # training wall seconds at the end of each step
            self.start = 0.0
            self.eval_seconds = 0.0

        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.start = time.perf_counter()

        def on_step_end(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
            now = time.perf_counter()
            train_seconds = now - self.start - self.eval_seconds
            self.step_seconds.append(train_seconds)
            if state.global_step % every == 0 or state.global_step == state.max_steps:
                scores = held_out_scores(model, tokenizer, rows, script_args, training_args)
                self.points.append({"step": state.global_step, "train_seconds": train_seconds, **scores})
                self.eval_seconds += time.perf_counter() - now

        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any) -> None:
            # trl logs a step's reward after its `on_step_end`, so the progress line is printed here.
            quarter = max(state.max_steps // 4, 1)
            step = state.global_step
            if label and logs and "reward" in logs and step % quarter == 0 and step < state.max_steps:
                seconds = self.step_seconds[-1] if self.step_seconds else 0.0
                reward = logs["reward"]
                print(
                    f"  {label}: step {step}/{state.max_steps}, {seconds:.0f} s, training reward {reward:.3f}",
                    flush=True,
                )

    return HeldOutEval()


def warm_start_settings(script_args: Any, training_args: Any, model_args: Any) -> dict[str, Any]:
    """What the warm start depends on (`grpo_tools.training.warm_start`): every model and LoRA setting, the
    `warmup_sft_*` settings and the rows they name, and the seed, precision and device of the training settings.
    JSON-ready: values that JSON has no type for are written as their text."""
    import dataclasses

    script = {
        field.name: getattr(script_args, field.name)
        for field in dataclasses.fields(script_args)
        if field.name.startswith("warmup_sft") or field.name == "dataset_name"
    }
    training = {name: getattr(training_args, name) for name in ("seed", "bf16", "fp16", "use_cpu")}
    settings = {"model": dataclasses.asdict(model_args), "script": script, "training": training}
    return json.loads(json.dumps(settings, default=str))


def warm_start_once(
    recipe: str, overrides: list[str], work_dir: Path, train_rows: list[dict], fresh: bool
) -> tuple[str, float | None]:
    """The recipe's supervised warm start, run once into `work_dir/warmup` as `grpo-tools train` runs it (on
    `warmup_sft_data` where the recipe names it, LoRA merged with `warmup_sft_peft`), or reused when that folder holds
    one made from the same warm-start settings, warm-start rows and base model weights; returns its folder and the
    seconds it took (None when reused).

    The settings compared are the ones the warm start reads (`warm_start_settings`), as parsed from the recipe and
    overrides: a comment does not count, and neither does a GRPO-only setting (`--kl_target`, `--learning_rate`,
    `--lr_scheduler_type`, ...), so trying one reuses the warm start rather than redoing it."""
    import hashlib

    from transformers import AutoTokenizer

    from grpo_tools.training.warm_start import warm_started_model
    from tasks.tiny_model import build_tiny_model

    script_args, training_args, model_args = parse_recipe(recipe, [*overrides, "--output_dir", str(work_dir)])
    model_path = model_args.model_name_or_path
    if not Path(model_path).exists() and Path(model_path).name == "tiny-model":
        build_tiny_model(model_path, seed=0)  # what `make train` does first
    weights = sorted(Path(model_path).glob("*.safetensors"))
    warm_rows = script_args.warmup_sft_data or script_args.dataset_name
    key = {
        "settings": warm_start_settings(script_args, training_args, model_args),
        "warm_start_rows": hashlib.sha256(Path(warm_rows).read_bytes()).hexdigest()
        if warm_rows and Path(warm_rows).is_file()
        else warm_rows,
        "base_weights": [hashlib.sha256(path.read_bytes()).hexdigest() for path in weights] or model_path,
    }
    folder = work_dir / "warmup"
    marker = folder / "bench_learning_key.json"
    if not fresh and marker.exists() and json.loads(marker.read_text()) == key:
        return str(folder), None
    if script_args.warmup_sft_epochs <= 0:
        return model_path, 0.0
    start = time.perf_counter()
    training_args.disable_tqdm = True
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    warm_started_model(model_path, tokenizer, train_rows, script_args, training_args, model_args)
    marker.write_text(json.dumps(key))
    return str(folder), time.perf_counter() - start


def parse_arm(recipe: str, overrides: list[str], arm: str) -> tuple[Any, Any, Any]:
    """The recipe parsed with an arm's command-line overrides (`ARMS[arm]` among them), and the settings the
    old-rewards arm leaves unset."""
    script_args, training_args, model_args = parse_recipe(recipe, overrides)
    for name in OLD_REWARDS_UNSET if arm == "old-rewards" else ():
        setattr(training_args, name, None)
    return script_args, training_args, model_args


def run_arm(
    recipe: str,
    overrides: list[str],
    warm_dir: str,
    arm: str,
    seed: int,
    eval_every: int,
    work_dir: Path,
    rows: dict[str, list[dict]],
    seconds: float | None = None,
    step_zero: list[str] | None = None,
) -> dict:
    """One GRPO run of the recipe from the warm start: per-step logs and the held-out points, the first of them step 0
    where `step_zero` holds the warm start's held-out completions (scored here with this arm's rewards). The `sft` arm
    is `run_sft` for `seconds` of training instead."""
    if arm == "sft":
        return run_sft(recipe, overrides, warm_dir, seed, seconds or 0.0, work_dir, rows, step_zero)
    from transformers import AutoTokenizer

    from benchmarks.common import without_printer
    from grpo_tools.training import build_trainer

    beta = parse_recipe(recipe, overrides)[1].beta
    arm_overrides = [*overrides, *ARMS[arm](beta), "--seed", str(seed), "--model_name_or_path", warm_dir]
    arm_overrides += ["--output_dir", str(work_dir / f"{arm}-seed{seed}"), "--save_strategy", "no"]
    arm_overrides += ["--logging_steps", "1", "--disable_tqdm", "true", "--warmup_sft_epochs", "0"]
    script_args, training_args, model_args = parse_arm(recipe, arm_overrides, arm)
    tokenizer = AutoTokenizer.from_pretrained(warm_dir)
    callback = _eval_callback(
        tokenizer, rows["eval"], script_args, training_args, eval_every, f"{arm:<11} seed {seed}"
    )
    # The trainer `grpo-tools train` builds; the held-out callback prints this benchmark's own lines.
    trainer = without_printer(build_trainer(warm_dir, tokenizer, rows["train"], training_args, model_args, [callback]))
    trainer.train()
    logs = [entry for entry in trainer.state.log_history if "reward" in entry]
    points = _with_step_zero(callback.points, step_zero, rows["eval"], script_args, training_args)
    return {
        "arm": arm,
        "seed": seed,
        "beta": training_args.beta,
        "adaptive_kl": training_args.adaptive_kl,
        "steps": trainer.state.global_step,
        "train_seconds": callback.step_seconds[-1] if callback.step_seconds else 0.0,
        "held_out": points,
        "per_step": {
            "step": [entry["step"] for entry in logs],
            "train_seconds": callback.step_seconds[: len(logs)],
            "reward": [entry["reward"] for entry in logs],
            "kl": [entry.get("kl") for entry in logs],  # trl measures no KL when beta is 0
            "kl_coef": [entry.get("kl_coef", training_args.beta) for entry in logs],  # logged by the adaptive arm
            # Per class of row, the share of samples that call and that are right (`decision/...` in trl's log).
            "decision": {
                key.removeprefix("decision/"): [entry.get(key) for entry in logs]
                for key in sorted({key for entry in logs for key in entry if key.startswith("decision/")})
            },
        },
    }


def _with_step_zero(
    points: list[dict], step_zero: list[str] | None, rows: list[dict], script_args: Any, training_args: Any
) -> list[dict]:
    """A run's held-out points with step 0 first: the warm start's completions scored with the run's own rewards."""
    if step_zero is None:
        return points
    return [{"step": 0, "train_seconds": 0.0, **score_held_out(step_zero, rows, script_args, training_args)}, *points]


def run_sft(
    recipe: str,
    overrides: list[str],
    warm_dir: str,
    seed: int,
    seconds: float,
    work_dir: Path,
    rows: dict,
    step_zero: list[str] | None = None,
) -> dict:
    """The `sft` arm: supervised fine-tuning from the warm start on the GRPO split's gold turns (a fresh LoRA adapter
    of the recipe's, the warm start's learning rate, constant, and batch size) until `seconds` of training have
    passed, then the held-out evaluation, scored with the recipe's rewards (step 0 too, from `step_zero`)."""
    from transformers import AutoTokenizer, TrainerCallback

    from grpo_tools.training.warm_start import sft_trainer, train_sft

    arm_overrides = [*overrides, "--seed", str(seed), "--model_name_or_path", warm_dir, "--warmup_sft_peft", "true"]
    script_args, training_args, model_args = parse_recipe(recipe, arm_overrides)
    training_args.disable_tqdm = True
    tokenizer = AutoTokenizer.from_pretrained(warm_dir)

    class Budget(TrainerCallback):
        """Stops training once `seconds` of it have passed; records each step's loss and training seconds."""

        def __init__(self) -> None:
            self.start, self.steps, self.step_seconds, self.losses = 0.0, 0, [], []

        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.start = time.perf_counter()

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.steps = state.global_step
            self.step_seconds.append(time.perf_counter() - self.start)
            control.should_training_stop = self.step_seconds[-1] >= seconds

        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any) -> None:
            if logs and "loss" in logs:
                self.losses.append(logs["loss"])

    budget = Budget()
    trainer = sft_trainer(
        warm_dir, tokenizer, rows["train"], script_args, training_args, str(work_dir / f"sft-seed{seed}"),
        model_args, callbacks=[budget], num_train_epochs=1000, lr_scheduler_type="constant", warmup_steps=0,
        logging_steps=1,
    )  # fmt: skip
    train_sft(trainer, training_args.cpu_fast_path)
    train_seconds = budget.step_seconds[-1] if budget.step_seconds else 0.0
    scores = held_out_scores(trainer.model, tokenizer, rows["eval"], script_args, training_args)
    epochs = budget.steps * script_args.warmup_sft_batch_size / len(rows["train"])
    print(
        f"  sft         seed {seed}: {budget.steps} steps ({epochs:.1f} epochs) in {train_seconds:.0f} s", flush=True
    )
    return {
        "arm": "sft",
        "seed": seed,
        "beta": None,
        "adaptive_kl": None,
        "steps": budget.steps,
        "epochs": epochs,
        "train_seconds": train_seconds,
        "held_out": _with_step_zero([{"step": budget.steps, "train_seconds": train_seconds, **scores}], step_zero,
                                    rows["eval"], script_args, training_args),
        "per_step": {"step": list(range(1, len(budget.losses) + 1)), "train_seconds": budget.step_seconds,
                     "loss": budget.losses, "reward": [], "kl": [], "kl_coef": [], "decision": {}},
    }  # fmt: skip


def _worker_setup(threads: int | None, parent: int | None = None) -> None:
    """Each worker process: the same quiet logging and thread count as the parent, and an end when the parent ends.

    A parent killed outright (SIGTERM, SIGKILL) never shuts its pool down, and the workers, whose command line does
    not name this script, would train on for the rest of their run: each one watches that its parent is still its
    parent, and exits when it is not."""
    import threading

    import torch

    from grpo_tools.fastpath import keep_freed_memory

    quiet()
    keep_freed_memory()  # as `grpo-tools train` does
    if threads:
        torch.set_num_threads(threads)
    if parent is not None:
        threading.Thread(target=_exit_with_parent, args=(parent,), daemon=True).start()


def _exit_with_parent(parent: int, every: float = 2.0) -> None:
    """Exit this process once `parent` is no longer its parent (it was reparented when `parent` died)."""
    while os.getppid() == parent:
        time.sleep(every)
    os._exit(1)


def _map_runs(arguments: list[tuple], jobs: int, threads: int | None) -> Iterator[dict]:
    """`run_arm(*args)` for each entry, in order: in this process when `jobs` is 1, else in a pool of `jobs`
    processes (spawned, so no worker inherits the parent's torch threads or forked state), a fresh one for each run.
    In workers kept from run to run, SmolLM2's steps went from 18-21 s in the first run to 30-32 s in the last (12
    runs on 2 workers, 5.5 GB resident per worker by then)."""
    if jobs <= 1:
        yield from (run_arm(*args) for args in arguments)
        return
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(
        jobs, mp_context=context, initializer=_worker_setup, initargs=(threads, os.getpid()), max_tasks_per_child=1
    ) as pool:
        yield from pool.map(run_arm, *zip(*arguments, strict=True))


def run(
    recipe: str | os.PathLike[str] = RECIPE,
    seeds: tuple[int, ...] = (0, 1, 2),
    arms: tuple[str, ...] = tuple(ARMS),
    max_steps: int | None = None,
    eval_every: int = 10,
    work_dir: str | os.PathLike[str] = REPO / "outputs" / "bench-learning",
    overrides: tuple[str, ...] = (),
    fresh: bool = False,
    threads: int | None = 1,
    progress: bool = True,
    jobs: int = 1,
) -> dict[str, Any]:
    """Warm start once, then every arm for every seed (seeds outermost, so a cut-short session has every arm at the
    first seeds); returns everything the plot needs. `threads` sets torch's thread count (None: torch's default).
    `jobs` > 1 runs that many GRPO runs at once, each in its own process with `threads` threads; the results keep
    the same order."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from grpo_tools.data.prompts import load_rows
    from grpo_tools.fastpath import keep_freed_memory
    from grpo_tools.training.configs import model_init_kwargs

    quiet()
    keep_freed_memory()  # as `grpo-tools train` does
    if threads:
        # The warm start and the step-0 evaluation run alone, before any worker starts: they get every worker's
        # threads. Workers set their own count (`_worker_setup`); with `jobs` 1 the runs use this one.
        torch.set_num_threads(threads * max(jobs, 1))
    recipe = str(recipe)
    work_dir = Path(work_dir)
    start = time.perf_counter()
    script_args, training_args, model_args = parse_recipe(recipe, [*overrides, "--output_dir", str(work_dir)])
    rows = {
        "train": load_rows(script_args.dataset_name, script_args.max_train_rows),
        "eval": load_rows(script_args.eval_data, script_args.max_eval_rows),
    }
    warm_dir, warm_seconds = warm_start_once(recipe, list(overrides), work_dir, rows["train"], fresh)
    tokenizer = AutoTokenizer.from_pretrained(warm_dir)
    # In the dtype the runs load it in (`model_init_kwargs`: bf16 for LoRA on a CPU with native bf16), so that step 0
    # and the runs' evaluations differ by training alone.
    model = AutoModelForCausalLM.from_pretrained(warm_dir, **model_init_kwargs(training_args, model_args))
    # Generated once; each arm scores them with its own rewards (`run_arm`), the warm start's record with the recipe's.
    step_zero_completions = held_out_completions(model, tokenizer, rows["eval"], script_args, training_args)
    step_zero = score_held_out(step_zero_completions, rows["eval"], script_args, training_args)
    overrides = [*overrides, *(["--max_steps", str(max_steps)] if max_steps else [])]
    if threads:
        torch.set_num_threads(threads)
    runs: list[dict] = []
    # The GRPO arms first: the sft arm of a seed trains for as long as that seed's adaptive run did (or, without an
    # adaptive arm, the run of the first GRPO arm named).
    timed = "adaptive" if "adaptive" in arms else next((arm for arm in arms if arm != "sft"), None)
    for phase in ([arm for arm in arms if arm != "sft"], [arm for arm in arms if arm == "sft"]):
        plan = [(arm, seed) for seed in seeds for arm in phase]
        seconds = {run_["seed"]: run_["train_seconds"] for run_ in runs if run_["arm"] == timed}
        if "sft" in phase and any(seed not in seconds for seed in seeds):
            raise ValueError("the sft arm trains for as long as a GRPO arm of its seed: run one beside it")
        arguments = [
            (
                recipe,
                overrides,
                warm_dir,
                arm,
                seed,
                eval_every,
                work_dir,
                rows,
                seconds.get(seed),
                step_zero_completions,
            )
            for arm, seed in plan
        ]
        for run_ in _map_runs(arguments, jobs, threads):
            runs.append(run_)
            if progress:
                last = run_["held_out"][-1]
                print(
                    f"  {run_['arm']:<11} seed {run_['seed']}: {run_['steps']} steps in {run_['train_seconds']:.0f} s,"
                    f" held-out accuracy {last['accuracy']:.3f}, mean reward {last['mean_reward']:.3f}",
                    flush=True,
                )
    return {
        "recipe": recipe,
        "overrides": overrides,
        "cores_on_machine": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "jobs": jobs,
        "initial_beta": training_args.beta,
        "gold_anchor": training_args.gold_anchor,
        "kl_controller": {
            "rule": training_args.kl_controller,
            "target": training_args.kl_target,
            "horizon": training_args.kl_horizon,
        },
        "max_steps": max_steps or training_args.max_steps,
        "eval_every": eval_every,
        "eval_rows": len(rows["eval"]),
        "warm_start": {"folder": warm_dir, "seconds": warm_seconds, **step_zero},
        "seeds": list(seeds),
        "arms": list(arms),
        "runs": runs,
        "total_seconds": time.perf_counter() - start,
    }


def summary_table(result: dict[str, Any]) -> list[dict[str, Any]]:
    """Per arm, over seeds: final held-out accuracy and mean reward (mean, min, max), the accuracy gain over the warm
    start (step 0) of each seed (mean, min, max: the min says whether the gain holds on every seed), training
    seconds, final KL."""
    rows = []
    for arm in result["arms"]:
        runs = [run for run in result["runs"] if run["arm"] == arm]
        if not runs:
            continue
        finals = [run["held_out"][-1] for run in runs]
        gains = [run["held_out"][-1]["accuracy"] - run["held_out"][0]["accuracy"] for run in runs]
        kls = [
            run["per_step"]["kl"][-1]
            for run in runs
            if run["per_step"]["kl"] and run["per_step"]["kl"][-1] is not None
        ]
        rows.append({
            "arm": arm,
            "seeds": len(runs),
            "accuracy": [statistics.mean(p["accuracy"] for p in finals), min(p["accuracy"] for p in finals),
                         max(p["accuracy"] for p in finals)],
            "gain": [statistics.mean(gains), min(gains), max(gains)],
            "mean_reward": [statistics.mean(p["mean_reward"] for p in finals), min(p["mean_reward"] for p in finals),
                            max(p["mean_reward"] for p in finals)],
            "train_seconds": statistics.mean(run["train_seconds"] for run in runs),
            "final_kl": statistics.mean(kls) if kls else None,
            "final_kl_coef": statistics.mean(run["per_step"]["kl_coef"][-1] for run in runs)
            if all(run["per_step"]["kl_coef"] for run in runs) else None,
        })  # fmt: skip
        if all("by_category" in run["held_out"][-1] for run in runs):
            rows[-1]["by_category"] = {
                name: _spread([run["held_out"][-1]["by_category"][name] for run in runs])
                for name in runs[0]["held_out"][-1]["by_category"]
            }
            for measure in SUMMARY_MEASURES:
                if runs[0]["held_out"][-1].get(measure) is not None:
                    rows[-1][measure] = _spread([run["held_out"][-1][measure] for run in runs])
                    rows[-1][f"{measure}_gain"] = _spread([run["held_out"][-1][measure] - run["held_out"][0][measure]
                                                           for run in runs])  # fmt: skip
    return rows


# Held-out measures over categories, beside the accuracy of each: the mean of the call categories, and usable.
SUMMARY_MEASURES = ("calls", "usable")


def _measure_names(point: dict[str, Any]) -> list[str]:
    """The columns of a held-out point: its categories, then the summary measures it has."""
    return [*point["by_category"], *(name for name in SUMMARY_MEASURES if point.get(name) is not None)]


def _value(point: dict[str, Any], name: str) -> float:
    return point[name] if name in SUMMARY_MEASURES else point["by_category"][name]


def _spread(values: list[float]) -> list[float]:
    """Mean, min and max."""
    return [statistics.mean(values), min(values), max(values)]


def _band(ax: Any, xs: list[list[float]], ys: list[list[float]], label: str, color: str) -> None:
    """Mean over seeds with min to max around it; runs are aligned by index (same evaluation steps). Only a quantity
    measured at more than two points is drawn as a line with a shaded band; otherwise each measured point is a
    marker with a min-max bar, so nothing between the points reads as measured."""
    length = min(len(y) for y in ys)
    x = [statistics.mean(run[i] for run in xs) for i in range(length)]
    columns = [[run[i] for run in ys] for i in range(length)]
    means = [statistics.mean(c) for c in columns]
    if length > 2:
        ax.plot(x, means, label=label, color=color, marker="o", markersize=3)
        if len(ys) > 1:
            ax.fill_between(x, [min(c) for c in columns], [max(c) for c in columns], color=color, alpha=0.2)
        return
    low = [mean - min(c) for mean, c in zip(means, columns, strict=True)]
    high = [max(c) - mean for mean, c in zip(means, columns, strict=True)]
    ax.errorbar(x, means, yerr=[low, high], label=label, color=color, marker="o", linestyle="none", capsize=3)


def _categories_panel(ax: Any, result: dict[str, Any], labels: dict[str, str], colors: dict[str, str]) -> None:
    """Final held-out accuracy per category (and the mean of the call categories) for the warm start and each arm:
    a bar for the mean over seeds, a dot for each seed."""
    step_zero = result["warm_start"]
    names = _measure_names(step_zero)
    bars = [("warm start", WARM_COLOR, [step_zero])]
    bars += [
        (labels[arm], colors[arm], [run["held_out"][-1] for run in result["runs"] if run["arm"] == arm])
        for arm in result["arms"]
    ]
    width = 0.8 / len(bars)
    for index, (label, color, points) in enumerate(bars):
        for position, name in enumerate(names):
            values = [_value(point, name) for point in points]
            x = position + (index - (len(bars) - 1) / 2) * width
            ax.bar(x, statistics.mean(values), width, color=color, alpha=0.6, label=label if position == 0 else None)
            ax.scatter([x] * len(values), values, color="black", s=8, zorder=3)
    ax.set_xticks(range(len(names)), names)
    ax.set_ylabel("accuracy")
    ax.legend(fontsize=8)
    ax.set_title(f"held-out accuracy at the end ({result['eval_rows']} rows; bar: mean, dots: seeds)")


def recipe_label(recipe: str | os.PathLike[str]) -> str:
    """`recipes/<model>/grpo/<name>.yaml` as `<model> recipe`, for titles."""
    path = Path(recipe)
    return f"{path.parent.parent.name} recipe" if path.parent.name == "grpo" else path.name


def arm_labels(result: dict[str, Any]) -> dict[str, str]:
    """The legend's name of each arm: the adaptive arm with its controller's rule and target, where the result records
    them (results written before they were recorded name only the starting coefficient), and the recipe's supervised
    anchor where it has one (so not GRPO alone; short, to fit the panels' legends)."""
    beta = result["initial_beta"]
    controller = result.get("kl_controller")
    adaptive = f"adaptive, {controller['rule']}, target {controller['target']:g}" if controller else "adaptive"
    anchor = f" + anchor {result['gold_anchor']:g}" if result.get("gold_anchor") else ""
    return {"adaptive": f"{adaptive} (from {beta:g}){anchor}", "fixed-0": "fixed 0", "fixed-init": f"fixed {beta:g}",
            "fixed-10x": f"fixed {10 * beta:g}", "no-gold": "adaptive, no gold turn in the group",
            "old-rewards": "adaptive, the earlier rewards",
            "anchored": f"GRPO + supervised anchor {GOLD_ANCHOR} (not GRPO alone)",
            "sft": "supervised, same seconds (reward: the recipe's)"}  # fmt: skip


def plot(result: dict[str, Any], path: str | os.PathLike[str]) -> Path:
    """Six panels: held-out accuracy and mean reward against steps and training seconds, KL and its coefficient."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = ARM_COLORS
    labels = arm_labels(result)
    figure, axes = plt.subplots(2, 3, figsize=(16, 9))
    by_category = "by_category" in result.get("warm_start", {})
    if by_category:
        _categories_panel(axes[0][0], result, labels, colors)
    panels = [
        *([] if by_category else [(axes[0][0], "held_out", "step", "accuracy", "held-out accuracy")]),
        (axes[0][1], "held_out", "train_seconds", "accuracy", "held-out accuracy"),
        (axes[1][0], "per_step", "step", "reward", "training reward per step (each arm's own rewards)"),
        (axes[1][1], "held_out", "step", "mean_reward", "held-out mean reward (each arm's own rewards)"),
        (axes[0][2], "per_step", "step", "kl", "KL to the reference (trl log, per step)"),
        (axes[1][2], "per_step", "step", "kl_coef", "KL coefficient in force"),
    ]
    for ax, source, x_key, y_key, title in panels:
        for arm in result["arms"]:
            runs = [run for run in result["runs"] if run["arm"] == arm]
            if source == "per_step" and not all(run["per_step"][y_key] for run in runs):
                continue  # the sft arm logs no reward or KL
            if source == "held_out":
                xs = [[point[x_key] for point in run["held_out"]] for run in runs]
                ys = [[point[y_key] for point in run["held_out"]] for run in runs]
            else:
                if not runs or any(value is None for run in runs for value in run["per_step"][y_key]):
                    continue  # no KL is measured with beta = 0
                xs = [run["per_step"][x_key] for run in runs]
                ys = [run["per_step"][y_key] for run in runs]
            if runs:
                _band(ax, xs, ys, labels[arm], colors[arm])
        ax.set_title(title)
        ax.set_xlabel("optimizer step" if x_key == "step" else "training wall seconds (evaluation excluded)")
        ax.grid(alpha=0.3)
        if y_key in ("kl", "kl_coef"):
            ax.set_yscale("symlog", linthresh=1e-3)
        ax.legend(fontsize=8)
    seeds = len(result["seeds"])
    figure.suptitle(
        f"{recipe_label(result['recipe'])}: {', '.join(labels[arm] for arm in result['arms'])}\n"
        f"{seeds} seed{'s' * (seeds > 1)} each (mean, with min-max as a band or bar), {result['eval_rows']} held-out "
        f"rows, {result['cores_on_machine']} CPU cores"
    )
    figure.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


# What results must share to be merged: the same recipe run the same way from the same warm start.
MERGE_KEYS = ("recipe", "overrides", "initial_beta", "max_steps", "eval_every", "eval_rows")


def merge_results(results: list[dict[str, Any]], names: list[str]) -> dict[str, Any]:
    """Several invocations' results as one, e.g. seeds run in different sessions: the runs of all of them, their seeds
    and arms. Raises ValueError naming the file where a setting or the warm start's held-out accuracy differs from
    the first file's, or where an arm and seed pair was already in an earlier file. The KL controller (rule, target,
    horizon) is compared only between files that hold adaptive runs: the fixed arms do not read it."""
    for result, name in zip(results, names, strict=True):
        if not isinstance(result, dict):
            raise ValueError(f"{name}: not a result of this benchmark (not a JSON object)")
        missing = [key for key in (*MERGE_KEYS, "warm_start", "runs", "total_seconds") if key not in result]
        if missing:
            raise ValueError(f"{name}: not a result of this benchmark (no {', '.join(missing)})")
    first = results[0]
    merged = {**first, "runs": [], "seeds": [], "arms": [], "merged_from": names, "total_seconds": 0.0}
    seen: dict[tuple[str, int], str] = {}
    controller_from = None  # the first file with adaptive runs
    for result, name in zip(results, names, strict=True):
        for key in MERGE_KEYS:
            if result[key] != first[key]:
                raise ValueError(f"{name}: {key} is {result[key]!r}, but {names[0]} has {first[key]!r}")
        # Compared apart: results written before the controller was recorded have none.
        if any(run_["arm"] == "adaptive" for run_ in result["runs"]):
            if controller_from is None:
                controller_from = name
                merged["kl_controller"] = result.get("kl_controller")
            elif result.get("kl_controller") != merged["kl_controller"]:
                raise ValueError(
                    f"{name}: kl_controller is {result.get('kl_controller')!r}, "
                    f"but {controller_from} has {merged['kl_controller']!r}"
                )
        if result["warm_start"]["accuracy"] != first["warm_start"]["accuracy"]:
            raise ValueError(
                f"{name}: the warm start's held-out accuracy is {result['warm_start']['accuracy']}, "
                f"but {names[0]} has {first['warm_start']['accuracy']}: not the same warm start"
            )
        for run_ in result["runs"]:
            pair = (run_["arm"], run_["seed"])
            if pair in seen:
                raise ValueError(f"{name}: {pair[0]} seed {pair[1]} is also in {seen[pair]}")
            seen[pair] = name
            merged["runs"].append(run_)
        merged["total_seconds"] += result["total_seconds"]
    merged["seeds"] = sorted({run_["seed"] for run_ in merged["runs"]})
    merged["arms"] = [arm for arm in ARMS if any(run_["arm"] == arm for run_ in merged["runs"])]
    merged["runs"].sort(key=lambda run_: (run_["seed"], merged["arms"].index(run_["arm"])))
    return merged


def print_summary(result: dict[str, Any]) -> None:
    warm = result["warm_start"]
    took = "reused" if warm["seconds"] is None else f"{warm['seconds']:.0f} s"
    print(
        f"\nwarm start: {took}, held-out accuracy {warm['accuracy']:.3f}, mean reward {warm['mean_reward']:.3f} (the "
        "recipe's rewards; each arm's mean reward below is in the rewards it trains with)\n"
    )
    print(
        f"{'arm':<11} {'seeds':>5} {'accuracy (min-max)':>22} {'gain (min to max)':>27} {'mean reward (min-max)':>24}"
        f" {'train s':>8} {'KL':>8}"
    )
    _print_categories(result)
    for row in result["summary"]:
        accuracy, gain, reward = row["accuracy"], row["gain"], row["mean_reward"]
        kl = f"{row['final_kl']:.4f}" if row["final_kl"] is not None else "-"
        print(
            f"{row['arm']:<11} {row['seeds']:>5} {accuracy[0]:>8.3f} ({accuracy[1]:.3f}-{accuracy[2]:.3f})"
            f" {gain[0]:>+8.3f} ({gain[1]:+.3f} to {gain[2]:+.3f})"
            f" {reward[0]:>10.3f} ({reward[1]:.3f}-{reward[2]:.3f}) {row['train_seconds']:>8.0f} {kl:>8}"
        )


def _print_categories(result: dict[str, Any]) -> None:
    """Held-out accuracy (%) per category, mean over seeds with min-max, the warm start first."""
    warm = result["warm_start"]
    if "by_category" not in warm:
        return
    names = _measure_names(warm)
    print(f"{'held-out accuracy (%)':<24}" + "".join(f"{name:>22}" for name in names))
    print(f"{'warm start':<24}" + "".join(f"{100 * _value(warm, name):>22.1f}" for name in names))
    for row in result["summary"]:
        if "by_category" not in row:
            continue
        cells = [_value(row, name) for name in names]
        print(
            f"{row['arm']:<24}" + "".join(f"{100 * m:>10.1f} ({100 * lo:4.1f}-{100 * hi:4.1f})" for m, lo, hi in cells)
        )
    print()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--recipe", default=str(RECIPE))
    parser.add_argument("--max-steps", type=int, help="GRPO steps per run (default: the recipe's)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--arms", nargs="+", choices=list(ARMS), default=list(ARMS))
    parser.add_argument("--eval-every", type=int, default=10, help="steps between held-out evaluations")
    parser.add_argument("--work-dir", default=str(REPO / "outputs" / "bench-learning"), help="runs and warm start")
    parser.add_argument("--fresh", action="store_true", help="redo the warm start even if the work folder has one")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (0: torch's default); see the docstring")
    parser.add_argument("--jobs", type=int, default=1, help="GRPO runs at once, one process each (default: 1)")
    parser.add_argument("--output", default=str(RESULTS / "learning.json"), help="JSON; the PNG goes next to it")
    parser.add_argument(
        "--merge",
        nargs="+",
        metavar="JSON",
        help="train nothing: combine the results of earlier invocations (same recipe, settings and warm start, "
        "different seeds or arms) into --output and its plot",
    )
    args, overrides = parser.parse_known_args()
    if args.merge:
        if overrides:
            parser.error(f"--merge trains nothing, so it takes no recipe overrides: {' '.join(overrides)}")
        results = []
        for name in args.merge:
            try:
                results.append(json.loads(Path(name).read_text()))
            except (OSError, ValueError) as error:
                parser.exit(2, f"bench_learning.py --merge: {name}: {error}\n")
        try:
            result = merge_results(results, args.merge)
        except ValueError as error:
            parser.exit(2, f"bench_learning.py --merge: {error}\n")
    else:
        print(
            f"learning: {len(args.arms)} arms x {len(args.seeds)} seeds of {args.recipe}"
            f"{' ' + ' '.join(overrides) if overrides else ''}, held-out evaluation every {args.eval_every} steps",
            flush=True,
        )
        result = run(args.recipe, tuple(args.seeds), tuple(args.arms), args.max_steps, args.eval_every,
                     args.work_dir, tuple(overrides), args.fresh, args.threads or None, jobs=args.jobs)  # fmt: skip
    result["summary"] = summary_table(result)
    print_summary(result)
    output = write_result(args.output, result)
    figure = plot(result, output.with_suffix(".png"))
    print(f"\nwrote {output} and {figure} ({result['total_seconds'] / 60:.1f} min in all)")


if __name__ == "__main__":
    main()
