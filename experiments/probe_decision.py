"""Does GRPO learn at all on the tiny recipe? A probe with a reward the warm-started model can climb by a decision
alone: 1 for a completion without a tool call, 0 for one with a call.

The tiny recipe's held-out accuracy does not move under GRPO (docs/findings.md, "The tiny model"); this separates
"the trainer does not learn" from "this model does not learn to copy argument values". It runs the recipe
(`recipes/tiny/grpo/cpu.yaml`, β = 0, no adaptive KL) from the warm start `make bench-learning-tiny` keeps in
`outputs/bench-learning/warmup` (made first if missing), and prints the mean reward every 5 steps:

    .venv/bin/python -m experiments.probe_decision [--max-steps 40]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from benchmarks.bench_learning import RECIPE, REPO, parse_recipe, warm_start_once
from benchmarks.common import quiet, without_printer


def no_call_reward(completions: list[str], **kwargs: object) -> list[float]:
    """1.0 for an answer in words, 0.0 for one that calls a tool."""
    return [0.0 if "<tool_call>" in text else 1.0 for text in completions]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max-steps", type=int, default=40)
    parser.add_argument("--work-dir", default=str(REPO / "outputs" / "bench-learning"), help="where the warm start is")
    args = parser.parse_args()
    import torch
    from transformers import AutoTokenizer

    from grpo_tools.data.prompts import load_rows
    from grpo_tools.training import build_trainer

    quiet()
    torch.set_num_threads(1)
    work_dir = Path(args.work_dir)
    script_args, _, _ = parse_recipe(RECIPE, ["--output_dir", str(work_dir)])
    rows = load_rows(script_args.dataset_name, script_args.max_train_rows)
    warm_dir, _ = warm_start_once(str(RECIPE), [], work_dir, rows, fresh=False)
    overrides = ["--model_name_or_path", warm_dir, "--output_dir", str(work_dir / "probe-decision"), "--max_steps"]
    overrides += [str(args.max_steps), "--adaptive_kl", "false", "--beta", "0", "--logging_steps", "5"]
    overrides += ["--save_strategy", "no", "--disable_tqdm", "true", "--warmup_sft_epochs", "0"]
    # The recipe's rewards give way to the probe's: tool_format stays at weight 0 (logged, trained on by nothing)
    overrides += ["--reward_funcs", "tool_format", "--reward_weights", "0.0"]
    _, training_args, model_args = parse_recipe(RECIPE, overrides)
    tokenizer = AutoTokenizer.from_pretrained(warm_dir)
    # The trainer `grpo-tools train` builds from the recipe, with the probe's reward added at weight 1
    trainer = build_trainer(warm_dir, tokenizer, rows, training_args, model_args)
    trainer.add_reward_func(no_call_reward, 1.0)
    trainer = without_printer(trainer)
    trainer.train()
    for entry in trainer.state.log_history:
        if "reward" in entry:
            print(f"step {entry['step']:>3}: mean reward {entry['reward']:.3f}")


if __name__ == "__main__":
    main()
