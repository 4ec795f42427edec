"""Run by tests/training/test_run.py under `torchrun --nproc_per_node 2`: a few ToolGRPOTrainer steps, then
each process writes the KL it fed its controller, and the coefficients it got, to OUT/rank<N>.json."""

import json
import os
import sys
from pathlib import Path

from peft import LoraConfig
from transformers import AutoTokenizer

from grpo_tools.data.prompts import load_rows, prompt_dataset
from grpo_tools.training.configs import ToolGRPOConfig
from grpo_tools.training.trainer import ToolGRPOTrainer


def letter_reward(completions, **kwargs):
    return [float(text.count("e")) for text in completions]


def main(model_dir: str, train_path: str, out: str) -> None:
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    args = ToolGRPOConfig(
        output_dir=out, use_cpu=True, per_device_train_batch_size=4, num_generations=4, max_completion_length=8,
        max_steps=3, learning_rate=2e-2, logging_steps=1, report_to=[], save_strategy="no", gradient_checkpointing=False,
        disable_tqdm=True, seed=0, beta=0.01, kl_target=0.001,
    )  # fmt: skip
    trainer = ToolGRPOTrainer(
        model=model_dir, reward_funcs=[letter_reward], args=args, processing_class=tokenizer,
        train_dataset=prompt_dataset(load_rows(train_path), tokenizer),
        peft_config=LoraConfig(r=8, lora_alpha=16, target_modules="all-linear", task_type="CAUSAL_LM"),
    )  # fmt: skip
    trainer.train()
    rank = trainer.accelerator.process_index
    Path(out, f"rank{rank}.json").write_text(
        json.dumps({"kl_history": trainer.kl_history, "world": trainer.accelerator.num_processes})
    )
    # Both ranks have written their result: leave without tearing gloo down. On a loaded machine its threads aborted
    # ("terminate called without an active exception") or hung at interpreter exit, and so did destroy_process_group.
    trainer.accelerator.wait_for_everyone()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main(*sys.argv[1:4])
