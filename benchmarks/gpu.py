"""GPU throughput: `ToolGRPOTrainer` (LoRA, adaptive KL, the tool rewards) on one GPU in bf16 with a model the size of
Qwen2.5-0.5B built from its config (random weights, nothing downloaded): generated tokens per second, optimizer steps
per second and peak GPU memory, with plain transformers generation and, where vLLM is installed, vLLM colocated.

The model is Qwen2.5-0.5B's shape (hidden 896, 24 layers, 14 heads, 2 KV heads, MLP 4864, vocabulary 151,936, tied
embeddings; 494M parameters). Its tokenizer is the tiny model's, padded with never-produced tokens up to the full
vocabulary, so that every id a random model samples decodes to text (unpadded, the tokenizer drops them).
Completions are forced to full length (`min_new_tokens` for transformers, `min_tokens` for vLLM), so every step
generates `batch x max_completion_length` tokens whatever the random weights sample.

Each backend runs in its own process (vLLM colocated takes a share of the GPU and its own distributed setup), the
same steps each; the first `--warmup` steps are left out. Per step: wall seconds (CUDA synchronised) from the end of
one optimizer step to the end of the next; generation seconds around trl's `_generate_single_turn` (for vLLM this
includes pushing the merged LoRA weights to it); tokens generated. Peak memory is `torch.cuda.max_memory_allocated`
(what went through torch's allocator: the policy, its activations and, colocated, what vLLM allocates through torch)
and the device's memory in use at the end (`mem_get_info`, every allocator, vLLM's reserved KV cache included).

    .venv/bin/python -m benchmarks.gpu [--steps 12] [--warmup 2] [--backends transformers vllm] \\
        [--output benchmarks/results/gpu.json]
    .venv/bin/python -m benchmarks.gpu --smoke    # CPU-sized path: tiny model, fp32, 2 steps; automatic without CUDA

Sized to finish in under 10 minutes on one H100/H200-class GPU.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import (
    RESULTS,
    REWARD_FUNCS,
    TRAIN_DATA,
    build_sized_model,
    build_tiny,
    grpo_settings,
    lora_model_args,
    quiet,
    without_printer,
    write_result,
)


QWEN25_05B = {
    "hidden_size": 896,
    "num_layers": 24,
    "num_heads": 14,
    "num_kv_heads": 2,
    "intermediate_size": 4864,
    "vocab_size": 151_936,
}
# Work per step. GPU: 8 prompts x 8 completions of 256 tokens, the shape of a small tool-calling GRPO run.
GPU_BATCH = {"per_device_train_batch_size": 64, "num_generations": 8, "max_completion_length": 256}
SMOKE_BATCH = {"per_device_train_batch_size": 4, "num_generations": 2, "max_completion_length": 8}
BACKENDS = ("transformers", "vllm")


def pad_tokenizer(folder: Path, vocab_size: int) -> None:
    """Grow the saved tokenizer's vocabulary to `vocab_size` with tokens no text encodes to (no merge makes them),
    so that any id the model can sample decodes.

    `tokenizers` numbers the added tokens that are not in the model's vocabulary (the tool-call tags) after it, so the
    padding goes between the two and those tokens move to the top ids; nothing else changes id.
    """
    path = folder / "tokenizer.json"
    data = json.loads(path.read_text())
    vocab = data["model"]["vocab"]
    outside = sorted((token for token in data["added_tokens"] if token["content"] not in vocab), key=lambda t: t["id"])
    first_outside = vocab_size - len(outside)
    for token_id in range(len(vocab), first_outside):
        vocab[f"<|pad_{token_id}|>"] = token_id
    for offset, token in enumerate(outside):
        token["id"] = first_outside + offset
    path.write_text(json.dumps(data))


def build_model(folder: Path, smoke: bool) -> tuple[str, int]:
    """The tiny model for the smoke path; otherwise the Qwen2.5-0.5B-shaped one in bf16 with a padded tokenizer."""
    tiny = build_tiny(folder / "tiny")
    if smoke:
        from transformers import AutoModelForCausalLM

        return tiny, AutoModelForCausalLM.from_pretrained(tiny).num_parameters()
    model_dir, parameters = build_sized_model(folder / "qwen2.5-0.5b-shape", tiny, dtype="bfloat16", **QWEN25_05B)
    pad_tokenizer(Path(model_dir), QWEN25_05B["vocab_size"])
    return model_dir, parameters


def _timing_callback(cuda: bool) -> Any:
    import torch
    from transformers import TrainerCallback

    class StepClock(TrainerCallback):
        """Wall seconds of each optimizer step, from the end of the previous one (CUDA work finished at both ends)."""

        def __init__(self) -> None:
            self.step_seconds: list[float] = []
            self.last = 0.0

        def _now(self) -> float:
            if cuda:
                torch.cuda.synchronize()
            return time.perf_counter()

        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.last = self._now()

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            now = self._now()
            self.step_seconds.append(now - self.last)
            self.last = now

    return StepClock()


def run_backend(backend: str, model_dir: str, steps: int, warmup: int, smoke: bool, output_dir: str) -> dict[str, Any]:
    """Train `steps` optimizer steps with one generation backend; returns its throughput and memory."""
    import torch
    from transformers import AutoTokenizer

    from grpo_tools.data.prompts import load_rows
    from grpo_tools.training import build_trainer
    from grpo_tools.training.configs import ToolGRPOConfig

    quiet()
    cuda = torch.cuda.is_available() and not smoke
    if not cuda:
        torch.set_num_threads(1)  # as the CPU benchmarks: on a shared machine more threads only fight the other load
    batch = SMOKE_BATCH if smoke else GPU_BATCH
    length = batch["max_completion_length"]
    settings = grpo_settings(output_dir, max_steps=steps, learning_rate=1e-5, **batch)
    settings.update(use_cpu=not cuda, bf16=cuda, model_init_kwargs={"dtype": "bfloat16" if cuda else "float32"})
    if backend == "vllm":
        settings.update(
            use_vllm=True,
            vllm_mode="colocate",
            vllm_gpu_memory_utilization=0.2,
            vllm_max_model_length=1024,
            generation_kwargs={"min_tokens": length},  # vLLM's name for min_new_tokens
        )
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    rows = load_rows(TRAIN_DATA, 64 if smoke else None)  # smoke: less to check and load
    args = ToolGRPOConfig(**settings, reward_funcs=REWARD_FUNCS, kl_target=0.02)
    # The trainer `grpo-tools train` builds, from these settings and the tiny recipe's adapter and rewards
    trainer = without_printer(build_trainer(model_dir, tokenizer, rows, args, lora_model_args()))
    clock = _timing_callback(cuda)
    trainer.add_callback(clock)
    generation_seconds: list[float] = []
    generated_tokens: list[int] = []
    generate = trainer._generate_single_turn

    def timed_generate(*args: Any, **kwargs: Any) -> Any:
        start = clock._now()
        completion_ids, logprobs = generate(*args, **kwargs)
        generation_seconds.append(clock._now() - start)
        generated_tokens.append(sum(len(ids) for ids in completion_ids))
        return completion_ids, logprobs

    trainer._generate_single_turn = timed_generate
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    trainer.train()
    measured = clock.step_seconds[warmup:]
    tokens, seconds = sum(generated_tokens[warmup:]), sum(generation_seconds[warmup:])
    lengths = [
        entry["completions/mean_length"] for entry in trainer.state.log_history if "completions/mean_length" in entry
    ]
    result = {
        "backend": backend,
        "device": torch.cuda.get_device_name() if cuda else "cpu",
        "dtype": "bfloat16" if cuda else "float32",
        "steps": trainer.state.global_step,
        "measured_steps": len(measured),
        "completions_per_step": batch["per_device_train_batch_size"],
        "max_completion_length": length,
        "mean_completion_length": statistics.mean(lengths),
        "seconds_per_step_median": statistics.median(measured),
        "optimizer_steps_per_second": 1 / statistics.median(measured),
        "generated_tokens_per_second": tokens / seconds,
        "generation_share_of_step": seconds / sum(measured),
        "step_seconds": clock.step_seconds,
        "generation_seconds": generation_seconds,
    }
    if cuda:
        free, total = torch.cuda.mem_get_info()
        result.update(
            peak_gpu_memory_gb=torch.cuda.max_memory_allocated() / 2**30,
            gpu_memory_in_use_gb=(total - free) / 2**30,
            gpu_memory_total_gb=total / 2**30,
        )
    return result


def vllm_available() -> bool:
    """Whether vLLM imports here (it is an optional extra: `pip install -e ".[vllm]"`)."""
    import importlib.util

    return importlib.util.find_spec("vllm") is not None


def run(
    steps: int = 12, warmup: int = 2, backends: tuple[str, ...] = BACKENDS, smoke: bool | None = None
) -> dict[str, Any]:
    """Build the model, then run each backend in its own process; `smoke=None` means smoke when there is no CUDA."""
    import torch

    quiet()
    cuda = torch.cuda.is_available()
    smoke = not cuda if smoke is None else smoke
    if smoke:
        steps, warmup, backends = min(steps, 2), min(warmup, 1), ("transformers",)  # vLLM needs a GPU
    if steps <= warmup:
        raise ValueError(f"steps ({steps}) must be larger than warmup ({warmup})")
    results, skipped = [], {}
    with tempfile.TemporaryDirectory() as folder:
        model_dir, parameters = build_model(Path(folder), smoke)
        for backend in backends:
            if backend == "vllm" and not vllm_available():
                skipped[backend] = "vLLM is not installed"
                continue
            result_path = Path(folder) / f"{backend}.json"
            command = [
                sys.executable,
                "-m",
                "benchmarks.gpu",
                "--worker",
                backend,
                "--model-dir",
                model_dir,
                "--steps",
                str(steps),
            ]
            command += ["--warmup", str(warmup), "--result", str(result_path), *(["--smoke"] if smoke else [])]
            with tempfile.TemporaryFile() as log:
                start = time.perf_counter()
                status = subprocess.run(
                    command,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    check=False,
                    cwd=Path(__file__).resolve().parent.parent,
                ).returncode
                if status != 0:
                    log.seek(0)
                    raise SystemExit(f"the {backend} run failed:\n{log.read().decode()[-4000:]}")
            results.append({**json.loads(result_path.read_text()), "process_seconds": time.perf_counter() - start})
    return {
        "smoke": smoke,
        "model": "tiny (tasks.tiny_model)" if smoke else "Qwen2.5-0.5B shape, random weights",
        "model_shape": None if smoke else QWEN25_05B,
        "parameters": parameters,
        "lora_rank": 32,
        "steps": steps,
        "warmup": warmup,
        "results": results,
        "skipped": skipped,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=12, help="optimizer steps per backend, warm-up included")
    parser.add_argument("--warmup", type=int, default=2, help="first steps left out of the figures")
    parser.add_argument("--backends", nargs="+", choices=BACKENDS, default=list(BACKENDS))
    parser.add_argument("--smoke", action="store_true", help="CPU-sized path (the default where there is no CUDA)")
    parser.add_argument("--output", default=str(RESULTS / "gpu.json"))
    parser.add_argument("--worker", choices=BACKENDS, help=argparse.SUPPRESS)
    parser.add_argument("--model-dir", help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        with tempfile.TemporaryDirectory() as output_dir:
            report = run_backend(args.worker, args.model_dir, args.steps, args.warmup, args.smoke, output_dir)
        Path(args.result).write_text(json.dumps(report))
        return

    result = run(args.steps, args.warmup, tuple(args.backends), smoke=True if args.smoke else None)
    batch = SMOKE_BATCH if result["smoke"] else GPU_BATCH
    where = "CPU smoke path, figures say nothing about a GPU" if result["smoke"] else "one GPU, bf16"
    print(
        f"GRPO throughput: {result['model']} ({result['parameters'] / 1e6:.0f}M parameters), LoRA r=32, {where}; "
        f"{batch['per_device_train_batch_size']} completions x {batch['max_completion_length']} tokens a step, "
        f"median of {result['steps'] - result['warmup']} steps after {result['warmup']}\n"
    )
    print(
        f"{'backend':<13} {'device':<24} {'tokens/s':>10} {'steps/s':>8} {'s/step':>7} {'gen share':>9} {'peak GB':>8}"
    )
    for row in result["results"]:
        peak = f"{row['peak_gpu_memory_gb']:.1f}" if "peak_gpu_memory_gb" in row else "-"
        print(
            f"{row['backend']:<13} {row['device'][:24]:<24} {row['generated_tokens_per_second']:>10,.0f}"
            f" {row['optimizer_steps_per_second']:>8.3f} {row['seconds_per_step_median']:>7.2f}"
            f" {row['generation_share_of_step']:>9.0%} {peak:>8}"
        )
    for backend, reason in result["skipped"].items():
        print(f"{backend:<13} skipped: {reason}")
    print(f"\nwrote {write_result(args.output, result)}")


if __name__ == "__main__":
    main()
