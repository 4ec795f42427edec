"""`grpo-tools eval`: generate with a model (and optionally its adapter) on canonical rows, and score the calls.

Prompts are each row's `messages` and `tools` rendered by the model's own chat template. The predictions file is the
`{"id", "completion"}` layout `grpo-tools score` reads and the report is the one `score` writes (plus the mean of
every reward and, when sampling, pass@k), so anyone can re-score an evaluation and get the same figures.
`--compare-base` evaluates the base model (adapter disabled) and base + adapter from one load of the weights.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import warnings
from math import comb
from pathlib import Path
from typing import Any

from grpo_tools.evaluation.compare import print_comparison
from grpo_tools.evaluation.generation import generate_completions, row_prompts, spread_completions


__all__ = ["evaluate_model", "generate_completions", "main", "pass_at_k", "print_comparison"]

logger = logging.getLogger(__name__)


def pass_at_k(num_samples: int, num_correct: int, k: int) -> float:
    """Chance that at least one of `k` samples drawn from `num_samples` (of which `num_correct` are right) is right:
    the unbiased estimator of Chen et al. (2021), `1 - C(n - c, k) / C(n, k)`.

    >>> pass_at_k(4, 1, 1), pass_at_k(4, 1, 4), pass_at_k(4, 0, 2)
    (0.25, 1.0, 0.0)
    """
    if not 1 <= k <= num_samples:
        raise ValueError(f"k must be in [1, {num_samples}], got {k}")
    if num_samples - num_correct < k:
        return 1.0
    return 1.0 - comb(num_samples - num_correct, k) / comb(num_samples, k)


def _golds(rows: list[dict[str, Any]]) -> list[Any]:
    """Each row's gold calls and tools, prepared once for every summary of an evaluation."""
    from grpo_tools.rewards import make_gold

    return [make_gold(row["tools"], row["answers"], row.get("possible_answers"), str(row["id"])) for row in rows]


def _reward_means(golds: list[Any], completions: list[str | None]) -> dict[str, float]:
    """The mean of every registered reward over the rows, so a report shows format and schema progress as well; a row
    without a completion (its prompt could not be rendered) scores 0."""
    from grpo_tools.rewards import REWARDS, score_completion

    return {
        name: sum(
            score_completion(name, text, gold).score
            for text, gold in zip(completions, golds, strict=True)
            if text is not None
        )
        / len(golds)
        for name in REWARDS
    }


def _argument_summary(golds: list[Any], completions: list[str | None]) -> dict[str, dict[str, int]]:
    """For every `tool.argument` of the gold calls: how often a call to the right tool carried it (`checked`), and
    how often its value was wrong or left out (`wrong`); most often wrong first."""
    from grpo_tools.rewards import argument_checks

    checked: dict[str, int] = {}
    wrong: dict[str, int] = {}
    for gold, text in zip(golds, completions, strict=True):
        for argument, right in argument_checks(text, gold) if text is not None else []:
            checked[argument] = checked.get(argument, 0) + 1
            wrong[argument] = wrong.get(argument, 0) + (not right)
    order = sorted(checked, key=lambda argument: (-wrong[argument], argument))
    return {argument: {"checked": checked[argument], "wrong": wrong[argument]} for argument in order}


