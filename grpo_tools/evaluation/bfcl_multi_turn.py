"""`grpo-tools score` on BFCL's multi-turn results: BFCL's accuracy per category, computed without `eval`.

The data are rows `grpo-tools convert --from bfcl multi_turn_*` wrote (`env.name` is `bfcl`); the predictions are
BFCL's own result files (`{"id": ..., "result": [...]}` per line: per turn, per step, the model's response, as
`bfcl generate` writes them, or the decoded calls). Each row gets the verdict of
`grpo_tools.tools.bfcl_verdict.bfcl_verdict`, which equals bfcl-eval's `multi_turn_checker` and runs calls through
the safe executor, so a model's results can be scored without running its text. The report has the layout of
`grpo-tools score` (`grpo_tools.evaluation.scoring`), by BFCL's category (`multi_turn_base`, ...), with BFCL's
error types (`multi_turn:instance_state_mismatch`, ...) and `overall`, the unweighted mean of the categories'
accuracies, as BFCL's leaderboard reports multi-turn accuracy.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from grpo_tools.data.rows import DataError, read_jsonl


__all__ = ["is_bfcl_multi_turn", "score_bfcl_multi_turn"]


def is_bfcl_multi_turn(path: str | Path) -> bool:
    """Whether a dataset holds BFCL multi-turn rows (its first row's `env.name` is `bfcl`); False for any other or
    unreadable file, which the ordinary scorer then reports."""
    try:
        for _, row in read_jsonl(path):
            env = row.get("env") if isinstance(row, dict) else None
            if isinstance(env, str):
                try:
                    env = json.loads(env)
                except ValueError:
                    return False
            return isinstance(env, dict) and env.get("name") == "bfcl"
    except DataError:
        return False
    return False


def _data_rows(path: Path) -> list[tuple[int, dict[str, Any]]]:
    rows, problems, seen = [], [], set()
    for number, row in read_jsonl(path):
        label = f"{path}: row {number}" + (f" (id={row.get('id')})" if isinstance(row, dict) else "")
        if isinstance(row, DataError):
            problems.append(f"{label}: {row}")
            continue
        env = row.get("env")
        if isinstance(env, str):
            try:
                env = json.loads(env)
            except ValueError:
                env = None
        if row.get("id") is None:
            problems.append(f"{label}: id: missing")
        elif not isinstance(env, dict) or env.get("name") != "bfcl" or "involved_classes" not in env:
            problems.append(
                f"{label}: env: expected a BFCL multi-turn environment (`convert --from bfcl multi_turn_*`)"
            )
        elif not isinstance(row.get("expected"), list):
            problems.append(f"{label}: expected: missing; it holds BFCL's ground truth per turn")
        elif str(row.get("id")) in seen:
            problems.append(f"{label}: id: duplicate; ids must be unique to join predictions")
        else:
            seen.add(str(row["id"]))
            rows.append((number, {**row, "env": env}))
    if problems:
        raise DataError("\n".join(problems[:20]) + f"\n{len(problems)} data row(s) cannot be scored")
    if not rows:
        raise DataError(f"{path}: no data rows")
    return rows


def _predictions(path: Path, notes: list[str], tally: Counter) -> dict[str, Any]:
    by_id: dict[str, Any] = {}
    for number, line in read_jsonl(path):
        tally["predictions"] += 1
        if isinstance(line, DataError) or "id" not in line or "result" not in line:
            reason = line if isinstance(line, DataError) else 'expected BFCL\'s {"id": ..., "result": [...]}'
            notes.append(f"{path}: row {number}: {reason}")
            tally["unreadable"] += 1
        elif str(line["id"]) in by_id:
            notes.append(f"{path}: row {number} (id={line['id']}): id: a second result for this id; the first counts")
            tally["duplicate_prediction"] += 1
        else:
            by_id[str(line["id"])] = line["result"]
    return by_id


def score_bfcl_multi_turn(
    data: str | Path, predictions: str | Path, per_row: str | Path | None = None
) -> tuple[dict[str, Any], list[str]]:
    """Score BFCL multi-turn results against converted rows: the report (scoring's layout) and notes on lines of the
    predictions that could not be used. `DataError` for a data file that cannot be scored, naming file, row and field.
    """
    # Imported here: the executor brings torch and transformers, which `grpo-tools score` on other rows never needs.
    from grpo_tools.tools.bfcl_verdict import bfcl_verdict

    data, predictions = Path(data), Path(predictions)
    rows = _data_rows(data)
    notes: list[str] = []
    tally: Counter = Counter()
    results = _predictions(predictions, notes, tally)
    totals: dict[str, list[int]] = {}
    errors: Counter = Counter()
    verdicts = []
    for _, row in rows:
        category = row["env"].get("category", "multi_turn")
        key = str(row["id"])
        if key in results:
            verdict = bfcl_verdict(row["env"], row["expected"], results.pop(key))
            error = verdict.error_type
        else:
            tally["missing_prediction"] += 1
            error, verdict = "missing_prediction", None
        correct = verdict is not None and verdict.valid
        counts = totals.setdefault(category, [0, 0])
        counts[0] += 1
        counts[1] += int(correct)
        if error:
            errors[error] += 1
        verdicts.append({"id": row["id"], "category": category, "score": float(correct), "correct": correct,
                         "errors": [error] if error else []})  # fmt: skip
    tally["unmatched_prediction"] = len(results)
    notes.extend(f"{predictions}: id={key}: no data row with this id" for key in list(results)[:20])
    if per_row:
        Path(per_row).parent.mkdir(parents=True, exist_ok=True)
        Path(per_row).write_text("".join(json.dumps(line) + "\n" for line in verdicts), encoding="utf-8")
    by_category = {
        category: {"rows": count, "correct": right, "accuracy": right / count, "mean_reward": right / count}
        for category, (count, right) in sorted(totals.items())
    }
    correct = sum(right for _, right in totals.values())
    report_rows = {
        "data": len(rows),
        "predictions": tally["predictions"],
        "scored": len(rows) - tally["missing_prediction"],
    }
    for key in ("missing_prediction", "unmatched_prediction", "duplicate_prediction", "unreadable"):
        report_rows[key] = tally[key]
    report_rows["invalid_data"] = 0
    return {
        "scorer": "bfcl_multi_turn",
        "data": str(data),
        "predictions": str(predictions),
        "rows": report_rows,
        "accuracy": correct / len(rows),
        "mean_reward": correct / len(rows),
        "overall": sum(entry["accuracy"] for entry in by_category.values()) / len(by_category),
        "by_category": by_category,
        "errors": dict(errors.most_common()),
    }, notes
