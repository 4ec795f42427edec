"""`grpo-tools push`: publish a trained adapter (or the merged model) to the Hugging Face Hub with a model card.

Everything that would be uploaded is first staged into one folder, laid out as the repo will be:

    adapter_config.json, adapter_model.safetensors   (or config.json + model*.safetensors with --merge)
    tokenizer files                                   (only when they differ from the base model's; always merged)
    README.md                                         the model card
    training/  run_info.json, recipe.yaml, trainer_state.json, training_curves.png
    eval/      <label>_report.json, plots

A dry run moves that folder to where the user asked; a real push uploads it in one commit. Both paths share the
staging code, so a dry run shows exactly what a push would publish. Checkpoints, the warm-start model, optimizer
states, `training_args.bin` and the eval rows and predictions are never staged: they are large, or they would publish
the evaluation set (a model's correct calls spell out its answers).
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import logging
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from huggingface_hub import HfApi, ModelCard, ModelCardData, get_token
from huggingface_hub.errors import GatedRepoError, HfHubHTTPError, HFValidationError, RepositoryNotFoundError
from huggingface_hub.utils import validate_repo_id


__all__ = [
    "ADAPTER_FILES",
    "TOKENIZER_FILES",
    "HubError",
    "PushResult",
    "main",
    "push_run",
    "stage_run",
]

logger = logging.getLogger(__name__)

ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors")
# Every file a transformers tokenizer may be saved as, across tokenizer kinds.
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "merges.txt",
    "vocab.txt",
    "tokenizer.model",
    "spiece.model",
    "chat_template.jinja",
    "chat_template.json",
)
TAGS = ("grpo", "tool-calling", "lora")
# Reports whose labels pair up into a before/after table: (first, second, what produced them).
REPORT_PAIRS = (
    ("before", "after", "measured by `grpo-tools train` on the held-out rows, before and after GRPO"),
    ("base", "adapter", "measured by `grpo-tools eval`, the base model against the fine-tuned one"),
)
# Remote files a push owns: those not in the new commit are deleted by it, so a repo switched between an adapter and
# a merged model never holds both. Any other file a user put in the repo is left alone.
MANAGED_PATTERNS = (
    "*.safetensors",
    "*.safetensors.index.json",
    "adapter_config.json",
    "config.json",
    "generation_config.json",
    *TOKENIZER_FILES,
    "training/*",
    "eval/*",
)
_DATA_SUFFIXES = (".json", ".jsonl", ".parquet", ".csv", ".txt", ".arrow")
# Hugging Face access tokens, and a token given to `grpo-tools train` as trl's `hub_token` (flag or recipe key).
_TOKEN_PATTERNS = (
    (re.compile(r"(--hub_token[= ])[^\s\"']+"), r"\1<redacted>"),
    (re.compile(r"^(\s*hub_token\s*:\s*)\S.*$", re.MULTILINE), r"\1<redacted>"),
    (re.compile(r"hf_[A-Za-z0-9]{20,}"), "<redacted>"),
)
# huggingface_hub raises OSError subclasses for HTTP failures and its HTTP client's own errors for an unreachable
# network; HfHubHTTPError's bases are that client's error class and OSError, whichever client this version uses.
_HUB_ERRORS = (OSError, *HfHubHTTPError.__bases__)


class HubError(ValueError):
    """A push refused before anything is uploaded: the message names the folder, file or value at fault."""


@dataclass(frozen=True)
class PushResult:
    """What a push published (or a dry run staged): the repo paths, and where to find them."""

    files: tuple[str, ...]  # paths in the repo, sorted
    folder: Path | None  # the dry-run folder; None after a real push, whose staging folder was temporary
    url: str | None  # the commit's URL after a real push


@dataclass
class _Run:
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


# --- checks ---------------------------------------------------------------------------------------------------


def check_adapter(adapter_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """Refuse a folder that is not a readable LoRA adapter; return its `adapter_config.json`."""
    from safetensors import SafetensorError, safe_open

    folder = Path(adapter_dir)
    if not folder.is_dir():
        raise HubError(f"{folder}: no such folder (--adapter is the output_dir of `grpo-tools train`)")
    missing = [name for name in ADAPTER_FILES if not (folder / name).is_file()]
    if missing:
        raise HubError(f"{folder}: no {' or '.join(missing)}; is this the output_dir of `grpo-tools train`?")
    config = _read_json(folder / "adapter_config.json")
    weights = folder / "adapter_model.safetensors"
    try:
        with safe_open(weights, framework="pt") as handle:
            num_tensors = len(list(handle.keys()))
    except (SafetensorError, OSError) as error:
        raise HubError(f"{weights}: cannot be read as safetensors ({error})") from None
    if not num_tensors:
        raise HubError(f"{weights}: holds no tensors")
    return config


def check_repo_id(repo_id: str) -> None:
    """Refuse anything but `owner/name`: a bare name would land in whichever account the token belongs to."""
    if repo_id.count("/") != 1:
        raise HubError(f"repo id {repo_id!r}: expected owner/name, e.g. your-name/qwen2.5-0.5b-tool-grpo")
    try:
        validate_repo_id(repo_id)
    except HFValidationError as error:
        raise HubError(f"repo id {repo_id!r}: {error}") from None


def _read_json(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise HubError(f"{path}: not readable JSON ({error})") from None
    if not isinstance(value, dict):
        raise HubError(f"{path}: expected a JSON object")
    return value


def _read_report(path: Path) -> dict[str, Any]:
    report = _read_json(path)
    if not isinstance(report.get("accuracy"), (int, float)) or not isinstance(report.get("by_category", {}), dict):
        raise HubError(f"{path}: not a scoring report (no numeric 'accuracy' or no 'by_category' mapping)")
    return report


def _looks_like_hub_id(name: str | None, *, data: bool = False) -> bool:
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


def _redact(text: str) -> str:
    """Remove access tokens from recorded commands and recipes (trl accepts `--hub_token` on the command line)."""
    for pattern, replacement in _TOKEN_PATTERNS:
        text = pattern.sub(replacement, text)
    return text


# --- staging --------------------------------------------------------------------------------------------------


def _base_folder(name: str) -> tuple[Path | None, bool | None]:
    """Where the base model's tokenizer files are: a local folder, or the Hub cache (downloading only them).

    Returns the folder (None when unavailable) and whether the name is known to be a Hub model (None: unknown).
    """
    from huggingface_hub import snapshot_download

    if os.path.isdir(name):
        return Path(name), False
    if not _looks_like_hub_id(name):
        return None, False
    try:
        return Path(snapshot_download(name, allow_patterns=list(TOKENIZER_FILES))), True
    except GatedRepoError:  # exists, but this account may not read it
        return None, True
    except RepositoryNotFoundError:
        return None, False
    except _HUB_ERRORS as error:  # offline, unreachable, or not cached
        logger.debug("tokenizer files of %s unavailable: %s", name, error)
        return None, None


def _tokenizer_state(folder: Path) -> dict[str, Any]:
    """What makes a tokenizer behave as it does, independent of how its files happen to be serialised.

    Re-saving a tokenizer rewrites its files (transformers adds defaults, renames the class), so comparing bytes
    would call every saved tokenizer changed.
    """
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    backend = getattr(tokenizer, "backend_tokenizer", None)
    return {
        "class": type(tokenizer).__name__,
        "backend": json.loads(backend.to_str()) if backend is not None else tokenizer.get_vocab(),
        "added_tokens": {index: repr(token) for index, token in tokenizer.added_tokens_decoder.items()},
        "special_tokens": tokenizer.special_tokens_map,
        "chat_template": tokenizer.chat_template,
        "response_template": getattr(tokenizer, "response_template", None),
        "padding_side": tokenizer.padding_side,
        "truncation_side": tokenizer.truncation_side,
        "model_max_length": tokenizer.model_max_length,
        "clean_up_tokenization_spaces": tokenizer.clean_up_tokenization_spaces,
    }


def _same_tokenizer(ours: Path, names: list[str], base: Path) -> bool:
    """Whether the run's tokenizer equals the base model's: same files, or (when the files differ) the same state.

    When in doubt it answers False: uploading an unchanged tokenizer costs a few megabytes, leaving out a changed
    one (a new pad token, another chat template) breaks the model for whoever loads it.
    """
    theirs = sorted(name for name in TOKENIZER_FILES if (base / name).is_file())
    if theirs == names and all((ours / name).read_bytes() == (base / name).read_bytes() for name in names):
        return True
    try:
        # Ours is loaded from its tokenizer files alone: next to adapter_config.json, AutoTokenizer would go looking
        # for the adapter's base model.
        with tempfile.TemporaryDirectory() as alone:
            for name in names:
                shutil.copyfile(ours / name, Path(alone, name))
            return _tokenizer_state(Path(alone)) == _tokenizer_state(base)
    except (OSError, ValueError) as error:
        logger.info("could not load both tokenizers to compare them (%s); treating them as different", error)
        return False


def _stage_tokenizer(adapter_dir: Path, staging: Path, run: _Run, base: str | None) -> None:
    names = sorted(name for name in TOKENIZER_FILES if (adapter_dir / name).is_file())
    if not names:
        if run.merged:
            raise HubError(f"{adapter_dir}: no tokenizer files; a merged model needs its tokenizer")
        logger.info("no tokenizer files in %s: the card points users to the base model's tokenizer", adapter_dir)
        return
    upload = run.merged
    if not upload and run.base_inside_run:
        logger.info("the adapter's base model is a folder of the run, which is not published: uploading the tokenizer")
        upload = True
    elif not upload and base:
        folder, run.base_on_hub = _base_folder(base)
        if folder is None:
            logger.info(
                "base model %s is neither a local folder nor available from the Hub: uploading the tokenizer files, "
                "as they cannot be compared with the base model's",
                base,
            )
            upload = True
        elif _same_tokenizer(adapter_dir, names, folder):
            logger.info("tokenizer unchanged from the base model %s: not uploaded", base)
        else:
            logger.info("tokenizer differs from the base model %s: uploading it", base)
            upload = True
    elif not upload:
        logger.info("the adapter names no base model to compare the tokenizer with: uploading it")
        upload = True
    if upload:
        for name in names:
            shutil.copyfile(adapter_dir / name, staging / name)
    run.tokenizer_uploaded = upload


def _stage_merged(adapter_dir: Path, staging: Path, adapter_base: str | None) -> None:
    """Fold the LoRA weights into the base model the adapter was trained on and save it as safetensors."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    if not adapter_base:
        raise HubError(
            f"{adapter_dir / 'adapter_config.json'}: base_model_name_or_path is missing; nothing to merge into"
        )
    try:
        model = AutoModelForCausalLM.from_pretrained(adapter_base, dtype="auto")
    except OSError as error:
        raise HubError(f"cannot load the base model {adapter_base!r} to merge the adapter into: {error}") from None
    logger.info("merging %s into %s", adapter_dir, adapter_base)
    merged = PeftModel.from_pretrained(model, adapter_dir).merge_and_unload()
    merged.save_pretrained(staging)


