"""The held-out evaluation around training (`grpo-tools train` with `eval_data`): before GRPO and after, on the same
rows, with the rows shared out between the processes of a distributed run and one report from the main process.

Generation runs on whole weights: through `sharding.model_for_generation` (trl's `unwrap_model_for_generation`),
which under DeepSpeed ZeRO-3 gathers the partitioned parameters on every process, before training as after it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from grpo_tools.tools.environments import is_multi_turn
from grpo_tools.training.sharding import model_for_generation


__all__ = ["held_out_evaluator"]

logger = logging.getLogger(__name__)


def _evaluate(model: Any, tokenizer: Any, rows: list[dict], script_args: Any, training_args: Any, label: str) -> Any:
    """The held-out report, generated with the rows shared out between the processes; written by the main process,
    which alone returns it (None on the others)."""
    from accelerate import PartialState

    from grpo_tools.evaluation.evaluate import evaluate_model
    from grpo_tools.evaluation.generation import generate_completions_shared, row_prompts, spread_completions

    max_new_tokens = training_args.max_completion_length or 256
    prompts, _ = row_prompts(tokenizer, rows)  # None where the template cannot render a row: scored as a failure
    generated = generate_completions_shared(model, tokenizer, [prompt for prompt in prompts if prompt is not None],
                                            script_args.eval_batch_size, max_new_tokens,
                                            not training_args.disable_tqdm, f"{label}: generating",
                                            cpu_fast_path=training_args.cpu_fast_path)  # fmt: skip
    completions = spread_completions(generated, prompts, num_samples=1)
    if not PartialState().is_main_process:
        return None
    return evaluate_model(model, tokenizer, rows, training_args.output_dir, scorer=script_args.eval_scorer,
                          label=label, completions=completions)  # fmt: skip


def _evaluate_multi_turn(
    model: Any, tokenizer: Any, rows: list[dict], script_args: Any, training_args: Any, label: str
) -> Any:
    """Outcome accuracy on multi-turn rows: greedy rollouts through the same environments as training, under trl's
    budget (`max_completion_length` for the whole trajectory) and turn limit."""
    from grpo_tools.tools.rollouts import evaluate_multi_turn

    iterations = training_args.max_tool_calling_iterations
    return evaluate_multi_turn(
        model,
        tokenizer,
        rows,
        training_args.output_dir,
        label=label,
        batch_size=script_args.eval_batch_size,
        max_new_tokens=training_args.max_completion_length or 256,
        max_turns=iterations + 1 if iterations is not None else 8,
        timeout=training_args.tool_timeout,
        progress=not training_args.disable_tqdm,
    )


def held_out_evaluator(
    trainer: Any, tokenizer: Any, eval_rows: list[dict] | None, script_args: Any, training_args: Any
) -> Callable[[str], Any]:
    """`evaluate(label)`: the held-out report of the trainer's policy as it is now, on the main process; None on the
    others, without eval data, or for multi-turn rows in a distributed run. Every process must call it."""
    if eval_rows is None:
        return lambda label: None
    multi_turn = is_multi_turn(eval_rows)
    if multi_turn and trainer.accelerator.num_processes > 1:
        logger.warning("multi-turn evaluation around training runs in single-process runs only; use `grpo-tools eval`")
        return lambda label: None
    evaluator = _evaluate_multi_turn if multi_turn else _evaluate

    def evaluate(label: str) -> Any:
        with model_for_generation(trainer) as model:
            return evaluator(model, tokenizer, eval_rows, script_args, training_args, label)

    return evaluate
