"""What the terminal shows while training: one compact line per logging step, beside the progress bar.

trl's `GRPOTrainer` logs about fifty metrics at every logging step, and transformers' `ProgressCallback` writes the
whole dictionary under the bar (`PrinterCallback` prints it when the bar is off), so the bar scrolls away between walls
of text. `use_compact_progress` swaps those two callbacks for ones that write a single line a person can follow::

    step 12/32 | reward 1.234 | format 0.906 exact 0.344 partial 0.562 | call rows: call 0.72 right 0.22 |
    no-call rows: call 0.28 | kl 0.0412 coef 0.0213 | 14.2 s/step

(one line in the terminal; the decision fields are each class of row's share of samples that call and that are right;
multi-turn runs add `calls 1.25/rollout failed 0.20 (timeout 0.10 validation 0.10)`, the tool calls per rollout, the
share that failed and the share of each failure kind that happened)

Only what reaches the terminal changes: the full metrics still go to `trainer_state.json` (which `grpo-tools plot`
draws) and to every `report_to` backend, which read the logs through their own callbacks.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping
from typing import Any

from transformers.trainer_callback import PrinterCallback, ProgressCallback


__all__ = ["CompactPrinterCallback", "CompactProgressCallback", "format_log_line", "use_compact_progress"]

logger = logging.getLogger(__name__)


def _number(value: Any, digits: int) -> str | None:
    """`value` to `digits` significant digits, or None when it is not a finite number."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return f"{value:.{digits}g}" if abs(value) < 1e-3 and value != 0 else f"{value:.{digits}f}"


def _reward_name(key: str) -> str:
    """`rewards/tool_exact_reward/mean` -> `exact`; `rewards/outcome_reward/mean` -> `outcome`."""
    name = key[len("rewards/") : -len("/mean")]
    name = name.removeprefix("tool_").removesuffix("_reward")
    return name or key


def _decision_parts(logs: Mapping[str, Any]) -> list[str]:
    """`call rows: call 0.72 right 0.22` and `no-call rows: call 0.28`, from the `decision/` shares logged."""
    parts = []
    for label, prefix, fields in (
        ("call rows", "decision/call_rows/", ("call", "right")),
        ("no-call rows", "decision/no_call_rows/", ("call",)),
    ):
        shares = [f"{field} {text}" for field in fields if (text := _number(logs.get(prefix + field), 2)) is not None]
        if shares:
            parts.append(f"{label}: {' '.join(shares)}")
    return parts


def _tool_parts(logs: Mapping[str, Any]) -> list[str]:
    """`calls 1.25/rollout failed 0.20 (timeout 0.10 validation 0.10)` for multi-turn rollouts: calls per rollout,
    the share of calls that failed and, by kind, each kind's share of calls (kinds that did not happen left out)."""
    calls = _number(logs.get("tools/calls_per_rollout"), 2)
    if calls is None:
        return []
    failed = _number(logs.get("tools/failure_rate"), 2)
    kinds = [
        f"{key.removeprefix('tools/failures/')} {text}"
        for key, value in logs.items()
        if key.startswith("tools/failures/") and value and (text := _number(value, 2)) is not None
    ]
    by_kind = f" ({' '.join(kinds)})" if kinds else ""
    return [f"calls {calls}/rollout failed {failed}{by_kind}"]