def _copy_extras(sources: Iterable[Path], staging: Path, run: _Run) -> None:
    """Copy the run record and eval reports and plots (later sources win a name clash), redacting tokens."""
    training, evaluation = staging / "training", staging / "eval"
    for source in sources:
        if (source / "run_info.json").is_file():
            info = json.loads(_redact(json.dumps(_read_json(source / "run_info.json"))))
            training.mkdir(exist_ok=True)
            (training / "run_info.json").write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
        if (source / "recipe.yaml").is_file():
            training.mkdir(exist_ok=True)
            recipe = _redact((source / "recipe.yaml").read_text(encoding="utf-8"))
            (training / "recipe.yaml").write_text(recipe, encoding="utf-8")
        if (source / "trainer_state.json").is_file():
            training.mkdir(exist_ok=True)
            shutil.copyfile(source / "trainer_state.json", training / "trainer_state.json")
        for path in sorted(source.glob("*_report.json")):
            label = path.name.removesuffix("_report.json")
            if label in run.reports:
                logger.warning("%s replaces the %s report found earlier", path, label)
            run.reports[label] = _read_report(path)
            evaluation.mkdir(exist_ok=True)
            shutil.copyfile(path, evaluation / path.name)
        for path in sorted(source.glob("*.png")):
            folder = training if path.name == "training_curves.png" else evaluation
            folder.mkdir(exist_ok=True)
            shutil.copyfile(path, folder / path.name)
    if (training / "run_info.json").is_file():
        run.run_info = _read_json(training / "run_info.json")
    run.has_recipe = (training / "recipe.yaml").is_file()
    run.has_trainer_state = (training / "trainer_state.json").is_file()
    run.plots = sorted(str(path.relative_to(staging)) for path in staging.glob("*/*.png"))


