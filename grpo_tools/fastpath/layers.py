"""Linear layers for sampling without gradients: LoRA merged into one product, weights packed for oneDNN once.

A LoRA layer runs three products per token (base, A, B) with casts to the adapter's float32; merged, it runs one,
the same function up to the rounding of the merged weight. peft's own `merge_adapter` and `unmerge_adapter` would
add the product to the base weights and subtract it again, which in bf16 does not give the frozen weights back, so
the merged weight here is a new tensor and the layers are put back untouched. The packed layout uses torch's private
`torch.ops.mkldnn` operators; where a build of torch lacks or refuses them, the plain product runs. Measured effects:
docs/benchmarks.md.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch


__all__ = ["SAMPLING_ROWS", "SamplingLinear", "layers_for_sampling", "merged_lora", "packed_weight"]

# The batch size oneDNN lays linear weights out for while sampling; the products' values do not depend on it.
SAMPLING_ROWS = 32


@contextlib.contextmanager
def layers_for_sampling(model: torch.nn.Module) -> Iterator[None]:
    """Within the block, each linear layer of `model` runs as one matrix product with its weight laid out for oneDNN
    ahead of time (`SamplingLinear`), and each LoRA layer that `merged_lora` can merge runs as one such layer; the
    original layers are put back afterwards, untouched. A plain layer's packed weight is kept on the layer while the
    weight is unchanged, so a frozen layer is packed once per training run."""
    from peft.tuners.lora import LoraLayer

    swapped: list[tuple[torch.nn.Module, str, torch.nn.Module]] = []
    inside_lora: set[str] = set()  # LoRA layers, whose own linear layers (base, A, B) are theirs to run
    for name, module in list(model.named_modules()):
        if not name or any(name.startswith(f"{outer}.") for outer in inside_lora):
            continue
        if isinstance(module, LoraLayer):
            inside_lora.add(name)
            replacement = merged_lora(module)
        elif type(module) is torch.nn.Linear:
            replacement = SamplingLinear.of(module)
        else:
            continue
        if replacement is None:
            continue
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name)
        swapped.append((parent, child, module))
        setattr(parent, child, replacement)
    try:
        yield
    finally:
        for parent, child, module in swapped:
            setattr(parent, child, module)


def merged_lora(module: Any) -> SamplingLinear | None:
    """`module`'s LoRA layer as one linear layer: base weight + scale x B A, in the base weight's dtype, and with
    peft's `lora_bias` the bias base + scale x B's bias, as peft's own merge computes them. None where it is not one
    plain linear layer with one active, enabled, unmerged adapter without DoRA: the LoRA layer then runs as it is."""
    base = module.get_base_layer()
    adapter = module.active_adapters[0] if len(module.active_adapters) == 1 else None
    if (
        not isinstance(base, torch.nn.Linear)
        or module.merged
        or module.disable_adapters
        or adapter is None
        or module.use_dora.get(adapter, False)
        or adapter not in module.lora_A
    ):
        return None
    delta = module.get_delta_weight(adapter)  # (out, in)
    weight = (base.weight.float() + delta.float()).to(base.weight.dtype)  # (out, in)
    bias = base.bias
    if getattr(module, "lora_bias", {}).get(adapter, False):
        if base.bias is None:  # peft refuses to merge this too; running the LoRA layer as it is stays exact
            return None
        lora_bias = module.lora_B[adapter].bias.detach()  # (out,)
        bias = (base.bias.float() + lora_bias.float() * module.scaling[adapter]).to(base.bias.dtype)  # (out,)
    return SamplingLinear(weight, bias, packed_weight(weight))


class SamplingLinear(torch.nn.Module):
    """A linear layer for sampling without gradients: with `packed` (the weight laid out ahead of time in oneDNN's
    blocked format), oneDNN's product on it, with values equal to the bit to `torch.nn.functional.linear`'s; without
    `packed`, `torch.nn.functional.linear`."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, packed: torch.Tensor | None) -> None:
        super().__init__()
        self.weight, self.bias, self.packed = weight, bias, packed

    @classmethod
    def of(cls, linear: torch.nn.Linear) -> SamplingLinear:
        """`linear` with its packed weight, packed at the first call and kept on `linear` while the weight (its
        memory and version) stays the same."""
        weight = linear.weight
        key = (weight.data_ptr(), weight._version, weight.dtype)
        kept = getattr(linear, "_grpo_tools_packed", None)
        if kept is None or kept[0] != key:
            kept = (key, packed_weight(weight.detach()))
            linear._grpo_tools_packed = kept
        return cls(weight.detach(), linear.bias, kept[1])

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        if self.packed is None or inputs.dtype != self.packed.dtype or inputs.requires_grad:
            return torch.nn.functional.linear(inputs, self.weight, self.bias)
        return torch.ops.mkldnn._linear_pointwise(inputs.contiguous(), self.packed, self.bias, "none", [], "")


def packed_weight(weight: torch.Tensor) -> torch.Tensor | None:
    """`weight` (out, in) in oneDNN's layout for its bf16 linear product, or None off the CPU, for other dtypes, or
    where this build of torch or this CPU has no such product."""
    if weight.device.type != "cpu" or weight.dtype != torch.bfloat16 or weight.dim() != 2:
        return None
    try:
        if not (torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported()):
            return None
        return torch.ops.mkldnn._reorder_linear_weight(weight, SAMPLING_ROWS)
    except (AttributeError, RuntimeError):  # an operator this build of torch lacks, or refuses here
        return None
