"""`grpo-tools train --config RECIPE.yaml [--key value ...]`: GRPO for tool calling, from a recipe.

Stages: config (TrlParser over ToolScriptArguments, ToolGRPOConfig, trl's ModelConfig) -> data (canonical rows,
checked) -> model and tokenizer -> optional supervised warm start -> held-out accuracy before -> GRPO with the tool
rewards and adaptive KL -> save the adapter -> held-out accuracy after. Several GPUs or nodes:
`accelerate launch --config_file recipes/accelerate_configs/zero3.yaml -m grpo_tools.cli train --config ...`.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import warnings
from pathlib import Path
from typing import Any


logger = logging.getLogger(__name__)


def warm_start(
    model_path: str, tokenizer: Any, rows: list[dict], script_args: Any, training_args: Any, output_dir: str
) -> str:
    """Supervised fine-tuning on the gold answers (trl SFTTrainer), so the model knows the call format before GRPO;
    returns the folder of the warmed-up model."""
    from trl import SFTConfig, SFTTrainer

    from grpo_tools.prompts import sft_dataset

    config = SFTConfig(
        output_dir=output_dir,
        num_train_epochs=script_args.warmup_sft_epochs,
        learning_rate=script_args.warmup_sft_learning_rate,
        per_device_train_batch_size=script_args.warmup_sft_batch_size,
        lr_scheduler_type="cosine",
        warmup_steps=0.05,
        logging_steps=max(training_args.logging_steps, 1),
        save_strategy="no",
        report_to=[],
        seed=training_args.seed,
        bf16=training_args.bf16,
        use_cpu=training_args.use_cpu,
        completion_only_loss=True,
        disable_tqdm=training_args.disable_tqdm,
    )
    trainer = SFTTrainer(
        model=model_path, args=config, train_dataset=sft_dataset(rows, tokenizer), processing_class=tokenizer
    )
    trainer.train()
    trainer.save_model(output_dir)
    tokenizer.save_pretrained(output_dir)
    return output_dir


def _evaluate(model: Any, tokenizer: Any, rows: list[dict], script_args: Any, training_args: Any, label: str) -> Any:
    from grpo_tools.evaluate import evaluate_model

    return evaluate_model(
        model,
        tokenizer,
        rows,
        training_args.output_dir,
        scorer=script_args.eval_scorer,
        batch_size=script_args.eval_batch_size,
        max_new_tokens=training_args.max_completion_length or 256,
        progress=not training_args.disable_tqdm,
        label=label,
    )


def print_comparison(before: dict[str, Any], after: dict[str, Any]) -> None:
    """Held-out accuracy per category before and after GRPO, with the difference."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"held-out tool-call accuracy ({after['scorer']}), before and after GRPO")
    for column in ("category", "rows", "before", "after", "change"):
        table.add_column(column, justify="left" if column == "category" else "right")
    categories = {**before["by_category"], **after["by_category"]}
    for category in categories:
        old = before["by_category"].get(category, {}).get("accuracy", 0.0)
        new = after["by_category"].get(category, {}).get("accuracy", 0.0)
        rows = categories[category]["rows"]
        table.add_row(category, str(rows), f"{old:.3f}", f"{new:.3f}", f"{new - old:+.3f}")
    change = after["accuracy"] - before["accuracy"]
    table.add_row(
        "all", str(after["rows"]["data"]), f"{before['accuracy']:.3f}", f"{after['accuracy']:.3f}", f"{change:+.3f}",
        style="bold",
    )  # fmt: skip
    Console().print(table)


