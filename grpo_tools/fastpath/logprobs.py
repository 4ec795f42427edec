"""Log-probabilities and entropies of completion tokens on the CPU, from the LM head over the completion positions.

trl's fused LM head projects every position, prompt included, whenever it cannot use its Triton kernels; here the
model's own head runs on the positions that predict completion tokens alone, and the completions of a group share
their prompt's forward pass (`shared_prefix`). Logits become log-probabilities a few rows at a time, each piece under
the size above which glibc maps fresh pages for every block (see `allocator`), so the pieces reuse the same memory.
Every operation is row by row, so values and gradients are those of the whole batch at once. Measured effects:
docs/benchmarks.md.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import torch

from grpo_tools.fastpath.lower_layers import LowerLayers
from grpo_tools.fastpath.prefix import CACHE_ARGUMENT, shared_prefix


__all__ = ["LOGITS_PIECE_BYTES", "MAX_CPU_LOGITS", "completion_logits", "fits", "per_token_logps", "score_logits"]

# The most logits (rows x completion positions x vocabulary) this path materialises at once; above it, trl's fused
# LM head, which never holds them, runs instead. 2**28 float32 logits are 1 GiB, and the log-softmax kept for the
# backward pass as much again.
MAX_CPU_LOGITS = 2**28

# The float32 values of one piece of `score_logits`: under the 32 MiB above which glibc maps every block afresh from
# the kernel even with `keep_freed_memory`.
LOGITS_PIECE_BYTES = 16 << 20


def fits(rows: int, logits_to_keep: int, vocab: int | None) -> bool:
    """Whether a batch's logits stay within `MAX_CPU_LOGITS` (an unknown vocabulary never does)."""
    return vocab is not None and rows * (logits_to_keep + 1) * vocab <= MAX_CPU_LOGITS


def per_token_logps(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    logits_to_keep: int,
    *,
    batch_size: int | None,
    temperature: float,
    compute_entropy: bool,
    entropy_grad: bool,
    share_prompts: bool,
    autocast: Callable[[], Any],
    lower_layers: LowerLayers | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probabilities (b, K) of the last `logits_to_keep` (K) tokens of each row at `temperature`, and their
    entropies where asked, as trl's `_get_per_token_logps_and_entropies` computes them, `batch_size` rows at a time.
    `entropy_grad`: whether anything differentiates the entropy (trl's entropy bonus); `share_prompts` False (with
    gradient checkpointing, which turns the cache off) runs whole rows; `autocast` is the trainer's autocast context;
    `lower_layers`: the states below the first adapted layer kept from a pass without gradients, for one with them."""
    batch_size = batch_size or input_ids.size(0)
    around = lower_layers.around() if lower_layers is not None else None
    all_logps, all_entropies = [], []
    for start in range(0, input_ids.size(0), batch_size):
        ids, mask = input_ids[start : start + batch_size], attention_mask[start : start + batch_size]  # (b, L)
        with autocast():
            blocks = completion_logits(model, ids, mask, logits_to_keep, share_prompts, around)  # [(b, k, V), ...]
        widths = [block.size(1) for block in blocks]
        targets = ids[:, -logits_to_keep:].split(widths, dim=1)  # (b, k) each
        # Padding positions score 0, as trl scores them.
        padding = (mask[:, -logits_to_keep:] == 0).split(widths, dim=1)  # (b, k) each
        scored = [
            score_logits(*block, temperature, compute_entropy, entropy_grad)
            for block in zip(blocks, targets, padding, strict=True)
        ]
        all_logps.append(torch.cat([logps for logps, _ in scored], dim=1))  # (b, K)
        if compute_entropy:
            all_entropies.append(torch.cat([entropy for _, entropy in scored], dim=1))  # (b, K)
    entropies = torch.cat(all_entropies, dim=0) if compute_entropy else None
    return torch.cat(all_logps, dim=0), entropies


def score_logits(
    logits: torch.Tensor,
    targets: torch.Tensor,
    padding: torch.Tensor,
    temperature: float,
    compute_entropy: bool,
    entropy_grad: bool,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The log-probabilities of `targets` (b, k) under `logits` (b, k, V) at `temperature`, and the entropies where
    asked, both (b, k) and 0 where `padding` is set; a few rows at a time (`LOGITS_PIECE_BYTES`). `split` (one
    autograd node) gives the backward pass one concatenation, where indexing would add a whole-block gradient per
    piece."""
    rows = max(1, LOGITS_PIECE_BYTES // (4 * logits[0].numel()))
    all_logps, all_entropies = [], []
    for part, part_targets, part_padding in zip(
        logits.split(rows), targets.split(rows), padding.split(rows), strict=True
    ):
        logps = (part.float() / temperature).log_softmax(dim=-1)  # (r, k, V)
        gathered = logps.gather(-1, part_targets.unsqueeze(-1)).squeeze(-1)  # (r, k)
        all_logps.append(gathered.masked_fill(part_padding, 0.0))
        if compute_entropy:
            # Without an entropy bonus, no graph keeps exp(logps) alive.
            with contextlib.nullcontext() if entropy_grad else torch.no_grad():
                entropy = -(logps.exp() * logps).sum(dim=-1)  # (r, k)
            all_entropies.append(entropy.masked_fill(part_padding, 0.0))
    return torch.cat(all_logps), torch.cat(all_entropies) if compute_entropy else None


def completion_logits(
    model: torch.nn.Module,
    ids: torch.Tensor,
    mask: torch.Tensor,
    logits_to_keep: int,
    share_prompts: bool = True,
    around: Callable[[torch.Tensor, torch.Tensor, int], Any] | None = None,
) -> list[torch.Tensor]:
    """The logits that predict the last `logits_to_keep` tokens of each row (position i predicts token i + 1), as
    consecutive blocks of those positions, (b, k, V) each: the first from the prompts' pass, the rest from the
    completions'. Joined, they would be copied once more forward and once more backward.

    Rows that share a prompt share its pass (`shared_prefix`, positions as trl's single pass numbers them), and
    gradients reach the adapter through the shared cache. Without `share_prompts`, with no shared prompt or a model
    that returns no cache, the whole rows run in one pass. `around(ids, mask, prompt_length).of(kind)`, where given,
    is the context of each pass (`LowerLayers.around`)."""
    prompt_length = ids.size(1) - logits_to_keep
    passes = around(ids, mask, prompt_length) if around is not None else None

    def context(kind: str) -> Callable[[torch.Tensor, torch.Tensor], contextlib.AbstractContextManager[Any]]:
        return passes.of(kind) if passes is not None else lambda ids, mask: contextlib.nullcontext()

    prefix = None
    if prompt_length > 0 and share_prompts:
        prefix = shared_prefix(
            model, ids[:, :prompt_length], mask[:, :prompt_length], count_padding=True, around=context("prompt")
        )
    if prefix is None:
        with context("row")(ids, mask):
            # The logits of the last K + 1 positions, less the final one.
            return [model(input_ids=ids, attention_mask=mask, logits_to_keep=logits_to_keep + 1).logits[:, :-1]]
    # (b, 1, V): what each prompt's last token predicts; `index_select`, for the reason `copy_rows` gives
    blocks = [prefix.logits.index_select(0, prefix.row_prompt)]
    if logits_to_keep > 1:
        with context("rest")(ids, mask):
            rest = model(
                input_ids=ids[:, prompt_length:-1],
                attention_mask=mask[:, :-1],
                use_cache=True,
                **{CACHE_ARGUMENT: prefix.cache},
            ).logits  # (b, K - 1, V)
        blocks.append(rest)
    return blocks