def _sampling_summary(
    rows: list[dict[str, Any]], golds: list[Any], samples: list[list[str | None]], scorer: str, temperature: float
) -> dict[str, Any]:
    """pass@k overall and per category from `num_samples` completions per row (k = 1 and the powers of 2 up to n)."""
    from grpo_tools.data.rows import derive_category
    from grpo_tools.evaluation.scoring import SCORERS
    from grpo_tools.rewards import score_completion

    num_samples = len(samples[0])
    ks = sorted({1, num_samples, *(2**i for i in range(num_samples.bit_length()) if 2**i <= num_samples)})
    totals: dict[str, dict[int, float]] = {}
    counts: dict[str, int] = {}
    for row, gold, row_samples in zip(rows, golds, samples, strict=True):
        correct = sum(
            text is not None and score_completion(SCORERS[scorer], text, gold).score >= 1.0 for text in row_samples
        )
        for category in ("all", row.get("category") or derive_category(gold.calls, gold.tool_list)):
            counts[category] = counts.get(category, 0) + 1
            per_k = totals.setdefault(category, dict.fromkeys(ks, 0.0))
            for k in ks:
                per_k[k] += pass_at_k(num_samples, correct, k)
    summary = {
        category: {f"pass@{k}": total / counts[category] for k, total in per_k.items()}
        for category, per_k in totals.items()
    }
    overall = summary.pop("all")
    return {"num_samples": num_samples, "temperature": temperature, **overall, "by_category": summary}


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
    num_samples: int = 1,
    temperature: float = 0.0,
    completions: list[str | None] | None = None,
) -> dict[str, Any]:
    """Generate for every row (unless `completions` are given, `num_samples` per row, grouped by row), score, and
    write into `output_dir`: `<label>_data.jsonl` (the rows), `<label>_predictions.jsonl` (the first completion of each
    row, in the layout `grpo-tools score` reads), `<label>_rows.jsonl` (its verdict per row, as `score --per-row`), `<label>_samples.jsonl` when sampling several, and
    `<label>_report.json`; return the report. A row whose prompt the chat template cannot render gets no completion
    (None in `completions`) and is scored as a failure, as a row without a prediction is: the report counts them
    (`rows.unrenderable`) and lists each with the template's reason (`unrenderable`).

    The report is `score`'s for the predictions file, plus `rewards` (the mean of every reward), `arguments` (per
    gold argument, how often a call to the right tool got its value wrong) and, with several samples, `sampling`
    (pass@k overall and per category).
    """
    from grpo_tools.evaluation.scoring import score_files

    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    # Given completions (scored as they are) need no tokenizer; with one, the rows it cannot render are named.
    prompts, failures = row_prompts(tokenizer, rows) if tokenizer is not None else ([], [])
    if failures:
        named = "; ".join(str(failure) for failure in failures[:3]) + ("; ..." if len(failures) > 3 else "")
        logger.warning(
            "%s: %d of %d rows cannot be rendered by the chat template; scored as failures: %s",
            label, len(failures), len(rows), named,
        )  # fmt: skip
    if completions is None:
        rendered = [prompt for prompt in prompts if prompt is not None]
        generated = generate_completions(model, tokenizer, rendered, batch_size, max_new_tokens, progress,
                                         description=f"{label}: generating", num_samples=num_samples,
                                         temperature=temperature)  # fmt: skip
        completions = spread_completions(generated, prompts, num_samples)
    samples = [completions[index * num_samples : (index + 1) * num_samples] for index in range(len(rows))]
    data_path = output_dir / f"{label}_data.jsonl"
    predictions_path = output_dir / f"{label}_predictions.jsonl"
    data_path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    predictions_path.write_text(
        "".join(
            json.dumps({"id": row["id"], "completion": texts[0]}) + "\n"
            for row, texts in zip(rows, samples, strict=True)
            if texts[0] is not None
        ),
        encoding="utf-8",
    )
    per_row = output_dir / f"{label}_rows.jsonl"
    report, _ = score_files(data_path, predictions_path, scorer, workers=1, per_row=per_row, progress=False)
    golds = _golds(rows)
    report["rewards"] = _reward_means(golds, [texts[0] for texts in samples])
    report["arguments"] = _argument_summary(golds, [texts[0] for texts in samples])
    if failures:
        report["rows"]["unrenderable"] = len(failures)
        report["unrenderable"] = [{"id": f.row_id, "reason": f"{f.part}: {f.reason}"} for f in failures]
    if num_samples > 1:
        (output_dir / f"{label}_samples.jsonl").write_text(
            "".join(
                json.dumps({"id": row["id"], "sample": index, "completion": text}) + "\n"
                for row, texts in zip(rows, samples, strict=True)
                for index, text in enumerate(texts)
                if text is not None
            ),
            encoding="utf-8",
        )
        report["sampling"] = _sampling_summary(rows, golds, samples, scorer, temperature)
    (output_dir / f"{label}_report.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return report


def _has_tokenizer(folder: str) -> bool:
    return Path(folder, "tokenizer_config.json").is_file()


def _load(args: argparse.Namespace) -> tuple[Any, Any]:
    """The model (with the adapter, when given) and tokenizer; the adapter folder's tokenizer wins when it has one."""
    import torch
    from transformers import AutoModelForCausalLM

    from grpo_tools.models.loading import load_tokenizer

    device = args.device if args.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    tokenizer = load_tokenizer(args.adapter if args.adapter and _has_tokenizer(args.adapter) else args.model)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=dtype).to(device)
    if args.adapter:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, args.adapter)
    return model, tokenizer


