"""GPU tests (`pytest -m gpu`, skipped without CUDA): one GRPO step of `ToolGRPOTrainer` on the tiny model with LoRA,
bf16 and adaptive KL on a CUDA device, with transformers' generation and, where vLLM is installed, with vLLM
colocated and gold turns in the groups. The CPU fast path stays off there."""

import importlib.util
import math

import pytest
import torch
from trainer_builders import make_trainer


pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


def one_cuda_step(trainer):
    assert trainer.accelerator.device.type == "cuda" and not trainer.cpu_fast_path
    assert next(p for p in trainer.model.parameters() if p.requires_grad).device.type == "cuda"
    trainer.train()
    logged = trainer.state.log_history[0]
    assert math.isfinite(logged["loss"]) and math.isfinite(logged["kl"])
    assert logged["kl_coef"] == trainer.args.beta  # the first step runs at the starting coefficient...
    assert len(trainer.kl_history) == 1  # ...and the controller took that step's KL
    return logged


def test_one_step_with_lora_bf16_and_adaptive_kl_on_cuda(tiny_model_dir, small_data, tmp_path):
    trainer = make_trainer(tiny_model_dir, small_data["train"], tmp_path, use_cpu=False, bf16=True, max_steps=1)
    one_cuda_step(trainer)


@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM is not installed")
def test_one_step_with_vllm_colocated_and_gold_turns(tiny_model_dir, small_data, tmp_path):
    trainer = make_trainer(
        tiny_model_dir, small_data["train"], tmp_path, use_cpu=False, bf16=True, max_steps=1, use_vllm=True,
        vllm_mode="colocate", vllm_gpu_memory_utilization=0.2, gold_in_group=True, max_completion_length=160,
    )  # fmt: skip
    logged = one_cuda_step(trainer)
    assert "sampling/importance_sampling_ratio/min" in logged
