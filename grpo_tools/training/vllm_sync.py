"""The weights a LoRA run sends to vLLM, merged into copies: the base weights are never written.

trl's `VLLMGeneration` syncs a peft model by merging the adapter into the base weights in place, sending them, and
unmerging. In bfloat16, W + BA - BA is not W: every sync moves the base weights by a rounding error, and after
thousands of syncs they, which are the KL reference (the base with the adapter disabled), have drifted from the model
the user loaded. `merged_weights` computes, one layer at a time, W + the layer's LoRA delta in float32, rounded once to
W's dtype (what peft's in-place merge sends), into a copy that vLLM loads and that is then freed; trl's gathering
(DeepSpeed ZeRO-3) and names stay as they are (`trl_compat.sync_vllm_from_copies`). Models this cannot merge that way
(LoRA variants such as DoRA, quantized base weights, other peft tuners) and FSDP keep trl's own sync, with a warning.

Memory: while one LoRA layer is sent, its W in float32, one delta in float32 and the merged copy in W's dtype
(10 bytes a weight for a bf16 W; 0.7 GB for a 3584 x 18944 MLP matrix of Qwen2.5-7B), where trl's in-place merge
needed the delta alone; the other parameters are sent as they are, uncopied.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

from grpo_tools.training.configs import ConfigError


__all__ = ["check_vllm_policy", "merged_weights", "prepare_vllm_generation", "unmergeable_layers"]

logger = logging.getLogger(__name__)


def _adapters(module: nn.Module) -> list[str]:
    """The active adapters `module` holds, the ones peft's `merge_adapter` would merge."""
    held = set(getattr(module, "lora_A", {})) | set(getattr(module, "lora_embedding_A", {}))
    return [name for name in module.active_adapters if name in held]


def _variant(module: nn.Module, adapter: str) -> bool:
    """Whether `adapter` of a LoRA layer is a variant (DoRA and others), whose merge is not W + BA x scaling."""
    return adapter in getattr(module, "lora_variant", {}) or bool(getattr(module, "use_dora", {}).get(adapter))


def unmergeable_layers(model: nn.Module) -> list[str]:
    """Names of the peft layers of `model` that `merged_weights` cannot merge into a copy: anything but plain LoRA
    (a LoRA variant, another tuner, an adapter already merged) or a base weight that is not a float tensor
    (bitsandbytes)."""
    from peft.tuners.lora import LoraLayer
    from peft.tuners.tuners_utils import BaseTunerLayer

    names = []
    for name, module in model.named_modules():
        if not isinstance(module, BaseTunerLayer):
            continue
        weight = getattr(module.get_base_layer(), "weight", None)
        plain = (
            isinstance(module, LoraLayer)
            and not module.merged
            and not any(_variant(module, adapter) for adapter in _adapters(module))
            and isinstance(weight, torch.Tensor)
            and torch.is_floating_point(weight)
        )
        if not plain:
            names.append(name)
    return names


def _merged_copy(module: nn.Module, which: str) -> torch.Tensor | None:
    """The base layer's `which` ("weight" or "bias") with every active adapter added, as a new tensor: W + the sum of
    the deltas in float32, rounded once to W's dtype; None where no adapter adds to it (a bias without `lora_bias`)."""
    tensor = getattr(module.get_base_layer(), which).data
    adapters = _adapters(module)
    if which == "bias":
        adapters = [name for name in adapters if getattr(module, "lora_bias", {}).get(name)]
    if not adapters:
        return None
    merged = tensor.to(torch.float32, copy=True)  # copy=True: a float32 W must not be the tensor added to
    for adapter in adapters:  # one delta alive at a time: the peak is this layer's W in float32 and one delta
        if which == "weight":
            merged += module.get_delta_weight(adapter).to(torch.float32)  # W's shape
        else:
            merged += module.lora_B[adapter].bias.to(torch.float32) * module.scaling[adapter]  # (out,)
    return merged.to(tensor.dtype)


