"""The model card `grpo-tools push` publishes: what a staged run records, written out for the Hub.

`model_card(run)` builds it from a `StagedRun` (what staging found in the run folder: `run_info.json`, the eval
reports, the plots, whether the tokenizer or a merged model was uploaded, the provenance of a locally converted base, the
Hub model `push --base-model` names). Only what the run folder records is stated, and what the user names is said to
be theirs; what neither says is called unknown, never guessed. `redact` removes access tokens from anything recorded.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from huggingface_hub import ModelCard, ModelCardData
from huggingface_hub.errors import HFValidationError
from huggingface_hub.utils import validate_repo_id

from grpo_tools.models.provenance import Provenance


__all__ = [
    "REPORT_PAIRS",
    "TAGS",
    "StagedRun",
    "base_unpublished",
    "hub_base",
    "looks_like_hub_id",
    "model_card",
    "original_base",
    "redact",
]

TAGS = ("grpo", "tool-calling", "lora")
# Reports whose labels pair up into a before/after table: (first, second, what produced them).
REPORT_PAIRS = (
    ("before", "after", "measured by `grpo-tools train` on the held-out rows, before and after GRPO"),
    ("base", "adapter", "measured by `grpo-tools eval`, the base model against the fine-tuned one"),
)
_DATA_SUFFIXES = (".json", ".jsonl", ".parquet", ".csv", ".txt", ".arrow")
# Hugging Face access tokens, and a token given to `grpo-tools train` as trl's `hub_token` (flag or recipe key).
_TOKEN_PATTERNS = (
    (re.compile(r"(--hub_token[= ])[^\s\"']+"), r"\1<redacted>"),
    (re.compile(r"^(\s*hub_token\s*:\s*)\S.*$", re.MULTILINE), r"\1<redacted>"),
    (re.compile(r"hf_[A-Za-z0-9]{20,}"), "<redacted>"),
)


@dataclass
class StagedRun:
    """What staging learned about a run, for the model card."""

    repo_id: str
    adapter_config: dict[str, Any]
    merged: bool
    run_info: dict[str, Any] | None = None
    reports: dict[str, dict[str, Any]] = field(default_factory=dict)  # label -> scoring report
    plots: list[str] = field(default_factory=list)  # repo paths of the PNGs
    has_recipe: bool = False
    has_trainer_state: bool = False
    tokenizer_uploaded: bool = False
    base_on_hub: bool | None = None  # None: unknown (offline, or not looked up)
    base_inside_run: bool = False  # the adapter's base is a folder of the run itself (the warm-started model)
    base_provenance: Provenance | None = None  # how the local base was made from a Hub model (its provenance.json)
    named_base: str | None = None  # the Hub model the local base was made from, as `push --base-model` names it
    stacked: bool = False  # the adapter is the run's `base_adapter`: the warm start's LoRA and GRPO's as one


def looks_like_hub_id(name: str | None, *, data: bool = False) -> bool:
    """Whether a model or dataset name can go in card metadata: the Hub rejects a card naming a local path."""
    if not name or os.path.exists(name) or name.startswith((".", "/", "~")) or name.count("/") > 1:
        return False
    if data and name.endswith(_DATA_SUFFIXES):
        return False
    try:
        validate_repo_id(name)
    except HFValidationError:
        return False
    return True


def redact(text: str) -> str:
    """Remove access tokens from recorded commands and recipes (trl accepts `--hub_token` on the command line)."""
    for pattern, replacement in _TOKEN_PATTERNS:
        text = pattern.sub(replacement, text)
    return text


def _same_model(first: str | None, second: str | None) -> bool:
    """Whether two recorded model names are the same model, however a local path was spelled."""
    if first == second or first is None or second is None:
        return True
    return os.path.exists(first) and os.path.exists(second) and os.path.samefile(first, second)


def base_unpublished(run: StagedRun) -> bool:
    """Whether the adapter only works on a model users cannot get: a warm-started folder, or not the named base."""
    return run.base_inside_run or not _same_model(
        original_base(run), run.adapter_config.get("base_model_name_or_path")
    )


def original_base(run: StagedRun) -> str | None:
    """The model training started from: run_info's (before any warm start), else the adapter's base."""
    recorded = (run.run_info or {}).get("base_model")
    return recorded or run.adapter_config.get("base_model_name_or_path")


def hub_base(run: StagedRun) -> str | None:
    """The Hub model a local base was made from (`--base-model`, else its provenance), or None when nothing names one
    or the base is that model itself."""
    named = run.named_base or (run.base_provenance.base_model if run.base_provenance else None)
    return None if named == original_base(run) else named


def _hub_link(name: str) -> str:
    return f"[{name}](https://huggingface.co/{name})"


def _weights_note(run: StagedRun, base: str | None, named: str) -> list[str]:
    """How the local base relates to the Hub model the card names: as its provenance records, or as the user says."""
    link = _hub_link(named)
    start = "**Base weights:** training started from " + (
        f"the local folder `{base}`" if base else "a base model the run did not record"
    )
    provenance = run.base_provenance
    if provenance is None:
        text = (
            f"{start}, which the publisher names as made from {link} (`grpo-tools push --base-model`). How it was made "
            "is not recorded: its weights may differ from those on the Hub"
        )
        if not run.merged:
            text += ", and then this adapter on the Hub's model does not give exactly the results below"
        return [text + ".", ""]
    text = (
        f"{start}, a copy of {link} whose weights were {provenance.weights} (made by `{provenance.converted_by}`; "
        f"license {provenance.license}). They are not bit-identical to the weights of {named} on the Hub"
    )
    if run.merged:
        text += ", and this model was built from them: close to, not exactly, the same adapter on the Hub's model."
    else:
        text += (
            ": loaded onto the Hub's model, this adapter gives a close but not identical model, and the results below "
            "were measured on the local copy. To reproduce them exactly, make the same copy "
            f"(`{provenance.converted_by}`) and load the adapter onto it."
        )
    return [text, ""]


def _accuracy(value: float | None) -> str:
    return "–" if value is None else f"{value:.3f}"


def _eval_table(reports: list[tuple[str, dict[str, Any]]]) -> list[str]:
    """Markdown rows: accuracy per category and overall for each report, and the change when there are two."""
    with_change = len(reports) == 2
    header = ["category", "rows", *(label for label, _ in reports), *(["change"] if with_change else [])]
    lines = ["| " + " | ".join(header) + " |", "|---" + "|---:" * (len(header) - 1) + "|"]

    def row(name: str, rows: Any, values: list[float | None], bold: bool = False) -> str:
        cells = [name, "–" if rows is None else str(rows), *map(_accuracy, values)]
        if with_change:
            cells.append("–" if None in values else f"{values[1] - values[0]:+.3f}")
        return "| " + " | ".join(f"**{cell}**" if bold else cell for cell in cells) + " |"

    categories = sorted({name for _, report in reports for name in report.get("by_category", {})})
    for name in categories:
        counts = [report.get("by_category", {}).get(name, {}) for _, report in reports]
        rows = next((count["rows"] for count in reversed(counts) if "rows" in count), None)
        lines.append(row(name, rows, [count.get("accuracy") for count in counts]))
    rows = reports[-1][1].get("rows", {}).get("data")
    lines.append(row("all", rows, [report["accuracy"] for _, report in reports], bold=True))
    return lines


def _scorer_line(reports: list[dict[str, Any]]) -> str:
    from grpo_tools.rewards import REWARDS

    scorers = sorted({str(report.get("scorer")) for report in reports})
    if len(scorers) > 1:
        return f"Scorers `{'`, `'.join(scorers)}`: the reports were scored differently."
    rule = REWARDS.get(f"tool_{scorers[0]}")
    return f"Scorer `{scorers[0]}`" + (f": {rule.description}." if rule else ".")


def _evaluation_section(run: StagedRun) -> list[str]:
    lines = ["## Evaluation", ""]
    if not run.reports:
        lines += ["No evaluation reports were found with this run, so its accuracy is unknown.", ""]
    shown: set[str] = set()
    for first, second, how in REPORT_PAIRS:
        present = [(label, run.reports[label]) for label in (first, second) if label in run.reports]
        if not present:
            continue
        reports = [report for _, report in present]
        if first == "before" and (run.run_info or {}).get("warm_start_epochs"):
            how += " (before means after the warm start)"
        lines += [f"Tool-call accuracy (the fraction of rows whose calls are correct), {how}.", ""]
        lines += [*_eval_table(present), "", _scorer_line(reports)]
        if len({(report.get("scorer"), report.get("rows", {}).get("data")) for report in reports}) > 1:
            lines[-1] += " The reports cover different rows or scorers: the change is not like for like."
        lines.append("")
        shown |= {first, second}
    for label in sorted(set(run.reports) - shown):
        lines += [f"Tool-call accuracy in the `{label}` report.", ""]
        lines += [*_eval_table([(label, run.reports[label])]), "", _scorer_line([run.reports[label]]), ""]
    plots = [plot for plot in run.plots if plot.startswith("eval/")]
    lines += [f"![{Path(plot).stem.replace('_', ' ')}]({plot})" for plot in plots] + ([""] if plots else [])
    if run.reports:
        lines += ["The reports are in [`eval/`](eval/), in the layout `grpo-tools score` writes.", ""]
    return lines


def _training_section(run: StagedRun, base: str | None, named: str | None) -> list[str]:
    lines = ["## Training", ""]
    info = run.run_info
    if info is None:
        unknown = "No `run_info.json` was found with this adapter: the data, rewards and settings that trained it are"
        lines += [unknown + " unknown.", ""]
        return lines
    base_cell = f"`{base}`" if base else "unknown"
    if named:
        base_cell = (f"`{base}`, made from " if base else "") + _hub_link(named)
    rows: list[tuple[str, str]] = [("Base model", base_cell)]
    epochs = info.get("warm_start_epochs")
    if epochs:
        warm = f"{epochs:g} epochs of supervised fine-tuning on the gold calls, then GRPO"
        if run.stacked:
            warm += (
                f"; both trained LoRA adapters, and this one holds the two side by side (rank {run.adapter_config['r']}),"
                " so it applies to the base model itself"
            )
        rows.append(("Warm start", warm))
    else:
        rows.append(("Warm start", "none: GRPO from the base model"))
    rows.append(("Training data", f"`{info['dataset']}`" if info.get("dataset") else "unknown"))
    rows.append(("Evaluation data", f"`{info['eval_data']}`" if info.get("eval_data") else "none"))
    rewards = info.get("reward_funcs") or []
    weights = info.get("reward_weights") or [1.0] * len(rewards)
    if rewards:
        rows.append(("Rewards", ", ".join(f"`{r}` × {w:g}" for r, w in zip(rewards, weights, strict=False))))
    kl = info.get("kl") or {}
    if kl:
        beta = kl.get("beta")
        if kl.get("adaptive_kl"):
            kl_text = (
                f"adaptive, `{kl.get('kl_controller')}` controller: β starts at {beta:g} and moves to hold the KL "
                f"near {kl.get('kl_target'):g}, within [{kl.get('kl_min'):g}, {kl.get('kl_max'):g}]"
            )
        else:
            kl_text = f"fixed β = {beta:g}" if beta else "none (β = 0)"
        rows.append(("KL penalty", kl_text))
    multi_turn = info.get("multi_turn")
    if multi_turn:
        turns = multi_turn.get("max_tool_calling_iterations")
        limit = f"at most {turns} tool rounds" if turns is not None else "trl's default number of tool rounds"
        rows.append(
            (
                "Multi-turn",
                f"rollouts run the tools; outcome reward × {multi_turn.get('outcome_reward_weight'):g}, "
                f"{multi_turn.get('extra_call_cost'):g} off per extra call, {multi_turn.get('tool_timeout'):g} s per tool "
                f"call, {limit}",
            )
        )
    lora = info.get("lora")
    if lora:
        targets = lora.get("target_modules")
        targets = ", ".join(targets) if isinstance(targets, list) else targets
        rows.append(("LoRA", f"r {lora.get('r')}, alpha {lora.get('alpha')}, target modules `{targets}`"))
    grpo = []
    if info.get("num_generations") is not None:
        grpo.append(f"{info['num_generations']} completions per prompt")
    if info.get("learning_rate") is not None:
        grpo.append(f"learning rate {info['learning_rate']:g}")
    if info.get("max_steps") is not None:
        grpo.append(f"{info['max_steps']} steps")
    if info.get("seed") is not None:
        grpo.append(f"seed {info['seed']}")
    if grpo:
        rows.append(("GRPO", ", ".join(grpo)))
    lines += ["| | |", "|---|---|", *(f"| {name} | {value} |" for name, value in rows), ""]
    if info.get("command"):
        lines += ["The command that trained it:", "", "```bash", redact(info["command"]), "```", ""]
    records = ["[`training/recipe.yaml`](training/recipe.yaml) is the recipe"] if run.has_recipe else []
    records.append("`training/run_info.json` records these settings")
    if run.has_trainer_state:
        records.append("`training/trainer_state.json` holds the metrics logged during training")
    lines += [", ".join(records[:-1]) + (" and " if len(records) > 1 else "") + records[-1] + ".", ""]
    lines += [f"![{Path(plot).stem.replace('_', ' ')}]({plot})" for plot in run.plots if plot.startswith("training/")]
    return lines


def _usage_section(run: StagedRun, base: str | None, on_hub: bool, adapter_base: str | None) -> list[str]:
    """Loading code that works for this repo: a merged model, an adapter on a Hub base, or on a local one."""
    base_ref = base if on_hub else "path/to/base-model"
    tokenizer_ref = run.repo_id if run.tokenizer_uploaded or run.merged else base_ref
    if run.merged:
        imports = ["from transformers import AutoModelForCausalLM, AutoTokenizer"]
        model = [f'model = AutoModelForCausalLM.from_pretrained("{run.repo_id}", dtype="auto")']
    elif looks_like_hub_id(adapter_base):  # the adapter's own config names a model anyone can download
        imports = ["from peft import AutoPeftModelForCausalLM", "from transformers import AutoTokenizer"]
        model = [f'model = AutoPeftModelForCausalLM.from_pretrained("{run.repo_id}", dtype="auto")']
    else:
        imports = ["from peft import PeftModel", "from transformers import AutoModelForCausalLM, AutoTokenizer"]
        model = [
            f'base = AutoModelForCausalLM.from_pretrained("{base_ref}", dtype="auto")',
            f'model = PeftModel.from_pretrained(base, "{run.repo_id}")',
        ]
    load = [*imports, "", *model, f'tokenizer = AutoTokenizer.from_pretrained("{tokenizer_ref}")']
    lines = ["## Usage", ""]
    if not run.merged and base and not on_hub and not run.base_inside_run:
        lines += [
            f"The base model was the local folder `{base}`, not a Hub model: load it from where you keep it.",
            "",
        ]
    lines += [
        "```python",
        *load,
        "",
        'tools = [{"type": "function", "function": {',
        '    "name": "get_weather", "description": "Current weather in a city",',
        '    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]',
        'messages = [{"role": "user", "content": "Is it warm in Lyon today?"}]',
        "inputs = tokenizer.apply_chat_template(",
        '    messages, tools=tools, add_generation_prompt=True, return_dict=True, return_tensors="pt"',
        ").to(model.device)",
        "output = model.generate(**inputs, max_new_tokens=128)",
        'print(tokenizer.decode(output[0, inputs["input_ids"].shape[1] :], skip_special_tokens=True))',
        "```",
        "",
    ]
    return lines


def model_card(run: StagedRun) -> ModelCard:
    """The model card for a staged run: metadata the Hub indexes, then usage, evaluation and training.

    Only what the run folder records is stated; what it does not record is called unknown, never guessed.
    """
    info = run.run_info or {}
    adapter_base = run.adapter_config.get("base_model_name_or_path")
    base = original_base(run)
    named = hub_base(run)
    card_base = named or base  # a local base is named by the Hub model it was made from, when that is known
    # base_on_hub: what staging learned looking `card_base` up; a model the provenance or the user names is trusted
    on_hub = run.base_on_hub if run.base_on_hub is not None else bool(named) or looks_like_hub_id(base)
    datasets = [name for name in (info.get("dataset"),) if looks_like_hub_id(name, data=True)]
    data = ModelCardData(
        base_model=card_base if on_hub else None,
        library_name="transformers" if run.merged else "peft",
        tags=list(TAGS),
        datasets=datasets or None,
        pipeline_tag="text-generation",
    )
    name = run.repo_id.split("/")[-1]
    base_link = _hub_link(card_base) if on_hub else (f"`{card_base}`" if card_base else "an unknown base model")
    how = "fine-tuned for tool calling with GRPO (Group Relative Policy Optimization) using `grpo-tools`"
    if run.merged:
        subject = base_link if card_base else "A model (base unknown)"
        intro = (
            f"{subject} {how}, with its LoRA adapter merged into the weights: a full model that loads without PEFT."
        )
    else:
        intro = f"A LoRA adapter for {base_link}, {how}."
    lines = [f"# {name}", "", intro, ""]
    if base_unpublished(run):
        if _same_model(base, adapter_base):
            what = "a folder of the training run, the model after its warm start"
        elif info.get("warm_start_epochs"):
            what = f"the warm-started copy of {f'`{base}`' if named else base_link}"
        else:
            what = "not the base model the run recorded"
        if run.merged:
            lines += [f"The adapter was trained on top of `{adapter_base}` ({what}) and merged into it.", ""]
        else:
            lines += [
                f"**Note:** the adapter was trained on top of `{adapter_base}` ({what}), which is not in this repo:"
                " without that model the adapter will not reproduce the results below. `grpo-tools push --merge`"
                " publishes a self-contained model instead.",
                "",
            ]
    if named:
        lines += _weights_note(run, base, named)
    if not run.merged and not run.tokenizer_uploaded:
        lines += ["The tokenizer is the base model's, unchanged.", ""]
    lines += _usage_section(run, card_base, on_hub, adapter_base)
    lines += _evaluation_section(run)
    lines += _training_section(run, base, named)
    body = "\n".join(lines).rstrip() + "\n"
    return ModelCard(f"---\n{data.to_yaml()}\n---\n\n{body}")
