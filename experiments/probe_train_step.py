"""Where a GRPO step of the BFCL recipe spends its time, and what two levers of issue 74 would buy.

`--part step` builds the trainer as `grpo-tools train` does (the recipe, the base model, no warm start), samples one
batch (sampling, rewards and the reference's pass: `generate_and_score`), then on that same batch times the
reference's pass and the policy's forward and backward pass in the loss, with the fast path's shared lower layers
(`fastpath.lower_layers`) and without, interleaved, and checks that the loss and every gradient are the same.
`--part padding` times the warm start's forward and backward pass on random batches of its rows, padded to the
longest as trl pads them and with each row at its own length, beside the share of the padded tokens that are real.
Timings are seconds on this machine; take the ratios, measured side by side:

    .venv/bin/python -m experiments.probe_train_step --part step [--threads 1] [--reps 4]
    .venv/bin/python -m experiments.probe_train_step --part padding [--threads 1] [--reps 3]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from typing import Any

from benchmarks.bench_learning import REPO


RECIPE = REPO / "recipes" / "SmolLM2-135M-Instruct" / "grpo" / "bfcl.yaml"


def _trainer() -> Any:
    from transformers import AutoTokenizer
    from trl import TrlParser

    from grpo_tools.data.prompts import load_rows
    from grpo_tools.training import build_trainer
    from grpo_tools.training.configs import ModelConfig, ToolGRPOConfig, ToolScriptArguments

    parser = TrlParser((ToolScriptArguments, ToolGRPOConfig, ModelConfig))
    overrides = ["--max_steps", "1", "--output_dir", "outputs/probe-train-step", "--disable_tqdm", "true"]
    script_args, args, model_args = parser.parse_args_and_config(args=["--config", str(RECIPE), *overrides])
    tokenizer = AutoTokenizer.from_pretrained(model_args.model_name_or_path)
    rows = load_rows(script_args.dataset_name)
    return build_trainer(model_args.model_name_or_path, tokenizer, rows, args, model_args)


def probe_step(reps: int) -> None:
    import torch

    trainer = _trainer()
    lever = trainer.lower_layers
    print(f"layers below the first adapted one, shared: {None if lever is None else lever.first}")
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1  # set by transformers' loop, which this probe does not run
    inputs = next(iter(trainer.get_train_dataloader()))
    torch.manual_seed(0)
    start = time.perf_counter()
    batch = trainer.generate_and_score(inputs)
    print(
        f"sampling, rewards and the reference's pass: {time.perf_counter() - start:.1f} s; completions "
        f"{tuple(batch['completion_ids'].shape)}, prompts {tuple(batch['prompt_ids'].shape)}"
    )
    times: dict[bool, dict[str, list[float]]] = {on: {"reference": [], "policy": []} for on in (True, False)}
    results = {}
    for _ in range(reps):
        for on in (True, False):
            trainer.lower_layers = lever if on else None
            start = time.perf_counter()
            batch["ref_per_token_logps"] = reference = trainer._reference_logps(batch)
            times[on]["reference"].append(time.perf_counter() - start)
            trainer.model.zero_grad()
            start = time.perf_counter()
            loss = trainer.compute_loss(trainer.model, batch)
            loss.backward()
            times[on]["policy"].append(time.perf_counter() - start)
            grads = [p.grad.clone() for p in trainer.model.parameters() if p.grad is not None]
            results[on] = (reference, loss.detach(), grads)
    for on in (True, False):
        figures = ", ".join(f"{part} {statistics.median(values):.2f} s {[round(v, 1) for v in values]}"
                            for part, values in times[on].items())  # fmt: skip
        print(f"shared lower layers {'on ' if on else 'off'}: {figures}")
    ratio = statistics.median(times[True]["policy"]) / statistics.median(times[False]["policy"])
    (ref_on, loss_on, grads_on), (ref_off, loss_off, grads_off) = results[True], results[False]
    same = all(torch.equal(a, b) for a, b in zip(grads_on, grads_off, strict=True))
    print(f"policy pass on / off: {ratio:.2f}; reference equal: {torch.equal(ref_on, ref_off)}, "
          f"loss {loss_on.item()} / {loss_off.item()}, gradients equal: {same}")  # fmt: skip


def probe_padding(reps: int) -> None:
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from grpo_tools.data.prompts import load_rows
    from grpo_tools.training.warm_start import sft_dataset

    model_dir = str(REPO / "outputs" / "smollm2-135m")
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    dataset = sft_dataset(load_rows(str(REPO / "outputs" / "bfcl-task" / "warmup.jsonl")), tokenizer)
    rows = [tokenizer(row["prompt"] + row["completion"]).input_ids for row in dataset]
    target = r".*\.layers\.(1[89]|2[0-9])\.(self_attn|mlp)\.[a-z]+_proj"  # the recipe's LoRA
    config = LoraConfig(r=16, lora_alpha=32, target_modules=target, task_type="CAUSAL_LM")
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(model_dir), config)
    model.train()
    rng = random.Random(0)
    real = [sum(map(len, b)) / (8 * max(map(len, b))) for b in (rng.sample(rows, 8) for _ in range(200))]
    print(f"{len(rows)} rows, {min(map(len, rows))} to {max(map(len, rows))} tokens; real / computed tokens in a "
          f"random batch of 8: {statistics.mean(real):.2f}")  # fmt: skip

    def padded(batch: list[list[int]]) -> None:
        longest = max(map(len, batch))
        ids = torch.tensor([row + [tokenizer.pad_token_id] * (longest - len(row)) for row in batch])  # (8, L)
        mask = torch.tensor([[1] * len(row) + [0] * (longest - len(row)) for row in batch])  # (8, L)
        model(input_ids=ids, attention_mask=mask, labels=ids.masked_fill(mask == 0, -100)).loss.backward()

    def each_row(batch: list[list[int]]) -> None:
        for row in batch:
            ids = torch.tensor([row])  # (1, l)
            model(input_ids=ids, labels=ids).loss.backward()

    times: dict[str, list[float]] = {"padded": [], "each row": []}
    warm_up = rng.sample(rows, 8)
    padded(warm_up)
    each_row(warm_up)
    for batch in (rng.sample(rows, 8) for _ in range(reps)):
        for name, run in (("padded", padded), ("each row", each_row)):
            start = time.perf_counter()
            run(batch)
            times[name].append(time.perf_counter() - start)
    print({name: [round(value, 2) for value in values] for name, values in times.items()})
    print(f"each row / padded: {statistics.median(times['each row']) / statistics.median(times['padded']):.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--part", choices=["step", "padding"], required=True)
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--reps", type=int, default=None, help="timed repetitions (step: 4, padding: 3)")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    if args.part == "step":
        probe_step(args.reps or 4)
    else:
        probe_padding(args.reps or 3)


if __name__ == "__main__":
    main()
