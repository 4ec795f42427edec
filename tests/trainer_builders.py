"""Builders shared by the trainer tests (tests/training) and the fast-path tests (tests/fastpath): a
`ToolGRPOTrainer` on the tiny offline model, a reward any model can climb, and a LoRA adapter moved off the identity.
Imported as `trainer_builders` (tests/ is on the path through its conftest)."""

import torch
from peft import LoraConfig
from transformers import AutoTokenizer

from grpo_tools.data.prompts import load_rows, prompt_dataset
from grpo_tools.training.configs import ToolGRPOConfig
from grpo_tools.training.trainer import ToolGRPOTrainer


def letter_reward(completions, **kwargs):
    """A reward any random model can climb from the first step: how often it writes the letter 'e'."""
    return [float(text.count("e")) for text in completions]


def make_trainer(model_dir, train_path, output_dir, reward_funcs=(letter_reward,), peft_config=None, **overrides):
    """`ToolGRPOTrainer` on the tiny model: LoRA on every linear layer (or `peft_config`), 2 groups of 4, CPU."""
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    settings = {
        "output_dir": str(output_dir),
        "use_cpu": True,
        "per_device_train_batch_size": 8,
        "num_generations": 4,
        "max_completion_length": 12,
        "max_steps": 4,
        "learning_rate": 1e-3,
        "logging_steps": 1,
        "report_to": [],
        "save_strategy": "no",
        "gradient_checkpointing": False,
        "disable_tqdm": True,
        "seed": 0,
        **overrides,
    }
    return ToolGRPOTrainer(
        model=model_dir,
        reward_funcs=list(reward_funcs),
        args=ToolGRPOConfig(**settings),
        train_dataset=prompt_dataset(load_rows(train_path), tokenizer, with_gold=settings.get("gold_in_group", False)),
        processing_class=tokenizer,
        peft_config=peft_config or LoraConfig(r=8, lora_alpha=16, target_modules="all-linear", task_type="CAUSAL_LM"),
    )


def perturb_adapter(trainer):
    """Random LoRA B weights, so that the adapter changes the outputs; returns two prompts of different lengths."""
    with torch.no_grad():
        for name, parameter in trainer.model.named_parameters():
            if "lora_B" in name:
                parameter.normal_(std=0.5)
    return ["Convert 50 EUR to JPY, please, right now.", "Weather in Lyon?"]
