"""Panels of the training-curves figure that `grpo_tools.evaluation.plot` lays out, and the drawing they share: a
metric as logged or smoothed (`curve`), the tool-call error kinds of one reward (`errors_panel`) and the decision to
call per class of row (`decision_panel`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from grpo_tools.evaluation.history import logged_keys, series
from grpo_tools.rewards import ERROR_KINDS


if TYPE_CHECKING:
    from matplotlib.axes import Axes

__all__ = ["DECISION_SERIES", "curve", "decision_panel", "errors_panel", "not_logged", "rolling_mean"]

_ERROR_KIND = re.compile(r"^(?P<prefix>[^/]+)/(?P<kind>" + "|".join(ERROR_KINDS) + r")$")
_PREFERRED_ERROR_PREFIX = "tool_exact"
# The decision to call, as the trainer logs it: (key, label, colour, line style).
DECISION_SERIES = (
    ("decision/call_rows/call", "call rows: call", "tab:blue", "-"),
    ("decision/call_rows/right", "call rows: right", "tab:blue", "--"),
    ("decision/no_call_rows/call", "no-call rows: call", "tab:red", "-"),
)


def not_logged(ax: Axes, what: str) -> None:
    ax.text(0.5, 0.5, f"{what} not logged", transform=ax.transAxes, ha="center", va="center", color="0.4")


def rolling_mean(values: Sequence[float], window: int) -> list[float]:
    """Trailing mean over `window` values (fewer at the start), so a curve never looks ahead of its step."""
    means, total = [], 0.0
    for index, value in enumerate(values):
        total += value
        if index >= window:
            total -= values[index - window]
        means.append(total / min(index + 1, window))
    return means


def curve(ax: Axes, steps: list[float], values: list[float], window: int, **style: Any) -> None:
    """One metric: as logged when short (with markers: a single point would otherwise be invisible); when
    smoothed, the logged values faint and their rolling mean in full, in the same colour, carrying the label."""
    if window <= 1:
        if len(steps) <= 40:
            style = {"marker": "o", "markersize": 3, **style}
        ax.plot(steps, values, **style)
        return
    (raw,) = ax.plot(steps, values, alpha=0.25, linewidth=0.8, label="_nolegend_", color=style.get("color"))
    ax.plot(steps, rolling_mean(values, window), **{**style, "color": raw.get_color()})


def _error_prefix(history: Sequence[Mapping[str, Any]]) -> str | None:
    """Whose error kinds to draw: `tool_exact`'s when logged (the strictest, most telling), else the first reward's."""
    prefixes = [match.group("prefix") for key in logged_keys(history) if (match := _ERROR_KIND.match(key))]
    if not prefixes:
        return None
    return _PREFERRED_ERROR_PREFIX if _PREFERRED_ERROR_PREFIX in prefixes else prefixes[0]


def errors_panel(ax: Axes, history: Sequence[Mapping[str, Any]], window: int) -> None:
    prefix = _error_prefix(history)
    if prefix is None:
        ax.set_title("tool-call errors")
        not_logged(ax, "tool-call error kinds")
        return
    ax.set_title(f"tool-call errors ({prefix})")
    drawn = False
    for kind in ERROR_KINDS:
        steps, values = series(history, f"{prefix}/{kind}")
        if steps and any(value != 0 for value in values):  # a kind that never happened is only clutter
            curve(ax, steps, values, window, label=kind.replace("_", " "))
            drawn = True
    if not drawn:
        ax.text(0.5, 0.5, "no errors at any step", transform=ax.transAxes, ha="center", va="center", color="0.4")
        return
    ax.set_ylabel("share of completions")
    ax.set_ylim(bottom=0)
    # Outside the axes: up to nine kinds would otherwise sit on the curves.
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)


def decision_panel(ax: Axes, history: Sequence[Mapping[str, Any]], window: int) -> None:
    """Per class of row, the share of samples that call and (call rows) that are right, step by step: the decision
    moving before any evaluation shows it."""
    ax.set_title("decision to call (samples)")
    drawn = False
    for key, label, color, linestyle in DECISION_SERIES:
        steps, values = series(history, key)
        if steps:
            curve(ax, steps, values, window, color=color, linestyle=linestyle, linewidth=1.6, label=label)
            drawn = True
    if not drawn:
        not_logged(ax, "decision/ shares")
        return
    ax.set_ylabel("share of samples")
    ax.set_ylim(-0.02, 1.02)
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
