"""Batched generation with transformers for evaluation: greedy, or several sampled completions per prompt."""

from __future__ import annotations

from typing import Any


__all__ = ["generate_completions"]


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
) -> list[str]:
    """Completions for text prompts in batches (left-padded), decoded without special tokens: greedy when
    `temperature` is 0, else `num_samples` sampled completions per prompt, grouped by prompt, in the prompts' order.

    Batches are drawn longest prompt first, so each holds prompts of similar length and pads little (the prefill
    computes every padding position). On SmolLM2's 80 held-out rows in batches of 40, on 2 CPU cores, that took
    evaluation from 60.5 s to 51.8 s with the same greedy completions (README, Performance)."""
    import torch
    from tqdm import tqdm

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
    try:
        with torch.no_grad():
            for start in tqdm(range(0, len(prompts), batch_size), desc=description, disable=not progress or None):
                texts = [prompts[index] for index in order[start : start + batch_size]]
                batch = tokenizer(texts, return_tensors="pt", padding=True)
                batch = {key: value.to(model.device) for key, value in batch.items()}
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
    completions = [""] * len(drawn)
    for position, index in enumerate(order):
        completions[index * num_samples : (index + 1) * num_samples] = drawn[
            position * num_samples : (position + 1) * num_samples
        ]
    return completions
