"""`grpo-tools eval --cache-dir`: greedy completions kept and reused while nothing that makes them has changed.

The base model's evaluation that `make train` prints first is the same model on the same rows with the same decoding
every run; greedy decoding makes the same completions from the same inputs on the same software and CPU, so they are
kept under a key and the report is scored again from them. The key is the SHA-256 of every part below; any part that
changes gives another key, and the completions are generated afresh:

- the model folder's files and the adapter folder's files (their bytes, names and sizes),
- the rows as read, and the prompts the chat template rendered from them (template and tools included),
- the decoding settings (`max_new_tokens`, `batch_size`, temperature, samples, top-p, seed),
- the label (`base` with an adapter is the adapter's model with the adapter switched off),
- the device, dtype, the CPU's kernel level and torch's thread count (other kernels round differently),
- the versions of grpo-tools, torch, transformers and peft, and the source of the generation code (`fastpath/`,
  `evaluation/generation.py`), whose changes within one version would otherwise go unseen.

Only greedy single-sample evaluations of local folders on single-turn rows, without vLLM, are kept. Each label's
status is written beside its report as `<label>_cache.json` (`computed` or `reused`, with the key), which the BFCL
table (`evaluation.leaderboard table --base`) prints; an evaluation without the cache removes a stale one.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any


__all__ = ["CacheEntry", "cache_note", "folder_digest", "lookup", "record"]

logger = logging.getLogger(__name__)

_CHUNK = 1 << 22


@dataclass
class CacheEntry:
    """One label's key, its parts, the completions found under it (None: not found, to be generated), and which rows
    the chat template rendered (the others get no completion)."""

    key: str
    parts: dict[str, Any]
    completions: list[str | None] | None
    rendered: list[bool]


def folder_digest(folder: str | os.PathLike[str], skip: Path | None = None) -> str:
    """SHA-256 over every file under `folder` (relative name, size and bytes, in name order), `skip` and what is under
    it left out (a cache kept inside the folder)."""
    root = Path(folder).resolve()
    skip = skip.resolve() if skip is not None else None
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        if skip is not None and (path == skip or skip in path.parents):
            continue
        digest.update(f"{path.relative_to(root).as_posix()}\0{path.stat().st_size}\0".encode())
        with path.open("rb") as handle:
            while chunk := handle.read(_CHUNK):
                digest.update(chunk)
    return digest.hexdigest()


def _text_digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def _code_digest() -> str:
    """The source of the code that generates: the fast path and evaluation's generation."""
    from grpo_tools import fastpath
    from grpo_tools.evaluation import generation

    files = [*sorted(Path(fastpath.__file__).parent.glob("*.py")), Path(generation.__file__)]
    return hashlib.sha256(b"".join(path.read_bytes() for path in files)).hexdigest()


def _environment(args: argparse.Namespace) -> dict[str, Any]:
    from importlib.metadata import version

    import peft
    import torch
    import transformers

    device = args.device if args.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    return {
        "device": device,
        "dtype": "bfloat16" if device.startswith("cuda") else "float32",  # as `evaluate._load` chooses
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "threads": torch.get_num_threads(),
        "versions": {
            "grpo_tools": version("grpo-tools"),
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "peft": peft.__version__,
        },
        "code": _code_digest(),
    }


def _why_not(args: argparse.Namespace, temperature: float, multi_turn: bool) -> str | None:
    if args.vllm or multi_turn or temperature != 0 or args.num_samples != 1:
        return "only greedy single-sample evaluations of single-turn rows without vLLM are cached"
    if not Path(args.model).is_dir() or (args.adapter and not Path(args.adapter).is_dir()):
        return "only local model and adapter folders are cached"
    return None


