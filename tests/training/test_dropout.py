"""Tests that GRPO's policy computes without dropout by default: trl recomputes the old log-probabilities in train
mode (with vLLM, to compare them with vLLM's sampling log-probabilities), so dropout would make the same batch's
log-probabilities differ from one pass to the next and an on-policy importance ratio differ from 1. A LoRA adapter
with `lora_dropout` 0.05 computes the same log-probabilities twice in train mode, and every recipe that generates with
vLLM trains without dropout. (A vLLM run that asks for dropout is refused: tests/training/test_vllm_sync.py.)"""

from pathlib import Path

import torch
import yaml
from peft import LoraConfig
from trainer_builders import make_trainer, perturb_adapter
from trl import TrlParser

from grpo_tools.training.configs import ModelConfig, ToolGRPOConfig, ToolScriptArguments


VLLM_RECIPES = [path for path in sorted(Path("recipes").glob("*/grpo/*.yaml")) if "use_vllm: true" in path.read_text()]


def test_the_same_batch_gets_the_same_log_probabilities_twice_in_train_mode(tiny_model_dir, small_data, tmp_path):
    dropout = LoraConfig(r=8, lora_alpha=16, lora_dropout=0.05, target_modules="all-linear", task_type="CAUSAL_LM")
    trainer = make_trainer(tiny_model_dir, small_data["train"], tmp_path, peft_config=dropout, cpu_fast_path="off")
    prompts = perturb_adapter(trainer)  # B = 0 would hide the adapter's dropout
    batch = trainer.processing_class(prompts[:1], return_tensors="pt")
    trainer.model.train()
    torch.manual_seed(0)
    first, _, _ = trainer.token_logps(trainer.model, batch["input_ids"], batch["attention_mask"], 6)  # (1, 6)
    second, _, _ = trainer.token_logps(trainer.model, batch["input_ids"], batch["attention_mask"], 6)  # (1, 6)
    assert torch.equal(first, second)  # on-policy, the ratio exp(new - old) is exactly 1


def test_every_vllm_recipe_trains_without_dropout():
    assert len(VLLM_RECIPES) >= 5
    parser = TrlParser((ToolScriptArguments, ToolGRPOConfig, ModelConfig))
    for recipe in VLLM_RECIPES:
        overrides = [] if torch.cuda.is_available() else ["--bf16", "false", "--use_vllm", "false"]
        _, training_args, model_args = parser.parse_args_and_config(["--config", str(recipe), *overrides])
        assert training_args.disable_dropout, recipe
        # A dropout the run switches off would only mislead a reader of the recipe.
        assert model_args.lora_dropout == 0.0 == yaml.safe_load(recipe.read_text()).get("lora_dropout", 0.0), recipe
