"""The layers below the first LoRA layer, run once for the reference's log-probabilities and the policy's.

With LoRA on the upper layers only (the SmolLM2 recipe adapts layers 18 to 29 of 30) and the reference the same model
with its adapter switched off, both passes compute the same hidden states below the first adapted layer: the same
frozen weights on the same rows. trl computes the reference's log-probabilities first (no gradients, adapter off),
then the policy's in the loss. `LowerLayers` keeps the hidden states that enter the first adapted layer during the
reference's pass, one per row and pass (a distinct prompt, or a row's completion positions), keyed by the row's tokens
and mask; the policy's pass over the same rows then starts there, its lower layers replaced for that pass by stand-ins
that give the kept states back and fill the key/value cache with placeholders of the right length (the cache's length
numbers the positions and sizes the attention mask; no upper layer reads a lower layer's entries).

The values are those of the plain pass: the same arithmetic on the same inputs, up to the rounding a matrix product of
another batch shape may give. It runs only where it cannot change them: no trainable parameter below the first adapted
layer nor outside the decoder's layers, no dropout below it (a dropout mask would differ between the two passes), no
gradient checkpointing, and the reference being the policy's own model with the adapter off. The kept states carry no
gradient (recorded without one), as the lower layers' outputs never did: nothing there is trained.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch


__all__ = ["LowerLayers"]


def _decoder_layers(model: torch.nn.Module) -> tuple[str, torch.nn.ModuleList] | None:
    """The decoder's list of layers (its name and the list): the `ModuleList` of `num_hidden_layers` entries."""
    config = getattr(model, "config", None)
    count = getattr(config.get_text_config(), "num_hidden_layers", None) if config is not None else None
    found = [
        (name, module)
        for name, module in model.named_modules()
        if isinstance(module, torch.nn.ModuleList) and name.endswith("layers") and len(module) == count
    ]
    return found[0] if len(found) == 1 else None


