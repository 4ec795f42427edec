"""A warm start's LoRA adapter and GRPO's stacked into one: on the base model it must give what GRPO's adapter gives on
the warm-started model, and adapters that cannot be stacked are refused with the reason."""

import json

import pytest
import torch

from grpo_tools.models.adapters import StackError, stack_lora_adapters


TARGETS = ["q_proj", "v_proj", "down_proj"]


def _random_adapter(model, **lora):
    """`model` with a LoRA adapter whose A and B are both random (a fresh adapter's B is zero and would hide errors)."""
    from peft import LoraConfig, get_peft_model

    peft_model = get_peft_model(model, LoraConfig(target_modules=TARGETS, **lora))
    generator = torch.Generator().manual_seed(lora["r"])
    with torch.no_grad():
        for name, parameter in peft_model.named_parameters():
            if "lora_" in name:
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.05)
    return peft_model


@pytest.fixture
def warm_and_grpo(tiny_model_dir, tmp_path):
    """A warm start's adapter (rank 4, alpha 8) merged into a copy of the tiny model, and a GRPO adapter (rank-stabilized
    rank 2, alpha 3) made on that copy, both with random weights; returns their folders and the merged model with
    GRPO's adapter."""
    from transformers import AutoModelForCausalLM

    warm = _random_adapter(AutoModelForCausalLM.from_pretrained(tiny_model_dir), r=4, lora_alpha=8)
    warm.save_pretrained(tmp_path / "warm_lora")
    merged_dir = tmp_path / "warmup"
    warm.merge_and_unload().save_pretrained(merged_dir)
    grpo = _random_adapter(AutoModelForCausalLM.from_pretrained(merged_dir), r=2, lora_alpha=3, use_rslora=True)
    grpo.save_pretrained(tmp_path / "grpo")
    return tmp_path / "warm_lora", tmp_path / "grpo", grpo.eval()


def test_the_stacked_adapter_on_the_base_gives_the_warm_started_model_with_grpos_adapter(
    tiny_model_dir, warm_and_grpo, tmp_path
):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    warm_lora, grpo_dir, expected_model = warm_and_grpo
    base = stack_lora_adapters(warm_lora, grpo_dir, tmp_path / "stacked")

    assert base == tiny_model_dir
    config = json.loads((tmp_path / "stacked" / "adapter_config.json").read_text())
    assert config["r"] == 6 and config["base_model_name_or_path"] == tiny_model_dir
    stacked = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_model_dir), tmp_path / "stacked")
    plain = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    ids = torch.randint(0, plain.config.vocab_size, (2, 12), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        expected = expected_model(input_ids=ids).logits
        got = stacked.eval()(input_ids=ids).logits
        unchanged = plain(input_ids=ids).logits
    assert torch.allclose(got, expected, atol=1e-5)
    assert not torch.allclose(unchanged, expected, atol=1e-3)  # both adapters move the logits: the check can fail


def test_adapters_of_different_modules_or_kinds_are_refused(warm_and_grpo, tmp_path):
    from safetensors.torch import load_file, save_file

    warm_lora, grpo_dir, _ = warm_and_grpo
    weights = load_file(grpo_dir / "adapter_model.safetensors")
    config = json.loads((grpo_dir / "adapter_config.json").read_text())
    dora, narrow = tmp_path / "dora", tmp_path / "narrow"
    for folder, tensors, changed in (
        (dora, weights, {"use_dora": True}),
        (
            narrow,
            {name: tensor for name, tensor in weights.items() if "q_proj" in name},
            {"target_modules": ["q_proj"]},
        ),
    ):
        folder.mkdir()
        save_file(tensors, folder / "adapter_model.safetensors")
        (folder / "adapter_config.json").write_text(json.dumps({**config, **changed}))

    with pytest.raises(StackError, match="use_dora is set"):
        stack_lora_adapters(warm_lora, dora, tmp_path / "out")
    with pytest.raises(StackError, match="adapt different modules"):
        stack_lora_adapters(warm_lora, narrow, tmp_path / "out")
    assert not (tmp_path / "out").exists()
