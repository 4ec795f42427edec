"""Generate completions for canonical rows and score them with the reward model.

The predictions file it writes is the `{"id", "completion"}` layout `grpo-tools score` reads, and the report is the
one `score` writes, so anyone can re-score an evaluation.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from grpo_tools.prompts import render_prompt


__all__ = ["evaluate_model", "generate_completions"]


def generate_completions(
    model: Any,
    tokenizer: Any,
    prompts: list[str],
    batch_size: int = 32,
    max_new_tokens: int = 128,
    progress: bool = True,
    description: str = "generating",
) -> list[str]:
    """Greedy completions for text prompts, in batches (left-padded), decoded without special tokens."""
    import torch
    from tqdm import tqdm

    padding_side = tokenizer.padding_side
    tokenizer.padding_side = "left"  # decoder-only models continue from the right edge
    completions: list[str] = []
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            for start in tqdm(range(0, len(prompts), batch_size), desc=description, disable=not progress or None):
                batch = tokenizer(prompts[start : start + batch_size], return_tensors="pt", padding=True)
                batch = {key: value.to(model.device) for key, value in batch.items()}
                output = model.generate(
                    **batch,
                    max_new_tokens=max_new_tokens,
                    do_sample=False,
                    eos_token_id=tokenizer.eos_token_id,
                    pad_token_id=tokenizer.pad_token_id,
                )  # (B, prompt + new)
                new_tokens = output[:, batch["input_ids"].shape[1] :]  # (B, new)
                completions += tokenizer.batch_decode(new_tokens, skip_special_tokens=True)
    finally:
        tokenizer.padding_side = padding_side
        model.train(was_training)
    return completions


def evaluate_model(
    model: Any,
    tokenizer: Any,
    rows: list[dict[str, Any]],
    output_dir: str | os.PathLike[str],
    scorer: str = "exact",
    batch_size: int = 32,
    max_new_tokens: int = 128,
    progress: bool = True,
    label: str = "eval",
) -> dict[str, Any]:
    """Generate for every row, write `<label>_predictions.jsonl` and `<label>_report.json`, return the report."""
    from grpo_tools.scoring import score_files

    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    prompts = [render_prompt(tokenizer, row) for row in rows]
    completions = generate_completions(
        model, tokenizer, prompts, batch_size, max_new_tokens, progress, description=f"{label}: generating"
    )
    data_path = output_dir / f"{label}_data.jsonl"
    predictions_path = output_dir / f"{label}_predictions.jsonl"
    data_path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    predictions_path.write_text(
        "".join(
            json.dumps({"id": row["id"], "completion": text}) + "\n"
            for row, text in zip(rows, completions, strict=True)
        ),
        encoding="utf-8",
    )
    report, _ = score_files(data_path, predictions_path, scorer, workers=1, progress=False)
    (output_dir / f"{label}_report.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return report
