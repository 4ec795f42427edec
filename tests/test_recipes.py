"""Every recipe under recipes/ parses with the real parser into valid configurations, opens with the comment header
docs/configuration.md describes (what it trains, the hardware, the launch line), and every accelerate config loads with accelerate's
own loader, its nested `fsdp_config` / `deepspeed_config` keys each an option of `accelerate launch`. (FSDP itself
cannot be run here: accelerate 1.15 selects FSDP only for GPU-like devices, and two CPU processes get DDP.)"""

from pathlib import Path

import pytest
import torch
import yaml
from trl import TrlParser

from grpo_tools.training.configs import ModelConfig, ToolGRPOConfig, ToolScriptArguments
from grpo_tools.training.reward_funcs import REWARD_FUNCS


RECIPES = sorted(Path("recipes").glob("*/grpo/*.yaml"))
ACCELERATE = sorted(Path("recipes/accelerate_configs").glob("*.yaml"))


def test_the_expected_recipes_exist():
    names = {f"{path.parts[1]}/{path.stem}" for path in RECIPES}
    assert {
        "tiny/cpu",
        "Qwen2.5-0.5B-Instruct/tool-use",
        "Qwen2.5-0.5B-Instruct/exploration",
        "Qwen2.5-0.5B-Instruct/stable",
        "Qwen2.5-7B-Instruct/tool-use",
        "Llama-3.2-1B-Instruct/tool-use",
        "SmolLM2-135M-Instruct/bfcl",
        "SmolLM2-135M-Instruct/bfcl-gpu",
        "tiny/bfcl-multi-turn-cpu",
        "Qwen2.5-1.5B-Instruct/bfcl-multi-turn",
    } <= names
    assert {path.stem for path in ACCELERATE} == {"ddp", "zero2", "zero3", "fsdp"}


@pytest.mark.parametrize("recipe", RECIPES, ids=str)
def test_recipe_parses_with_the_real_parser(recipe):
    overrides = []
    if not torch.cuda.is_available():
        # GPU recipes ask for bf16 and vLLM, which transformers and trl refuse to configure on a CPU-only machine;
        # everything else is parsed and validated as written.
        overrides = ["--bf16", "false", "--use_vllm", "false"]
    parser = TrlParser((ToolScriptArguments, ToolGRPOConfig, ModelConfig))
    script_args, training_args, model_args = parser.parse_args_and_config(["--config", str(recipe), *overrides])
    assert model_args.model_name_or_path and script_args.dataset_name and training_args.output_dir
    assert set(training_args.reward_funcs) <= set(REWARD_FUNCS)
    assert training_args.output_dir.startswith("outputs/")
    text = recipe.read_text()
    header = text.split("\n\n")[0]
    assert header.startswith("# ") and "Launch:" in header
    assert "grpo-tools train" in header or "grpo_tools.cli train" in header
    for section in ("# Model", "# Data", "# Rewards", "# GRPO", "# Logging"):
        assert f"\n{section}\n" in text


@pytest.mark.parametrize("config", ACCELERATE, ids=str)
def test_accelerate_config_is_valid(config):
    settings = yaml.safe_load(config.read_text())
    assert settings["distributed_type"] in {"MULTI_GPU", "DEEPSPEED", "FSDP"}
    assert settings["num_processes"] >= 2
    assert config.read_text().startswith("# ") and "accelerate launch --config_file" in config.read_text()


def test_the_bfcl_gpu_recipe_is_the_bfcl_recipe_scaled_up():
    """bfcl-gpu.yaml says it is `make train`'s recipe with a longer GRPO split, larger steps and checkpoints: every
    other setting (model, LoRA, warm start, rewards, sampling, KL target) must stay the CPU recipe's."""
    folder = Path("recipes/SmolLM2-135M-Instruct/grpo")
    cpu = yaml.safe_load((folder / "bfcl.yaml").read_text())
    gpu = yaml.safe_load((folder / "bfcl-gpu.yaml").read_text())
    scaled = {
        "dataset_name": "outputs/bfcl-task/train_long.jsonl",
        "eval_data": "outputs/bfcl-task/eval_full.jsonl",
        "eval_batch_size": 120,
        "per_device_train_batch_size": 128,
        "max_steps": 45,
        "use_cpu": False,
        "bf16": True,
        "output_dir": "outputs/smollm2-bfcl-gpu",
        "save_strategy": "steps",
        "save_steps": 15,
    }
    assert {key: gpu[key] for key in scaled} == scaled
    shared = (set(cpu) | set(gpu)) - set(scaled) - {"kl_horizon"}
    assert {key: gpu.get(key) for key in shared} == {key: cpu.get(key) for key in shared}
    # The KL horizon counts completions (docs/configuration.md): it scales with the completions a step.
    horizon_per_completion = cpu["kl_horizon"] / cpu["per_device_train_batch_size"]
    assert gpu["kl_horizon"] / gpu["per_device_train_batch_size"] == horizon_per_completion


def accelerate_config_problems(path):
    """What accelerate's own loader refuses in an accelerate config (an unknown top-level key, an unknown
    distributed_type), and the `fsdp_config` / `deepspeed_config` keys `accelerate launch` has no option for (launch
    copies those onto its arguments without a check, so a misspelt one is silently ignored)."""
    from accelerate.commands.config.config_args import load_config_from_file
    from accelerate.commands.launch import launch_command_parser

    config = load_config_from_file(str(path))
    options = {action.dest for action in launch_command_parser()._actions}
    nested = [*(config.fsdp_config or {}), *(config.deepspeed_config or {})]
    return config, sorted(set(nested) - options)


@pytest.mark.parametrize("config", ACCELERATE, ids=str)
def test_accelerate_config_loads_with_accelerates_own_loader(config):
    loaded, unknown = accelerate_config_problems(config)
    assert unknown == []
    assert loaded.distributed_type.value == yaml.safe_load(config.read_text())["distributed_type"]


def test_a_misspelt_accelerate_key_is_caught(tmp_path):
    settings = yaml.safe_load(Path("recipes/accelerate_configs/fsdp.yaml").read_text())
    settings["fsdp_config"]["fsdp_auto_wrap"] = "TRANSFORMER_BASED_WRAP"
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(settings))
    assert accelerate_config_problems(path)[1] == ["fsdp_auto_wrap"]
    settings["num_process"] = 2
    path.write_text(yaml.safe_dump(settings))
    with pytest.raises(ValueError, match="unknown keys"):
        accelerate_config_problems(path)
