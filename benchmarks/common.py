"""What the training benchmarks share: the models they build, the GRPO settings both sides of a comparison get, and
the statistics they report.

Every comparison builds its two sides from `grpo_settings`, so that the settings differ only where the comparison
says they do. Generation is forced to `max_completion_length` tokens (`min_new_tokens`), because sampled completions
of two runs differ in length and a step's cost follows its length: with every completion at full length, both sides
do the same work at every step, whatever they sample.
"""

from __future__ import annotations

import json
import logging
import os
import random
import statistics
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any


RESULTS = Path(__file__).resolve().parent / "results"
REWARD_FUNCS = ["tool_format", "tool_exact", "tool_partial"]  # and the weights of the tiny recipe
REWARD_WEIGHTS = [0.2, 1.0, 1.0]
TRAIN_DATA = Path(__file__).resolve().parent.parent / "data" / "tool_calls_train.jsonl"
EVAL_DATA = Path(__file__).resolve().parent.parent / "data" / "tool_calls_eval.jsonl"


def quiet() -> None:
    """Silence library chatter (per-step log dicts, deprecation notes) so that the benchmark's table stays legible."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    warnings.filterwarnings("ignore")
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    logging.getLogger("grpo_tools").setLevel(logging.WARNING)


def build_tiny(folder: str | os.PathLike[str]) -> str:
    """The tiny offline model (0.9M parameters) and its tokenizer, saved in `folder`."""
    from tasks.tiny_model import build_tiny_model

    return str(build_tiny_model(folder, seed=0))


def build_sized_model(
    folder: str | os.PathLike[str],
    tokenizer_dir: str | os.PathLike[str],
    *,
    hidden_size: int,
    num_layers: int,
    num_heads: int,
    num_kv_heads: int,
    intermediate_size: int,
    vocab_size: int | None = None,
    tie_word_embeddings: bool = True,
    dtype: str = "float32",
) -> tuple[str, int]:
    """A Qwen2 decoder of the given shape with random weights (no download), saved in `folder` with the tiny model's
    tokenizer; returns the folder and the parameter count.

    Sizes the tiny model cannot show (weights that weigh against the process's own baseline) need a bigger model, but
    not a trained one: memory and speed depend on the shapes alone. `vocab_size` defaults to the tokenizer's size.
    """
    import torch
    from transformers import AutoTokenizer, GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    eos_id, pad_id = tokenizer.convert_tokens_to_ids(["<|im_end|>", "<|endoftext|>"])
    config = Qwen2Config(
        vocab_size=vocab_size or len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_kv_heads,
        max_position_embeddings=2048,
        tie_word_embeddings=tie_word_embeddings,
        bos_token_id=None,
        eos_token_id=eos_id,
        pad_token_id=pad_id,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = Qwen2ForCausalLM(config).to(getattr(torch, dtype))
    model.generation_config = GenerationConfig(eos_token_id=eos_id, pad_token_id=pad_id)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder), model.num_parameters()


def train_dataset(tokenizer: Any, limit: int | None = None) -> Any:
    """The bundled training rows as trl's prompt dataset (text prompts plus the columns the tool rewards read)."""
    from grpo_tools.data.prompts import load_rows, prompt_dataset

    return prompt_dataset(load_rows(TRAIN_DATA, limit), tokenizer)


def grpo_settings(output_dir: str, **overrides: Any) -> dict[str, Any]:
    """Keyword arguments for `GRPOConfig` / `ToolGRPOConfig` shared by both sides of a comparison.

    Completions always run to `max_completion_length` (see the module docstring); logging every step, no saving,
    no progress bar, a constant learning rate so that no step differs from another by its schedule.
    """
    settings = {
        "output_dir": output_dir,
        "use_cpu": True,
        "bf16": False,
        "per_device_train_batch_size": 16,
        "num_generations": 4,
        "max_completion_length": 32,
        "max_steps": 10,
        "learning_rate": 1e-3,
        "lr_scheduler_type": "constant",
        "beta": 0.02,
        "reward_weights": REWARD_WEIGHTS,
        "logging_steps": 1,
        "report_to": [],
        "save_strategy": "no",
        "gradient_checkpointing": False,
        "disable_tqdm": True,
        "seed": 0,
        **overrides,
    }
    settings.setdefault("generation_kwargs", {"min_new_tokens": settings["max_completion_length"]})
    return settings


def lora_config(rank: int = 32) -> Any:
    """The tiny recipe's adapter: rank 32, alpha 64, on every linear layer."""
    from peft import LoraConfig

    return LoraConfig(
        r=rank, lora_alpha=2 * rank, lora_dropout=0.0, target_modules="all-linear", task_type="CAUSAL_LM"
    )


def lora_model_args(rank: int = 32, **overrides: Any) -> Any:
    """The same adapter as `lora_config` as model arguments, for `grpo_tools.training.build_trainer`."""
    from grpo_tools.training.configs import ModelConfig

    return ModelConfig(
        use_peft=True, lora_r=rank, lora_alpha=2 * rank, lora_dropout=0.0, lora_target_modules=["all-linear"],
        **overrides,
    )  # fmt: skip


def tool_reward_funcs() -> list[Any]:
    """The tiny recipe's reward functions, as plain callables with trl's signature."""
    from grpo_tools.rewards import get_reward_funcs

    return get_reward_funcs(REWARD_FUNCS)


def without_printer(trainer: Any) -> Any:
    """Drop the callback that prints every log dict (transformers adds it when the progress bar is off), or the
    compact one that replaces it in the trainer `build_trainer` builds."""
    from transformers.trainer_callback import PrinterCallback

    from grpo_tools.training.progress import CompactPrinterCallback

    trainer.remove_callback(PrinterCallback)
    trainer.remove_callback(CompactPrinterCallback)
    return trainer


def percentile(values: Sequence[float], fraction: float) -> float:
    """Linear-interpolated percentile (`fraction` in [0, 1]) of a non-empty sequence."""
    ordered = sorted(values)
    position = fraction * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def bootstrap_ratio(
    numerator: Sequence[float], denominator: Sequence[float], resamples: int = 2000, seed: int = 0
) -> tuple[float, float]:
    """95% interval of median(numerator) / median(denominator), resampling the pairs (i-th of each) together.

    The pairs are steps run back to back, so resampling them together keeps what they share (the load on the machine
    at that moment) out of the interval.
    """
    pairs = list(zip(numerator, denominator, strict=True))
    rng = random.Random(seed)
    ratios = []
    for _ in range(resamples):
        sample = [pairs[rng.randrange(len(pairs))] for _ in pairs]
        ratios.append(statistics.median(a for a, _ in sample) / statistics.median(b for _, b in sample))
    return percentile(ratios, 0.025), percentile(ratios, 0.975)


def write_result(path: str | os.PathLike[str], payload: dict[str, Any]) -> Path:
    """Write `payload` as indented JSON, creating the folder; returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=2) + "\n")
    return path
