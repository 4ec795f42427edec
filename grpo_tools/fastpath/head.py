"""The LM head's input made contiguous: one matrix product where transformers' strided slice of the last positions
would make `torch.nn.functional.linear` copy the head's weight once per row."""

from __future__ import annotations

from typing import Any


__all__ = ["contiguous_head_input"]


def contiguous_head_input(model: Any) -> Any:
    """Make the input of `model`'s output layer (its LM head) contiguous before it runs; returns the hook's handle
    (`handle.remove()` takes it off), or None where the model has no output layer or already has this hook.

    transformers keeps the last positions' hidden states as a slice (`logits_to_keep`: the last position in every
    prefill of `generate`, the completions in a GRPO pass), and for a strided 3-D input `torch.nn.functional.linear`
    falls back to a batched matmul that first copies the LM head's weight once per row (for SmolLM2, 576 x 49,152
    values a row). Copying the slice (a few rows of hidden states) instead lets it run as one matrix product; the
    values are the same products."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if head is None or getattr(head, "_grpo_tools_contiguous_input", False):
        return None
    handle = head.register_forward_pre_hook(_contiguous_first_input)
    head._grpo_tools_contiguous_input = True
    return _Removal(head, handle)


def _contiguous_first_input(module: Any, args: tuple[Any, ...]) -> tuple[Any, ...]:
    return (args[0].contiguous(), *args[1:]) if args and hasattr(args[0], "contiguous") else args


class _Removal:
    """The hook's handle; removing it also clears the layer's mark, so the hook can be added again later."""

    def __init__(self, head: Any, handle: Any) -> None:
        self.head, self.handle = head, handle

    def remove(self) -> None:
        self.handle.remove()
        self.head._grpo_tools_contiguous_input = False
