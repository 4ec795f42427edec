"""The prefix-sharing step both halves of the fast path use: rows that share a prompt run it once.

A GRPO batch holds each prompt `num_generations` times, and prompts are most of the positions a forward pass reads.
Each distinct prompt runs once, and its key/value cache is copied to every row that has it; the rows then go on from
there. Two position conventions exist because each caller reproduces the pass it replaces: sampling numbers the real
tokens of a left-padded row from 0, as `generate` does; scoring numbers every position, padding included, as trl's
single pass over the whole row does.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

import torch
import transformers
from packaging.version import Version
from transformers.cache_utils import DynamicLayer


__all__ = ["CACHE_ARGUMENT", "SharedPrefix", "copy_rows", "shared_prefix"]

# transformers 5.24 renamed the key/value cache, as an argument and as an output field, from `past_key_values` to
# `cache`; the old name still works there, with a warning. Earlier releases know only the old name.
CACHE_ARGUMENT = "cache" if Version(transformers.__version__) >= Version("5.24.0.dev0") else "past_key_values"


@dataclass
class SharedPrefix:
    """The prefix pass: `cache` holds every row's prefix (rows copied from their distinct prompt's), `logits` what each
    distinct prefix's last position predicts (u, 1, V), `row_prompt` each row's distinct prompt (b,)."""

    cache: Any
    logits: torch.Tensor
    row_prompt: torch.Tensor


def shared_prefix(
    model: torch.nn.Module, ids: torch.Tensor, mask: torch.Tensor, *, count_padding: bool, around: Any = None
) -> SharedPrefix | None:
    """Run each distinct row of `ids` (b, L) under `mask` (b, L) once, with a cache, and give every row its copy.

    `count_padding` False: positions count each row's real tokens from 0 (`generate`'s convention for left-padded
    rows); True: the model's own positions, 0 to L - 1 (trl's single pass). None where no two rows are alike, a row is
    all padding, or the model returns no cache: the caller then runs every row itself. `around(ids, mask)`, where
    given, is the context the pass over the distinct rows runs in (`lower_layers`)."""
    length = ids.size(1)
    rows = torch.cat([ids, mask.to(ids.dtype)], dim=1)  # (b, 2L)
    distinct, row_prompt = torch.unique(rows, dim=0, return_inverse=True)  # (u, 2L), (b,)
    distinct_ids, distinct_mask = distinct[:, :length], distinct[:, length:]  # (u, L) each
    if distinct.size(0) == ids.size(0) or not distinct_mask.bool().any(dim=1).all():
        return None
    positions = {}
    if not count_padding:
        positions["position_ids"] = (distinct_mask.cumsum(dim=-1) - 1).masked_fill(distinct_mask == 0, 0)  # (u, L)
    with around(distinct_ids, distinct_mask) if around is not None else contextlib.nullcontext():
        output = model(
            input_ids=distinct_ids, attention_mask=distinct_mask, use_cache=True, logits_to_keep=1, **positions
        )  # logits (u, 1, V)
    cache = getattr(output, CACHE_ARGUMENT)
    if cache is None:
        return None
    copy_rows(cache, row_prompt)
    return SharedPrefix(cache=cache, logits=output.logits, row_prompt=row_prompt)


def copy_rows(cache: Any, rows: torch.Tensor) -> None:
    """Replace each layer of `cache` by its rows `rows` (b,), in place, as `batch_select_indices` does, but with
    `index_select`, whose gradient adds each copy back in a fixed order. transformers indexes (`keys[rows]`), and on
    the CPU with more than one thread the backward pass of indexing adds the copies of one row with atomic float
    additions in whatever order the threads reach them, so two runs of the same step differ in the last bits. A layer
    that keeps more than keys and values (its own `batch_select_indices`) selects its rows itself."""
    layers = getattr(cache, "layers", None)
    if layers is None:  # a cache kept otherwise
        cache.batch_select_indices(rows)
        return
    for layer in layers:
        if type(layer).batch_select_indices is not DynamicLayer.batch_select_indices:
            layer.batch_select_indices(rows)
        elif layer.get_seq_length() > 0:
            layer.keys, layer.values = layer.keys.index_select(0, rows), layer.values.index_select(0, rows)
