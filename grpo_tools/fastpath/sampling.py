"""Sampling on the CPU: each prompt prefilled once, plain sampling in a loop that drops each row at its end of turn;
the same loop decodes greedily for evaluation (`greedy_generate`).

`prefill_once_per_prompt` wraps a model's `generate` for the duration of a block. Each distinct prompt (less its last
token) runs once (`shared_prefix`); plain sampling from the tempered softmax, trl's default, then goes on in
`sample_rows`, and any other generation config goes on in `generate` from the shared cache. `generate` computes every
row until the last one ends and prefills every row; the loop here stops computing a row at its end of turn, writes
each position into key/value buffers allocated once (`PreallocatedLayer`), draws each token with one uniform number
(`draw`) and runs merged LoRA on packed weights (`layers_for_sampling`). Measured effects: docs/benchmarks.md.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from transformers.cache_utils import DynamicLayer

from grpo_tools.fastpath.layers import layers_for_sampling
from grpo_tools.fastpath.prefix import CACHE_ARGUMENT, shared_prefix


__all__ = [
    "PreallocatedLayer",
    "draw",
    "greedy_generate",
    "greedy_generate_runs",
    "plain_sampling",
    "prefill_once_per_prompt",
    "prompt_cache",
    "sample_rows",
]


def prompt_cache(model: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> Any:
    """The key/value cache of each row's prompt less its last token, computed once per distinct prompt, positions
    counting real tokens from 0 as `generate` numbers them; None where `shared_prefix` finds nothing to share."""
    if input_ids.size(1) < 2:
        return None
    prefix = shared_prefix(model, input_ids[:, :-1], attention_mask[:, :-1], count_padding=False)
    return None if prefix is None else prefix.cache


def greedy_generate(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    max_new_tokens: int,
    eos_token_id: int | list[int],
    pad_token_id: int | None = None,
) -> torch.Tensor:
    """Greedy completions of left-padded prompts, as `model.generate(do_sample=False)` returns them with no other
    generation setting: (B, P + T), T the longest completion, each row's tokens after its end of turn the pad token.

    Every prompt less its last token is prefilled in one pass, then `sample_rows` decodes, taking the most likely
    token where it would draw one: a row leaves the batch at its end of turn, where `generate` computes every row
    until the last one ends. The tokens are `generate`'s up to float rounding (a near tie may break the other way).
    A batch with a row of fewer than two real tokens goes to `generate` itself."""
    from transformers import GenerationConfig

    config = GenerationConfig(
        do_sample=False, max_new_tokens=max_new_tokens, eos_token_id=eos_token_id, pad_token_id=pad_token_id
    )
    if input_ids.size(1) < 2 or bool((attention_mask[:, :-1].sum(dim=1) == 0).any()):
        return model.generate(input_ids=input_ids, attention_mask=attention_mask, generation_config=config)
    ids, mask = input_ids[:, :-1], attention_mask[:, :-1]  # (B, P - 1) each
    positions = (mask.cumsum(dim=-1) - 1).masked_fill(mask == 0, 0)  # (B, P - 1): real tokens counted from 0
    with torch.no_grad():
        output = model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True, logits_to_keep=1)
    return sample_rows(model, input_ids, attention_mask, getattr(output, CACHE_ARGUMENT), config)


def greedy_generate_runs(model: Any) -> bool:
    """Whether `greedy_generate` can decode with `model`: a transformers model, or a peft model over one. Anything
    else that only offers `generate` (a wrapper, a stand-in) is left to its own `generate`."""
    from peft import PeftModel
    from transformers import PreTrainedModel

    return isinstance(model, PreTrainedModel | PeftModel)


def sample_rows(
    model: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor, cache: Any, config: Any
) -> torch.Tensor:
    """Sampled completions of left-padded prompts, returned as `generate` returns them: (B, P + T), each row's
    tokens after its end of turn set to the pad token, T the longest completion. Greedy (the most likely token each
    step) where `config.do_sample` is false.

    `cache` holds every row's prompt less its last token (`prompt_cache`). A row that has written an end-of-turn
    token leaves the batch (its cache rows are dropped)."""
    eos = torch.tensor(config.eos_token_id if isinstance(config.eos_token_id, list) else [config.eos_token_id])
    pad = config.pad_token_id if config.pad_token_id is not None else int(eos[0])
    batch = input_ids.size(0)
    positions = (attention_mask.cumsum(dim=-1) - 1).clamp(min=0)  # (B, P)
    completions = torch.full((batch, config.max_new_tokens), pad, dtype=input_ids.dtype)  # (B, max_new)
    rows = torch.arange(batch)  # (b,): the rows still sampling, by their index in the batch
    token, position, mask = input_ids[:, -1:], positions[:, -1:], attention_mask  # (b, 1), (b, 1), (b, P + t)
    length = 0
    _preallocate(cache, config.max_new_tokens)
    with torch.no_grad(), layers_for_sampling(model):
        for step in range(config.max_new_tokens):
            logits = model(
                input_ids=token, attention_mask=mask, position_ids=position, use_cache=True, **{CACHE_ARGUMENT: cache}
            ).logits[:, -1]  # (b, V)
            drawn = draw(logits, config.temperature) if config.do_sample else logits.argmax(dim=-1)  # (b,)
            completions[rows, step] = drawn
            length = step + 1
            going = ~torch.isin(drawn, eos)  # (b,)
            if not going.any():
                break
            if not going.all():
                keep = going.nonzero().squeeze(1)  # (b',)
                cache.batch_select_indices(keep)
                rows, drawn, position, mask = rows[keep], drawn[keep], position[keep], mask[keep]
            token, position = drawn.unsqueeze(1), position + 1  # (b, 1) each
            mask = torch.cat([mask, mask.new_ones(mask.size(0), 1)], dim=1)  # (b, P + t + 1)
    return torch.cat([input_ids, completions[:, :length]], dim=1)  # (B, P + T)


def draw(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """One token per row from softmax(logits / temperature), by inverting the cumulative distribution at a uniform
    draw: a cumulative sum and a binary search per row, where `torch.multinomial` (as `generate` samples) draws an
    exponential number for every token of the vocabulary. A token of probability 0 is never drawn (`right=True`: the
    first index whose cumulative sum exceeds the draw)."""
    probs = torch.softmax(logits.float() / temperature, dim=-1)  # (b, V)
    cumulative = probs.cumsum(dim=-1)  # (b, V)
    uniform = torch.rand(probs.size(0), 1, device=probs.device) * cumulative[:, -1:]  # (b, 1)
    return torch.searchsorted(cumulative, uniform, right=True).squeeze(1).clamp(max=probs.size(1) - 1)  # (b,)


def _preallocate(cache: Any, room: int) -> None:
    """Give each plain layer of `cache` (transformers' `DynamicLayer`) room for `room` more positions, in place."""
    layers = getattr(cache, "layers", None) or []
    for index, layer in enumerate(layers):
        if type(layer) is DynamicLayer and layer.is_initialized and layer.keys.dim() == 4:
            layers[index] = PreallocatedLayer(layer, room)


class PreallocatedLayer(DynamicLayer):
    """A `DynamicLayer` whose keys and values are views of buffers with room for more positions: a decoding step
    writes its position in place, where `DynamicLayer` concatenates, copying every row's whole cache at every step.
    Dropping rows copies the buffers once."""

    def __init__(self, layer: DynamicLayer, room: int) -> None:
        super().__init__()
        self.device, self.is_initialized = layer.keys.device, True
        self._length = layer.keys.size(-2)
        self._buffers = [_with_room(states, room) for states in (layer.keys, layer.values)]  # (b, h, L + room, d)
        self._expose()

    def _expose(self) -> None:
        self.keys, self.values = (buffer[:, :, : self._length] for buffer in self._buffers)  # (b, h, L, d) each

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        end = self._length + key_states.size(-2)
        if end > self._buffers[0].size(-2):  # out of room: as much again as is needed
            self._buffers = [_with_room(buffer[:, :, : self._length], end) for buffer in self._buffers]
        for buffer, states in zip(self._buffers, (key_states, value_states), strict=True):
            buffer[:, :, self._length : end] = states
        self._length = end
        self._expose()
        return self.keys, self.values

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        self._buffers = [buffer[indices] for buffer in self._buffers]
        self._expose()

    def _unsupported(self, *args: Any, **kwargs: Any) -> None:
        # `sample_rows` only appends positions and drops rows; the rest of `DynamicLayer`'s methods would change the
        # exposed views without the buffers.
        raise NotImplementedError(f"{type(self).__name__} only appends positions and drops rows")

    crop = batch_repeat_interleave = reorder_cache = reset = offload = prefetch = _unsupported


def _with_room(states: torch.Tensor, room: int) -> torch.Tensor:
    """`states` (b, h, L, d) at the start of a new buffer (b, h, L + room, d)."""
    batch, heads, length, dim = states.shape
    buffer = states.new_empty(batch, heads, length + room, dim)
    buffer[:, :, :length] = states
    return buffer


@contextlib.contextmanager
def prefill_once_per_prompt(model: torch.nn.Module) -> Iterator[None]:
    """Within the block, `model.generate` prefills each distinct prompt of its batch once (`prompt_cache`), and plain
    sampling (`plain_sampling`) runs in `sample_rows`. Calls with other arguments reach `generate` unchanged; the
    model's own `generate` is put back afterwards."""
    generate = model.generate
    own = vars(model).get("generate")  # an attribute set on the instance, to put back afterwards

    def shared_prefill(*args: Any, **kwargs: Any) -> Any:
        config = kwargs.get("generation_config")
        if (
            not args
            and set(kwargs) == {"input_ids", "attention_mask", "generation_config"}
            and config is not None
            and config.use_cache is not False  # None: the model's default, a cache
            and config.cache_implementation is None
        ):
            cache = prompt_cache(model, kwargs["input_ids"], kwargs["attention_mask"])
            if cache is not None and plain_sampling(config):
                return sample_rows(model, kwargs["input_ids"], kwargs["attention_mask"], cache, config)
            if cache is not None:
                kwargs[CACHE_ARGUMENT] = cache
        return generate(*args, **kwargs)

    model.generate = shared_prefill
    try:
        yield
    finally:
        if own is None:
            del model.generate
        else:
            model.generate = own


def plain_sampling(config: Any) -> bool:
    """Whether `config` asks for sampling from the tempered softmax and nothing else (trl's defaults: no top-k, top-p,
    min-p, repetition penalty or other logits processor), with a length limit in new tokens."""
    from transformers import GenerationConfig

    allowed = {
        "max_new_tokens", "do_sample", "temperature", "pad_token_id", "bos_token_id", "eos_token_id", "use_cache",
        "disable_compile", "transformers_version", "cache_implementation", "top_p", "top_k", "min_p",
        "repetition_penalty",
    }  # fmt: skip
    changed = set(config.to_diff_dict()) - {"_from_model_config"}
    return (
        changed <= allowed
        and config.do_sample is True
        and (config.temperature or 0) > 0
        and config.max_new_tokens is not None
        and config.eos_token_id is not None
        and config.top_p in (None, 1.0)
        and config.top_k in (None, 0)
        and config.min_p is None
        and config.repetition_penalty in (None, 1.0)
        and config.num_return_sequences in (None, 1)
        and GenerationConfig().num_beams == config.num_beams
    )