def lookup(
    args: argparse.Namespace, rows: list[dict[str, Any]], labels: list[str], temperature: float, multi_turn: bool
) -> dict[str, CacheEntry]:
    """Each label's cache entry under `args.cache_dir` (completions None where none is kept); {} without a cache
    directory or where the evaluation is not one the cache keeps (logged)."""
    if not args.cache_dir:
        return {}
    reason = _why_not(args, temperature, multi_turn)
    if reason:
        logger.warning("--cache-dir: not used: %s", reason)
        return {}
    from grpo_tools.evaluation.generation import row_prompts
    from grpo_tools.models.loading import load_tokenizer

    cache_dir = Path(args.cache_dir)
    has_tokenizer = bool(args.adapter) and Path(args.adapter, "tokenizer_config.json").is_file()
    prompts, _ = row_prompts(load_tokenizer(args.adapter if has_tokenizer else args.model), rows)
    shared = {
        "model": folder_digest(args.model, skip=cache_dir),
        "adapter": folder_digest(args.adapter, skip=cache_dir) if args.adapter else None,
        "rows": _text_digest(rows),
        "prompts": _text_digest(prompts),
        "decoding": {
            "max_new_tokens": args.max_new_tokens,
            "batch_size": args.batch_size,
            "temperature": temperature,
            "num_samples": args.num_samples,
            "top_p": args.top_p,
            "seed": args.seed,
        },
        **_environment(args),
    }
    entries = {}
    for label in labels:
        parts = {"label": label, **shared}
        key = _text_digest(parts)
        rendered = [prompt is not None for prompt in prompts]
        entries[label] = CacheEntry(key, parts, _read(cache_dir / f"{key}.json", parts, len(rows)), rendered)
    return entries


def _read(path: Path, parts: dict[str, Any], rows: int) -> list[str | None] | None:
    """The completions kept at `path`, or None where there are none; a damaged or foreign file is logged and
    generated over."""
    if not path.is_file():
        return None
    try:
        kept = json.loads(path.read_text(encoding="utf-8"))
        completions = kept["completions"]
        usable = kept["parts"] == parts and isinstance(completions, list) and len(completions) == rows
    except (OSError, ValueError, KeyError, TypeError) as error:
        logger.warning("%s: unreadable cache entry (%s); generating again", path, error)
        return None
    if not usable:
        logger.warning("%s: cache entry does not match its key; generating again", path)
        return None
    return completions


def record(args: argparse.Namespace, entry: CacheEntry | None, label: str) -> None:
    """After a label's evaluation: keep its freshly generated completions (its `<label>_predictions.jsonl`, one line
    per rendered row, in order) under its key, and write `<label>_cache.json` beside its report (removed where the
    evaluation ran without the cache)."""
    note_path = Path(args.output_dir, f"{label}_cache.json")
    if entry is None:
        note_path.unlink(missing_ok=True)
        return
    status = "reused" if entry.completions is not None else "computed"
    if status == "computed":
        lines = Path(args.output_dir, f"{label}_predictions.jsonl").read_text(encoding="utf-8").splitlines()
        predicted = iter(json.loads(line)["completion"] for line in lines)
        completions = [next(predicted) if rendered else None for rendered in entry.rendered]
        path = Path(args.cache_dir, f"{entry.key}.json")
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
        partial.write_text(json.dumps({"parts": entry.parts, "completions": completions}), encoding="utf-8")
        partial.replace(path)  # whole or absent, for a reader at the same time
    logger.info("%s: completions %s (cache key %s, %s)", label, status, entry.key, args.cache_dir)
    note = {"status": status, "key": entry.key, "cache_dir": str(args.cache_dir)}
    note_path.write_text(json.dumps(note, indent=2) + "\n", encoding="utf-8")


def cache_note(rows_path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """What the cache did for the evaluation whose per-row verdicts are `rows_path` (`<label>_rows.jsonl`): its
    `<label>_cache.json` (status and key), or None where it ran without the cache."""
    path = Path(rows_path)
    note = path.with_name(path.name.removesuffix("_rows.jsonl") + "_cache.json")
    if not path.name.endswith("_rows.jsonl") or not note.is_file():
        return None
    return json.loads(note.read_text(encoding="utf-8"))
