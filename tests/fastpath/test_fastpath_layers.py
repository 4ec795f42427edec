"""Tests for `grpo_tools.fastpath.layers`: LoRA layers merged while sampling give the adapter's outputs (with peft's
`lora_bias` too) and are put back untouched; plain linear layers sample on weights packed once, with the same values."""

import torch
from peft import LoraConfig
from trainer_builders import make_trainer, perturb_adapter
from transformers import AutoModelForCausalLM, AutoTokenizer

from grpo_tools.fastpath.layers import SamplingLinear, layers_for_sampling, merged_lora


def test_lora_layers_are_merged_while_sampling_and_put_back_after(tiny_model_dir, small_data, tmp_path):
    from peft.tuners.lora import LoraLayer

    trainer = make_trainer(tiny_model_dir, small_data["train"], tmp_path)
    perturb_adapter(trainer)
    model = trainer.model
    ids = trainer.processing_class("Weather in Lyon?", return_tensors="pt").input_ids  # (1, T)
    layers = {name: module for name, module in model.named_modules() if isinstance(module, LoraLayer)}
    weights = {name: module.get_base_layer().weight.clone() for name, module in layers.items()}
    with torch.no_grad():
        adapted = model(ids).logits  # (1, T, V)
        with layers_for_sampling(model):
            assert not any(isinstance(module, LoraLayer) for module in model.modules())
            merged = model(ids).logits  # (1, T, V)
        restored = model(ids).logits  # (1, T, V)
    torch.testing.assert_close(merged, adapted, atol=1e-5, rtol=1e-4)
    assert torch.equal(restored, adapted)
    assert {name: module for name, module in model.named_modules() if isinstance(module, LoraLayer)} == layers
    assert all(torch.equal(layers[name].get_base_layer().weight, weight) for name, weight in weights.items())


def test_linear_layers_sample_with_their_weights_laid_out_once_and_the_same_values(tiny_model_dir):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.bfloat16).eval()
    ids = AutoTokenizer.from_pretrained(tiny_model_dir)(["Weather in Lyon?"], return_tensors="pt").input_ids  # (1, T)
    layers = dict(model.named_modules())
    linear = [name for name, module in layers.items() if type(module) is torch.nn.Linear]
    packs = []
    with torch.no_grad():
        plain = model(ids).logits  # (1, T, V)
        for _ in range(2):
            with layers_for_sampling(model):
                swapped = dict(model.named_modules())
                assert all(isinstance(swapped[name], SamplingLinear) for name in linear)
                packs.append([swapped[name].packed for name in linear])
                sampled = model(ids).logits  # (1, T, V)
            assert torch.equal(sampled, plain)  # the same products, not merely close
    assert dict(model.named_modules()) == layers  # every layer put back
    supported = torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported()
    assert all((pack is not None) == supported for pack in packs[0])
    assert all(first is second for first, second in zip(*packs, strict=True))  # laid out once, kept on the layer
    head, first = model.get_output_embeddings(), packs[0][linear.index("lm_head")]
    with torch.no_grad():
        head.weight.mul_(2.0)  # the weight changed in place: laid out again
        with layers_for_sampling(model):
            repacked = model.get_output_embeddings().packed
            hidden = model.model(ids).last_hidden_state  # (1, T, H)
            assert torch.equal(model(ids).logits, torch.nn.functional.linear(hidden, head.weight))
    assert repacked is None if not supported else repacked is not first


def test_a_lora_bias_is_merged_as_peft_merges_it(tiny_model_dir, small_data, tmp_path):
    """With `lora_bias`, LoRA's B layer has a bias of its own: merged, the layer's bias is base + scale x that bias."""
    from peft.tuners.lora import LoraLayer

    # The tiny model's attention projections q, k and v have biases; peft refuses lora_bias on a layer without one.
    config = LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "k_proj", "v_proj"], lora_bias=True)
    config.task_type = "CAUSAL_LM"
    trainer = make_trainer(tiny_model_dir, small_data["train"], tmp_path, peft_config=config)
    perturb_adapter(trainer)
    with torch.no_grad():
        for name, parameter in trainer.model.named_parameters():
            if "lora_B" in name and name.endswith(".bias"):
                parameter.normal_(std=0.5)  # a bias that changes the outputs
    model = trainer.model
    ids = trainer.processing_class("Weather in Lyon?", return_tensors="pt").input_ids  # (1, T)
    layers = [module for module in model.modules() if isinstance(module, LoraLayer)]
    merged = [merged_lora(module) for module in layers]
    assert merged and all(layer is not None and layer.bias is not None for layer in merged)
    with torch.no_grad():
        adapted = model(ids).logits  # (1, T, V)
        with layers_for_sampling(model):
            sampled = model(ids).logits  # (1, T, V)
    torch.testing.assert_close(sampled, adapted, atol=1e-5, rtol=1e-4)
