"""Tests for `grpo_tools.training.warm_start`: the supervised examples of the warm start are the gold turn as the
model's chat template writes it, and the reward model gives them full marks. (Multi-turn examples: tests/tools/.)"""

import contextlib

import pytest

from grpo_tools.data.prompts import NO_CALL_REPLY, render_prompt
from grpo_tools.rewards import tool_exact_reward
from grpo_tools.training.warm_start import sft_dataset


def test_sft_completions_are_what_the_template_adds_and_score_full_marks(tokenizer, call_and_no_call_rows):
    dataset = sft_dataset(call_and_no_call_rows, tokenizer)
    assert dataset[0]["prompt"] == render_prompt(tokenizer, call_and_no_call_rows[0])
    assert dataset[0]["completion"] == (
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Lyon", "unit": "celsius"}}\n</tool_call><|im_end|>\n'
    )
    assert dataset[1]["completion"] == NO_CALL_REPLY + "<|im_end|>\n"
    # The gold completion, as the reward model reads it, is exactly right.
    rewards = tool_exact_reward(
        dataset["completion"],
        [r["tools"] for r in call_and_no_call_rows],
        [r["answers"] for r in call_and_no_call_rows],
    )
    assert rewards == [1.0, 1.0]


def test_on_the_cpu_the_warm_starts_lm_head_projects_only_the_completion_with_the_same_results(
    tiny_model_dir, tokenizer, call_and_no_call_rows, monkeypatch
):
    import torch
    import trl.trainer.utils as trl_utils
    from transformers import AutoModelForCausalLM

    from grpo_tools.training.trl_compat import labelled_positions_only_on_cpu

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    trl_utils.add_fused_lm_head(model, outputs=("log_probs", "entropy", "is_top1"))
    dataset = sft_dataset(call_and_no_call_rows, tokenizer)
    rows = dataset.to_list()
    prompts = tokenizer([row["prompt"] for row in rows], add_special_tokens=False).input_ids
    fulls = tokenizer([row["prompt"] + row["completion"] for row in rows], add_special_tokens=False)
    batch = tokenizer.pad(fulls, return_tensors="pt", padding_side="right")  # (2, L)
    labels = batch.input_ids.masked_fill(batch.attention_mask == 0, -100)
    for index, prompt in enumerate(prompts):
        labels[index, : len(prompt)] = -100  # the loss is on the completion only
    projected = []  # rows of hidden states that reach the vocabulary projection, per call
    chunked = trl_utils._ChunkedLogProbFunction

    class Recording:
        @staticmethod
        def apply(hidden, *rest):
            projected.append(hidden.size(0))
            return chunked.apply(hidden, *rest)

    monkeypatch.setattr(trl_utils, "_ChunkedLogProbFunction", Recording)
    use_triton = trl_utils._use_triton
    results = []
    for scope in (labelled_positions_only_on_cpu, contextlib.nullcontext):
        model.zero_grad()
        with scope():
            outputs = model(**batch, labels=labels, fused_lm_head=True)
        outputs.loss.backward()
        grads = [parameter.grad.clone() for parameter in model.parameters() if parameter.grad is not None]
        results.append((outputs, grads))
    assert trl_utils._use_triton is use_triton  # restored on leaving the block
    labelled = int((labels[:, 1:] != -100).sum())
    assert projected == [labelled, labels[:, 1:].numel()] and labelled < labels[:, 1:].numel() / 2
    (ours, our_grads), (trls, trl_grads) = results
    for field in ("loss", "log_probs", "entropy", "is_top1", "label_mask"):
        torch.testing.assert_close(getattr(ours, field), getattr(trls, field), atol=1e-5, rtol=1e-4)
    for our_grad, trl_grad in zip(our_grads, trl_grads, strict=True):
        torch.testing.assert_close(our_grad, trl_grad, atol=1e-4 * trl_grad.abs().max().item(), rtol=1e-4)


