"""Pictures of a run: `grpo-tools plot` (training curves) and the accuracy-by-category chart `grpo-tools eval` draws.

The training curves come from trl's logged history (`log_history` in `trainer_state.json`), so any run of
`grpo-tools train` can be drawn after the fact, including one killed mid-way (its newest checkpoint holds the
history up to that step). Figures use matplotlib's object API (`Figure` + the Agg canvas) rather than pyplot: no
global state, no display needed, and matplotlib is imported only when a picture is drawn, so `grpo-tools --help`
stays instant.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from grpo_tools.evaluation.history import (
    COMPONENT_REWARD,
    HistoryError,
    as_float,
    find_trainer_state,
    is_training_entry,
    load_history,
    logged_keys,
    read_kl_target,
    read_state,
    series,
)
from grpo_tools.evaluation.panels import curve, decision_panel, errors_panel, not_logged, rolling_mean


if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = [
    "HistoryError",
    "build_accuracy_figure",
    "build_run_figure",
    "find_trainer_state",
    "load_history",
    "main",
    "plot_accuracy_by_category",
    "plot_run",
    "read_kl_target",
]


DEFAULT_OUTPUT = "training_curves.png"
PANEL_TITLES = (
    "reward", "KL vs target", "KL coefficient", "completion length", "tool-call errors", "decision to call (samples)",
)  # fmt: skip
_COMPONENT_STYLES = ("-", "--", "-.", ":")
_SMOOTH_ABOVE = 60  # logged steps; more are drawn with a rolling mean over the faint raw values
_DPI = 110


def _smoothing_window(history: Sequence[Mapping[str, Any]]) -> int:
    """How many logged steps each drawn point averages: 1 (no smoothing) up to `_SMOOTH_ABOVE` logs, then about
    1/40 of them, so a long run's trend shows through its step-to-step noise."""
    logs = sum(1 for entry in history if is_training_entry(entry))
    return 1 if logs <= _SMOOTH_ABOVE else max(3, logs // 40)


def _reward_panel(ax: Axes, history: Sequence[Mapping[str, Any]], window: int) -> None:
    ax.set_title("reward")
    drawn = False
    steps, values = series(history, "reward")
    if steps:
        curve(ax, steps, values, window, color="black", linewidth=2, label="reward (total)")
        drawn = True
    components = [match.group("name") for key in logged_keys(history) if (match := COMPONENT_REWARD.match(key))]
    for index, name in enumerate(components):
        steps, values = series(history, f"rewards/{name}/mean")
        if steps:
            # Rewards often agree (an exact call also has the right format), so their curves overlap: dashes of
            # different kinds keep each one visible.
            linestyle = _COMPONENT_STYLES[index % len(_COMPONENT_STYLES)]
            curve(ax, steps, values, window, linewidth=1.4, linestyle=linestyle, label=name)
            drawn = True
    if drawn:
        ax.legend(fontsize="small")
    else:
        not_logged(ax, "reward")


def _kl_panel(ax: Axes, history: Sequence[Mapping[str, Any]], kl_target: float | None, window: int) -> None:
    ax.set_title("KL vs target")
    steps, values = series(history, "kl")
    if not steps:
        not_logged(ax, "kl")
        return
    curve(ax, steps, values, window, color="tab:blue", label="KL")
    if kl_target is not None:
        ax.axhline(kl_target, color="tab:red", linestyle="--", linewidth=1.2, label=f"target {kl_target:g}")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize="small")


def _kl_coef_panel(ax: Axes, history: Sequence[Mapping[str, Any]]) -> None:
    ax.set_title("KL coefficient")
    steps, values = series(history, "kl_coef")
    if not steps:
        not_logged(ax, "kl_coef")
        return
    # Never smoothed: the controller's coefficient moves in steps, and those steps are what this panel shows.
    curve(ax, steps, values, 1, color="tab:purple")
    # The adaptive controller moves the coefficient by factors, so a log axis shows its steps evenly; a coefficient
    # of zero (no KL penalty) cannot go on one.
    if all(value > 0 for value in values):
        ax.set_yscale("log")
        _plain_log_labels(ax, min(values), max(values))


def _plain_log_labels(ax: Axes, low: float, high: float) -> None:
    """Label a log y axis with plain numbers (0.02, not 2x10^-2), and label more of the minor ticks the narrower the
    range: a coefficient that stays within one decade would otherwise show one labelled tick, or none."""
    from matplotlib.ticker import FuncFormatter, NullFormatter

    ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    ratio = high / low
    if ratio >= 30:
        ax.yaxis.set_minor_formatter(NullFormatter())
        return
    labelled = range(2, 10) if ratio < 10 else (2, 5)

    def minor(value: float, _: int) -> str:
        leading = round(value / 10 ** math.floor(math.log10(value)), 6)
        return f"{value:g}" if leading in labelled else ""

    ax.yaxis.set_minor_formatter(FuncFormatter(minor))


