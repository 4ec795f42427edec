"""Tests for runs whose weights are sharded (DeepSpeed ZeRO-3, FSDP), without DeepSpeed or GPUs: the evaluation around
training generates on gathered weights under ZeRO-3 (its partitioning played by a stand-in for `deepspeed.zero`, which
empties every parameter outside `GatheredParameters` as `zero3_init_flag` leaves them before training); what cannot
run on whole weights is refused before any model loads, naming the keys and what to do instead.

DeepSpeed does not install here and accelerate switches FSDP on for GPU-like devices only, so neither engine runs in
these tests: they test the decisions. docs/gpu.md lists what has never run."""

import contextlib
import importlib.machinery
import sys
import types

import pytest
import torch
from trainer_builders import make_trainer
from transformers import AutoTokenizer

from grpo_tools.data.prompts import load_rows
from grpo_tools.training.configs import ConfigError, ModelConfig, ToolGRPOConfig, ToolScriptArguments
from grpo_tools.training.held_out import held_out_evaluator
from grpo_tools.training.sharding import check_sharded_run, sharded_engine


class Partitioned:
    """ZeRO-3's partitioning, played on one process: each parameter of `model` holds an empty tensor, as under
    `zero3_init_flag` before training, except inside `GatheredParameters(...)` of the stand-in `deepspeed` module."""

    def __init__(self, model):
        self.whole = {parameter: parameter.data for parameter in model.parameters()}
        self.gathers = 0
        for parameter in self.whole:
            parameter.data = torch.empty(0, dtype=parameter.dtype)

    @contextlib.contextmanager
    def gathered(self, parameters, modifier_rank=None):
        self.gathers += 1
        parameters = list(parameters)
        for parameter in parameters:
            parameter.data = self.whole[parameter]
        try:
            yield
        finally:
            for parameter in parameters:
                parameter.data = torch.empty(0, dtype=parameter.dtype)

    def module(self):
        deepspeed = types.ModuleType("deepspeed")
        deepspeed.__spec__ = importlib.machinery.ModuleSpec("deepspeed", None)  # found, but no package is installed
        deepspeed.zero = types.SimpleNamespace(GatheredParameters=self.gathered)
        return deepspeed


def parsed(*argv):
    from trl import TrlParser

    parser = TrlParser((ToolScriptArguments, ToolGRPOConfig, ModelConfig))
    return parser.parse_args_and_config(args=list(argv))


def test_evaluation_under_zero3_generates_on_gathered_weights(tiny_model_dir, small_data, tmp_path, monkeypatch):
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    rows = load_rows(small_data["eval"])[:6]
    script_args, training_args, _ = parsed(
        "--output_dir", str(tmp_path), "--use_cpu", "true", "--max_completion_length", "10", "--eval_batch_size", "3",
        "--disable_tqdm", "true",
    )  # fmt: skip
    trainer = make_trainer(tiny_model_dir, small_data["train"], tmp_path / "trainer", max_completion_length=10)
    training_args.output_dir = str(tmp_path / "whole")
    whole = held_out_evaluator(trainer, tokenizer, rows, script_args, training_args)("before")

    training_args.output_dir = str(tmp_path / "zero3")
    partitioned = Partitioned(trainer.model)
    monkeypatch.setitem(sys.modules, "deepspeed", partitioned.module())
    plugin = types.SimpleNamespace(zero_stage=3)
    monkeypatch.setattr(type(trainer.accelerator.state), "deepspeed_plugin", property(lambda state: plugin))
    report = held_out_evaluator(trainer, tokenizer, rows, script_args, training_args)("before")
    assert partitioned.gathers == 1  # every batch generated inside one gathering
    assert all(parameter.numel() == 0 for parameter in trainer.model.parameters())  # partitioned again after
    assert (tmp_path / "zero3" / "before_predictions.jsonl").read_text() == (
        tmp_path / "whole" / "before_predictions.jsonl"
    ).read_text()
    assert report["accuracy"] == whole["accuracy"]


def zero3(gather_on_save=True):
    config = {"zero_optimization": {"stage": 3, "stage3_gather_16bit_weights_on_model_save": gather_on_save}}
    return types.SimpleNamespace(zero_stage=3, deepspeed_config=config)


@pytest.mark.parametrize(
    ("engine", "arguments", "message"),
    [
        ("fsdp", ["--eval_data", "EVAL"], r"eval_data under FSDP.*grpo-tools eval"),
        ("fsdp", ["--warmup_sft_epochs", "1"], r"warmup_sft_epochs under FSDP.*--warmup_sft_epochs 0"),
        ("zero3", ["--warmup_sft_epochs", "1", "--warmup_sft_peft", "true", "--use_peft", "true"],
         r"warmup_sft_peft under DeepSpeed ZeRO-3.*warmup_sft_peft: false"),
        ("zero3-no-gather", ["--warmup_sft_epochs", "1"], r"without zero3_save_16bit_model"),
    ],
)  # fmt: skip
def test_what_a_sharded_run_cannot_do_on_whole_weights_is_refused_before_any_model_loads(
    engine, arguments, message, tiny_model_dir, small_data, tmp_path, monkeypatch
):
    from grpo_tools.training import run as run_module

    arguments = [small_data["eval"] if value == "EVAL" else value for value in arguments]
    script_args, training_args, model_args = parsed(
        "--model_name_or_path", tiny_model_dir, "--dataset_name", small_data["train"], "--output_dir", str(tmp_path),
        "--use_cpu", "true", *arguments,
    )  # fmt: skip
    if engine == "fsdp":
        monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")
    else:
        training_args.deepspeed_plugin = zero3(gather_on_save=engine == "zero3")

    def loads(*args, **kwargs):
        raise AssertionError("a model was loaded before the refusal")

    monkeypatch.setattr(run_module, "_load_tokenizer", loads)
    with pytest.raises(ConfigError, match=message):
        run_module.run(script_args, training_args, model_args)


def test_a_sharded_run_that_can_run_on_whole_weights_is_not_refused(tiny_model_dir, small_data, tmp_path, monkeypatch):
    """ZeRO-3 with a full-weight warm start gathered on save, and with eval_data (generation gathers); FSDP without
    evaluation or warm start; and ZeRO-2, which shards no weights."""
    script_args, training_args, _ = parsed(
        "--model_name_or_path", tiny_model_dir, "--dataset_name", small_data["train"], "--output_dir", str(tmp_path),
        "--use_cpu", "true", "--warmup_sft_epochs", "1", "--eval_data", small_data["eval"],
    )  # fmt: skip
    training_args.deepspeed_plugin = zero3()
    assert sharded_engine(training_args) == "DeepSpeed ZeRO-3"
    check_sharded_run(script_args, training_args)
    training_args.deepspeed_plugin = types.SimpleNamespace(zero_stage=2, deepspeed_config={})
    assert sharded_engine(training_args) is None
    check_sharded_run(script_args, training_args)
    training_args.deepspeed_plugin = None
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")
    script_args.eval_data, script_args.warmup_sft_epochs = None, 0
    assert sharded_engine(training_args) == "FSDP"
    check_sharded_run(script_args, training_args)