def stage_run(
    adapter_dir: str | os.PathLike[str],
    staging_dir: str | os.PathLike[str],
    repo_id: str,
    *,
    merge: bool = False,
    eval_dir: str | os.PathLike[str] | None = None,
) -> list[str]:
    """Write into the empty `staging_dir` exactly what a push of this run uploads; return the repo paths, sorted.

    `repo_id` only names the repo in the model card. Raises `HubError` for a folder, report or base model that
    cannot be used.
    """
    adapter_dir, staging = Path(adapter_dir), Path(staging_dir)
    adapter_config = check_adapter(adapter_dir)
    sources = [adapter_dir]
    if eval_dir is not None:
        eval_path = Path(eval_dir)
        if not eval_path.is_dir():
            raise HubError(f"{eval_path}: no such folder (--eval-dir is the --output-dir of `grpo-tools eval`)")
        if not any(eval_path.glob("*_report.json")) and not any(eval_path.glob("*.png")):
            raise HubError(f"{eval_path}: no *_report.json or *.png to publish")
        if eval_path.resolve() != adapter_dir.resolve():
            sources.append(eval_path)
    run = _Run(repo_id, adapter_config, merge)
    staging.mkdir(parents=True, exist_ok=True)
    _copy_extras(sources, staging, run)  # first: the card's base model comes from run_info
    adapter_base = adapter_config.get("base_model_name_or_path")
    if merge:
        _stage_merged(adapter_dir, staging, adapter_base)
    else:
        for name in ADAPTER_FILES:
            shutil.copyfile(adapter_dir / name, staging / name)
    base = _original_base(run)
    run.base_inside_run = bool(adapter_base) and _inside(adapter_base, adapter_dir)
    if not merge and _base_unpublished(run):
        logger.warning(
            "the adapter was trained on top of %s, which is not published, and only works on top of that model; "
            "push with --merge to publish a self-contained model",
            adapter_base,
        )
    _stage_tokenizer(adapter_dir, staging, run, base)
    _model_card(run).save(staging / "README.md")
    files = sorted(str(path.relative_to(staging)) for path in staging.rglob("*") if path.is_file())
    staged_names = {Path(name).name for name in files}
    left_out = sorted(
        p.name + ("/" if p.is_dir() else "") for p in adapter_dir.iterdir() if p.name not in staged_names
    )
    if left_out:
        logger.info("not published from %s: %s", adapter_dir, ", ".join(left_out))
    return files