def _length_panel(ax: Axes, history: Sequence[Mapping[str, Any]], window: int) -> None:
    ax.set_title("completion length")
    steps, values = series(history, "completions/mean_length")
    if not steps:
        not_logged(ax, "completions/mean_length")
        return
    curve(ax, steps, values, window, color="tab:green", linewidth=2, label="mean")
    # The bounds only frame the mean: smoothed without their raw values, which would bury it.
    bounds = {}
    for name in ("min", "max"):
        bound_steps, bound_values = series(history, f"completions/{name}_length")
        bounds[name] = (bound_steps, rolling_mean(bound_values, window))
    for name, (bound_steps, bound_values) in bounds.items():
        if bound_steps:
            ax.plot(bound_steps, bound_values, color="tab:green", linewidth=0.8, linestyle=":", label=name)
    if bounds["min"][0] and bounds["min"][0] == bounds["max"][0]:
        ax.fill_between(bounds["min"][0], bounds["min"][1], bounds["max"][1], color="tab:green", alpha=0.12)
    ax.set_ylabel("tokens")
    # Headroom above the longest completion, so the legend sits over empty space rather than the band.
    top = max(bounds["max"][1] or values)
    ax.set_ylim(0, top * 1.3 if top > 0 else 1)
    ax.legend(fontsize="small", loc="upper center", ncol=3)


def build_run_figure(
    history: Sequence[Mapping[str, Any]], kl_target: float | None = None, title: str | None = None
) -> Figure:
    """The training-curves figure: six panels over `step`, in the order of `PANEL_TITLES`.

    Panels: reward (total and each `rewards/<func>/mean`), KL against `kl_target`, the KL coefficient (log scale),
    completion length (mean, min, max), the tool-call error kinds of one reward (`tool_exact` when logged), and per
    class of row the shares of samples that call and that are right (`decision/...`). A
    metric missing from `history` leaves its panel saying "not logged" rather than failing, since plain trl runs and
    runs with `adaptive_kl: false` log fewer keys. Past 60 logged steps, curves are drawn as a trailing rolling mean
    over the faint logged values (the suptitle says over how many). Returned unsaved, so callers (and tests) can
    inspect the axes.
    """
    from matplotlib.figure import Figure

    figure = Figure(figsize=(14, 14), layout="constrained")
    grid = figure.add_gridspec(4, 2)
    reward_ax = figure.add_subplot(grid[0, 0])
    axes = [
        reward_ax,
        figure.add_subplot(grid[0, 1], sharex=reward_ax),
        figure.add_subplot(grid[1, 0], sharex=reward_ax),
        figure.add_subplot(grid[1, 1], sharex=reward_ax),
        figure.add_subplot(grid[2, :], sharex=reward_ax),  # full width: the panel with the most lines and a legend
        figure.add_subplot(grid[3, :], sharex=reward_ax),
    ]
    window = _smoothing_window(history)
    _reward_panel(axes[0], history, window)
    _kl_panel(axes[1], history, kl_target, window)
    _kl_coef_panel(axes[2], history)
    _length_panel(axes[3], history, window)
    errors_panel(axes[4], history, window)
    decision_panel(axes[5], history, window)
    from matplotlib.ticker import MaxNLocator

    reward_ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # shared by every panel: steps are whole numbers
    for ax in axes:
        ax.set_xlabel("step")
        ax.grid(True, alpha=0.3)
    if window > 1:
        note = f"faint: as logged; solid: mean of the last {window} logged steps"
        title = f"{title}\n{note}" if title else note
    if title:
        figure.suptitle(title, fontsize="large")
    return figure


def _save(figure: Figure, path: Path) -> Path:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(figure)  # attaches itself to the figure: renders without any GUI backend
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=_DPI)
    return path


def plot_run(run_dir: str | os.PathLike[str], output: str | os.PathLike[str] | None = None) -> Path:
    """Draw a run's training curves into one PNG (default `RUN_DIR/training_curves.png`); return its path."""
    run_dir = Path(run_dir)
    state_path = find_trainer_state(run_dir)
    history = read_state(state_path)
    kl_target = read_kl_target(run_dir, state_path)
    last_step = max(int(as_float(entry["step"]) or 0) for entry in history)
    source = "" if state_path.parent == run_dir else f", from {state_path.parent.name}"
    figure = build_run_figure(
        history, kl_target, title=f"{run_dir.resolve().name}: training to step {last_step}{source}"
    )
    return _save(figure, Path(output) if output is not None else run_dir / DEFAULT_OUTPUT)


def plot_accuracy_by_category(
    reports: Mapping[str, Mapping[str, Any]], path: str | os.PathLike[str], title: str | None = None
) -> Path:
    """Grouped bars of accuracy per category, one bar per report, plus an "all" group; saved as a PNG at `path`.

    `reports` maps a label ("before", "after"; "base", "adapter"; or a single one) to a scoring report (its layout: docs/cli.md,
    "`grpo-tools score`"), so a before/after comparison reads at a glance, category by category. Raises `ValueError`
    when `reports` is empty or one of them lacks `accuracy` / `by_category`. Returns the path written.
    """
    return _save(build_accuracy_figure(reports, title), Path(path))


