"""What only makes GRPO faster on the CPU, apart from the algorithm: with it off, trl's own path runs.

- `sampling`: each prompt prefilled once, plain sampling in a loop that drops each row at its end of turn, key/value
  buffers allocated once, one uniform draw per token;
- `layers`: LoRA merged and weights packed for oneDNN while sampling;
- `logprobs`: log-probabilities from the LM head over completion positions only, a group's prompt run once, logits
  scored in pieces;
- `prefix`: the prefix-sharing step the two above use;
- `lower_layers`: the layers below the first LoRA layer run once for the reference's log-probabilities and the
  policy's (`shared_lower_layers`);
- `allocator`: glibc's allocator set to keep freed memory;
- `head`: the LM head's input made contiguous (`contiguous_head_input`), for sampling, log-probabilities and
  evaluation's generation.

The warm start's projection of only the labelled positions onto the vocabulary is decided here too (`enabled`) but
switched inside trl, so it sits with trl's other private names (`training.trl_compat.labelled_positions_only_on_cpu`).

`ToolGRPOTrainer` turns it on with `ToolGRPOConfig.cpu_fast_path` (`auto`: on the CPU) where `unsupported_reason`
finds nothing against it. Each piece gives the values of the path it replaces, up to float rounding, and is tested
for that against trl's (tests/fastpath). Measured effects: docs/benchmarks.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from grpo_tools.fastpath.allocator import keep_freed_memory
from grpo_tools.fastpath.head import contiguous_head_input


if TYPE_CHECKING:
    from grpo_tools.fastpath.lower_layers import LowerLayers


__all__ = [
    "LowerLayers",
    "contiguous_head_input",
    "enabled",
    "keep_freed_memory",
    "shared_lower_layers",
    "unsupported_reason",
]


def unsupported_reason(device: Any) -> str | None:
    """Why the fast path cannot run on `device` (a `torch.device`), or None where it can: it is written for the CPU
    (packed weights, glibc's allocator, log-probabilities held whole until the backward pass)."""
    if getattr(device, "type", str(device)) != "cpu":
        return f"the CPU fast path runs on the CPU only; this run is on {device}"
    return None


def enabled(setting: str, device: Any) -> bool:
    """Whether the fast path runs for `cpu_fast_path` `setting` (`auto`, `on`, `off`) on `device`. `on` where it
    cannot run raises ValueError naming the reason; `auto` runs it wherever it can."""
    reason = unsupported_reason(device)
    if setting == "on" and reason:
        raise ValueError(f"cpu_fast_path: on, but {reason}; set cpu_fast_path: auto or off")
    return setting != "off" and reason is None


def shared_lower_layers(trainer: Any) -> LowerLayers | None:
    """The layers below the first LoRA layer of `trainer`'s policy, to run once for the reference's log-probabilities
    and the policy's (`lower_layers`), where the reference is the policy with its adapter off (no `ref_model`) and the
    policy allows it (`LowerLayers.of`); None elsewhere."""
    from grpo_tools.fastpath.lower_layers import LowerLayers

    if trainer.ref_model is not None:
        return None
    model = trainer.accelerator.unwrap_model(trainer.model)
    return LowerLayers.of(model, bool(getattr(trainer.args, "gradient_checkpointing", False)))


def __getattr__(name: str) -> Any:
    # `LowerLayers` needs torch, which importing this package must not bring in: `grpo-tools score` imports
    # evaluation, whose generation imports this package, and never runs a model.
    if name == "LowerLayers":
        from grpo_tools.fastpath.lower_layers import LowerLayers

        return LowerLayers
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
