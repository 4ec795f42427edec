"""A training run's logged history, as `grpo-tools plot` reads it: trl's `log_history` in `trainer_state.json`, from the
run folder or, for a run killed mid-way, its newest checkpoint; and the series of one metric over the steps."""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any


__all__ = [
    "COMPONENT_REWARD",
    "STATE_FILE",
    "HistoryError",
    "as_float",
    "find_trainer_state",
    "is_training_entry",
    "load_history",
    "logged_keys",
    "read_kl_target",
    "read_state",
    "series",
]

logger = logging.getLogger(__name__)


STATE_FILE = "trainer_state.json"


_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")
COMPONENT_REWARD = re.compile(r"^rewards/(?P<name>.+)/mean$")


# Keys whose presence marks a log entry as a training step (rather than the end-of-run summary or an eval entry).
_TRAINING_KEYS = ("loss", "reward", "kl", "kl_coef", "completions/mean_length")


class HistoryError(ValueError):
    """A run folder with nothing to draw: missing, without a trainer state, or without training metrics."""


def find_trainer_state(run_dir: str | os.PathLike[str]) -> Path:
    """The `trainer_state.json` to read for a run: the final one, else the newest checkpoint's.

    `grpo-tools train` saves the final state only when training ends; a run killed mid-way still has its
    checkpoints, each with the history up to its step. "Newest" is by step number (`checkpoint-20` after
    `checkpoint-3`), never by name.
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise HistoryError(f"{run_dir}: no such run folder")
    final = run_dir / STATE_FILE
    if final.is_file():
        return final
    checkpoints = [
        (int(match.group(1)), child)
        for child in run_dir.iterdir()
        if (match := _CHECKPOINT.match(child.name)) and (child / STATE_FILE).is_file()
    ]
    if not checkpoints:
        raise HistoryError(
            f"{run_dir}: no {STATE_FILE} here nor in any checkpoint-*/ folder; is this a `grpo-tools train` output_dir?"
        )
    step, newest = max(checkpoints)
    logger.info(
        "%s has no %s (written when `grpo-tools train` ends); drawing checkpoint-%d's history",
        run_dir,
        STATE_FILE,
        step,
    )
    return newest / STATE_FILE


def is_training_entry(entry: Mapping[str, Any]) -> bool:
    return any(key in entry for key in _TRAINING_KEYS) or any(COMPONENT_REWARD.match(key) for key in entry)


def read_state(path: Path) -> list[dict[str, Any]]:
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise HistoryError(f"{path}: cannot read it as JSON ({error})") from None
    history = state.get("log_history") if isinstance(state, dict) else None
    if not isinstance(history, list):
        raise HistoryError(f"{path}: no `log_history` list; not a transformers trainer state")
    history = [entry for entry in history if isinstance(entry, dict) and "step" in entry]
    if not any(is_training_entry(entry) for entry in history):
        raise HistoryError(
            f"{path}: the logged history has no training metrics (did the run stop before its first logging step?)"
        )
    return history


def load_history(run_dir: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The logged history of a training run: one dict per logging event, each with `step` and its metrics.

    This is trl's `log_history` as `trainer.save_state()` writes it (falling back to the newest checkpoint for an
    unfinished run; see `find_trainer_state`), so the keys are trl's (`reward`, `rewards/<func>/mean`, `kl`,
    `completions/mean_length`, ...) plus ours (`kl_coef`, `<reward>/<error kind>`). Entries without `step` are
    dropped. Raises `HistoryError` naming the path when there is nothing to draw.
    """
    return read_state(find_trainer_state(run_dir))


def read_kl_target(run_dir: str | os.PathLike[str], state_path: str | os.PathLike[str] | None = None) -> float | None:
    """The KL target the run was trained towards, or None when it was not recorded.

    `run_info.json` (written when training ends) has it as `kl.kl_target`; an unfinished run has only checkpoints,
    whose `kl_controller.json` (saved next to `state_path`) holds the controller's `target`.
    """
    candidates = [(Path(run_dir) / "run_info.json", ("kl", "kl_target"))]
    if state_path is not None:
        candidates.append((Path(state_path).parent / "kl_controller.json", ("target",)))
    for path, keys in candidates:
        if not path.is_file():
            continue
        try:
            value: Any = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
            raise HistoryError(f"{path}: cannot read it as JSON ({error})") from None
        for key in keys:
            value = value.get(key) if isinstance(value, dict) else None
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
    return None


def as_float(value: Any) -> float | None:
    """A logged value as a float: trainer_state.json has numbers, but hand-made histories may hold strings."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


def series(history: Sequence[Mapping[str, Any]], key: str) -> tuple[list[float], list[float]]:
    """(steps, values) of one metric, over the entries that logged it."""
    steps, values = [], []
    for entry in history:
        value = as_float(entry.get(key))
        step = as_float(entry.get("step"))
        if value is not None and step is not None:
            steps.append(step)
            values.append(value)
    return steps, values


def logged_keys(history: Sequence[Mapping[str, Any]]) -> list[str]:
    """Every metric name in the history, in order of first appearance."""
    return list(dict.fromkeys(key for entry in history for key in entry))