# --- model card -----------------------------------------------------------------------------------------------


def _same_model(first: str | None, second: str | None) -> bool:
    """Whether two recorded model names are the same model, however a local path was spelled."""
    if first == second or first is None or second is None:
        return True
    return os.path.exists(first) and os.path.exists(second) and os.path.samefile(first, second)


def _inside(path: str, folder: Path) -> bool:
    return os.path.isdir(path) and Path(path).resolve().is_relative_to(folder.resolve())


def _base_unpublished(run: _Run) -> bool:
    """Whether the adapter only works on a model users cannot get: a warm-started folder, or not the named base."""
    return run.base_inside_run or not _same_model(
        _original_base(run), run.adapter_config.get("base_model_name_or_path")
    )


def _original_base(run: _Run) -> str | None:
    """The model training started from: run_info's (before any warm start), else the adapter's base."""
    recorded = (run.run_info or {}).get("base_model")
    return recorded or run.adapter_config.get("base_model_name_or_path")


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


def _evaluation_section(run: _Run) -> list[str]:
    lines = ["## Evaluation", ""]
    if not run.reports:
        lines += ["No evaluation reports were found with this run, so its accuracy is unknown.", ""]
    shown: set[str] = set()
    for first, second, how in REPORT_PAIRS:
        present = [(label, run.reports[label]) for label in (first, second) if label in run.reports]
        if not present:
            continue
        reports = [report for _, report in present]
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


