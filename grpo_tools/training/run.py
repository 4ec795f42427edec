"""`grpo-tools train --config RECIPE.yaml [--key value ...]`: GRPO for tool calling, from a recipe.

`run` reads in stages: config (TrlParser over ToolScriptArguments, ToolGRPOConfig, trl's ModelConfig, in `main`) ->
data (canonical rows, checked) -> model and tokenizer -> optional supervised warm start (`warm_start.py`) -> trainer,
and held-out accuracy before -> GRPO with the tool rewards and adaptive KL -> save the adapter -> held-out accuracy
after, and the training curves -> push. Several GPUs or nodes:
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

from grpo_tools.data.prompts import load_rows, prompt_dataset
from grpo_tools.tools.environments import is_multi_turn, make_environment_factory
from grpo_tools.tools.mcp_config import prepare_mcp
from grpo_tools.tools.trajectories import multi_turn_dataset
from grpo_tools.training.configs import ConfigError, check_rows_fill_a_step, model_init_kwargs, tokenizer_kwargs
from grpo_tools.training.held_out import held_out_evaluator
from grpo_tools.training.reward_funcs import check_reward_rows, training_rewards
from grpo_tools.training.sharding import check_sharded_run


logger = logging.getLogger(__name__)


def write_run_info(
    output_dir: str,
    script_args: Any,
    training_args: Any,
    model_args: Any,
    argv: list[str] | None,
    multi_turn: bool = False,
) -> None:
    """Record what trained this run in `output_dir`: `run_info.json` (command, base model, data, rewards, KL and LoRA
    settings, for `multi_turn` runs the outcome weight, extra-call cost and tool limits, and the `provenance.json` of
    a locally converted base) and a copy of the recipe as `recipe.yaml`. `grpo-tools push` builds the model card from
    them."""
    import shlex
    import shutil

    from grpo_tools.models.provenance import provenance_record

    config = None
    if argv:
        for index, arg in enumerate(argv):
            if arg == "--config" and index + 1 < len(argv):
                config = argv[index + 1]
            elif arg.startswith("--config="):
                config = arg.split("=", 1)[1]
    info = {
        "command": shlex.join(["grpo-tools", "train", *(argv or [])]),
        "base_model": model_args.model_name_or_path,
        "warm_start_epochs": script_args.warmup_sft_epochs,
        "warm_start_data": (script_args.warmup_sft_data or script_args.dataset_name)
        if script_args.warmup_sft_epochs > 0
        else None,
        "warm_start_lora": bool(script_args.warmup_sft_peft) if script_args.warmup_sft_epochs > 0 else None,
        "dataset": script_args.dataset_name,
        "eval_data": script_args.eval_data,
        "reward_funcs": list(training_args.reward_funcs),
        "reward_weights": list(training_args.reward_weights) if training_args.reward_weights else None,
        "kl": {
            "beta": training_args.beta,
            "adaptive_kl": training_args.adaptive_kl,
            "kl_target": training_args.kl_target,
            "kl_controller": training_args.kl_controller,
            "kl_min": training_args.kl_min,
            "kl_max": training_args.kl_max,
        },
        "lora": {
            "r": model_args.lora_r,
            "alpha": model_args.lora_alpha,
            "target_modules": model_args.lora_target_modules,
        }
        if model_args.use_peft
        else None,
        "num_generations": training_args.num_generations,
        "learning_rate": training_args.learning_rate,
        "max_steps": training_args.max_steps,
        "seed": training_args.seed,
        "multi_turn": {
            "outcome_reward_weight": training_args.outcome_reward_weight,
            "extra_call_cost": training_args.extra_call_cost,
            "tool_timeout": training_args.tool_timeout,
            "max_tool_calling_iterations": training_args.max_tool_calling_iterations,
        }
        if multi_turn
        else None,
    }
    info["base_provenance"] = provenance_record(model_args.model_name_or_path)  # a locally converted base
    Path(output_dir).mkdir(parents=True, exist_ok=True)
    Path(output_dir, "run_info.json").write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
    if config and os.path.isfile(config):
        shutil.copyfile(config, Path(output_dir, "recipe.yaml"))


def hub_target(training_args: Any) -> str | None:
    """The repo a recipe pushes to (`push_to_hub`, `hub_model_id`), checked before training starts, or None.

    trl would push every checkpoint on its own with a generic card; grpo-tools pushes once, at the end, through
    `grpo-tools push`'s code (adapter, reports, plots and the model card), so trl's own pushing is switched off.
    """
    from huggingface_hub import get_token

    from grpo_tools.hub.push import HubError, check_repo_id
    from grpo_tools.training.configs import ConfigError

    if not training_args.push_to_hub:
        return None
    repo_id = training_args.hub_model_id
    if not repo_id:
        raise ConfigError("push_to_hub needs hub_model_id: the repo to push to, as owner/name")
    try:
        check_repo_id(repo_id)
    except HubError as error:
        raise ConfigError(f"hub_model_id: {error}") from None
    if not (training_args.hub_token or get_token()):
        raise ConfigError("push_to_hub: no Hugging Face token; log in with `hf auth login` or set HF_TOKEN")
    training_args.push_to_hub = False
    return repo_id


def run(script_args: Any, training_args: Any, model_args: Any, argv: list[str] | None = None) -> dict[str, Any]:
    """Train from parsed configuration; returns the before/after reports (None where there is no eval data).
    `argv`, the command line, is recorded in the run folder for the model card."""
    from transformers import set_seed

    from grpo_tools import fastpath
    from grpo_tools.training.warm_start import renderable_rows, warm_started_model

    # Config: the Hub repo, a sharded engine's limits and the checkpoint resumed are checked now rather than after
    # minutes of loading or hours of training
    set_seed(training_args.seed)
    if fastpath.enabled(training_args.cpu_fast_path, training_args.device):
        fastpath.keep_freed_memory()
    hub_repo = hub_target(training_args)
    check_sharded_run(script_args, training_args)
    resume = _resume_from(training_args.resume_from_checkpoint)
    check_resume(resume, training_args.output_dir, training_args.max_steps)

    # Data
    train_rows, eval_rows = _load_data(script_args, training_args)
    try:  # rows for an MCP server: it starts (and lists its tools) now, or the run stops with its command and stderr
        prepare_mcp(training_args, train_rows + (eval_rows or []))
    except ValueError as error:
        raise ConfigError(str(error)) from None
    training_rewards(training_args, is_multi_turn(train_rows))  # a reward these rows cannot feed stops here
    check_reward_rows(training_args.reward_funcs, train_rows, script_args.dataset_name)

    # Model, warm-started on the gold answers when the recipe asks
    tokenizer = _load_tokenizer(training_args, model_args)
    train_rows = renderable_rows(train_rows, eval_rows, tokenizer, script_args, training_args.gold_in_group)
    check_rows_fill_a_step(training_args, len(train_rows), f"{script_args.dataset_name} (its renderable rows)")
    model_path = warm_started_model(
        model_args.model_name_or_path, tokenizer, train_rows, script_args, training_args, model_args, bool(resume)
    )

    # Trainer: a fresh LoRA adapter is the identity, so evaluating before training measures the starting model
    trainer = build_trainer(model_path, tokenizer, train_rows, training_args, model_args)
    evaluate = held_out_evaluator(trainer, tokenizer, eval_rows, script_args, training_args)
    before = evaluate("before")

    # Train and save
    trainer.train(resume_from_checkpoint=resume or None)
    _save(trainer, tokenizer, script_args, training_args, model_args, argv, is_multi_turn(train_rows))

    # Evaluate: held-out accuracy after, compared with before; the training curves
    after = evaluate("after")
    if before and after:
        from grpo_tools.evaluation.compare import write_comparison

        write_comparison(before, after, training_args.output_dir)
    if trainer.accelerator.is_main_process:
        _plot_curves(training_args.output_dir)

    # Push: the adapter, stacked with a LoRA warm start's; after any other warm start it sits on a warm-started copy
    # of the base, so the merged model is pushed
    if hub_repo and trainer.accelerator.is_main_process:
        _push(hub_repo, script_args, training_args)
    return {"before": before, "after": after}


def _resume_from(resume: Any) -> Any:
    """`--resume_from_checkpoint true` means the last checkpoint in output_dir; a path means that checkpoint."""
    if isinstance(resume, str) and resume.lower() in ("true", "false", "yes", "no", "1", "0", ""):
        return resume.lower() in ("true", "yes", "1")
    return resume


def check_resume(resume: Any, output_dir: str, max_steps: int) -> None:
    """Refuse to resume a run whose checkpoint has already reached `max_steps`: it would train 0 steps and exit as
    if it had trained. `resume` is True (the last checkpoint in `output_dir`) or a checkpoint folder."""
    from transformers.trainer_utils import get_last_checkpoint

    if not resume or max_steps <= 0:
        return
    checkpoint = get_last_checkpoint(output_dir) if resume is True and os.path.isdir(output_dir) else resume
    state_file = Path(str(checkpoint), "trainer_state.json") if checkpoint else None
    if state_file is None or not state_file.is_file():
        return  # no checkpoint to read: transformers says so when training starts
    step = json.loads(state_file.read_text()).get("global_step", 0)
    if step >= max_steps:
        raise ConfigError(
            f"resume_from_checkpoint: {checkpoint} is at step {step} and max_steps is {max_steps}, so nothing would "
            f"train; raise max_steps (for example --max_steps {step + max_steps}) to train on from it"
        )


def _load_data(script_args: Any, training_args: Any) -> tuple[list[dict], list[dict] | None]:
    """The training rows, enough for one optimizer step, and the held-out rows (None without `eval_data`), checked as
    `check-data` checks them."""
    if not script_args.dataset_name:
        raise ConfigError("no training data: set dataset_name (a canonical JSONL file or a Hugging Face dataset)")
    train_rows = load_rows(script_args.dataset_name, script_args.max_train_rows)
    check_rows_fill_a_step(training_args, len(train_rows), script_args.dataset_name)
    eval_rows = load_rows(script_args.eval_data, script_args.max_eval_rows) if script_args.eval_data else None
    return train_rows, eval_rows


def _load_tokenizer(training_args: Any, model_args: Any) -> Any:
    from grpo_tools.models.loading import check_model_folder, load_tokenizer

    if not model_args.model_name_or_path:
        raise ConfigError("no model: set model_name_or_path")
    check_model_folder(model_args.model_name_or_path)
    tokenizer = load_tokenizer(model_args.model_name_or_path, **tokenizer_kwargs(training_args, model_args))
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def build_trainer(
    model_path: str, tokenizer: Any, train_rows: list[dict], training_args: Any, model_args: Any, callbacks: Any = None
) -> Any:
    """`ToolGRPOTrainer` as `grpo-tools train` builds it from parsed arguments: the recipe's model settings and
    rewards (`reward_funcs.training_rewards`), prompts rendered with each row's tools; for multi-turn rows (`env`),
    trl runs the environment's tools during rollouts."""
    from trl import get_peft_config

    from grpo_tools.training.progress import use_compact_progress
    from grpo_tools.training.trainer import ToolGRPOTrainer

    # The recipe's model settings, under any `model_init_kwargs` it gives itself (as trl's scripts merge them)
    training_args.model_init_kwargs = {
        **model_init_kwargs(training_args, model_args),
        **(training_args.model_init_kwargs or {}),
    }
    multi_turn = is_multi_turn(train_rows)
    reward_funcs, added_rewards = training_rewards(training_args, multi_turn)
    check_reward_rows(training_args.reward_funcs, train_rows)
    rollouts: dict[str, Any] = {}
    if multi_turn:
        if training_args.gold_in_group:
            raise ConfigError("gold_in_group needs single-turn rows; these are multi-turn (they have `env`)")
        rollouts["environment_factory"] = make_environment_factory(train_rows, training_args.tool_timeout)
        train_dataset = multi_turn_dataset(train_rows)
    else:
        train_dataset = prompt_dataset(train_rows, tokenizer, with_gold=training_args.gold_in_group)
    trainer = ToolGRPOTrainer(
        model=model_path,
        reward_funcs=reward_funcs,
        args=training_args,
        train_dataset=train_dataset,
        processing_class=tokenizer,
        peft_config=get_peft_config(model_args),
        callbacks=callbacks,
        **rollouts,
    )
    use_compact_progress(trainer)  # one line per logging step in the terminal, not trl's dict of every metric
    for function, weight in added_rewards:
        trainer.add_reward_func(function, weight)
    return trainer


