"""Tests for `grpo_tools.fastpath.lower_layers` on the tiny model (4 layers) with LoRA on its upper two: the policy's
log-probabilities and gradients, starting from the states the reference's pass kept below the first adapted layer,
equal the plain path's, its lower layers not run again; rows the reference did not see run whole; training steps
a training step gives the same loss, KL and adapter as with the lever off; and the lever stays off wherever the two passes' lower
layers could differ (an adapter from the first layer, dropout below it, gradient checkpointing, a separate
reference model)."""

import torch
from peft import LoraConfig
from trainer_builders import make_trainer, perturb_adapter

from grpo_tools.fastpath import LowerLayers


UPPER = r".*\.layers\.[23]\.(self_attn|mlp)\.[a-z]+_proj"


def upper_lora(**overrides):
    return LoraConfig(r=8, lora_alpha=16, target_modules=UPPER, task_type="CAUSAL_LM", **overrides)


def batch(trainer):
    """Two prompts of different lengths, three completions each (some alike), left-padded as trl pads them."""
    tokenizer = trainer.processing_class
    prompt = tokenizer(perturb_adapter(trainer), return_tensors="pt", padding=True, padding_side="left")
    prompt_ids = prompt.input_ids.repeat_interleave(3, dim=0)  # (6, P)
    prompt_mask = prompt.attention_mask.repeat_interleave(3, dim=0)
    completion_ids = torch.tensor([[5, 6, 7, 8, 9], [9, 8, 7, 0, 0], [4, 0, 0, 0, 0]]).repeat(2, 1)  # (6, 5)
    completion_mask = (completion_ids != 0).long()
    return torch.cat([prompt_ids, completion_ids], dim=1), torch.cat([prompt_mask, completion_mask], dim=1)


def lower_layer_calls(trainer):
    """How often the first decoder layer runs with gradients on (the policy's pass in the loss)."""
    calls = []
    first = trainer.lower_layers.layers[0]
    first.register_forward_hook(lambda *_: calls.append(1) if torch.is_grad_enabled() else None)
    return calls


def reference_and_policy(trainer, input_ids, attention_mask, order):
    """The reference's log-probabilities (adapter off, no gradients) over the rows, then the policy's with the
    gradient of their sum over its adapter, over the rows in `order` (trl shuffles the batch in between)."""
    adapter = [parameter for name, parameter in trainer.model.named_parameters() if "lora_" in name]
    with torch.no_grad(), trainer.model.disable_adapter():
        reference, _, _ = trainer._get_per_token_logps_and_entropies(trainer.model, input_ids, attention_mask, 5)
    policy, entropy, _ = trainer._get_per_token_logps_and_entropies(
        trainer.model, input_ids[order], attention_mask[order], 5, compute_entropy=True
    )
    grads = torch.autograd.grad((policy * attention_mask[order][:, -5:]).sum(), adapter)
    return reference, policy, entropy, grads


def test_the_policy_starts_from_the_references_lower_layers_with_the_same_values(tiny_model_dir, small_data, tmp_path):
    trainer = make_trainer(tiny_model_dir, small_data["train"], tmp_path, peft_config=upper_lora())
    assert trainer.lower_layers is not None and trainer.lower_layers.first == 2
    input_ids, attention_mask = batch(trainer)
    order = torch.tensor([4, 1, 5, 0, 3, 2])
    calls = lower_layer_calls(trainer)
    shared = reference_and_policy(trainer, input_ids, attention_mask, order)
    assert calls == []  # the policy's passes (prompts, then completions) began at layer 2
    lower_layers, trainer.lower_layers = trainer.lower_layers, None
    plain = reference_and_policy(trainer, input_ids, attention_mask, order)
    assert len(calls) == 2  # the plain path's two passes
    assert torch.equal(shared[0], plain[0])  # the reference's pass is the plain one, its states kept on the side
    torch.testing.assert_close(shared[1], plain[1], atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(shared[2], plain[2], atol=1e-6, rtol=1e-6)
    for ours, theirs in zip(shared[3], plain[3], strict=True):
        torch.testing.assert_close(ours, theirs, atol=1e-6 * max(1.0, theirs.abs().max().item()), rtol=1e-5)

    # Rows the reference did not see (another completion) run every layer, with the plain values.
    trainer.lower_layers = lower_layers
    other = input_ids.clone()
    other[0, -2] = 11
    adapter_calls = len(calls)
    fresh, _, _ = trainer._get_per_token_logps_and_entropies(trainer.model, other, attention_mask, 5)
    assert len(calls) == adapter_calls + 2
    trainer.lower_layers = None
    torch.testing.assert_close(
        fresh, trainer._get_per_token_logps_and_entropies(trainer.model, other, attention_mask, 5)[0], atol=0, rtol=0
    )


def test_a_training_step_is_the_same_with_the_lever_and_without(tiny_model_dir, small_data, tmp_path):
    results = []
    for shared in (True, False):
        trainer = make_trainer(
            tiny_model_dir, small_data["train"], tmp_path / str(shared), peft_config=upper_lora(), max_steps=1,
            beta=0.1, temperature=1.0,
        )  # fmt: skip
        perturb_adapter(trainer)  # the policy away from the reference from the first step: a KL to compare
        calls = lower_layer_calls(trainer)
        if not shared:
            trainer.lower_layers = None
        trainer.train()
        assert (calls == []) == shared  # trl's loss began at layer 2 on every step, with the reference's states
        logs = [(log["loss"], log["kl"], log["reward"]) for log in trainer.state.log_history if "loss" in log]
        adapter = {name: p.detach().clone() for name, p in trainer.model.named_parameters() if "lora_" in name}
        results.append((logs, adapter))
    (shared_logs, shared_adapter), (plain_logs, plain_adapter) = results
    assert len(shared_logs) == 1 and plain_logs[0][1] > 0
    for ours, theirs in zip(shared_logs, plain_logs, strict=True):
        assert ours[2] == theirs[2]  # the same samples and rewards
        torch.testing.assert_close(torch.tensor(ours[:2]), torch.tensor(theirs[:2]), atol=1e-6, rtol=1e-5)
    for name, weight in plain_adapter.items():
        torch.testing.assert_close(shared_adapter[name], weight, atol=1e-6, rtol=1e-5)


def test_the_lever_stays_off_where_the_lower_layers_could_differ(tiny_model_dir, small_data, tmp_path):
    def lower(peft_config, **overrides):
        trainer = make_trainer(tiny_model_dir, small_data["train"], tmp_path, peft_config=peft_config, **overrides)
        return trainer.lower_layers

    assert lower(None) is None  # LoRA on every layer: nothing below the first adapted one
    assert lower(upper_lora(), gradient_checkpointing=True) is None
    assert lower(upper_lora(), cpu_fast_path="off") is None
    assert lower(upper_lora(lora_dropout=0.1)).first == 2  # dropout above the first adapted layer does not matter


def test_dropout_below_the_first_adapted_layer_or_a_trained_embedding_keeps_the_lever_off(tiny_model_dir):
    from peft import get_peft_model
    from transformers import AutoModelForCausalLM

    model = get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_model_dir), upper_lora())
    assert LowerLayers.of(model, gradient_checkpointing=False).first == 2
    model.config.attention_dropout = 0.1
    assert LowerLayers.of(model, gradient_checkpointing=False) is None
    model.config.attention_dropout = 0.0
    model.get_input_embeddings().weight.requires_grad_(True)
    assert LowerLayers.of(model, gradient_checkpointing=False) is None