def test_the_warm_start_loads_the_model_as_grpo_does(tokenizer, call_and_no_call_rows, monkeypatch):
    """The recipe's revision, attention implementation, remote-code permission and dtype reach the model the warm
    start loads, as they reach GRPO's (tests/test_recipe_keys.py); a full-weight warm start on a quantized model is
    refused."""
    import trl
    from trl import TrlParser

    from grpo_tools.training import warm_start
    from grpo_tools.training.configs import ConfigError, ModelConfig, ToolGRPOConfig, ToolScriptArguments

    class RecordingSFTTrainer:
        def __init__(self, model, args, **kwargs):
            self.model, self.args = model, args

    monkeypatch.setattr(trl, "SFTTrainer", RecordingSFTTrainer)
    parser = TrlParser((ToolScriptArguments, ToolGRPOConfig, ModelConfig))
    flags = [
        "--model_name_or_path",
        "org/model",
        "--dataset_name",
        "x.jsonl",
        "--output_dir",
        "out",
        "--use_cpu",
        "true",
    ]
    flags += ["--model_revision", "v2", "--attn_implementation", "eager", "--trust_remote_code", "true"]
    flags += ["--dtype", "float32", "--warmup_sft_epochs", "1"]
    script_args, training_args, model_args = parser.parse_args_and_config(flags)
    trainer = warm_start.sft_trainer(
        "org/model", tokenizer, call_and_no_call_rows, script_args, training_args, "w", model_args
    )
    assert trainer.model == "org/model"
    assert {key: trainer.args.model_init_kwargs.get(key) for key in ("revision", "attn_implementation", "dtype")} == {
        "revision": "v2",
        "attn_implementation": "eager",
        "dtype": "float32",
    }
    assert trainer.args.trust_remote_code is True

    monkeypatch.setattr("grpo_tools.training.configs._bitsandbytes_available", lambda: True, raising=False)
    model_args.load_in_4bit = True
    with pytest.raises(ConfigError, match="warmup_sft_peft"):
        warm_start.sft_trainer(
            "org/model", tokenizer, call_and_no_call_rows, script_args, training_args, "w", model_args
        )


@pytest.mark.parametrize(("cpu_fast_path", "patched"), [("auto", True), ("off", False)])
def test_the_warm_start_projects_only_the_completion_with_the_fast_path_alone(cpu_fast_path, patched):
    """The labelled-positions projection is a CPU speed trick: the warm start takes it where the recipe's
    `cpu_fast_path` runs, and with `off` trains as trl does."""
    from types import SimpleNamespace

    import torch
    import trl.trainer.utils as trl_utils

    from grpo_tools.training.warm_start import train_sft

    seen = []
    trainer = SimpleNamespace(
        accelerator=SimpleNamespace(device=torch.device("cpu")),
        train=lambda: seen.append(trl_utils._use_triton(torch.device("cpu"))),
    )
    train_sft(trainer, cpu_fast_path)
    assert seen == [patched]


@pytest.mark.parametrize("checkpointing", [False, True])
def test_the_warm_start_checkpoints_activations_only_where_the_recipe_says(
    tokenizer, call_and_no_call_rows, monkeypatch, checkpointing
):
    """trl's `SFTConfig` turns gradient checkpointing on by default; the warm start takes the recipe's
    `gradient_checkpointing` instead, as GRPO does (on, it recomputes every layer's forward pass in the backward one,
    and with LoRA it carries gradients back through the layers that have no adapter)."""
    import trl
    from trl import TrlParser

    from grpo_tools.training import warm_start
    from grpo_tools.training.configs import ModelConfig, ToolGRPOConfig, ToolScriptArguments

    class RecordingSFTTrainer:
        def __init__(self, model, args, **kwargs):
            self.args = args

    monkeypatch.setattr(trl, "SFTTrainer", RecordingSFTTrainer)
    flags = ["--model_name_or_path", "org/model", "--dataset_name", "x.jsonl", "--output_dir", "out"]
    flags += ["--use_cpu", "true", "--warmup_sft_epochs", "1", "--gradient_checkpointing", str(checkpointing).lower()]
    script_args, training_args, model_args = TrlParser(
        (ToolScriptArguments, ToolGRPOConfig, ModelConfig)
    ).parse_args_and_config(flags)
    trainer = warm_start.sft_trainer(
        "org/model", tokenizer, call_and_no_call_rows, script_args, training_args, "w", model_args
    )
    assert trainer.args.gradient_checkpointing is checkpointing
