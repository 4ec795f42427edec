"""The before/after comparison `grpo-tools eval --compare-base` and `grpo-tools train` print: accuracy by category,
pass@k, mean rewards, multi-turn tool use, the arguments most often wrong and error kinds, one table each."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


__all__ = ["print_comparison", "write_comparison"]


def print_comparison(reports: dict[str, dict[str, Any]], title: str | None = None) -> None:
    """Accuracy per category for each labelled report side by side, with the change from the first to the last."""
    from rich.console import Console
    from rich.table import Table

    labels = list(reports)
    first, last = reports[labels[0]], reports[labels[-1]]
    table = Table(title=title or f"tool-call accuracy ({last['scorer']})")
    columns = ["category", "rows", *labels] + (["change"] if len(labels) > 1 else [])
    for column in columns:
        table.add_column(column, justify="left" if column == "category" else "right")
    categories: dict[str, Any] = {}
    for report in reports.values():
        categories.update(report["by_category"])
    for category, totals in categories.items():
        values = [report["by_category"].get(category, {}).get("accuracy", 0.0) for report in reports.values()]
        change = [f"{values[-1] - values[0]:+.3f}"] if len(labels) > 1 else []
        table.add_row(category, str(totals["rows"]), *(f"{value:.3f}" for value in values), *change)
    values = [report["accuracy"] for report in reports.values()]
    change = [f"{values[-1] - values[0]:+.3f}"] if len(labels) > 1 else []
    table.add_row("all", str(last["rows"]["data"]), *(f"{value:.3f}" for value in values), *change, style="bold")
    console = Console()
    console.print(table)
    if all("overall" in report for report in reports.values()):  # BFCL's multi-turn column: the categories' mean
        console.print("BFCL multi-turn overall: " + ", ".join(f"{k} {r['overall']:.3f}" for k, r in reports.items()))
        if any(report.get("decoder") == "grpo-tools" for report in reports.values()):
            console.print("(calls read by grpo-tools' parser: not BFCL's prompting figure; docs/multi-turn.md)")
    if "sampling" in last:
        sampling = Table(title=f"pass@k over {last['sampling']['num_samples']} samples per row")
        keys = [key for key in last["sampling"] if key.startswith("pass@")]
        for column in ["", *keys]:
            sampling.add_column(column, justify="left" if not column else "right")
        for label, report in reports.items():
            if "sampling" in report:
                sampling.add_row(label, *(f"{report['sampling'][key]:.3f}" for key in keys))
        console.print(sampling)
    rewards = Table(title="mean reward")
    for column in ["", *first.get("rewards", {})]:
        rewards.add_column(column.removeprefix("tool_"), justify="left" if not column else "right")
    for label, report in reports.items():
        if "rewards" in report:
            rewards.add_row(label, *(f"{value:.3f}" for value in report["rewards"].values()))
    if first.get("rewards"):
        console.print(rewards)
    if all("tools" in report for report in reports.values()):  # multi-turn: what happened when the tools ran
        tools = Table(title="tool use per rollout (multi-turn)")
        for column in ["", *labels]:
            tools.add_column(column, justify="left" if not column else "right")
        measures = {
            "call accuracy": lambda report: report["call_accuracy"],
            "calls per rollout": lambda report: report["tools"]["calls_per_rollout"],
            "turns per rollout": lambda report: report["tools"]["turns"],
            "failures per call": lambda report: report["tools"]["failure_rate"],
            **{
                f"  {kind}": (lambda report, kind=kind: report["tools"]["failures"][kind])
                for kind in last["tools"]["failures"]
            },
        }
        for name, measure in measures.items():
            tools.add_row(name, *(f"{measure(report):.3f}" for report in reports.values()))
        console.print(tools)
    _print_arguments(console, reports)
    errors = sorted({kind for report in reports.values() for kind in report["errors"]})
    if errors:
        table = Table(title="rows with each error kind")
        for column in ["error", *labels]:
            table.add_column(column, justify="left" if column == "error" else "right")
        for kind in errors:
            table.add_row(kind, *(str(report["errors"].get(kind, 0)) for report in reports.values()))
        console.print(table)


def write_comparison(before: dict[str, Any], after: dict[str, Any], output_dir: str | Path) -> None:
    """After training: print the before/after tables, draw accuracy by category, write `eval_summary.json`, and on
    BFCL rows (every id names a BFCL category) `bfcl_summary.json` with its table, accuracy per BFCL category as
    BFCL's own checker gives it (read from `evaluate_model`'s `before_rows.jsonl` and `after_rows.jsonl`)."""
    from grpo_tools.evaluation.leaderboard import bfcl_summary, format_summary, is_bfcl, read_verdicts
    from grpo_tools.evaluation.plot import plot_accuracy_by_category

    reports = {"before": before, "after": after}
    print_comparison(reports, title=f"held-out tool-call accuracy ({after['scorer']}), before and after GRPO")
    plot_accuracy_by_category(reports, Path(output_dir, "accuracy_by_category.png"))
    summary = {"before": before["accuracy"], "after": after["accuracy"], "scorer": after["scorer"]}
    Path(output_dir, "eval_summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    verdicts = [Path(output_dir, f"{label}_rows.jsonl") for label in reports]
    if not all(path.is_file() for path in verdicts):
        return
    if not is_bfcl([json.loads(line) for line in verdicts[0].read_text().splitlines()]):
        return
    bfcl = bfcl_summary(read_verdicts(verdicts[0]), read_verdicts(verdicts[1]))
    Path(output_dir, "bfcl_summary.json").write_text(json.dumps(bfcl, indent=2) + "\n")
    print(f"BFCL accuracy (%, BFCL's own rules), warm start and after GRPO; {Path(output_dir, 'bfcl_summary.json')}")
    print(format_summary(bfcl))


def _print_arguments(console: Any, reports: dict[str, dict[str, Any]], limit: int = 8) -> None:
    """The arguments most often wrong in the last report, as `wrong / checked` for every report."""
    from rich.table import Table

    last = list(reports.values())[-1].get("arguments") or {}
    shown = [argument for argument, counts in last.items() if counts["wrong"]][:limit]
    if not shown:
        return
    table = Table(title="wrong values by argument (wrong / calls to the right tool)")
    for column in ["argument", *reports]:
        table.add_column(column, justify="left" if column == "argument" else "right")
    for argument in shown:
        cells = []
        for report in reports.values():
            counts = report.get("arguments", {}).get(argument)
            cells.append(f"{counts['wrong']} / {counts['checked']}" if counts else "-")
        table.add_row(argument, *cells)
    console.print(table)