def _training_section(run: _Run, base: str | None) -> list[str]:
    lines = ["## Training", ""]
    info = run.run_info
    if info is None:
        unknown = "No `run_info.json` was found with this adapter: the data, rewards and settings that trained it are"
        lines += [unknown + " unknown.", ""]
        return lines
    rows: list[tuple[str, str]] = [("Base model", f"`{base}`" if base else "unknown")]
    epochs = info.get("warm_start_epochs")
    if epochs:
        rows.append(("Warm start", f"{epochs:g} epochs of supervised fine-tuning on the gold calls, then GRPO"))
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
        lines += ["The command that trained it:", "", "```bash", _redact(info["command"]), "```", ""]
    records = ["[`training/recipe.yaml`](training/recipe.yaml) is the recipe"] if run.has_recipe else []
    records.append("`training/run_info.json` records these settings")
    if run.has_trainer_state:
        records.append("`training/trainer_state.json` holds the metrics logged during training")
    lines += [", ".join(records[:-1]) + (" and " if len(records) > 1 else "") + records[-1] + ".", ""]
    lines += [f"![{Path(plot).stem.replace('_', ' ')}]({plot})" for plot in run.plots if plot.startswith("training/")]
    return lines


def _usage_section(run: _Run, base: str | None, on_hub: bool, adapter_base: str | None) -> list[str]:
    """Loading code that works for this repo: a merged model, an adapter on a Hub base, or on a local one."""
    base_ref = base if on_hub else "path/to/base-model"
    tokenizer_ref = run.repo_id if run.tokenizer_uploaded or run.merged else base_ref
    if run.merged:
        imports = ["from transformers import AutoModelForCausalLM, AutoTokenizer"]
        model = [f'model = AutoModelForCausalLM.from_pretrained("{run.repo_id}", dtype="auto")']
    elif _looks_like_hub_id(adapter_base):  # the adapter's own config names a model anyone can download
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


def _model_card(run: _Run) -> ModelCard:
    """The model card for a staged run: metadata the Hub indexes, then usage, evaluation and training.

    Only what the run folder records is stated; what it does not record is called unknown, never guessed.
    """
    info = run.run_info or {}
    adapter_base = run.adapter_config.get("base_model_name_or_path")
    base = _original_base(run)
    on_hub = run.base_on_hub if run.base_on_hub is not None else _looks_like_hub_id(base)
    datasets = [name for name in (info.get("dataset"),) if _looks_like_hub_id(name, data=True)]
    data = ModelCardData(
        base_model=base if on_hub else None,
        library_name="transformers" if run.merged else "peft",
        tags=list(TAGS),
        datasets=datasets or None,
        pipeline_tag="text-generation",
    )
    name = run.repo_id.split("/")[-1]
    base_link = (
        f"[{base}](https://huggingface.co/{base})" if on_hub else (f"`{base}`" if base else "an unknown base model")
    )
    how = "fine-tuned for tool calling with GRPO (Group Relative Policy Optimization) using `grpo-tools`"
    if run.merged:
        subject = base_link if base else "A model (base unknown)"
        intro = (
            f"{subject} {how}, with its LoRA adapter merged into the weights: a full model that loads without PEFT."
        )
    else:
        intro = f"A LoRA adapter for {base_link}, {how}."
    lines = [f"# {name}", "", intro, ""]
    if _base_unpublished(run):
        if _same_model(base, adapter_base):
            what = "a folder of the training run, the model after its warm start"
        elif info.get("warm_start_epochs"):
            what = f"the warm-started copy of {base_link}"
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
    if not run.merged and not run.tokenizer_uploaded:
        lines += ["The tokenizer is the base model's, unchanged.", ""]
    lines += _usage_section(run, base, on_hub, adapter_base)
    lines += _evaluation_section(run)
    lines += _training_section(run, base)
    body = "\n".join(lines).rstrip() + "\n"
    return ModelCard(f"---\n{data.to_yaml()}\n---\n\n{body}")