def run(script_args: Any, training_args: Any, model_args: Any) -> dict[str, Any]:
    """Train from parsed configuration; returns the before/after reports (None where there is no eval data)."""
    from transformers import AutoTokenizer, set_seed
    from trl import get_peft_config

    from grpo_tools.configs import ConfigError
    from grpo_tools.prompts import load_rows, prompt_dataset
    from grpo_tools.rewards import get_reward_funcs
    from grpo_tools.trainer import ToolGRPOTrainer

    # Data
    set_seed(training_args.seed)
    if not script_args.dataset_name:
        raise ConfigError("no training data: set dataset_name (a canonical JSONL file or a Hugging Face dataset)")
    train_rows = load_rows(script_args.dataset_name, script_args.max_train_rows)
    eval_rows = load_rows(script_args.eval_data, script_args.max_eval_rows) if script_args.eval_data else None

    # Model
    model_path = model_args.model_name_or_path
    if not model_path:
        raise ConfigError("no model: set model_name_or_path")
    tokenizer = AutoTokenizer.from_pretrained(model_path, revision=model_args.model_revision)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    # `--resume_from_checkpoint true` means the last checkpoint in output_dir; a path means that checkpoint.
    resume = training_args.resume_from_checkpoint
    if isinstance(resume, str) and resume.lower() in ("true", "false", "yes", "no", "1", "0", ""):
        resume = resume.lower() in ("true", "yes", "1")
    resuming = bool(resume)
    warm_path = os.path.join(training_args.output_dir, "warmup")
    if script_args.warmup_sft_epochs > 0:
        model_path = (
            warm_path
            if resuming and os.path.isdir(warm_path)
            else warm_start(model_path, tokenizer, train_rows, script_args, training_args, warm_path)
        )
    if training_args.model_init_kwargs is None:
        training_args.model_init_kwargs = {"dtype": model_args.dtype or "auto"}

    # Trainer: a fresh LoRA adapter is the identity, so evaluating before training measures the starting model
    trainer = ToolGRPOTrainer(
        model=model_path,
        reward_funcs=get_reward_funcs(training_args.reward_funcs),
        args=training_args,
        train_dataset=prompt_dataset(train_rows, tokenizer),
        processing_class=tokenizer,
        peft_config=get_peft_config(model_args),
    )
    distributed = trainer.accelerator.num_processes > 1
    if eval_rows is not None and distributed:
        logger.warning("evaluation around training runs in single-process runs only; use `grpo-tools eval` after")
    evaluate = eval_rows is not None and not distributed
    before = _evaluate(trainer.model, tokenizer, eval_rows, script_args, training_args, "before") if evaluate else None

    # Train and save
    trainer.train(resume_from_checkpoint=resume or None)
    trainer.save_model(training_args.output_dir)
    if trainer.accelerator.is_main_process:
        tokenizer.save_pretrained(training_args.output_dir)
    model = trainer.accelerator.unwrap_model(trainer.model)
    after = _evaluate(model, tokenizer, eval_rows, script_args, training_args, "after") if evaluate else None
    if before and after:
        print_comparison(before, after)
        summary = {"before": before["accuracy"], "after": after["accuracy"], "scorer": after["scorer"]}
        Path(training_args.output_dir, "eval_summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return {"before": before, "after": after}


def main(argv: list[str]) -> int:
    """Parse the recipe and flags, train, and turn known failures into one clear message."""
    from trl import TrlParser

    from grpo_tools.configs import ConfigError, ModelConfig, ToolGRPOConfig, ToolScriptArguments
    from grpo_tools.data import DataError
    from grpo_tools.trainer import TrainingDivergedError

    logging.basicConfig(format="%(levelname)s %(name)s: %(message)s", level=logging.INFO)
    # trl still sets transformers' old `gradient_checkpointing` names; the rename warning is noise to a user.
    warnings.filterwarnings("ignore", message=".*gradient_checkpoint.*deprecated", category=FutureWarning)
    parser = TrlParser((ToolScriptArguments, ToolGRPOConfig, ModelConfig), prog="grpo-tools train")
    try:
        script_args, training_args, model_args = parser.parse_args_and_config(args=argv)
    except (ValueError, OSError) as error:
        print(f"grpo-tools train: {error}", file=sys.stderr)
        return 2
    try:
        run(script_args, training_args, model_args)
    except (ConfigError, DataError, OSError) as error:  # OSError: a model that is neither a folder nor on the Hub
        print(f"grpo-tools train: {error}", file=sys.stderr)
        return 2
    except TrainingDivergedError as error:
        print(f"grpo-tools train: {error}", file=sys.stderr)
        return 1
    return 0
