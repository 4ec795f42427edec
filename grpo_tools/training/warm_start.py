"""The supervised warm start: SFT on the gold answers (trl SFTTrainer) before GRPO, so the model knows the call format.

Single-turn rows teach the gold turn as the model's chat template writes it; multi-turn rows (with `env`) teach their
gold trajectories, tool results included, with a mask on what the assistant writes.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any

from grpo_tools.data.prompts import load_rows, rendered_rows
from grpo_tools.models.adapters import WARM_ADAPTER_DIR
from grpo_tools.tools.environments import is_multi_turn
from grpo_tools.tools.trajectories import sft_examples
from grpo_tools.training.configs import ConfigError, model_init_kwargs
from grpo_tools.training.sharding import check_warm_start_visible


__all__ = ["renderable_rows", "sft_dataset", "sft_trainer", "train_sft", "warm_start", "warm_started_model"]


def renderable_rows(
    train_rows: list[dict], eval_rows: list[dict] | None, tokenizer: Any, script_args: Any, gold_in_group: bool
) -> list[dict]:
    """The training rows GRPO can use, checked before any training (the warm start included): single-turn rows whose
    prompt (and with `gold_in_group` gold turn) the chat template renders, as `unrenderable_rows` says (stop naming
    the others, or leave them out with a warning). Held-out rows stop the run too under `error`; under `skip` the
    evaluation scores them as failures. Multi-turn rows are rendered by trl with their environment's tools."""
    if eval_rows and not is_multi_turn(eval_rows) and script_args.unrenderable_rows == "error":
        rendered_rows(eval_rows, tokenizer, source=script_args.eval_data)
    if is_multi_turn(train_rows):
        return train_rows
    policy, source = script_args.unrenderable_rows, script_args.dataset_name
    return [row for row, _ in rendered_rows(train_rows, tokenizer, gold_in_group, policy, source)]


def sft_dataset(
    rows: list[dict[str, Any]], tokenizer: Any, unrenderable_rows: str = "error", source: str | None = None
) -> Any:
    """A prompt-completion `datasets.Dataset` for `SFTTrainer`: the gold turn as the model's template writes it.
    Rows whose prompt or gold turn the template cannot render stop here or are left out, as `unrenderable_rows` says
    (`grpo_tools.data.prompts.rendered_rows`). Multi-turn rows (with `env`) give their tokenized gold trajectories
    instead, with a `completion_mask` on what the assistant writes (see `grpo_tools.tools.trajectories.sft_example`)."""
    from datasets import Dataset

    if is_multi_turn(rows):
        return Dataset.from_list(sft_examples(rows, tokenizer))
    rendered = rendered_rows(rows, tokenizer, with_gold=True, unrenderable_rows=unrenderable_rows, source=source)
    return Dataset.from_list(
        [{"prompt": texts["prompt"], "completion": texts["gold_completion"]} for _, texts in rendered]
    )


def sft_trainer(
    model_path: str,
    tokenizer: Any,
    rows: list[dict],
    script_args: Any,
    training_args: Any,
    output_dir: str,
    model_args: Any = None,
    callbacks: list[Any] | None = None,
    **config: Any,
) -> Any:
    """trl's `SFTTrainer` on the rows' gold turns with the recipe's `warmup_sft_*` settings (`config` overrides any
    `SFTConfig` field), with a LoRA adapter from `model_args` when `warmup_sft_peft` is set."""
    from trl import SFTConfig, SFTTrainer, get_peft_config

    settings = {
        "output_dir": output_dir,
        "num_train_epochs": script_args.warmup_sft_epochs,
        "learning_rate": script_args.warmup_sft_learning_rate,
        "per_device_train_batch_size": script_args.warmup_sft_batch_size,
        "lr_scheduler_type": "cosine",
        "warmup_steps": 0.05,
        "logging_steps": max(training_args.logging_steps, 1),
        "save_strategy": "no",
        "report_to": [],
        "seed": training_args.seed,
        "bf16": training_args.bf16,
        "use_cpu": training_args.use_cpu,
        "completion_only_loss": True,
        # trl's SFTConfig turns checkpointing on by default; the recipe's setting holds here as in GRPO (on the CPU,
        # with LoRA on the last layers, it about doubled the warm start's time and changed no figure).
        "gradient_checkpointing": training_args.gradient_checkpointing,
        "gradient_checkpointing_kwargs": training_args.gradient_checkpointing_kwargs,
        "disable_tqdm": training_args.disable_tqdm,
        "trust_remote_code": training_args.trust_remote_code,
    }
    if model_args is not None:
        # The model loads as GRPO's does (revision, attention, quantization, the recipe's dtype), but in trl's float32
        # where the recipe sets no dtype: a full-weight warm start trains every weight in the dtype it loads in.
        if (model_args.load_in_4bit or model_args.load_in_8bit) and not script_args.warmup_sft_peft:
            raise ConfigError(
                "a warm start on a quantized model (load_in_4bit or load_in_8bit) needs warmup_sft_peft: true: "
                "quantized weights cannot be trained"
            )
        user_kwargs = training_args.model_init_kwargs or {}
        settings["model_init_kwargs"] = {
            **model_init_kwargs(training_args, model_args, choose_dtype=False),
            **user_kwargs,
        }
    peft_config = None
    if script_args.warmup_sft_peft:
        if model_args is None or not model_args.use_peft:
            raise ConfigError("warmup_sft_peft needs the LoRA settings of the recipe: set use_peft: true")
        peft_config = get_peft_config(model_args)
    return SFTTrainer(
        model=model_path,
        args=SFTConfig(**{**settings, **config}),
        train_dataset=sft_dataset(
            rows,
            tokenizer,
            script_args.unrenderable_rows,
            script_args.warmup_sft_data or script_args.dataset_name,
        ),
        processing_class=tokenizer,
        peft_config=peft_config,
        callbacks=callbacks,
    )