def build_accuracy_figure(reports: Mapping[str, Mapping[str, Any]], title: str | None = None) -> Figure:
    """The figure `plot_accuracy_by_category` saves, unsaved so that callers (and tests) can inspect the bars.

    Bars are drawn label by label (all of the first report's bars, then the second's); each carries its value, and
    the x labels carry each category's row count, since a jump on 4 rows means less than one on 400. A category a
    report never saw gets no bar rather than a misleading zero.
    """
    from matplotlib.figure import Figure

    if not reports:
        raise ValueError("plot_accuracy_by_category needs at least one report")
    for label, report in reports.items():
        by_category = report.get("by_category")
        if (
            not isinstance(report.get("accuracy"), int | float)
            or not isinstance(by_category, dict)
            or not all(isinstance(stats, dict) and "accuracy" in stats for stats in by_category.values())
        ):
            raise ValueError(
                f"report {label!r} is not a scoring report: it needs `accuracy` and `by_category` with an "
                "`accuracy` per category"
            )
    categories = list(dict.fromkeys(name for report in reports.values() for name in report["by_category"]))
    groups = [*categories, "all"]

    def rows_in(group: str) -> int | None:
        for report in reports.values():
            if group == "all":
                rows = report.get("rows")
                return rows.get("data") if isinstance(rows, dict) else None
            if group in report["by_category"]:
                return report["by_category"][group].get("rows")
        return None

    figure = Figure(figsize=(max(7.0, 1.5 + len(groups) * (0.6 + 0.5 * len(reports))), 5), layout="constrained")
    ax = figure.add_subplot()
    width = 0.8 / len(reports)
    for index, (label, report) in enumerate(reports.items()):
        positions, heights = [], []
        for position, group in enumerate(groups):
            stats = report if group == "all" else report["by_category"].get(group)
            if stats is None:
                continue
            positions.append(position + (index - (len(reports) - 1) / 2) * width)
            heights.append(float(stats["accuracy"]))
        bars = ax.bar(positions, heights, width=width * 0.95, label=label)
        # In the bar's colour, so a zero (no bar to see) still says whose it is.
        color = bars.patches[0].get_facecolor() if bars.patches else None
        labels = [f"{height:.2f}" for height in heights]
        ax.bar_label(bars, labels=labels, padding=2, fontsize="small", color=color, fontweight="bold")
    ticks = []
    for group in groups:
        rows = rows_in(group)
        ticks.append(group if rows is None else f"{group}\n(n={rows})")
    ax.set_xticks(range(len(groups)), ticks)
    ax.axvline(len(categories) - 0.5, color="0.6", linewidth=0.8)  # sets "all" apart from the categories
    # The scale runs 0 to 1; the headroom above 1 is for the value label of a perfect bar, hence no top frame line.
    ax.set_ylim(0, 1.1)
    ax.set_yticks([0, 0.2, 0.4, 0.6, 0.8, 1.0])
    ax.spines[["top", "right"]].set_visible(False)
    ax.set_ylabel("accuracy")
    ax.grid(True, axis="y", alpha=0.3)
    ax.set_axisbelow(True)
    # Beside the axes, so it never covers a bar or its label.
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    scorers = list(dict.fromkeys(str(report.get("scorer", "?")) for report in reports.values()))
    figure.suptitle(title or f"accuracy by category (scorer: {' / '.join(scorers)})")
    return figure


def main(argv: list[str]) -> int:
    """`grpo-tools plot RUN_DIR`: draw the run's training curves into one PNG; exit 2 when there is nothing to draw."""
    parser = argparse.ArgumentParser(
        prog="grpo-tools plot",
        description="Draw a training run's reward, KL, KL coefficient, completion length and tool-call error curves "
        "into one PNG, from the history in RUN_DIR/trainer_state.json (or its newest checkpoint's).",
    )
    parser.add_argument("run_dir", metavar="RUN_DIR", help="a `grpo-tools train` output_dir")
    parser.add_argument("--output", help=f"where to write the PNG (default: RUN_DIR/{DEFAULT_OUTPUT})")
    args = parser.parse_args(argv)
    logging.basicConfig(format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("grpo_tools").setLevel(logging.INFO)  # our notes (which checkpoint), not matplotlib's
    output = Path(args.output) if args.output else Path(args.run_dir) / DEFAULT_OUTPUT

    try:
        path = plot_run(args.run_dir, output)
    except HistoryError as error:
        print(f"grpo-tools plot: {error}", file=sys.stderr)
        return 2
    except (OSError, ValueError) as error:  # an unwritable --output, or one whose extension is no image format
        print(f"grpo-tools plot: cannot write {output}: {error}", file=sys.stderr)
        return 2
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
