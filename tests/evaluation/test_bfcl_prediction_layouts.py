"""`grpo-tools score` on BFCL multi-turn rows never scores a prediction file it cannot read as 0.0 in silence: a layout
it cannot read (grpo-tools' own `{"id", "completion"}`, results nested one level too deep, a turn that is not a list
of steps, a step that is neither text nor a list of calls, a call in no known layout) is refused with one message
naming the file, line and field and exit code 2; layouts it can read unambiguously are read, with a note where BFCL's
checker would not read them (a `result` stored as JSON text)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


pytest.importorskip("bfcl_eval", reason="bfcl-eval is not installed (`make install` installs it)")

from grpo_tools.cli import main
from grpo_tools.data.converters import convert_rows, load_ground_truth, read_source
from grpo_tools.data.converters.bfcl import bfcl_files
from grpo_tools.data.converters.bfcl_multi_turn import parse_call


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> tuple[Path, dict]:
    """multi_turn_base_0 converted, in a data file."""
    questions, answers = bfcl_files("multi_turn_base")
    source = [(number, entry) for number, entry in read_source(questions) if entry["id"] == "multi_turn_base_0"]
    row = convert_rows("bfcl", source, ground_truth=load_ground_truth(answers), category="multi_turn").rows[0]
    path = tmp_path_factory.mktemp("layouts") / "data.jsonl"
    path.write_text(json.dumps(row) + "\n")
    return path, row


def _gold(row: dict) -> list:
    """The ground truth as decoded call strings, one step per turn."""
    return [[list(calls)] for calls in row["expected"]]


def _score(data: Path, line: dict, tmp_path: Path, capsys) -> tuple[int, str, dict | None]:
    predictions = tmp_path / "results.jsonl"
    predictions.write_text(json.dumps(line) + "\n")
    report = tmp_path / "report.json"
    code = main(["score", "--data", str(data), "--predictions", str(predictions), "--output", str(report)])
    error = capsys.readouterr().err
    assert "Traceback" not in error
    return code, error.replace(str(predictions), "PRED"), json.loads(report.read_text()) if report.exists() else None


def test_bfcls_layout_scores(data, tmp_path, capsys):
    path, row = data
    code, error, report = _score(path, {"id": row["id"], "result": _gold(row)}, tmp_path, capsys)
    assert (code, report["accuracy"], error) == (0, 1.0, "")


@pytest.mark.parametrize(
    ("make", "field", "message"),
    [
        (lambda row: {"id": row["id"], "completion": "[cd(folder='document')]"}, "result", "`completion`"),
        (
            lambda row: {"id": row["id"], "result": [[step] for step in _gold(row)]},
            "result[0][0][0]",
            "one level too deep",
        ),
        (
            lambda row: {"id": row["id"], "result": [" ".join(c) for c in row["expected"]]},
            "result[0]",
            "a list of steps",
        ),
        (
            lambda row: {"id": row["id"], "result": [[None], *_gold(row)[1:]]},
            "result[0][0]",
            "the model's text or a list",
        ),
        (
            lambda row: {
                "id": row["id"],
                "result": [[[{"function_name": "cd", "args": {"folder": "document"}}]], *_gold(row)[1:]],
            },
            "result[0][0][0]",
            "a call",
        ),
        (lambda row: {"result": _gold(row)}, "id", "missing"),
    ],
    ids=["completion_layout", "nested_too_deep", "turn_not_a_list", "step_not_text", "unknown_call", "no_id"],
)
def test_a_layout_score_cannot_read_is_refused(data, tmp_path, capsys, make, field, message):
    path, row = data
    code, error, report = _score(path, make(row), tmp_path, capsys)
    assert code == 2 and report is None
    assert "PRED: row 1" in error and f": {field}: " in error and message in error


def test_a_result_stored_as_json_text_is_read_with_a_note(data, tmp_path, capsys):
    path, row = data
    code, error, report = _score(path, {"id": row["id"], "result": json.dumps(_gold(row))}, tmp_path, capsys)
    assert (code, report["accuracy"]) == (0, 1.0)
    assert f"PRED: row 1 (id={row['id']}): result: " in error and "JSON text" in error


def test_an_inference_error_stays_bfcls_verdict(data, tmp_path, capsys):
    """BFCL writes a failed inference's error message as the result; its checker counts it inference_error."""
    path, row = data
    line = {"id": row["id"], "result": "Error during inference: the server timed out"}
    code, _, report = _score(path, line, tmp_path, capsys)
    assert (code, report["accuracy"], report["errors"]) == (0, 0.0, {"multi_turn:inference_error": 1})


def test_openai_tool_calls_are_read(data, tmp_path, capsys):
    path, row = data

    def openai(text: str) -> dict:
        call = parse_call(text)
        assert not call.args or call.name == "sort"
        arguments = call.kwargs if call.name != "sort" else {"file_name": call.args[0]}
        return {
            "id": "call_0",
            "type": "function",
            "function": {"name": call.name, "arguments": json.dumps(arguments)},
        }

    result = [[[openai(text) for text in calls]] for calls in row["expected"]]
    code, error, report = _score(path, {"id": row["id"], "result": result}, tmp_path, capsys)
    assert (code, report["accuracy"], error) == (0, 1.0, "")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "no prediction lines"),
        ("[" + json.dumps({"id": "multi_turn_base_0", "result": []}) + "]\n", "one JSON object per line"),
        (json.dumps([{"id": "multi_turn_base_0", "result": [[]]}], indent=1) + "\n", "one JSON object per line"),
    ],
    ids=["empty", "json_array", "json_array_indented"],
)
def test_a_file_with_no_usable_line_is_refused(data, tmp_path, capsys, text, message):
    path, _ = data
    predictions = tmp_path / "results.json"
    predictions.write_text(text)
    assert main(["score", "--data", str(path), "--predictions", str(predictions)]) == 2
    error = capsys.readouterr().err
    assert f"{predictions}: " in error and message in error and "Traceback" not in error
