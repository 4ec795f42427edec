"""`grpo-tools convert --from bfcl multi_turn_*`: BFCL's four multi-turn sets become canonical `multi_turn` rows that
`check-data` accepts, holding what the BFCL environment and verdict need (`env`, `expected`); the four sets share
scenarios, which `env.scenario` names; a source row that cannot be converted is reported with its file, row and
field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


pytest.importorskip("bfcl_eval", reason="bfcl-eval is not installed (`make install` installs it)")

from grpo_tools.cli import main
from grpo_tools.data.converters.bfcl_multi_turn import MULTI_TURN_CATEGORIES
from grpo_tools.data.rows import check_rows, read_jsonl


@pytest.fixture(scope="module")
def converted(tmp_path_factory) -> dict[str, list[dict]]:
    out = tmp_path_factory.mktemp("bfcl-multi-turn")
    rows = {}
    for category in MULTI_TURN_CATEGORIES:
        path = out / f"{category}.jsonl"
        assert main(["convert", "--from", "bfcl", category, "--output", str(path)]) == 0
        rows[category] = [row for _, row in read_jsonl(path)]
    return rows


@pytest.mark.parametrize("category", MULTI_TURN_CATEGORIES)
def test_every_row_converts_and_passes_check_data(category, converted, capsys):
    rows = converted[category]
    assert len(rows) == 200
    assert check_rows(rows) == []
    for row in rows:
        assert row["category"] == "multi_turn" and row["env"]["name"] == "bfcl"
        assert row["env"]["category"] == category
        assert row["env"]["long_context"] == (category == "multi_turn_long_context")
        assert len(row["env"]["turns"]) == len(row["expected"])
        assert row["messages"] == row["env"]["turns"][0]
        assert len(row["answers"]) == sum(len(turn) for turn in row["expected"])


def test_gold_calls_give_arguments_by_name(converted):
    row = converted["multi_turn_base"][0]
    assert "sort('final_report.pdf')" in row["expected"][2]
    assert {"name": "sort", "arguments": {"file_name": "final_report.pdf"}} in row["answers"]


def test_held_out_functions_are_tools_of_the_row_and_their_turn_has_no_message(converted):
    rows = [row for row in converted["multi_turn_miss_func"] if row["env"]["missed_function"]]
    assert rows
    for row in rows:
        names = {tool["function"]["name"] for tool in row["tools"]}
        for turn, missed in row["env"]["missed_function"].items():
            assert set(missed) <= names
            assert row["env"]["turns"][int(turn)] == []


def test_the_four_categories_share_scenarios(converted):
    by_scenario: dict[str, set[str]] = {}
    for category, rows in converted.items():
        scenarios = [row["env"]["scenario"] for row in rows]
        assert len(set(scenarios)) == len(rows)
        for row in rows:
            by_scenario.setdefault(row["env"]["scenario"], set()).add(category)
    assert all(categories == set(MULTI_TURN_CATEGORIES) for categories in by_scenario.values())
    # Row N of each category starts from the same API classes: one scenario, asked four ways.
    base = {row["env"]["scenario"]: row["env"]["involved_classes"] for row in converted["multi_turn_base"]}
    assert all(
        base[row["env"]["scenario"]] == row["env"]["involved_classes"] for row in converted["multi_turn_miss_func"]
    )


def _source(tmp_path: Path, entry: dict, truth: list) -> Path:
    questions = tmp_path / "BFCL_v4_multi_turn_base.json"
    questions.write_text(json.dumps(entry) + "\n")
    (tmp_path / "possible_answer").mkdir()
    (tmp_path / "possible_answer" / questions.name).write_text(json.dumps({"id": entry["id"], "ground_truth": truth}))
    return questions


@pytest.mark.parametrize(
    ("change", "truth", "message"),
    [
        ({"involved_classes": ["WebSearchAPI"]}, [["ls()"]], "involved_classes: WebSearchAPI is not supported"),
        ({}, [["__import__('os').getcwd()"]], "ground_truth[0][0]: \"__import__('os').getcwd()\": a call must name"),
        ({}, [["ls(a=True)", "cd('a', 'b')"]], "ground_truth[0][1]: \"cd('a', 'b')\": too many positional"),
        ({}, [["ls()"], ["ls()"]], "ground_truth: 2 turns, but the question has 1"),
        ({"question": [[{"role": "user"}]]}, [["ls()"]], "question[0]: expected a list of messages"),
    ],
)
def test_a_bad_row_is_reported_with_file_row_and_field(tmp_path, capsys, change, truth, message):
    entry = {
        "id": "multi_turn_base_0",
        "question": [[{"role": "user", "content": "List the files."}]],
        "initial_config": {},
        "involved_classes": ["GorillaFileSystem"],
        **change,
    }
    questions = _source(tmp_path, entry, truth)
    assert main(["convert", "--from", "bfcl", str(questions), "--output", str(tmp_path / "out.jsonl")]) == 1
    error = capsys.readouterr().err
    assert error.startswith(f"{questions}: row 1: ")
    assert message in error
    assert "Traceback" not in error
