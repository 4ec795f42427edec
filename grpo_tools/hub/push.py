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

The card itself is written by `grpo_tools.hub.card`.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import logging
import os
import shutil
import sys
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from huggingface_hub import HfApi, get_token
from huggingface_hub.errors import GatedRepoError, HfHubHTTPError, HFValidationError, RepositoryNotFoundError
from huggingface_hub.utils import validate_repo_id

from grpo_tools.hub.card import (
    REPORT_PAIRS,
    StagedRun,
    base_unpublished,
    hub_base,
    looks_like_hub_id,
    model_card,
    original_base,
    redact,
)
from grpo_tools.models.provenance import Provenance, ProvenanceError, read_provenance


__all__ = [
    "ADAPTER_FILES",
    "TOKENIZER_FILES",
    "HubError",
    "PushResult",
    "check_base_model",
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


def check_base_model(name: str) -> None:
    """Refuse a `--base-model` that is not a Hub model id: the card's metadata names it, and the Hub refuses a path."""
    example = "e.g. HuggingFaceTB/SmolLM2-135M-Instruct"
    if os.path.exists(name):
        raise HubError(f"--base-model {name!r}: a local path; name the Hub model that folder was made from, {example}")
    if not looks_like_hub_id(name):
        raise HubError(f"--base-model {name!r}: not a Hub model id; expected owner/name, {example}")


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


# --- staging --------------------------------------------------------------------------------------------------


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
    sources = [adapter_dir]
    if eval_dir is not None:
        eval_path = Path(eval_dir)
        if not eval_path.is_dir():
            raise HubError(f"{eval_path}: no such folder (--eval-dir is the --output-dir of `grpo-tools eval`)")
        if not any(eval_path.glob("*_report.json")) and not any(eval_path.glob("*.png")):
            raise HubError(f"{eval_path}: no *_report.json or *.png to publish")
        if eval_path.resolve() != adapter_dir.resolve():
            sources.append(eval_path)
    run = StagedRun(repo_id, adapter_config, merge)
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
            shutil.copyfile(adapter_dir / name, staging / name)
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
    base_model: str | None = None,
) -> PushResult:
    """Publish a training run's adapter (or, with `merge`, the merged model) with its model card, in one commit.

    `adapter_dir` is the output_dir of `grpo-tools train`; `eval_dir` adds the reports and plots of `grpo-tools
    eval`; `base_model` names the Hub model a local base folder was made from. With `dry_run_dir` the staged files are
    written there and nothing is uploaded. `token` defaults to the saved login or HF_TOKEN; it is never logged or
    written. Raises `HubError`, before any upload, for unusable input; Hub failures propagate as huggingface_hub's
    errors.
    """
    check_adapter(adapter_dir)
    check_repo_id(repo_id)
    if base_model is not None:
        check_base_model(base_model)
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
        files = stage_run(adapter_dir, staging, repo_id, merge=merge, eval_dir=eval_dir, base_model=base_model)
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
    parser.add_argument(
        "--base-model",
        metavar="ID",
        help="the Hub model a local base folder was made from, named as the card's base_model (over its provenance)",
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
            base_model=args.base_model,
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
