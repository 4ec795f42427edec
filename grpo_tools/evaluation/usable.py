"""Whether a model could be put in front of users, on BFCL's rows: it must call where a call is right and abstain
where none is, so neither "always call" nor "never call" wins (docs/rewards.md, "BFCL evaluation").

- calls: the mean accuracy of the call categories (every one but the irrelevance ones; on `make train`'s rows,
  simple_python and multiple);
- irrelevance: the mean accuracy of the irrelevance categories (abstaining where no offered tool fits);
- usable: the mean of calls and irrelevance. A model that never calls scores 0 and 100: usable is exactly 50.

Each figure is a weighted sum of category accuracies over disjoint sets of rows. Its 95% interval is the normal
approximation of that sum, the categories independent: each category's variance is p(1 - p) / n with p and n taken
from its counts with z²/2 right and z²/2 wrong rows added (Agresti and Coull, 1998), so that a category at 0 or 100%
still carries the sampling error of its n rows; the interval is clipped to [0, 1]. A change between two runs of the
same rows pairs them by id: each row's change (1, 0 or -1), the variance of those changes per category, weighted the
same way (as `leaderboard.change_interval`).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping
from decimal import ROUND_HALF_EVEN, Decimal
from typing import Any


__all__ = [
    "MEASURES",
    "change_measures",
    "format_measures",
    "measure_weights",
    "model_measures",
    "published_measures",
    "usable_summary",
]

MEASURES = ("calls", "irrelevance", "usable")
Z_95 = statistics.NormalDist().inv_cdf(0.975)
DEFINITION = (
    "calls = mean accuracy of the call categories (simple_python, multiple); irrelevance = abstaining where no offered "
    "tool fits; usable = mean of calls and irrelevance (a model that never calls scores exactly 50)"
)
INTERVAL = (
    "95%: normal approximation of the weighted mean of category accuracies (disjoint rows, independent), each "
    "category's variance from its counts with z^2/2 right and z^2/2 wrong rows added (Agresti-Coull), clipped to "
    "[0, 1]; a change pairs the rows by id"
)
PUBLISHED_NOTE = (
    "approximate: the leaderboard's simple averages Python, Java and JavaScript, where ours is simple_python alone"
)


def _category(row_id: Any) -> str:
    """The BFCL category an id names (`simple_python_17` -> `simple_python`)."""
    return str(row_id).rsplit("_", 1)[0]


def measure_weights(categories: Iterable[str]) -> dict[str, dict[str, float]]:
    """Each measure's weight on each category's accuracy; a measure whose categories are absent is left out.

    >>> measure_weights(["simple_python", "multiple", "irrelevance"])["usable"]
    {'simple_python': 0.25, 'multiple': 0.25, 'irrelevance': 0.5}
    """
    names = list(dict.fromkeys(categories))
    calls = [name for name in names if "irrelevance" not in name]
    abstain = [name for name in names if "irrelevance" in name]
    weights: dict[str, dict[str, float]] = {}
    if calls:
        weights["calls"] = {name: 1 / len(calls) for name in calls}
    if abstain:
        weights["irrelevance"] = {name: 1 / len(abstain) for name in abstain}
    if calls and abstain:
        weights["usable"] = {name: 1 / (2 * len(calls)) for name in calls} | {
            name: 1 / (2 * len(abstain)) for name in abstain
        }
    return weights


def _counts(verdicts: Iterable[Mapping[str, Any]]) -> dict[str, tuple[int, int]]:
    """Per category, (correct rows, rows) of `score --per-row` verdicts."""
    counts: dict[str, list[int]] = {}
    for verdict in verdicts:
        totals = counts.setdefault(_category(verdict["id"]), [0, 0])
        totals[0] += bool(verdict["correct"])
        totals[1] += 1
    return {name: (correct, rows) for name, (correct, rows) in counts.items()}


def model_measures(verdicts: Iterable[Mapping[str, Any]]) -> dict[str, list[float]]:
    """One run's calls, irrelevance and usable from its `score --per-row` verdicts, each `[value, low, high]` (a
    fraction and its 95% interval)."""
    counts = _counts(verdicts)
    measures = {}
    for name, weights in measure_weights(counts).items():
        value = sum(weight * counts[category][0] / counts[category][1] for category, weight in weights.items())
        variance = 0.0
        for category, weight in weights.items():
            correct, rows = counts[category]
            adjusted = (correct + Z_95**2 / 2) / (rows + Z_95**2)  # Agresti-Coull
            variance += weight**2 * adjusted * (1 - adjusted) / (rows + Z_95**2)
        error = Z_95 * math.sqrt(variance)
        measures[name] = [value, max(0.0, value - error), min(1.0, value + error)]
    return measures


def change_measures(
    before: Iterable[Mapping[str, Any]], after: Iterable[Mapping[str, Any]]
) -> dict[str, list[float] | None]:
    """The 95% interval of each measure's change from `before` to `after`, rows paired by id (the callers check that
    both cover the same rows); None where a category has fewer than two rows to measure its spread by."""
    later = {verdict["id"]: bool(verdict["correct"]) for verdict in after}
    changes: dict[str, list[int]] = {}
    for verdict in before:
        change = int(later[verdict["id"]]) - int(bool(verdict["correct"]))
        changes.setdefault(_category(verdict["id"]), []).append(change)
    intervals: dict[str, list[float] | None] = {}
    for name, weights in measure_weights(changes).items():
        if any(len(changes[category]) < 2 for category in weights):
            intervals[name] = None
            continue
        mean = sum(weight * statistics.fmean(changes[category]) for category, weight in weights.items())
        variance = sum(
            weight**2 * statistics.variance(changes[category]) / len(changes[category])
            for category, weight in weights.items()
        )
        error = Z_95 * math.sqrt(variance)
        intervals[name] = [round(mean - error, 4), round(mean + error, 4)]
    return intervals


def published_measures(published: Mapping[str, Mapping[str, float]]) -> dict[str, dict[str, float]]:
    """Calls, irrelevance and usable (%) of published leaderboard rows (`{"simple", "multiple", "irrelevance"}`)."""
    figures = {}
    for model, row in published.items():
        calls = (row["simple"] + row["multiple"]) / 2
        usable = (calls + row["irrelevance"]) / 2
        # Published tenths, averaged twice, are exact in thousandths (66.95, not 66.94999999999999).
        figures[model] = {"calls": round(calls, 3), "irrelevance": row["irrelevance"], "usable": round(usable, 3)}
    return figures


def usable_summary(
    runs: Mapping[str, list[dict[str, Any]] | None],
    published: Mapping[str, Mapping[str, float]],
    source: str,
) -> dict[str, Any]:
    """`bfcl_summary.json`'s `usable`: what the figures mean, each run's measures (runs given as None are left out),
    the intervals of the change from "warm start" to "after GRPO", and the published rows with their source."""
    return {
        "definition": DEFINITION,
        "interval": INTERVAL,
        "models": {label: model_measures(rows) for label, rows in runs.items() if rows is not None},
        "change_95": change_measures(runs["warm start"] or [], runs["after GRPO"] or []),
        "published": {"source": source, "note": PUBLISHED_NOTE, "models": published_measures(published)},
    }


def format_measures(usable: Mapping[str, Any]) -> str:
    """The table a user reads: each run's calls, irrelevance and usable in % with their 95% intervals, the change
    from the warm start to after GRPO, and the published small models below."""
    models, published = usable["models"], usable.get("published", {})
    names = [name for name in MEASURES if any(name in figures for figures in models.values())]
    label_width = max(len("change (GRPO)"), *map(len, models), *map(len, published.get("models", {})))
    width = len("100.0 [100.0, 100.0]")

    def line(label: str, cells: list[str]) -> str:
        return (label.ljust(label_width) + "".join(f"  {cell:<{width}}" for cell in cells)).rstrip()

    def cell(figure: list[float] | None) -> str:
        return "–" if figure is None else f"{100 * figure[0]:.1f} [{100 * figure[1]:.1f}, {100 * figure[2]:.1f}]"

    lines = [f"BFCL, % with 95% intervals: {DEFINITION}", line("", names)]
    lines += [line(label, [cell(figures.get(name)) for name in names]) for label, figures in models.items()]
    changes = usable.get("change_95") or {}
    if changes and {"warm start", "after GRPO"} <= set(models):
        deltas = [
            None if changes.get(name) is None else models["after GRPO"][name][0] - models["warm start"][name][0]
            for name in names
        ]
        cells = [
            "–" if delta is None else f"{100 * delta:+.1f} [{100 * changes[n][0]:+.1f}, {100 * changes[n][1]:+.1f}]"
            for delta, n in zip(deltas, names, strict=True)
        ]
        lines.append(line("change (GRPO)", cells))
    if published:
        lines.append(f"published ({published['source']}; {published['note']}):")
        for model, figures in published["models"].items():
            # The exact decimal (66.95), rounded half to even: a float's binary error would round some down.
            decimals = [Decimal(str(figures[name])).quantize(Decimal("0.1"), ROUND_HALF_EVEN) for name in names]
            lines.append(line(model, [str(value) for value in decimals]))
    return "\n".join(lines)
