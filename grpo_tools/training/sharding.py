"""Runs whose weights are sharded over the processes (DeepSpeed ZeRO-3, FSDP) and runs over several nodes: what
`grpo-tools train` does so that they evaluate, warm-start and resume on whole weights, and what it refuses at start-up.

- Evaluation around training generates through trl's `unwrap_model_for_generation`, which gathers ZeRO-3's
  partitioned parameters (before training too: `zero3_init_flag` loads the model partitioned) and lifts ZeRO-3's
  hooks while `generate` runs; elsewhere it hands back the unwrapped model as it is.
- Refused at start-up, each with what to do instead: evaluation around an FSDP run (nothing gathers FSDP's shards
  before `generate`, and with `fsdp_cpu_ram_efficient_loading` the other processes hold no weights before training);
  a warm start under FSDP (its `SHARDED_STATE_DICT` saves no model GRPO can load) or, with `warmup_sft_peft`, under
  ZeRO-3 (the LoRA merge runs on one process over partitioned weights); a full-weight warm start under ZeRO-3 whose
  config does not gather the weights on save (`zero3_save_16bit_model`).
- Several nodes: a process that cannot see the warm start once it is written (a node without the main process's
  disk) stops every process with one message, and a resumed run reuses a warm start only where every process sees it.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

from grpo_tools.training.configs import ConfigError


__all__ = [
    "check_sharded_run",
    "check_warm_start_visible",
    "model_for_generation",
    "sharded_engine",
]

ZERO3 = "DeepSpeed ZeRO-3"
FSDP = "FSDP"


def sharded_engine(training_args: Any) -> str | None:
    """`"DeepSpeed ZeRO-3"` or `"FSDP"` where the run's weights will be sharded over its processes, else None. Read
    from what `accelerate launch` (or the `deepspeed`/`fsdp` arguments) set before anything loads: transformers'
    `deepspeed_plugin` on the training arguments, or FSDP asked for in the arguments or accelerate's environment."""
    plugin = getattr(training_args, "deepspeed_plugin", None)
    if plugin is not None and getattr(plugin, "zero_stage", None) == 3:
        return ZERO3
    if getattr(training_args, "fsdp", None) or os.environ.get("ACCELERATE_USE_FSDP", "").lower() in ("true", "1"):
        return FSDP
    return None


def check_sharded_run(script_args: Any, training_args: Any) -> None:
    """Refuse, before any model loads, what a sharded run cannot do on whole weights (see the module docstring)."""
    engine = sharded_engine(training_args)
    if engine is None:
        return
    if engine == FSDP and script_args.eval_data:
        raise ConfigError(
            "eval_data under FSDP: nothing gathers FSDP's shards before generation, so the evaluation around training "
            "is not run there. Leave eval_data out and evaluate the saved adapter afterwards: grpo-tools eval "
            "--model BASE --adapter OUTPUT_DIR --data EVAL.jsonl"
        )
    if script_args.warmup_sft_epochs <= 0:
        return
    what_instead = (
        "warm-start without sharding first (the same recipe with --max_steps 1 under recipes/accelerate_configs/"
        "ddp.yaml or zero2.yaml writes OUTPUT_DIR/warmup), then train from it here with --model_name_or_path "
        "OUTPUT_DIR/warmup --warmup_sft_epochs 0"
    )
    if engine == FSDP:
        raise ConfigError(
            f"warmup_sft_epochs under FSDP: the warm start would save shards GRPO cannot load; {what_instead}"
        )
    if script_args.warmup_sft_peft:
        raise ConfigError(
            "warmup_sft_peft under DeepSpeed ZeRO-3: merging the warm start's LoRA adapter needs whole weights, and "
            f"ZeRO-3 keeps them partitioned; {what_instead}, or set warmup_sft_peft: false"
        )
    zero = training_args.deepspeed_plugin.deepspeed_config.get("zero_optimization", {})
    if not zero.get("stage3_gather_16bit_weights_on_model_save"):
        raise ConfigError(
            "warmup_sft_epochs under DeepSpeed ZeRO-3 without zero3_save_16bit_model (stage3_gather_16bit_weights_"
            "on_model_save): the warm start would be saved partitioned, with no weights GRPO can load; set "
            "zero3_save_16bit_model: true in the accelerate config, as recipes/accelerate_configs/zero3.yaml does"
        )


@contextlib.contextmanager
def model_for_generation(trainer: Any) -> Iterator[Any]:
    """The trainer's policy, unwrapped, with whole weights while the block runs: trl's `unwrap_model_for_generation`
    over the wrapped model (under ZeRO-3 it gathers the partitioned parameters on every process, so every process
    must enter it; elsewhere it unwraps and nothing more)."""
    from trl.models import unwrap_model_for_generation

    checkpointing = trainer.args.gradient_checkpointing_kwargs  # switched back on as trl's own generation does
    with unwrap_model_for_generation(
        trainer.model_wrapped, trainer.accelerator, gradient_checkpointing_kwargs=checkpointing
    ) as model:
        yield model


def check_warm_start_visible(warm_path: str) -> None:
    """After the warm start: every process finds its model, or all stop with one message, rather than the process
    that cannot see it failing alone while the others wait for it in the next collective. The main process writes
    it, and transformers 5 writes model weights from global rank 0 alone (`save_pretrained` ignores `is_main_process`
    and `save_on_each_node` once torch.distributed is up), so nodes without a shared disk cannot each write their own."""
    from accelerate import PartialState
    from accelerate.utils import gather_object

    state = PartialState()
    found = os.path.isfile(os.path.join(warm_path, "config.json"))
    missing = [index for index, seen in enumerate(gather_object([found])) if not seen]
    if missing:
        raise ConfigError(
            f"{warm_path}: the warm-started model, written by the main process, is not on the disk of process(es) "
            f"{missing} of {state.num_processes}: nodes without a shared disk need output_dir on one they share, or "
            "the warm start copied to each node first (then train with --model_name_or_path OUTPUT_DIR/warmup "
            "--warmup_sft_epochs 0)"
        )
