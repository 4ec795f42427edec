"""Every key of every recipe under recipes/ reaches the object it configures: model keys the keyword arguments the
model is loaded with (`model_init_kwargs`), the tokenizer's or peft's `LoraConfig`; trainer keys the parsed
`ToolGRPOConfig`; data and warm-start keys the parsed `ToolScriptArguments`. A key that belongs to no object, or to
trl's `ModelConfig` but is handed on nowhere, fails. Quantization keys (no recipe sets them) reach the
`BitsAndBytesConfig`, and without bitsandbytes installed they get one clear `ConfigError`."""

import dataclasses
import enum
from pathlib import Path

import pytest
import torch
import yaml
from trl import TrlParser, get_peft_config

from grpo_tools.training.configs import ModelConfig, ToolGRPOConfig, ToolScriptArguments


RECIPES = sorted(Path("recipes").glob("*/grpo/*.yaml"))
# GPU recipes ask for bf16 and vLLM, which transformers and trl refuse to configure on a CPU-only machine.
CPU_OVERRIDES = {} if torch.cuda.is_available() else {"bf16": "false", "use_vllm": "false"}

# Where each of trl's model settings takes effect, read from (load kwargs, tokenizer kwargs, LoraConfig).
MODEL_KEYS = {
    "model_name_or_path": None,  # the model itself: the run loads it by this name (tests/training/test_run.py)
    "model_revision": lambda load, tok, lora: [load["revision"], tok["revision"]],
    "dtype": lambda load, tok, lora: [load["dtype"]],
    "attn_implementation": lambda load, tok, lora: [load["attn_implementation"]],
    "use_peft": lambda load, tok, lora: [lora is not None],
    "lora_r": lambda load, tok, lora: [lora.r],
    "lora_alpha": lambda load, tok, lora: [lora.lora_alpha],
    "lora_dropout": lambda load, tok, lora: [lora.lora_dropout],
    "lora_target_modules": lambda load, tok, lora: [lora.target_modules],
    "lora_target_parameters": lambda load, tok, lora: [lora.target_parameters],
    "lora_modules_to_save": lambda load, tok, lora: [lora.modules_to_save],
    "lora_task_type": lambda load, tok, lora: [lora.task_type],
    "use_rslora": lambda load, tok, lora: [lora.use_rslora],
    "use_dora": lambda load, tok, lora: [lora.use_dora],
    "load_in_4bit": lambda load, tok, lora: [load["quantization_config"].load_in_4bit],
    "load_in_8bit": lambda load, tok, lora: [load["quantization_config"].load_in_8bit],
    "bnb_4bit_quant_type": lambda load, tok, lora: [load["quantization_config"].bnb_4bit_quant_type],
    "use_bnb_nested_quant": lambda load, tok, lora: [load["quantization_config"].bnb_4bit_use_double_quant],
    "bnb_4bit_quant_storage": lambda load, tok, lora: [load["quantization_config"].bnb_4bit_quant_storage],
}
# Trainer settings that our own loading reads too, besides trl's trainer: the tokenizer and the warm start's model.
LOADING_TRAINER_KEYS = {
    "trust_remote_code": lambda load, tok, lora: [load["trust_remote_code"], tok["trust_remote_code"]]
}


def parse(recipe: Path, **flags: str):
    arguments = [item for key, value in {**CPU_OVERRIDES, **flags}.items() for item in (f"--{key}", value)]
    parser = TrlParser((ToolScriptArguments, ToolGRPOConfig, ModelConfig))
    return parser.parse_args_and_config(["--config", str(recipe), *arguments])


def owner(key: str) -> str | None:
    owners = [
        cls.__name__
        for cls in (ToolScriptArguments, ToolGRPOConfig, ModelConfig)
        if key in {item.name for item in dataclasses.fields(cls)}
    ]
    assert len(owners) <= 1, f"{key} belongs to {owners}"
    return owners[0] if owners else None


def same(expected, actual) -> bool:
    if isinstance(actual, enum.Enum):
        actual = actual.value
    if isinstance(actual, (set, frozenset)) and isinstance(expected, list):
        return set(expected) == actual
    if isinstance(actual, torch.dtype):
        return str(actual) == f"torch.{expected}"
    return expected == actual or (expected == "none" and actual == [])  # report_to: none is trl's []


