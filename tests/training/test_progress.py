"""Tests for `grpo_tools.training.progress`: while a run trains, the terminal gets one compact line per logging step
(step, reward, each reward's mean, KL, coefficient, seconds per step) instead of trl's dict of every metric, with the
progress bar and without it, while `trainer_state.json` keeps every metric; and the line leaves out what a run did not
log."""

import doctest
import json
import logging
import math
import re

import pytest
from peft import LoraConfig
from transformers import AutoTokenizer
from transformers.trainer_callback import PrinterCallback, ProgressCallback

import grpo_tools.training.progress
from grpo_tools.data.prompts import load_rows, prompt_dataset
from grpo_tools.rewards import get_reward_funcs
from grpo_tools.training.configs import ToolGRPOConfig
from grpo_tools.training.progress import (
    CompactPrinterCallback,
    CompactProgressCallback,
    format_log_line,
    use_compact_progress,
)
from grpo_tools.training.trainer import ToolGRPOTrainer


LINE = re.compile(
    r"^step (\d+)/2 \| reward -?\d+\.\d{3} \| format \d\.\d{3} exact \d\.\d{3} \| "
    r"call rows: call \d\.\d\d right \d\.\d\d \| (no-call rows: call \d\.\d\d \| )?kl \S+ coef \S+ \| \d+\.\d s/step$"
)


def tiny_trainer(model_dir, train_path, output_dir, disable_tqdm):
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    args = ToolGRPOConfig(
        output_dir=str(output_dir),
        use_cpu=True,
        per_device_train_batch_size=8,
        num_generations=4,
        max_completion_length=8,
        max_steps=2,
        logging_steps=1,
        report_to=[],
        save_strategy="no",
        gradient_checkpointing=False,
        disable_tqdm=disable_tqdm,
        seed=0,
    )
    return ToolGRPOTrainer(
        model=model_dir,
        reward_funcs=get_reward_funcs(["tool_format", "tool_exact"]),
        args=args,
        train_dataset=prompt_dataset(load_rows(train_path), tokenizer),
        processing_class=tokenizer,
        peft_config=LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", task_type="CAUSAL_LM"),
    )


@pytest.mark.parametrize("disable_tqdm", [False, True], ids=["progress-bar", "no-bar"])
def test_the_terminal_gets_one_line_a_step_and_the_state_keeps_every_metric(
    disable_tqdm, tiny_model_dir, small_data, tmp_path, capfd, caplog
):
    trainer = use_compact_progress(tiny_trainer(tiny_model_dir, small_data["train"], tmp_path, disable_tqdm))
    expected = CompactPrinterCallback if disable_tqdm else CompactProgressCallback
    callbacks = trainer.callback_handler.callbacks
    assert [type(callback) for callback in callbacks if isinstance(callback, (ProgressCallback, PrinterCallback))] == [
        expected
    ]

    with caplog.at_level(logging.INFO, logger="grpo_tools.training.progress"):
        trainer.train()
    captured = capfd.readouterr()
    terminal = captured.out + captured.err + "\n".join(record.getMessage() for record in caplog.records)

    step_lines = [line.strip() for line in terminal.splitlines() if line.strip().startswith("step ")]
    assert [LINE.match(line).group(1) for line in step_lines] == ["1", "2"], step_lines
    assert "trained 2 steps in" in terminal
    assert "completions/mean_length" not in terminal and "{'loss'" not in terminal  # no dict of every metric

    trainer.save_state()
    history = json.loads((tmp_path / "trainer_state.json").read_text())["log_history"]
    logged = set().union(*(entry.keys() for entry in history))
    assert {"completions/mean_length", "rewards/tool_exact_reward/mean", "kl", "kl_coef", "entropy"} <= logged


