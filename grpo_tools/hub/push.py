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

The staging lives in `grpo_tools.hub.staging`, the card in `grpo_tools.hub.card`.
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
from huggingface_hub.errors import HfHubHTTPError, HFValidationError
from huggingface_hub.utils import validate_repo_id

from grpo_tools.hub.card import (
    REPORT_PAIRS,
    looks_like_hub_id,
)
from grpo_tools.hub.staging import ADAPTER_FILES, HUB_ERRORS, TOKENIZER_FILES, HubError, check_adapter, stage_run


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


@dataclass(frozen=True)
class PushResult:
    """What a push published (or a dry run staged): the repo paths, and where to find them."""

    files: tuple[str, ...]  # paths in the repo, sorted
    folder: Path | None  # the dry-run folder; None after a real push, whose staging folder was temporary
    url: str | None  # the commit's URL after a real push


# --- checks ---------------------------------------------------------------------------------------------------


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


# --- staging --------------------------------------------------------------------------------------------------


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
    except HUB_ERRORS as error:  # the network, or the local disk while staging
        print(f"grpo-tools push: {error}", file=sys.stderr)
        return 1
    listing = "\n".join(f"  {name}" for name in result.files)
    if result.folder is not None:
        print(f"dry run: {len(result.files)} files staged in {result.folder}, nothing uploaded:\n{listing}")
    else:
        print(f"pushed {len(result.files)} files to {args.repo_id}: {result.url}\n{listing}")
    return 0