def _save(
    trainer: Any,
    tokenizer: Any,
    script_args: Any,
    training_args: Any,
    model_args: Any,
    argv: list[str] | None,
    multi_turn: bool,
) -> None:
    """The adapter, `trainer_state.json` (the logged history `grpo-tools plot` draws), the tokenizer, run_info."""
    trainer.save_model(training_args.output_dir)
    trainer.save_state()
    if trainer.accelerator.is_main_process:
        tokenizer.save_pretrained(training_args.output_dir)
        write_run_info(training_args.output_dir, script_args, training_args, model_args, argv, multi_turn)
        if model_args.use_peft:
            _stack_on_base(training_args.output_dir)


def _stack_on_base(output_dir: str) -> None:
    """After a LoRA warm start, `output_dir/base_adapter`: the warm start's adapter and GRPO's as one, which plain
    peft loads on the model training started from (`grpo_tools.models.adapters`). A stale one is removed."""
    import shutil

    from grpo_tools.models.adapters import BASE_ADAPTER_DIR, WARM_ADAPTER_DIR, StackError, stack_lora_adapters

    stacked = Path(output_dir, BASE_ADAPTER_DIR)
    if stacked.exists():
        shutil.rmtree(stacked)
    start = json.loads(Path(output_dir, "adapter_config.json").read_text()).get("base_model_name_or_path") or ""
    warm_adapter = Path(start, WARM_ADAPTER_DIR)
    if not start or not (warm_adapter / "adapter_config.json").is_file():
        return  # GRPO started from a model no LoRA warm start made: its adapter applies to that model as it is
    try:
        base = stack_lora_adapters(warm_adapter, output_dir, stacked)
    except StackError as error:
        logger.warning("the adapter applies to %s only; it was not stacked with its warm start's: %s", start, error)
        return
    logger.info("%s: the warm start's and GRPO's adapters as one, for %s", stacked, base)


