"""Generation for evaluation: batched with transformers (greedy, or several sampled completions per prompt) or with
vLLM, for the rows whose prompts the model's chat template renders."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from grpo_tools import fastpath
from grpo_tools.data.prompts import RenderFailure, render_row


__all__ = [
    "generate_completions",
    "generate_completions_shared",
    "row_prompts",
    "spread_completions",
    "vllm_completions",
]


def row_prompts(tokenizer: Any, rows: list[dict[str, Any]]) -> tuple[list[str | None], list[RenderFailure]]:
    """Each row's prompt as the chat template renders it, None where the template cannot (those rows' failures are
    returned beside, in order): such a row gets no completion and is scored as a failure."""
    prompts: list[str | None] = []
    failures = []
    for row in rows:
        rendered = render_row(tokenizer, row)
        if isinstance(rendered, RenderFailure):
            failures.append(rendered)
            prompts.append(None)
        else:
            prompts.append(rendered["prompt"])
    return prompts, failures


def spread_completions(completions: list[str], prompts: list[str | None], num_samples: int) -> list[str | None]:
    """Completions generated for the rendered prompts only (`num_samples` each, in order), laid out over every row:
    `num_samples` Nones where a row had no prompt."""
    spread: list[str | None] = []
    position = 0
    for prompt in prompts:
        if prompt is None:
            spread += [None] * num_samples
        else:
            spread += completions[position : position + num_samples]
            position += num_samples
    return spread


def vllm_completions(
    args: argparse.Namespace, prompts: list[str], labels: list[str], temperature: float
) -> dict[str, list[str]]:
    """Completions per label ("base" and/or "adapter") from vLLM, the adapter served as a LoRA request."""
    from vllm import LLM, SamplingParams
    from vllm.lora.request import LoRARequest

    rank = json.loads(Path(args.adapter, "adapter_config.json").read_text())["r"] if args.adapter else None
    has_tokenizer = bool(args.adapter) and Path(args.adapter, "tokenizer_config.json").is_file()
    llm = LLM(
        model=args.model,
        tokenizer=args.adapter if has_tokenizer else args.model,
        enable_lora=args.adapter is not None,
        max_lora_rank=max(rank or 16, 16),
        seed=args.seed,
    )
    params = SamplingParams(
        n=args.num_samples, temperature=temperature, top_p=args.top_p, max_tokens=args.max_new_tokens, seed=args.seed
    )
    results = {}
    for label in labels:
        lora = LoRARequest("adapter", 1, args.adapter) if label == "adapter" else None
        outputs = llm.generate(prompts, params, lora_request=lora)
        results[label] = [sample.text for output in outputs for sample in output.outputs]
    return results


def generate_completions(
    model: Any,
    tokenizer: Any,
    prompts: list[str],
    batch_size: int = 32,
    max_new_tokens: int = 128,
    progress: bool = True,
    description: str = "generating",
    num_samples: int = 1,
    temperature: float = 0.0,
    top_p: float = 1.0,
    cpu_fast_path: str = "auto",
) -> list[str]:
    """Completions for text prompts in batches (left-padded), decoded without special tokens: greedy when
    `temperature` is 0, else `num_samples` sampled completions per prompt, grouped by prompt, in the prompts' order.
    Where `cpu_fast_path` runs the fast path (`fastpath.enabled`), the LM head takes its input contiguous, and greedy
    decoding of a transformers or peft model runs in `fastpath.sampling.greedy_generate`, which drops each row from
    the batch at its end of turn.

    Batches are drawn longest prompt first, so each holds prompts of similar length and pads little: the prefill
    computes every padding position, and the completions are the same whatever the batches."""
    import torch
    from tqdm import tqdm

    from grpo_tools.fastpath.sampling import greedy_generate, greedy_generate_runs

    if temperature == 0 and num_samples > 1:
        raise ValueError("greedy decoding (temperature 0) gives identical samples; set a temperature > 0")
    sampling = (
        {"do_sample": True, "temperature": temperature, "top_p": top_p} if temperature > 0 else {"do_sample": False}
    )
    if not prompts:
        return []
    padding_side = tokenizer.padding_side
    tokenizer.padding_side = "left"  # decoder-only models continue from the right edge
    lengths = [len(ids) for ids in tokenizer(prompts).input_ids]
    order = sorted(range(len(prompts)), key=lambda index: -lengths[index])  # longest first; ties keep their order
    drawn: list[str] = []  # num_samples per prompt, in `order`
    was_training = model.training
    model.eval()
    fast = fastpath.enabled(cpu_fast_path, model.device)
    hook = fastpath.contiguous_head_input(model) if fast else None
    fast_greedy = fast and temperature == 0 and greedy_generate_runs(model)
    try:
        with torch.no_grad():
            for start in tqdm(range(0, len(prompts), batch_size), desc=description, disable=not progress or None):
                texts = [prompts[index] for index in order[start : start + batch_size]]
                batch = tokenizer(texts, return_tensors="pt", padding=True)
                batch = {key: value.to(model.device) for key, value in batch.items()}
                if fast_greedy:
                    output = greedy_generate(
                        model, batch["input_ids"], batch["attention_mask"], max_new_tokens, tokenizer.eos_token_id,
                        tokenizer.pad_token_id,
                    )  # fmt: skip
                else:
                    output = model.generate(
                        **batch,
                        max_new_tokens=max_new_tokens,
                        num_return_sequences=num_samples,
                        eos_token_id=tokenizer.eos_token_id,
                        pad_token_id=tokenizer.pad_token_id,
                        **sampling,
                    )  # (B * num_samples, prompt + new), each prompt's samples adjacent
                new_tokens = output[:, batch["input_ids"].shape[1] :]  # (B * num_samples, new)
                drawn += tokenizer.batch_decode(new_tokens, skip_special_tokens=True)
    finally:
        tokenizer.padding_side = padding_side
        model.train(was_training)
        if hook is not None:
            hook.remove()
    completions = [""] * len(drawn)
    for position, index in enumerate(order):
        completions[index * num_samples : (index + 1) * num_samples] = drawn[
            position * num_samples : (position + 1) * num_samples
        ]
    return completions


def generate_completions_shared(
    model: Any,
    tokenizer: Any,
    prompts: list[str],
    batch_size: int = 32,
    max_new_tokens: int = 128,
    progress: bool = True,
    description: str = "generating",
    cpu_fast_path: str = "auto",
) -> list[str]:
    """Greedy completions of `prompts`, as `generate_completions` gives them, with the prompts shared out between the
    processes of a distributed run (torchrun, `accelerate launch`): each generates its share and every process gets
    all the completions, in the prompts' order. Every process must call it, with the same prompts.

    The shares are padded to one length (the last prompt again), so every process runs as many batches: under
    DeepSpeed ZeRO-3 or FSDP each forward pass gathers the weights from all of them."""
    from accelerate import PartialState
    from accelerate.utils import gather_object

    state = PartialState()
    if state.num_processes == 1 or not prompts:
        return generate_completions(
            model, tokenizer, prompts, batch_size, max_new_tokens, progress, description, cpu_fast_path=cpu_fast_path
        )
    with state.split_between_processes(list(range(len(prompts))), apply_padding=True) as share:
        texts = generate_completions(
            model,
            tokenizer,
            [prompts[index] for index in share],
            batch_size,
            max_new_tokens,
            progress and state.is_main_process,
            description,
            cpu_fast_path=cpu_fast_path,
        )
    completions = dict(gather_object(list(zip(share, texts, strict=True))))  # the padding repeats the last prompt
    return [completions[index] for index in range(len(prompts))]
