"""float32 against bf16 on this CPU: one forward and backward pass with the SmolLM2 recipe's LoRA, and one sampled
generation, as GRPO runs them; median seconds of `--repeats` runs after a warm-up. Three ways: float32 weights without
autocast, float32 weights under bf16 autocast, and weights loaded in bf16 with the adapter in float32 (what
`grpo-tools train` does for a LoRA run in bf16 on the CPU), trained under autocast and sampled without it.

`.venv/bin/python -m benchmarks.bench_precision` (SmolLM2 converted by `make train` first; `--model` for another
folder). On a CPU without avx512_bf16 or AMX the bf16 column is emulated and many times slower; with avx512_bf16
alone it was slower than float32 too. `grpo-tools train` turns bf16 on by itself only where the CPU has AMX
(docs/configuration.md, "Precision on the CPU").
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from benchmarks.common import quiet, write_result


LORA_TARGETS = r".*\.layers\.(1[89]|2[0-9])\.(self_attn|mlp)\.[a-z]+_proj"  # the SmolLM2 recipe's


def _timed(work: Callable[[], Any], repeats: int) -> float:
    work()  # warm-up: allocator, kernels chosen
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        work()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure(model_dir: str, *, batch: int, prompt_tokens: int, new_tokens: int, repeats: int) -> dict[str, Any]:
    """Seconds per training pass and per generation in float32, under bf16 autocast, and with bf16 weights, with
    the recipe's LoRA."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from grpo_tools.training.configs import cpu_bf16_is_faster, cpu_has_native_bf16

    def lora_model(dtype: Any) -> Any:
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype)
        targets = LORA_TARGETS if any("layers.29." in name for name, _ in model.named_modules()) else "all-linear"
        config = LoraConfig(r=16, lora_alpha=32, target_modules=targets, task_type="CAUSAL_LM")
        return get_peft_model(model, config)  # the adapter in float32 (peft's default) whatever the weights' dtype

    models = {torch.float32: lora_model(torch.float32), torch.bfloat16: lora_model(torch.bfloat16)}
    vocab = models[torch.float32].config.vocab_size
    ids = torch.randint(0, vocab, (batch, prompt_tokens + new_tokens))  # (B, P + N)
    prompts = ids[:, :prompt_tokens]  # (B, P)

    def train_pass(model: Any, bf16: bool) -> None:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            logits = model(ids).logits[:, -new_tokens:]  # (B, N, V): the completion positions
            loss = torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), ids[:, -new_tokens:].flatten())
        loss.backward()
        model.zero_grad(set_to_none=True)

    def generation(model: Any, bf16: bool) -> None:
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            model.generate(
                prompts,
                attention_mask=torch.ones_like(prompts),
                max_new_tokens=new_tokens,
                min_new_tokens=new_tokens,
                do_sample=True,
                pad_token_id=0,
            )

    ways = (
        ("float32", models[torch.float32], False, False),
        ("bf16 autocast", models[torch.float32], True, True),
        ("bf16 weights", models[torch.bfloat16], True, False),  # sampled outside autocast, as trl samples
    )
    rows = {}
    for name, model, train_bf16, sample_bf16 in ways:
        rows[name] = {
            "train_pass_s": _timed(lambda m=model, b=train_bf16: train_pass(m, b), repeats),
            "generation_s": _timed(lambda m=model, b=sample_bf16: generation(m, b), repeats),
        }
    return {
        "model": model_dir,
        "native_bf16": cpu_has_native_bf16(),
        "bf16_chosen": cpu_bf16_is_faster(),  # what `grpo-tools train` picks here when a recipe leaves bf16 unset
        "threads": torch.get_num_threads(),
        "batch": batch,
        "prompt_tokens": prompt_tokens,
        "new_tokens": new_tokens,
        "repeats": repeats,
        "results": rows,
    }


def main(argv: Sequence[str] | None = None) -> int:
    """Print the table and write JSON to `--output`."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="outputs/smollm2-135m", help="A transformers model folder.")
    parser.add_argument("--batch", type=int, default=16, help="Sequences per pass (a GRPO step's completions).")
    parser.add_argument("--prompt-tokens", type=int, default=96)
    parser.add_argument("--new-tokens", type=int, default=48)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--output", default="benchmarks/results/precision.json")
    args = parser.parse_args(argv)
    if not (Path(args.model) / "config.json").is_file():
        print(f"bench_precision: no model at {args.model}: run `make train` (or pass --model)", file=sys.stderr)
        return 2
    quiet()
    result = measure(
        args.model,
        batch=args.batch,
        prompt_tokens=args.prompt_tokens,
        new_tokens=args.new_tokens,
        repeats=args.repeats,
    )
    print(
        f"{result['model']}: {args.batch} sequences, {args.prompt_tokens} prompt + {args.new_tokens} new tokens, "
        f"{result['threads']} threads, native bf16: {result['native_bf16']}, "
        f"chosen by grpo-tools train: {result['bf16_chosen']}"
    )
    print(f"{'precision':<14} {'train pass s':>13} {'generation s':>13}")
    for name, row in result["results"].items():
        print(f"{name:<14} {row['train_pass_s']:>13.2f} {row['generation_s']:>13.2f}")
    write_result(args.output, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
