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

from grpo_tools.data.bfcl_backends import check_bfcl_env
from grpo_tools.data.converters.bfcl_multi_turn import ground_truth_problems
from grpo_tools.data.rows import DataError, read_jsonl
from grpo_tools.evaluation.bfcl_decoding import DECODERS, decode_result


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
        elif env_problems := check_bfcl_env(env) + ground_truth_problems(row["expected"]):
            problems += [f"{label}: {field}: {message}" for field, message in env_problems]
        else:
            seen.add(str(row["id"]))
            rows.append((number, {**row, "env": env}))
    if problems:
        raise DataError("\n".join(problems[:20]) + f"\n{len(problems)} data row(s) cannot be scored")
    if not rows:
        raise DataError(f"{path}: no data rows")
    return rows


def _json_type(value: Any) -> str:
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}
    return names.get(type(value), "a number" if isinstance(value, int | float) else type(value).__name__)


_LAYOUT = (
    'BFCL\'s result layout is {"id": ..., "result": [per user turn, [per step, the model\'s text or a list of '
    "calls]]}, as `bfcl generate` and `grpo-tools eval` write it"
)


def _call_problem(item: Any) -> str | None:
    """Why one call of a step is in no layout `score` reads, or None: a call string, `{name: arguments}`,
    `{"name", "arguments"}` or an OpenAI tool call `{"type": "function", "function": {"name", "arguments"}}`."""
    if isinstance(item, str) or (isinstance(item, dict) and (len(item) == 1 or set(item) == {"name", "arguments"})):
        return None
    if isinstance(item, dict) and isinstance(item.get("function"), dict) and "name" in item["function"]:
        return None
    if isinstance(item, list):
        return "a list inside a step: the result is nested one level too deep"
    return f'expected a call (a string, {{name: arguments}} or {{"name", "arguments"}}), got {_json_type(item)}'


def _layout_problem(result: Any) -> tuple[str, str] | None:
    """The field of a result `score` cannot read for a BFCL multi-turn row and what is wrong, or None. A result that
    is not a list stays BFCL's to judge: BFCL writes a failed inference's error message there (`inference_error`)."""
    for t, turn in enumerate(result if isinstance(result, list) else []):
        if not isinstance(turn, list):
            return f"result[{t}]", f"expected a list of steps, got {_json_type(turn)}"
        for s, step in enumerate(turn):
            if not isinstance(step, str | list):
                return f"result[{t}][{s}]", f"expected the model's text or a list of calls, got {_json_type(step)}"
            for i, item in enumerate(step if isinstance(step, list) else []):
                if problem := _call_problem(item):
                    return f"result[{t}][{s}][{i}]", problem
    return None


def _openai_calls(result: list[Any]) -> list[Any]:
    """The result with OpenAI tool calls written as `{"name", "arguments"}` calls."""

    def call(item: Any) -> Any:
        if isinstance(item, dict) and isinstance(item.get("function"), dict) and "name" in item["function"]:
            return {"name": item["function"]["name"], "arguments": item["function"].get("arguments", {})}
        return item

    return [[[call(i) for i in step] if isinstance(step, list) else step for step in turn] for turn in result]


def _result(line: dict[str, Any], label: str, notes: list[str]) -> Any:
    """A line's result as the verdict reads it; `ValueError` naming the field when its layout cannot be read."""
    if "result" not in line:
        found = f"; this line has {', '.join(f'`{key}`' for key in line)}" if line else ""
        single_turn = ", grpo-tools' layout for single-turn rows" if "completion" in line else ""
        raise ValueError(f"result: missing{found}{single_turn}. {_LAYOUT}")
    if "id" not in line:
        raise ValueError(f"id: missing; it joins the result to its data row. {_LAYOUT}")
    result = line["result"]
    if isinstance(result, str) and result.lstrip().startswith("["):
        try:
            decoded = json.loads(result)
        except ValueError:
            decoded = None
        if isinstance(decoded, list):
            notes.append(
                f"{label}: result: JSON text, read as the list it holds (BFCL's checker reads only a list and "
                "would count this row multi_turn:inference_error)"
            )
            result = decoded
    problem = _layout_problem(result)
    if problem is not None:
        raise ValueError(f"{problem[0]}: {problem[1]}. {_LAYOUT}")
    return _openai_calls(result) if isinstance(result, list) else result


def _predictions(path: Path, notes: list[str], tally: Counter) -> dict[str, Any]:
    by_id: dict[str, Any] = {}
    problems: list[str] = []
    for number, line in read_jsonl(path):
        tally["predictions"] += 1
        if isinstance(line, DataError):
            notes.append(f"{path}: row {number}: {line}")
            tally["unreadable"] += 1
            continue
        label = f"{path}: row {number}" + (f" (id={line['id']})" if "id" in line else "")
        try:
            result = _result(line, label, notes)
        except ValueError as error:
            problems.append(f"{label}: {error}")
            continue
        if str(line["id"]) in by_id:
            notes.append(f"{label}: id: a second result for this id; the first counts")
            tally["duplicate_prediction"] += 1
        else:
            by_id[str(line["id"])] = result
    if problems:
        raise DataError("\n".join(problems[:20]) + f"\n{len(problems)} prediction line(s) cannot be scored")
    if not tally["predictions"]:
        raise DataError(f"{path}: no prediction lines. {_LAYOUT}")
    if not by_id and tally["unreadable"] == tally["predictions"]:
        shown = "\n".join(notes[-tally["unreadable"] :][:5])
        raise DataError(f"{shown}\n{path}: no line could be read: BFCL's result files hold one JSON object per line")
    return by_id


def score_bfcl_multi_turn(
    data: str | Path, predictions: str | Path, per_row: str | Path | None = None, decoder: str = "grpo-tools"
) -> tuple[dict[str, Any], list[str]]:
    """Score BFCL multi-turn results against converted rows: the report (scoring's layout) and notes on lines of the
    predictions that could not be used. `DataError` for a data file or a prediction layout that cannot be scored,
    naming file, row and field. `decoder` (`DECODERS`) reads the raw-text steps: `grpo-tools`, our parser, or one of
    BFCL's handlers' decoders; the report's `raw_text_steps` counts them and those our parser and BFCL's read
    differently, and a note says when the figure is not BFCL's prompting figure.
    """
    if decoder not in DECODERS:
        raise ValueError(f"decoder {decoder!r} is not one of {', '.join(DECODERS)}")
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
    raw: dict[str, int] = {"steps": 0, "differ": 0}
    for _, row in rows:
        category = row["env"].get("category", "multi_turn")
        key = str(row["id"])
        if key in results:
            verdict = bfcl_verdict(row["env"], row["expected"], decode_result(results.pop(key), decoder, raw))
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
    if raw["steps"] and decoder == "grpo-tools":
        notes.insert(
            0,
            f"{predictions}: {raw['steps']} raw-text step(s) read by grpo-tools' parser, {raw['differ']} of them read "
            "otherwise by BFCL's prompting decoder (which reads only Python call lists: no JSON, <tool_call> or "
            "<think> text): this figure is not BFCL's prompting figure; --decoder bfcl-prompting gives that",
        )
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
        "decoder": decoder,
        "raw_text_steps": {
            "steps": raw["steps"],
            "bfcl_decoder": decoder if decoder != "grpo-tools" else "bfcl-prompting",
            "read_otherwise_by_grpo_tools": raw["differ"],
        },
    }, notes