# --- push -----------------------------------------------------------------------------------------------------


def _stale_files(remote: Iterable[str], added: set[str]) -> list[str]:
    """Remote files this push owns but no longer publishes."""
    return sorted(
        path
        for path in remote
        if path not in added and any(fnmatch.fnmatch(path, pattern) for pattern in MANAGED_PATTERNS)
    )


def _scan_for_token(staging: Path, token: str) -> None:
    """Refuse to publish a staged file that contains the access token (weights are skipped: they hold numbers)."""
    needle = token.encode()
    for path in staging.rglob("*"):
        if path.is_file() and path.suffix != ".safetensors" and needle in path.read_bytes():
            raise HubError(f"{path.name}: contains your Hugging Face token; remove it from the run folder first")


def _commit_message(files: list[str], staging: Path, merged: bool) -> str:
    message = f"Upload {'merged model' if merged else 'LoRA adapter'} trained with grpo-tools (GRPO, tool calling)"
    for first, second, _ in REPORT_PAIRS:
        if f"eval/{first}_report.json" in files and f"eval/{second}_report.json" in files:
            old = json.loads((staging / "eval" / f"{first}_report.json").read_text())["accuracy"]
            new = json.loads((staging / "eval" / f"{second}_report.json").read_text())["accuracy"]
            return f"{message}: accuracy {old:.3f} -> {new:.3f}"
    return message


def _upload(
    staging: Path, files: list[str], repo_id: str, private: bool, revision: str | None, message: str, token: str
) -> str:
    """Create the repo (and branch) if needed and publish the staged folder in one commit; return its URL."""
    from huggingface_hub import CommitOperationAdd, CommitOperationDelete

    api = HfApi(token=token)
    api.create_repo(repo_id, private=private, exist_ok=True)
    if revision and revision != "main":
        api.create_branch(repo_id, branch=revision, exist_ok=True)
    stale = _stale_files(api.list_repo_files(repo_id, revision=revision), set(files))
    operations: list[Any] = [
        CommitOperationAdd(path_in_repo=name, path_or_fileobj=str(staging / name)) for name in files
    ]
    operations += [CommitOperationDelete(path_in_repo=name) for name in stale]
    if stale:
        logger.info("removing files an earlier push left that this one replaces: %s", ", ".join(stale))
    info = api.create_commit(repo_id, operations=operations, commit_message=message, revision=revision)
    return info.commit_url