def test_swapping_twice_keeps_one_progress_callback(tiny_model_dir, small_data, tmp_path):
    trainer = tiny_trainer(tiny_model_dir, small_data["train"], tmp_path, disable_tqdm=False)
    use_compact_progress(use_compact_progress(trainer))
    kinds = [type(callback) for callback in trainer.callback_handler.callbacks]
    assert kinds.count(CompactProgressCallback) == 1
    assert ProgressCallback not in kinds and PrinterCallback not in kinds


@pytest.mark.parametrize(
    ("logs", "step", "max_steps", "seconds", "line"),
    [
        (
            {
                "loss": 0.01,
                "reward": 1.5,
                "rewards/tool_format_reward/mean": 1.0,
                "rewards/tool_exact_reward/mean": 0.25,
                "rewards/tool_exact_reward/std": 0.4,
                "rewards/tool_partial_reward/mean": 0.375,
                "kl": 0.0412,
                "kl_coef": 0.0213,
                "completions/mean_length": 40.0,
            },
            12,
            32,
            14.24,
            "step 12/32 | reward 1.500 | format 1.000 exact 0.250 partial 0.375 | kl 0.0412 coef 0.0213 | 14.2 s/step",
        ),
        # the decision to call, per class of row
        (
            {
                "reward": 0.25,
                "rewards/tool_decision_reward/mean": 0.25,
                "decision/call_rows/call": 0.71875,
                "decision/call_rows/right": 0.21875,
                "decision/no_call_rows/call": 0.28125,
                "decision/no_call_rows/right": 0.71875,
                "kl": 0.05,
            },
            2,
            12,
            30.0,
            "step 2/12 | reward 0.250 | decision 0.250 | call rows: call 0.72 right 0.22 | no-call rows: call 0.28 | "
            "kl 0.0500 | 30.0 s/step",
        ),
        # beta 0: trl logs no KL and the coefficient is not adapted; the first log has no time yet
        ({"reward": 0.5, "rewards/tool_bfcl_reward/mean": 0.5}, 1, 10, None, "step 1/10 | reward 0.500 | bfcl 0.500"),
        # multi-turn: the outcome reward added by `add_reward_func` is named by its function
        (
            {"reward": 0.0, "rewards/outcome_reward/mean": 0.0},
            5,
            0,
            2.0,
            "step 5 | reward 0.000 | outcome 0.000 | 2.0 s/step",
        ),
        # a reward function that returned None for the whole batch (trl logs None), a non-finite KL
        ({"reward": None, "kl": math.nan, "kl_coef": 1e-4}, 3, 4, None, "step 3/4 | coef 0.0001"),
        # not a GRPO step: the loss alone
        ({"loss": 0.5, "learning_rate": 1e-3}, 7, 8, 1.0, "step 7/8 | loss 0.5000 | 1.0 s/step"),
    ],
)
def test_the_line_shows_what_the_run_logged_and_leaves_out_the_rest(logs, step, max_steps, seconds, line):
    assert format_log_line(logs, step, max_steps, seconds) == line


def test_docstring_examples():
    result = doctest.testmod(grpo_tools.training.progress)
    assert result.failed == 0 and result.attempted > 0


def test_multi_turn_steps_show_calls_and_the_failure_kinds_that_happened():
    logs = {"reward": 0.5, "tools/calls_per_rollout": 1.25, "tools/failure_rate": 0.2, "tools/failures/timeout": 0.1,
            "tools/failures/server_down": 0.1, "tools/failures/limit": 0.0, "tools/turns": 2.0}  # fmt: skip
    line = format_log_line(logs, step=1, max_steps=2)
    assert "calls 1.25/rollout failed 0.20 (timeout 0.10 server_down 0.10)" in line and "limit" not in line
    quiet = format_log_line({**logs, "tools/failure_rate": 0.0, "tools/failures/timeout": 0.0,
                             "tools/failures/server_down": 0.0}, step=1, max_steps=2)  # fmt: skip
    assert quiet.endswith("| calls 1.25/rollout failed 0.00")
    assert "calls" not in format_log_line({"reward": 0.5}, step=1, max_steps=2)