def format_log_line(
    logs: Mapping[str, Any], step: int, max_steps: int | None, seconds_per_step: float | None = None
) -> str:
    """One line for one logging step of GRPO: the step, the total reward, each reward function's mean, per class of
    row the shares of samples that call and that are right, the KL and the KL coefficient in force, and seconds per
    step; fields a run did not log are left out.

    >>> logs = {"reward": 1.25, "rewards/tool_exact_reward/mean": 0.5, "kl": 0.04, "kl_coef": 0.02, "loss": 0.1}
    >>> format_log_line(logs, step=3, max_steps=32, seconds_per_step=9.87)
    'step 3/32 | reward 1.250 | exact 0.500 | kl 0.0400 coef 0.0200 | 9.9 s/step'

    A summary log (trainer's `train_runtime` at the end) gets its own line:

    >>> format_log_line({"train_runtime": 388.2, "train_loss": 0.01}, 32, 32)
    'trained 32 steps in 6 min 28 s (12.1 s/step)'
    """
    if "train_runtime" in logs:
        runtime = float(logs["train_runtime"])
        minutes, seconds = divmod(round(runtime), 60)
        duration = f"{minutes} min {seconds} s" if minutes else f"{runtime:.1f} s"
        per_step = f" ({runtime / step:.1f} s/step)" if step > 0 else ""
        return f"trained {step} steps in {duration}{per_step}"
    parts = [f"step {step}/{max_steps}" if max_steps and max_steps > 0 else f"step {step}"]
    reward = _number(logs.get("reward"), 3)
    if reward is not None:
        parts.append(f"reward {reward}")
    rewards = [
        f"{_reward_name(key)} {text}"
        for key, value in logs.items()
        if key.startswith("rewards/") and key.endswith("/mean") and (text := _number(value, 3)) is not None
    ]
    if rewards:
        parts.append(" ".join(rewards))
    parts += _decision_parts(logs) + _tool_parts(logs)
    kl = [
        f"{label} {text}"
        for label, key in (("kl", "kl"), ("coef", "kl_coef"))
        if (text := _number(logs.get(key), 4)) is not None
    ]
    if kl:
        parts.append(" ".join(kl))
    if reward is None and not rewards and not kl:  # not a GRPO training step (an evaluation, a custom log)
        loss = _number(logs.get("loss"), 4)
        if loss is not None:
            parts.append(f"loss {loss}")
    if seconds_per_step is not None:
        parts.append(f"{seconds_per_step:.1f} s/step")
    return " | ".join(parts)


class _StepClock:
    """Wall seconds per optimizer step between two logging steps (everything a person waits for: sampling, rewards,
    passes, the optimizer)."""

    def __init__(self) -> None:
        self.time: float | None = None
        self.step = 0

    def start(self, step: int) -> None:
        self.time, self.step = time.perf_counter(), step

    def lap(self, step: int) -> float | None:
        now = time.perf_counter()
        seconds = (now - self.time) / (step - self.step) if self.time is not None and step > self.step else None
        self.time, self.step = now, step
        return seconds


class CompactProgressCallback(ProgressCallback):
    """transformers' progress bar, with one compact line per logging step written above it instead of the dict."""

    def __init__(self) -> None:
        super().__init__()
        self.clock = _StepClock()

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        super().on_train_begin(args, state, control, **kwargs)
        self.clock.start(state.global_step)

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any) -> None:
        if not state.is_world_process_zero or self.training_bar is None or not logs:
            return
        seconds = self.clock.lap(state.global_step)
        self.training_bar.write(format_log_line(logs, state.global_step, state.max_steps, seconds))


class CompactPrinterCallback(PrinterCallback):
    """For runs without a progress bar (`disable_tqdm`): the same compact line, through `logging`."""

    def __init__(self) -> None:
        super().__init__()
        self.clock = _StepClock()

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.clock.start(state.global_step)

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any) -> None:
        if not state.is_local_process_zero or not logs:
            return
        seconds = self.clock.lap(state.global_step)
        logger.info(format_log_line(logs, state.global_step, state.max_steps, seconds))


def use_compact_progress(trainer: Any) -> Any:
    """Swap `trainer`'s dict-printing callbacks (`ProgressCallback`, `PrinterCallback`) for the compact ones; returns
    the trainer. A trainer that has neither (a caller removed them) is left as it is."""
    for printer, compact in ((ProgressCallback, CompactProgressCallback), (PrinterCallback, CompactPrinterCallback)):
        if trainer.pop_callback(printer) is not None:
            trainer.add_callback(compact())
    return trainer