def push_run(
    adapter_dir: str | os.PathLike[str],
    repo_id: str,
    *,
    private: bool = False,
    revision: str | None = None,
    merge: bool = False,
    dry_run_dir: str | os.PathLike[str] | None = None,
    eval_dir: str | os.PathLike[str] | None = None,
    commit_message: str | None = None,
    token: str | None = None,
) -> PushResult:
    """Publish a training run's adapter (or, with `merge`, the merged model) with its model card, in one commit.

    `adapter_dir` is the output_dir of `grpo-tools train`; `eval_dir` adds the reports and plots of `grpo-tools
    eval`. With `dry_run_dir` the staged files are written there and nothing is uploaded. `token` defaults to the
    saved login or HF_TOKEN; it is never logged or written. Raises `HubError`, before any upload, for unusable
    input; Hub failures propagate as huggingface_hub's errors.
    """
    check_adapter(adapter_dir)
    check_repo_id(repo_id)
    secret = token or get_token()
    if dry_run_dir is None and not secret:
        raise HubError(
            "no Hugging Face token: log in with `hf auth login` or set HF_TOKEN (or stage with --dry-run DIR)"
        )
    if dry_run_dir is not None:
        target = Path(dry_run_dir)
        if target.exists() and (not target.is_dir() or any(target.iterdir())):
            raise HubError(f"{target}: already exists and is not an empty folder; choose a new --dry-run folder")
        target.parent.mkdir(parents=True, exist_ok=True)
        staging_root = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    else:
        staging_root = Path(tempfile.mkdtemp(prefix="grpo-tools-push-"))
    try:
        staging = staging_root / "repo"
        files = stage_run(adapter_dir, staging, repo_id, merge=merge, eval_dir=eval_dir)
        if secret:
            _scan_for_token(staging, secret)
        if dry_run_dir is not None:
            if target.exists():
                target.rmdir()
            staging.rename(target)
            return PushResult(tuple(files), target, None)
        message = commit_message or _commit_message(files, staging, merge)
        url = _upload(staging, files, repo_id, private, revision, message, secret)
        return PushResult(tuple(files), None, url)
    finally:
        shutil.rmtree(staging_root, ignore_errors=True)


def main(argv: list[str]) -> int:
    """`grpo-tools push`: stage a run and upload it (or write it to a folder); exit 2 on unusable input."""
    parser = argparse.ArgumentParser(
        prog="grpo-tools push",
        description="Push a trained adapter (or the merged model) to the Hugging Face Hub with a model card. The "
        "token is your saved login (`hf auth login`) or HF_TOKEN.",
    )
    parser.add_argument("--adapter", required=True, help="the run folder: output_dir of `grpo-tools train`")
    parser.add_argument("--repo-id", required=True, help="the Hub repo, owner/name")
    parser.add_argument(
        "--private", action="store_true", help="create the repo private (an existing repo keeps its visibility)"
    )
    parser.add_argument("--revision", help="push to this branch (created when missing) instead of main")
    parser.add_argument("--merge", action="store_true", help="merge the adapter into its base and push the full model")
    parser.add_argument("--dry-run", metavar="DIR", help="write what would be uploaded into DIR; upload nothing")
    parser.add_argument(
        "--eval-dir", metavar="DIR", help="also publish the reports and plots of `grpo-tools eval --output-dir DIR`"
    )
    parser.add_argument("--commit-message", help="the commit's message (default: names the kind and the accuracy)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    logging.getLogger("grpo_tools").setLevel(logging.INFO)  # ours only: the HTTP client logs every request at INFO
    try:
        result = push_run(
            args.adapter,
            args.repo_id,
            private=args.private,
            revision=args.revision,
            merge=args.merge,
            dry_run_dir=args.dry_run,
            eval_dir=args.eval_dir,
            commit_message=args.commit_message,
        )
    except HubError as error:
        print(f"grpo-tools push: {error}", file=sys.stderr)
        return 2
    except HfHubHTTPError as error:
        print(f"grpo-tools push: the Hub refused the push: {error}", file=sys.stderr)
        return 1
    except _HUB_ERRORS as error:  # the network, or the local disk while staging
        print(f"grpo-tools push: {error}", file=sys.stderr)
        return 1
    listing = "\n".join(f"  {name}" for name in result.files)
    if result.folder is not None:
        print(f"dry run: {len(result.files)} files staged in {result.folder}, nothing uploaded:\n{listing}")
    else:
        print(f"pushed {len(result.files)} files to {args.repo_id}: {result.url}\n{listing}")
    return 0
