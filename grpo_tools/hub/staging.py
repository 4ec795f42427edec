"""Staging a training run for the Hub: everything a push would upload, copied into one folder laid out as the repo will
be (adapter or merged weights, tokenizer files when they differ from the base's, the model card, training records and
evaluation reports). `grpo_tools.hub.push` uploads that folder, or hands it over as a dry run.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from huggingface_hub.errors import GatedRepoError, HfHubHTTPError, RepositoryNotFoundError

from grpo_tools.hub.card import (
    StagedRun,
    base_unpublished,
    hub_base,
    looks_like_hub_id,
    model_card,
    original_base,
    redact,
)
from grpo_tools.models.adapters import BASE_ADAPTER_DIR
from grpo_tools.models.provenance import Provenance, ProvenanceError, read_provenance


__all__ = ["ADAPTER_FILES", "HUB_ERRORS", "TOKENIZER_FILES", "HubError", "check_adapter", "stage_run"]

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


# huggingface_hub raises OSError subclasses for HTTP failures and its HTTP client's own errors for an unreachable
# network; HfHubHTTPError's bases are that client's error class and OSError, whichever client this version uses.
HUB_ERRORS = (OSError, *HfHubHTTPError.__bases__)


class HubError(ValueError):
    """A push refused before anything is uploaded: the message names the folder, file or value at fault."""


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


def _inside(path: str, folder: Path) -> bool:
    return os.path.isdir(path) and Path(path).resolve().is_relative_to(folder.resolve())


def _base_provenance(run: StagedRun, base: str | None, sources: list[Path]) -> Provenance | None:
    """How the run's local base was made: as `run_info.json` recorded it when training, else as the `provenance.json`
    of the base folder, when that folder is on this machine."""
    recorded = (run.run_info or {}).get("base_provenance")
    try:
        if recorded is not None:
            source = next(folder for folder in reversed(sources) if (folder / "run_info.json").is_file())
            return Provenance.from_dict(recorded, f"{source / 'run_info.json'}: base_provenance")
        return read_provenance(base) if base and os.path.isdir(base) else None
    except ProvenanceError as error:
        raise HubError(str(error)) from None


def _base_folder(name: str) -> tuple[Path | None, bool | None]:
    """Where the base model's tokenizer files are: a local folder, or the Hub cache (downloading only them).

    Returns the folder (None when unavailable) and whether the name is known to be a Hub model (None: unknown).
    """
    from huggingface_hub import snapshot_download

    if os.path.isdir(name):
        return Path(name), False
    if not looks_like_hub_id(name):
        return None, False
    try:
        return Path(snapshot_download(name, allow_patterns=list(TOKENIZER_FILES))), True
    except GatedRepoError:  # exists, but this account may not read it
        return None, True
    except RepositoryNotFoundError:
        return None, False
    except HUB_ERRORS as error:  # offline, unreachable, or not cached
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


def _stage_tokenizer(adapter_dir: Path, staging: Path, run: StagedRun, base: str | None) -> None:
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


def _copy_extras(sources: Iterable[Path], staging: Path, run: StagedRun) -> None:
    """Copy the run record and eval reports and plots (later sources win a name clash), redacting tokens."""
    training, evaluation = staging / "training", staging / "eval"
    for source in sources:
        if (source / "run_info.json").is_file():
            info = json.loads(redact(json.dumps(_read_json(source / "run_info.json"))))
            training.mkdir(exist_ok=True)
            (training / "run_info.json").write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
        if (source / "recipe.yaml").is_file():
            training.mkdir(exist_ok=True)
            recipe = redact((source / "recipe.yaml").read_text(encoding="utf-8"))
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
    base_model: str | None = None,
) -> list[str]:
    """Write into the empty `staging_dir` exactly what a push of this run uploads; return the repo paths, sorted.

    `repo_id` only names the repo in the model card; `base_model` names the Hub model a local base was made from,
    over its recorded provenance. Raises `HubError` for a folder, report, provenance or base model that cannot be used.
    """
    adapter_dir, staging = Path(adapter_dir), Path(staging_dir)
    adapter_config = check_adapter(adapter_dir)
    # After a LoRA warm start the run's adapter needs the warm-started copy of the base; its stacked twin does not
    weights_dir = adapter_dir / BASE_ADAPTER_DIR
    stacked = not merge and (weights_dir / "adapter_config.json").is_file()
    if stacked:
        adapter_config = check_adapter(weights_dir)
    else:
        weights_dir = adapter_dir
    sources = [adapter_dir]
    if eval_dir is not None:
        eval_path = Path(eval_dir)
        if not eval_path.is_dir():
            raise HubError(f"{eval_path}: no such folder (--eval-dir is the --output-dir of `grpo-tools eval`)")
        if not any(eval_path.glob("*_report.json")) and not any(eval_path.glob("*.png")):
            raise HubError(f"{eval_path}: no *_report.json or *.png to publish")
        if eval_path.resolve() != adapter_dir.resolve():
            sources.append(eval_path)
    run = StagedRun(repo_id, adapter_config, merge, stacked=stacked)
    staging.mkdir(parents=True, exist_ok=True)
    _copy_extras(sources, staging, run)  # first: the base model and its provenance come from run_info
    adapter_base = adapter_config.get("base_model_name_or_path")
    base = original_base(run)
    run.base_provenance = _base_provenance(run, base, sources)
    if base_model:
        if run.base_provenance and run.base_provenance.base_model != base_model:
            logger.warning(
                "--base-model %s replaces %s, the model the base's provenance records: the card names %s and does not"
                " say how the weights were made",
                base_model,
                run.base_provenance.base_model,
                base_model,
            )
            run.base_provenance = None
        run.named_base = base_model
    if merge:
        _stage_merged(adapter_dir, staging, adapter_base)
    else:
        for name in ADAPTER_FILES:
            shutil.copyfile(weights_dir / name, staging / name)
    run.base_inside_run = bool(adapter_base) and _inside(adapter_base, adapter_dir)
    if not merge and base_unpublished(run):
        logger.warning(
            "the adapter was trained on top of %s, which is not published, and only works on top of that model; "
            "push with --merge to publish a self-contained model",
            adapter_base,
        )
    named = hub_base(run)
    _stage_tokenizer(adapter_dir, staging, run, named or base)  # users are sent to the Hub model, when one is named
    if named and run.base_on_hub is False:
        raise HubError(f"{named}: not a model on the Hub (or not one this account can see); check the base model's id")
    model_card(run).save(staging / "README.md")
    files = sorted(str(path.relative_to(staging)) for path in staging.rglob("*") if path.is_file())
    staged_names = {Path(name).name for name in files}
    left_out = sorted(
        p.name + ("/" if p.is_dir() else "") for p in adapter_dir.iterdir() if p.name not in staged_names
    )
    if left_out:
        logger.info("not published from %s: %s", adapter_dir, ", ".join(left_out))
    return files