def train_sft(trainer: Any, cpu_fast_path: str = "auto") -> None:
    """Train an `sft_trainer`; where `cpu_fast_path` runs the fast path (`fastpath.enabled`), projecting only the
    labelled positions onto the vocabulary, as trl does on GPUs (the same values, less time)."""
    from grpo_tools import fastpath
    from grpo_tools.training.trl_compat import labelled_positions_only_on_cpu

    fast = fastpath.enabled(cpu_fast_path, trainer.accelerator.device)
    with labelled_positions_only_on_cpu() if fast else contextlib.nullcontext():
        trainer.train()


def warm_start(
    model_path: str,
    tokenizer: Any,
    rows: list[dict],
    script_args: Any,
    training_args: Any,
    output_dir: str,
    model_args: Any = None,
) -> str:
    """Supervised fine-tuning on the gold answers (trl SFTTrainer), so the model knows the call format before GRPO;
    returns the folder of the warmed-up model. With `warmup_sft_peft`, a LoRA adapter built from `model_args` is
    trained and merged into the weights, so the folder holds a plain model either way, and the adapter is kept in its
    `lora/` subfolder.

    With several processes, the main process alone writes the folder, and every process returns once it is written
    (transformers 5 writes model weights from global rank 0 alone, whatever `save_on_each_node` says)."""
    trainer = sft_trainer(model_path, tokenizer, rows, script_args, training_args, output_dir, model_args)
    train_sft(trainer, training_args.cpu_fast_path)
    main = trainer.accelerator.is_main_process
    if script_args.warmup_sft_peft and main:
        model = trainer.accelerator.unwrap_model(trainer.model)
        # The adapter itself too, in a subfolder the model loaders pass over: the run stacks it with GRPO's adapter
        # into one on the base model (`grpo_tools.models.adapters`).
        model.save_pretrained(os.path.join(output_dir, WARM_ADAPTER_DIR))
        model.merge_and_unload().save_pretrained(output_dir)
    elif not script_args.warmup_sft_peft:
        trainer.save_model(output_dir)  # on every process: under ZeRO-3 or FSDP, they gather the weights together
    if main:
        tokenizer.save_pretrained(output_dir)
    trainer.accelerator.wait_for_everyone()  # no process loads the folder before it is whole
    return output_dir


def warm_started_model(
    model_path: str,
    tokenizer: Any,
    train_rows: list[dict],
    script_args: Any,
    training_args: Any,
    model_args: Any,
    resuming: bool = False,
) -> str:
    """The model GRPO starts from: `model_path` itself, or with `warmup_sft_epochs` its warm-started copy in
    `output_dir/warmup`, trained on `warmup_sft_data` (else the training rows) or, when resuming, reused if its model
    was written (`config.json`)."""
    from accelerate.utils import gather_object

    if script_args.warmup_sft_epochs <= 0:
        return model_path
    warm_path = os.path.join(training_args.output_dir, "warmup")
    warm_rows = load_rows(script_args.warmup_sft_data) if script_args.warmup_sft_data else train_rows
    # Reused only where every process sees its model (nodes may not share a disk); every process decides before any
    # starts a warm start, which creates the folder.
    found = resuming and os.path.isfile(os.path.join(warm_path, "config.json"))
    if all(gather_object([found])):
        return warm_path
    warm_start(model_path, tokenizer, warm_rows, script_args, training_args, warm_path, model_args)
    check_warm_start_visible(warm_path)
    return warm_path