def consumers(training_args, model_args):
    from grpo_tools.training.configs import model_init_kwargs, tokenizer_kwargs

    return model_init_kwargs(training_args, model_args), tokenizer_kwargs(training_args, model_args)


@pytest.mark.parametrize("recipe", RECIPES, ids=str)
def test_every_key_of_the_recipe_reaches_what_it_configures(recipe):
    script_args, training_args, model_args = parse(recipe)
    load, tok = consumers(training_args, model_args)
    lora = get_peft_config(model_args)
    for key, value in yaml.safe_load(recipe.read_text()).items():
        if key in CPU_OVERRIDES:
            continue
        where = owner(key)
        assert where is not None, (
            f"{recipe}: {key} is no setting of ToolScriptArguments, ToolGRPOConfig or ModelConfig"
        )
        if where == "ToolScriptArguments":
            seen = [getattr(script_args, key)]
        elif where == "ToolGRPOConfig":
            seen = [getattr(training_args, key)]
            if key in LOADING_TRAINER_KEYS:
                seen += LOADING_TRAINER_KEYS[key](load, tok, lora)
        else:
            assert key in MODEL_KEYS, f"{recipe}: model setting {key} is handed to nothing"
            if MODEL_KEYS[key] is None:
                continue
            seen = MODEL_KEYS[key](load, tok, lora)
        assert all(same(value, item) for item in seen), f"{recipe}: {key}: {value!r} in the recipe, {seen!r} in use"


def test_every_model_setting_of_trl_is_handed_on():
    """A trl release that adds a model setting fails here until the run hands it on (or says why not)."""
    assert {item.name for item in dataclasses.fields(ModelConfig)} == set(MODEL_KEYS)


def test_loading_settings_reach_the_model_and_the_tokenizer():
    recipe = Path("recipes/Qwen2.5-7B-Instruct/grpo/tool-use.yaml")
    flags = {"model_revision": "v1.0", "trust_remote_code": "true", "attn_implementation": "eager"}
    _, training_args, model_args = parse(recipe, **flags)
    load, tok = consumers(training_args, model_args)
    assert {key: load[key] for key in ("revision", "trust_remote_code", "attn_implementation", "dtype")} == {
        "revision": "v1.0",
        "trust_remote_code": True,
        "attn_implementation": "eager",
        "dtype": "bfloat16",
    }
    assert tok == {"revision": "v1.0", "trust_remote_code": True}


def test_quantization_settings_reach_the_model(monkeypatch):
    import grpo_tools.training.configs as configs

    monkeypatch.setattr(configs, "_bitsandbytes_available", lambda: True, raising=False)
    recipe = Path("recipes/Qwen2.5-7B-Instruct/grpo/tool-use.yaml")
    settings = {"load_in_4bit": True, "bnb_4bit_quant_type": "fp4", "use_bnb_nested_quant": True}
    settings["bnb_4bit_quant_storage"] = "bfloat16"
    _, training_args, model_args = parse(recipe, **{key: str(value).lower() for key, value in settings.items()})
    load, tok = consumers(training_args, model_args)
    for key, value in settings.items():
        assert all(same(value, item) for item in MODEL_KEYS[key](load, tok, None)), key
    assert load["quantization_config"].bnb_4bit_compute_dtype == torch.bfloat16  # the recipe's dtype
    _, training_args, model_args = parse(recipe, load_in_8bit="true")
    assert configs.model_init_kwargs(training_args, model_args)["quantization_config"].load_in_8bit


def test_a_quantized_recipe_without_bitsandbytes_gets_one_clear_message(monkeypatch):
    import grpo_tools.training.configs as configs
    from grpo_tools.training.configs import ConfigError

    monkeypatch.setattr(configs, "_bitsandbytes_available", lambda: False, raising=False)
    _, training_args, model_args = parse(Path("recipes/Qwen2.5-7B-Instruct/grpo/tool-use.yaml"), load_in_4bit="true")
    with pytest.raises(ConfigError, match=r"load_in_4bit needs bitsandbytes"):
        configs.model_init_kwargs(training_args, model_args)