def _plot_curves(output_dir: str) -> None:
    from grpo_tools.evaluation.plot import HistoryError, plot_run

    try:
        plot_run(output_dir)  # training_curves.png
    except HistoryError as error:  # e.g. logging_steps past max_steps: nothing was logged to draw
        logger.warning("no training curves drawn: %s", error)


def _push(hub_repo: str, script_args: Any, training_args: Any) -> None:
    from grpo_tools.hub.push import push_run
    from grpo_tools.models.adapters import BASE_ADAPTER_DIR

    result = push_run(
        training_args.output_dir,
        hub_repo,
        private=bool(training_args.hub_private_repo),
        revision=training_args.hub_revision,
        merge=script_args.warmup_sft_epochs > 0 and not Path(training_args.output_dir, BASE_ADAPTER_DIR).is_dir(),
        token=training_args.hub_token,
    )
    logger.info("pushed %d files to %s", len(result.files), result.url)


def main(argv: list[str]) -> int:
    """Parse the recipe and flags, train, and turn known failures into one clear message."""
    from trl import TrlParser

    from grpo_tools.data.rows import DataError
    from grpo_tools.training.configs import ConfigError, ModelConfig, ToolGRPOConfig, ToolScriptArguments
    from grpo_tools.training.trainer import TrainingDivergedError

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
        run(script_args, training_args, model_args, argv)
    except (ConfigError, DataError, OSError) as error:  # OSError: a model that is neither a folder nor on the Hub
        print(f"grpo-tools train: {error}", file=sys.stderr)
        return 2
    except TrainingDivergedError as error:
        print(f"grpo-tools train: {error}", file=sys.stderr)
        return 1
    return 0
