"""`grpo-tools score` on BFCL's multi-turn result files: per category, the accuracy BFCL's own checker gives the same
results, with each step written as BFCL's result files write it (decoded call strings, function-calling objects with
JSON arguments, or the model's raw text); missing and unmatched results are counted; a data row that cannot be scored
is named with its file, row and field."""

from __future__ import annotations

import inspect
import json
from collections import defaultdict

import pytest


pytest.importorskip("bfcl_eval", reason="bfcl-eval is not installed (`make install` installs it)")

from benchmarks import bfcl_multi_turn_reference as reference
from grpo_tools.cli import main
from grpo_tools.data.converters.bfcl_multi_turn import api_class, bind_call, parse_call


def _function_calling(row: reference.Row, text: str) -> dict[str, str]:
    """A call string as a function-calling model's result writes it: `{name: "<JSON arguments>"}`."""
    call = parse_call(text)
    cls = next(api_class(c) for c in row.row["env"]["involved_classes"] if hasattr(api_class(c), call.name))
    method = getattr(cls(), call.name)
    arguments = bind_call(method, call)
    assert set(arguments) <= set(inspect.signature(method).parameters)
    return {call.name: json.dumps(arguments)}


def _result(row: reference.Row, trajectory: list, style: int) -> list:
    positional = any(parse_call(text).args for turn in trajectory for step in turn for text in step)
    if style == 0 or (style == 2 and positional):  # decoded call strings, as BFCL's `decode_execute` gives them
        # (raw text with a positional argument is not written: BFCL's prompting decoder drops such arguments, our
        # parser drops such calls, and either way the call fails)
        return trajectory
    if style == 1:  # function-calling models
        return [[[_function_calling(row, text) for text in step] for step in turn] for turn in trajectory]
    # prompting models: the raw text of each step, `[f(a=1), g()]`
    return [["[" + ", ".join(step) + "]" for step in turn] for turn in trajectory]


@pytest.fixture(scope="module")
def scored(tmp_path_factory):
    """Every row of the four categories with one trajectory each (the ground truth or a perturbation), written as
    BFCL result lines; one row per category left without a result. BFCL's checker gives the expected verdicts."""
    folder = tmp_path_factory.mktemp("bfcl-score")
    data, predictions = folder / "data.jsonl", folder / "results.jsonl"
    expected: dict[str, list[bool]] = defaultdict(list)
    with data.open("w") as data_file, predictions.open("w") as prediction_file:
        for category in reference.MULTI_TURN_CATEGORIES:
            for index, row in enumerate(reference.rows(category)):
                data_file.write(json.dumps(row.row) + "\n")
                if index == 7:
                    expected[category].append(False)  # no result: scored 0
                    continue
                options = dict(reference.trajectories(row))
                label = ("ground_truth", "call_dropped", "extra_read_only_call", "argument_changed")[index % 4]
                trajectory = options.get(label, options["ground_truth"])
                expected[category].append(reference.bfcl_checker_verdict(row, trajectory)[0])
                line = {"id": row.row["id"], "result": _result(row, trajectory, index % 3)}
                prediction_file.write(json.dumps(line) + "\n")
        prediction_file.write(json.dumps({"id": "multi_turn_base_999", "result": []}) + "\n")
    report_path, per_row = folder / "report.json", folder / "rows.jsonl"
    arguments = ["score", "--data", str(data), "--predictions", str(predictions), "--output", str(report_path)]
    assert main([*arguments, "--per-row", str(per_row)]) == 0
    report = json.loads(report_path.read_text())
    return report, expected, [json.loads(line) for line in per_row.read_text().splitlines()]


def test_accuracy_per_category_is_bfcls(scored):
    report, expected, _ = scored
    assert set(report["by_category"]) == set(reference.MULTI_TURN_CATEGORIES)
    for category, verdicts in expected.items():
        entry = report["by_category"][category]
        assert (entry["rows"], entry["correct"]) == (len(verdicts), sum(verdicts)), category
        assert 0 < entry["correct"] < entry["rows"]
    accuracies = [sum(v) / len(v) for v in expected.values()]
    assert report["overall"] == pytest.approx(sum(accuracies) / len(accuracies))
    assert report["accuracy"] == pytest.approx(sum(map(sum, expected.values())) / sum(map(len, expected.values())))


def test_missing_and_unmatched_results_are_counted(scored):
    report, _, per_row = scored
    assert report["rows"]["missing_prediction"] == 4
    assert report["rows"]["unmatched_prediction"] == 1
    assert report["errors"]["missing_prediction"] == 4
    assert len(per_row) == report["rows"]["data"] == 800
    assert all(line["correct"] == (line["errors"] == []) for line in per_row)
    assert {error for line in per_row for error in line["errors"]} >= {
        "multi_turn:instance_state_mismatch",
        "missing_prediction",
    }


def test_a_bad_data_row_is_named(tmp_path, capsys):
    row = reference.rows("multi_turn_base")[0].row
    broken = {key: value for key, value in row.items() if key != "expected"}
    data = tmp_path / "data.jsonl"
    data.write_text(json.dumps(row) + "\n" + json.dumps({**broken, "id": "b"}) + "\n")
    (tmp_path / "results.jsonl").write_text("")
    assert main(["score", "--data", str(data), "--predictions", str(tmp_path / "results.jsonl")]) == 2
    error = capsys.readouterr().err
    assert f"{data}: row 2 (id=b): expected: missing" in error and "Traceback" not in error