def _check_arguments(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    if args.num_samples < 1:
        parser.error(f"--num-samples must be at least 1, got {args.num_samples}")
    if args.temperature is not None and args.temperature < 0:
        parser.error(f"--temperature must be >= 0, got {args.temperature}")
    if args.num_samples > 1 and args.temperature == 0:
        parser.error("--num-samples > 1 needs a --temperature > 0 (greedy samples would all be the same)")
    if args.compare_base and not args.adapter:
        parser.error("--compare-base compares the base model with an adapter: give --adapter")
    if min(args.max_new_tokens, args.batch_size, args.max_conversation_tokens) < 1:
        parser.error("--max-new-tokens, --batch-size and --max-conversation-tokens must be at least 1")


def _check_adapter(folder: str) -> str | None:
    """Why an adapter folder cannot be loaded, or None."""
    if not os.path.isdir(folder):
        return f"{folder}: no such folder"
    if not Path(folder, "adapter_config.json").is_file():
        return f"{folder}: not a peft adapter folder (no adapter_config.json)"
    return None


def main(argv: list[str]) -> int:
    """`grpo-tools eval`: evaluate, print the tables, write predictions, reports and a plot; exit 2 on bad input."""
    from grpo_tools.evaluation.scoring import SCORERS

    parser = argparse.ArgumentParser(
        prog="grpo-tools eval",
        description="Generate with a model (and adapter) on canonical rows and score its tool calls.",
    )
    parser.add_argument("--model", required=True, help="base model: a local folder or a Hugging Face model id")
    parser.add_argument("--adapter", help="a peft LoRA adapter folder (e.g. a `grpo-tools train` output_dir)")
    parser.add_argument("--data", required=True, help="canonical rows (JSONL) or a Hugging Face dataset of them")
    parser.add_argument("--output-dir", default="outputs/eval", help="where predictions, reports and the plot go")
    parser.add_argument("--compare-base", action="store_true", help="also evaluate the base model, side by side")
    parser.add_argument("--scorer", choices=list(SCORERS), default="exact", help="reward that decides correctness")
    parser.add_argument(
        "--num-samples", type=int, default=1, help="completions per row; above 1, pass@k is reported (sampling)"
    )
    parser.add_argument(
        "--temperature", type=float, default=None, help="0 is greedy; default 0 with one sample, 1.0 with several"
    )
    parser.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling threshold when sampling")
    parser.add_argument("--max-new-tokens", type=int, default=256, help="longest completion generated")
    parser.add_argument(
        "--batch-size", type=int, default=32, help="prompts generated at once; multi-turn rows rolled out at once"
    )
    parser.add_argument("--max-rows", type=int, default=None, help="evaluate the first N rows only")
    parser.add_argument("--max-turns", type=int, default=4, help="multi-turn rows: assistant turns per rollout")
    parser.add_argument("--max-conversation-tokens", type=int, default=8192, help="BFCL rows: tokens per conversation")
    parser.add_argument("--mcp-config", help="rows of the `mcp` environment: a recipe YAML whose mcp_* keys name it")
    parser.add_argument(
        "--unrenderable-rows",
        choices=["error", "fail"],
        default="error",
        help="rows whose prompt the model's chat template cannot render: refuse the evaluation, naming them (error), "
        "or score them as failures, counted in the report (fail)",
    )
    parser.add_argument("--device", default="auto", help="auto (a GPU when there is one), cpu, cuda, cuda:1, ...")
    parser.add_argument("--vllm", action="store_true", help="generate with vLLM (pip install 'grpo-tools[vllm]')")
    parser.add_argument("--seed", type=int, default=0, help="sampling seed")
    parser.add_argument(
        "--cache-dir", help="keep greedy completions here and reuse them while model, rows and decoding are unchanged"
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    args = parser.parse_args(argv)
    _check_arguments(args, parser)
    temperature = args.temperature if args.temperature is not None else (1.0 if args.num_samples > 1 else 0.0)

    from grpo_tools.data.rows import DataError
    from grpo_tools.tools.rollouts import ResponseParsingError

    problem = _check_adapter(args.adapter) if args.adapter else None
    if problem:
        print(f"grpo-tools eval: --adapter {problem}", file=sys.stderr)
        return 2
    try:
        from grpo_tools.data.prompts import load_rows
        from grpo_tools.tools.mcp_config import prepare_mcp

        rows = load_rows(args.data, args.max_rows)
        prepare_mcp(args.mcp_config, rows)  # the rows' MCP server starts now, or the evaluation stops here
    except (DataError, ValueError) as error:
        print(f"grpo-tools eval: {error}", file=sys.stderr)
        return 2
    labels = (["base"] if args.compare_base or not args.adapter else []) + (["adapter"] if args.adapter else [])
    try:
        return _run(args, rows, labels, temperature)
    # OSError: a model that is neither a folder nor on the Hub, an unwritable output dir; DataError: mixed rows, rows
    # the chat template cannot render; ResponseParsingError: multi-turn rows, and no way to parse the model's calls
    except (OSError, DataError, ResponseParsingError) as error:
        print(f"grpo-tools eval: {error}", file=sys.stderr)
        return 2


def _run(args: argparse.Namespace, rows: list[dict[str, Any]], labels: list[str], temperature: float) -> int:
    from contextlib import nullcontext

    from transformers import set_seed

    from grpo_tools.evaluation.plot import plot_accuracy_by_category

    set_seed(args.seed)
    # peft still reads transformers' old `is_gradient_checkpointing` name; the rename warning is noise to a user.
    warnings.filterwarnings("ignore", message=".*gradient_checkpoint.*deprecated", category=FutureWarning)
    if args.vllm:
        try:
            import vllm  # noqa: F401
        except ImportError:
            print("grpo-tools eval: --vllm needs vLLM: pip install 'grpo-tools[vllm]'", file=sys.stderr)
            return 2
    from grpo_tools.evaluation.bfcl_conversations import check_bfcl_rows, evaluate_bfcl_rows, is_bfcl_rows
    from grpo_tools.tools.environments import is_multi_turn

    multi_turn = is_multi_turn(rows, evaluating=True)
    if multi_turn and (args.vllm or args.num_samples > 1):
        print("grpo-tools eval: multi-turn rows are evaluated greedily with transformers only", file=sys.stderr)
        return 2
    if bfcl := multi_turn and is_bfcl_rows(rows):  # whole conversations, judged by BFCL's verdict
        check_bfcl_rows(rows, args.data)
    from grpo_tools.models.loading import check_model_folder, load_tokenizer

    check_model_folder(args.model)
    from grpo_tools.evaluation import eval_cache

    cached = eval_cache.lookup(args, rows, labels, temperature, multi_turn)  # {} without --cache-dir
    reused = {label: entry.completions for label, entry in cached.items() if entry.completions is not None}
    model, tokenizer = (None, None) if args.vllm or len(reused) == len(labels) else _load(args)
    if tokenizer is None:
        tokenizer = load_tokenizer(args.adapter if args.adapter and _has_tokenizer(args.adapter) else args.model)
    if not tokenizer.chat_template:
        print(f"grpo-tools eval: {args.model}: the tokenizer has no chat template to render tools", file=sys.stderr)
        return 2
    if not multi_turn and args.unrenderable_rows == "error":
        from grpo_tools.data.prompts import rendered_rows

        rendered_rows(
            rows, tokenizer, source=args.data, switch="pass --unrenderable-rows fail to score them as failures"
        )
    generated = dict(reused)
    if args.vllm and not multi_turn:
        from grpo_tools.evaluation.generation import vllm_completions

        prompts = row_prompts(tokenizer, rows)[0]
        texts = vllm_completions(args, [prompt for prompt in prompts if prompt is not None], labels, temperature)
        generated = {label: spread_completions(texts[label], prompts, args.num_samples) for label in labels}
    reports = {}
    for label in labels:
        # The base model is the adapter's model with the adapter switched off: no second copy of the weights.
        context = model.disable_adapter() if model is not None and label == "base" and args.adapter else nullcontext()
        with context:
            if bfcl:
                reports[label] = evaluate_bfcl_rows(args, model, tokenizer, rows, label)
                continue
            if multi_turn:
                from grpo_tools.tools.rollouts import evaluate_multi_turn

                # The same environments as training run the tools; the report scores the final answers.
                reports[label] = evaluate_multi_turn(
                    model, tokenizer, rows, args.output_dir, label=label, batch_size=args.batch_size,
                    max_new_tokens=args.max_new_tokens, max_turns=args.max_turns, progress=not args.quiet,
                )  # fmt: skip
                continue
            reports[label] = evaluate_model(
                model,
                tokenizer,
                rows,
                args.output_dir,
                scorer=args.scorer,
                batch_size=args.batch_size,
                max_new_tokens=args.max_new_tokens,
                progress=not args.quiet,
                label=label,
                num_samples=args.num_samples,
                temperature=temperature,
                completions=generated.get(label),
            )
        eval_cache.record(args, cached.get(label), label)
    scorer = reports[labels[-1]]["scorer"]  # `outcome` for multi-turn rows
    print_comparison(reports, title=f"accuracy ({scorer}) on {args.data}")
    plot = plot_accuracy_by_category(reports, Path(args.output_dir, "accuracy_by_category.png"))
    print(f"wrote {', '.join(f'{label}_report.json' for label in labels)} and {plot.name} to {args.output_dir}")
    return 0