class _PassedLayer(torch.nn.Module):
    """A lower layer in the policy's pass: fills its cache entry with a placeholder as long as the input, and hands on
    its input, or the kept states when it is the last layer below the first adapted one."""

    def __init__(self, index: int, states: torch.Tensor | None) -> None:
        super().__init__()
        self.index, self.states = index, states

    def forward(self, hidden_states: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        cache = kwargs.get("cache", kwargs.get("past_key_values"))
        if cache is not None and kwargs.get("use_cache", True):
            rows, length = hidden_states.shape[:2]
            placeholder = hidden_states.new_zeros(rows, 1, length, 1)  # (b, 1, T, 1): only its length is read
            cache.update(placeholder, placeholder, self.index)
        return hidden_states if self.states is None else self.states


class LowerLayers:
    """The hidden states entering layer `first` (the first adapted one) of `model`'s decoder, kept from the
    reference's pass for the policy's. Built by `of`, which says whether the model allows it."""

    def __init__(self, layers: torch.nn.ModuleList, first: int) -> None:
        self.layers, self.first = layers, first
        self.kept: dict[bytes, torch.Tensor] = {}

    @classmethod
    def of(cls, model: torch.nn.Module, gradient_checkpointing: bool) -> LowerLayers | None:
        """For a peft `model` whose adapter (the only trainable parameters) starts above the decoder's first layer and
        that has no dropout below it; None where the two passes' lower layers could differ or nothing would be saved."""
        from peft.tuners.lora import LoraLayer

        found = _decoder_layers(model)
        config = getattr(model, "config", None)
        if found is None or gradient_checkpointing or config is None:
            return None
        prefix, layers = found
        pattern = re.compile(rf"^{re.escape(prefix)}\.(\d+)\.")

        def layer_of(name: str) -> int | None:
            match = pattern.match(name)
            return int(match.group(1)) if match else None

        adapted = [layer_of(name) for name, module in model.named_modules() if isinstance(module, LoraLayer)]
        trained = [layer_of(name) for name, parameter in model.named_parameters() if parameter.requires_grad]
        if not adapted or None in adapted or None in trained:
            return None
        first = min(adapted + trained)
        text_config = config.get_text_config()
        dropouts = [  # below the first adapted layer, where the two passes would each draw their own masks
            module.p
            for name, module in model.named_modules()
            if isinstance(module, torch.nn.Dropout) and (layer_of(f"{name}.") or 0) < first
        ]
        attention_dropout = getattr(text_config, "attention_dropout", 0.0) or 0.0
        if first == 0 or any(dropouts) or attention_dropout:
            return None
        return cls(layers, first)

    @staticmethod
    def _keys(ids: torch.Tensor, mask: torch.Tensor, kind: str) -> list[bytes]:
        rows = torch.cat([ids, mask.to(ids.dtype)], dim=1).cpu().numpy()  # (b, 2L)
        return [kind.encode() + row.tobytes() for row in rows]

    def around(self) -> Callable[[torch.Tensor, torch.Tensor, int], PassContexts]:
        """For one log-probability computation: given a chunk of rows `ids` (b, L), `mask` and the prompt's length,
        the contexts its passes run in. Without gradients (the reference's pass, or the policy's before training on
        the batch) they keep every row's states, after forgetting the last computation's; with gradients (the
        policy's pass in the loss) the passes start from them where the chunk's rows all have them. The lower layers
        hold no trained weight, so the states are the same whichever adapter is active."""
        if torch.is_grad_enabled():
            return lambda ids, mask, prompt_length: PassContexts(self, False, self._ready(ids, mask, prompt_length))
        self.kept.clear()
        return lambda ids, mask, prompt_length: PassContexts(self, True, False)

    def _ready(self, ids: torch.Tensor, mask: torch.Tensor, prompt_length: int) -> bool:
        """Whether the prompts' pass and the completions' pass of these rows can both start from kept states: a
        prompt's pass that did would leave placeholders in the cache that only a completions' pass that does can
        follow."""
        prompts = _keys(ids[:, :prompt_length], mask[:, :prompt_length], "prompt")
        return all(key in self.kept for key in prompts + _keys(ids, mask, "rest"))

    def record(self, ids: torch.Tensor, mask: torch.Tensor, kind: str) -> contextlib.AbstractContextManager[None]:
        """Keep the states of the pass over rows `ids` (b, L) under `mask` that runs within the block."""
        return self._recording(ids, mask, kind)

    @contextlib.contextmanager
    def _recording(self, ids: torch.Tensor, mask: torch.Tensor, kind: str) -> Iterator[None]:
        captured: list[torch.Tensor] = []
        hook = self.layers[self.first].register_forward_pre_hook(
            lambda _, args, kwargs: captured.append((args[0] if args else kwargs["hidden_states"]).detach()),
            with_kwargs=True,
        )
        try:
            yield
        finally:
            hook.remove()
        for key, row in zip(_keys(ids, mask, kind), captured[0], strict=True):  # (T, D) each
            self.kept[key] = row

    @contextlib.contextmanager
    def replay(self, ids: torch.Tensor, mask: torch.Tensor, kind: str) -> Iterator[None]:
        """Within the block, the pass over rows `ids` (b, L) under `mask` starts at layer `first` from their kept
        states; the layers below are put back afterwards."""
        states = torch.stack([self.kept[key] for key in _keys(ids, mask, kind)])  # (b, T, D)
        originals = [self.layers[index] for index in range(self.first)]
        for index in range(self.first):
            self.layers[index] = _PassedLayer(index, states if index == self.first - 1 else None)
        try:
            yield
        finally:
            for index, layer in enumerate(originals):
                self.layers[index] = layer


def _keys(ids: torch.Tensor, mask: torch.Tensor, kind: str) -> list[bytes]:
    """Each row's key: the kind of pass, its tokens and its mask."""
    rows = torch.cat([ids, mask.to(ids.dtype)], dim=1).cpu().numpy()  # (b, 2L)
    return [kind.encode() + row.tobytes() for row in rows]


@dataclass
class PassContexts:
    """The contexts of one chunk's passes (`kind`: `prompt` for the distinct prompts', `rest` for the completions'
    after them, `row` for whole rows): keeping their states (`recording`), or starting from them where `ready` (the
    prompts' and completions' passes) or where every row has them (a whole rows' pass)."""

    lower: LowerLayers
    recording: bool
    ready: bool

    def of(self, kind: str) -> Callable[[torch.Tensor, torch.Tensor], contextlib.AbstractContextManager[Any]]:
        """The context of a `kind` pass, given its rows and mask."""

        def context(ids: torch.Tensor, mask: torch.Tensor) -> contextlib.AbstractContextManager[Any]:
            if self.recording:
                return self.lower.record(ids, mask, kind)
            whole = kind == "row" and all(key in self.lower.kept for key in _keys(ids, mask, kind))
            return self.lower.replay(ids, mask, kind) if self.ready or whole else contextlib.nullcontext()

        return context