@torch.no_grad()
def merged_weights(model: nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """`model`'s parameters as peft names them, in `named_parameters` order, with the adapter merged into copies of
    the LoRA layers' base weights; the adapter's own parameters (`lora_`) and the frozen originals of
    `modules_to_save` are left out, as trl leaves them out. Parameters must be whole (gathered) while iterating."""
    from peft.tuners.lora import LoraLayer

    owners = {}  # id of a base layer's weight or bias -> (LoRA layer, which)
    for module in model.modules():
        if isinstance(module, LoraLayer):
            base = module.get_base_layer()
            for which in ("weight", "bias"):
                if getattr(base, which, None) is not None:
                    owners[id(getattr(base, which))] = (module, which)
    prefix = getattr(model, "prefix", "lora_")
    for name, parameter in model.named_parameters():
        if prefix in name or "original_module" in name:
            continue
        owner = owners.get(id(parameter))
        if owner is None:
            yield name, parameter.data
            continue
        merged = _merged_copy(*owner)
        yield name, parameter.data if merged is None else merged


def _policy_problem(policy: nn.Module) -> str | None:
    """Why vLLM would sample from another policy than the one trained, or None: a dropout left on (trl recomputes the
    old log-probabilities in train mode, so with dropout the importance-sampling ratio against vLLM's dropout-free
    sampling log-probabilities is noise even on-policy, and a sequence-level mask sums it over tokens), or a LoRA bias
    on a layer whose base has none (vLLM's copy of the layer has no bias to add it to; peft's own merge raises)."""
    from peft.tuners.lora import LoraLayer

    kept = sorted({module.p for module in policy.modules() if isinstance(module, nn.Dropout) and module.p > 0})
    if kept:
        return (
            f"use_vllm with disable_dropout: false and dropout {kept} in the model (lora_dropout, or the model's own): "
            "trl recomputes the log-probabilities with dropout on, so the importance-sampling ratio against vLLM's "
            "samples is not 1 even on-policy; set disable_dropout: true (the default) or lora_dropout: 0.0"
        )
    unbiased = [
        name.removeprefix("base_model.model.")
        for name, module in policy.named_modules()
        if isinstance(module, LoraLayer)
        and any(module.lora_bias.get(adapter) for adapter in _adapters(module))
        and getattr(module.get_base_layer(), "bias", None) is None
    ]
    if unbiased:
        return (
            f"use_vllm with lora_bias on {len(unbiased)} layers whose base layer has no bias ({unbiased[0]}, ...): "
            "vLLM's copy of the model has no bias there to take the adapter's, so it would sample from another policy "
            "than the one trained; set lora_bias: false, or target only layers with a bias"
        )
    return None


def check_vllm_policy(model: Any, peft_config: Any, args: Any) -> None:
    """Refuse, before the model loads and vLLM starts, a vLLM run whose policy keeps dropout (`disable_dropout: false`
    with a dropout in the model or `lora_dropout`) or puts a LoRA bias where the base layer has none. `model` is what
    the trainer is given (a name or path, or a model, whose config is read); the policy is built on the meta device
    from that config, with `peft_config` applied, so no weight is loaded."""
    import copy

    from peft import get_peft_model
    from transformers import AutoConfig, AutoModelForCausalLM

    keeps_dropout = not getattr(args, "disable_dropout", True)
    if not getattr(args, "use_vllm", False) or not (keeps_dropout or getattr(peft_config, "lora_bias", False)):
        return
    load = args.model_init_kwargs or {}
    remote = {"trust_remote_code": bool(load.get("trust_remote_code", getattr(args, "trust_remote_code", False)))}
    if isinstance(model, nn.Module) and peft_config is None:
        policy = model  # loaded already (a PeftModel carries its adapter): read as it is
    else:
        config = (
            model.config
            if isinstance(model, nn.Module)
            else AutoConfig.from_pretrained(model, revision=load.get("revision"), **remote)
        )
        with torch.device("meta"):
            policy = AutoModelForCausalLM.from_config(config, **remote)
        if peft_config is not None:
            policy = get_peft_model(policy, copy.deepcopy(peft_config))
    problem = _policy_problem(policy)
    if problem:
        raise ConfigError(problem)


def prepare_vllm_generation(trainer: Any) -> None:
    """After trl built `trainer.vllm_generation`: sync a LoRA model's weights to vLLM through merged copies. (What
    `check_vllm_policy` refused at start-up is checked again on the policy as trl loaded it.)"""
    from peft import PeftModel
    from trl.generation.vllm_generation import VLLMGeneration

    from grpo_tools.training.trl_compat import sync_vllm_from_copies

    problem = _policy_problem(trainer.model) if trainer.use_vllm else None
    if problem:
        raise ConfigError(problem)
    generation = trainer.vllm_generation if trainer.use_vllm else None
    # trl's generation class only (a substitute, such as the tests' stub, keeps its own sync), of a peft model.
    if not (isinstance(generation, VLLMGeneration) and isinstance(generation.model, PeftModel)):
        return
    model = generation.model
    unmergeable = unmergeable_layers(model)
    if unmergeable:
        logger.warning(
            "weight sync to vLLM: %d peft layers (%s, ...) are not plain LoRA on float weights; trl's own sync runs, "
            "which merges the adapter into the base weights in place and unmerges it, so in bf16 the base weights "
            "(the KL reference) drift by a rounding error at every sync",
            len(unmergeable),
            unmergeable[0],
        )
        return
    if not sync_vllm_from_copies(generation, merged_weights):
        logger.warning(
            "weight sync to vLLM under FSDP: trl's own sync runs, which merges the adapter into the base weights in "
            "place and unmerges it, so in bf16 the base weights (the KL reference) drift by a rounding error at "
            "every sync"
        )
