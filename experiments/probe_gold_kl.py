"""Where does a `gold_in_group` run's KL come from: the policy's own samples, or the gold turns it did not sample?

trl's k3 estimate, exp(r) - r - 1 with r = log p_ref - log p_policy per token, is made for tokens the policy sampled;
with `gold_in_group` every group also holds its row's gold turn, and those tokens count in the KL that trl logs and
the adaptive rule holds near its target. This probe loads a finished run (the GRPO adapter in RUN, its warm start,
the reference, in RUN/warmup, as `make train` leaves them), samples completions for the first training prompts, and
prints the mean per-token k3 of the samples and of the gold turns, with the largest single-token value of each:

    .venv/bin/python -m experiments.probe_gold_kl [--run outputs/smollm2-grpo] [--rows 32] [--samples 3]
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path
from typing import Any

from benchmarks.bench_learning import REPO
from benchmarks.common import quiet


def _k3(model: Any, prompt_ids: list[int], completion_ids: list[int]) -> list[float]:
    """k3 of each completion token, the policy (adapter on) against the reference (adapter off)."""
    import torch

    ids = torch.tensor([prompt_ids + completion_ids])  # (1, P + C)
    count = len(completion_ids)
    target = torch.tensor(completion_ids).unsqueeze(1)  # (C, 1)
    with torch.no_grad():
        policy = torch.log_softmax(model(ids).logits[0, -count - 1 : -1].float(), dim=-1).gather(1, target)  # (C, 1)
        with model.disable_adapter():
            reference = torch.log_softmax(model(ids).logits[0, -count - 1 : -1].float(), dim=-1).gather(1, target)
    ratio = (reference - policy).squeeze(1)  # (C,)
    return (torch.exp(ratio) - ratio - 1).tolist()


def kl_by_source(
    run: str | Path,
    rows: list[dict[str, Any]],
    samples: int = 3,
    max_new_tokens: int = 64,
    temperature: float = 0.7,
    seed: int = 0,
) -> dict[str, list[list[float]]]:
    """Per-token k3 of each sampled completion and of each row's gold turn (cut after its end of turn and to
    `max_new_tokens`, as the trainer cuts it), for the run in `run` against its warm start in `run/warmup`."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from grpo_tools.data.prompts import gold_completion, render_prompt

    torch.manual_seed(seed)
    warm = Path(run) / "warmup"
    tokenizer = AutoTokenizer.from_pretrained(warm)
    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(warm, dtype=torch.float32), str(run))
    model.eval()
    ends = {tokenizer.eos_token_id, tokenizer.convert_tokens_to_ids("<|im_end|>")}

    def cut(ids: list[int]) -> list[int]:
        end = next((position for position, token in enumerate(ids) if token in ends), len(ids) - 1)
        return ids[: end + 1][:max_new_tokens]

    result: dict[str, list[list[float]]] = {"sampled": [], "gold": []}
    for row in rows:
        prompt_ids = tokenizer(render_prompt(tokenizer, row), add_special_tokens=False)["input_ids"]
        gold = cut(tokenizer(gold_completion(tokenizer, row), add_special_tokens=False)["input_ids"])
        result["gold"].append(_k3(model, prompt_ids, gold))
        with torch.no_grad():
            output = model.generate(
                torch.tensor([prompt_ids]),
                do_sample=True,
                temperature=temperature,
                max_new_tokens=max_new_tokens,
                num_return_sequences=samples,
                pad_token_id=tokenizer.pad_token_id,
            )  # (samples, P + new)
        for sequence in output[:, len(prompt_ids) :].tolist():
            result["sampled"].append(_k3(model, prompt_ids, cut(sequence)))
    return result


def summary(result: dict[str, list[list[float]]]) -> dict[str, dict[str, float]]:
    """Mean over completions of the per-token mean, and the largest single-token value, per source."""
    return {
        source: {
            "completions": len(values),
            "mean": statistics.mean(statistics.mean(kl) for kl in values),
            "largest_token": max(max(kl) for kl in values),
        }
        for source, values in result.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--run", default=str(REPO / "outputs" / "smollm2-grpo"), help="GRPO adapter; warm start in RUN/warmup"
    )
    parser.add_argument("--data", default=str(REPO / "data" / "mapping_train.jsonl"), help="the run's training rows")
    parser.add_argument("--rows", type=int, default=32, help="first rows of --data")
    parser.add_argument("--samples", type=int, default=3, help="sampled completions per prompt")
    args = parser.parse_args()
    from grpo_tools.data.prompts import load_rows
    from grpo_tools.data.rows import DataError

    quiet()
    if not (Path(args.run) / "adapter_config.json").exists() or not (Path(args.run) / "warmup").is_dir():
        parser.exit(
            2, f"probe_gold_kl.py: {args.run}: no GRPO adapter with its warm start in warmup/ (run make train)\n"
        )
    try:
        rows = load_rows(args.data, args.rows)
    except (DataError, OSError) as error:
        parser.exit(2, f"probe_gold_kl.py: {error}\n")
    figures = summary(kl_by_source(args.run, rows, samples=args.samples))
    for source, values in figures.items():
        print(
            f"{source:>7}: {values['completions']} completions, k3 per token {values['mean']:.4f} (mean of the "
            f"completions' means), largest token {values['largest_token']:.2f}"
        )


if __name__ == "__main__":
    main()
