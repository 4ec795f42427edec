"""A BFCL multi-turn row whose `env` cannot be run (a refused or unknown backend in `involved_classes`, an
`initial_config` BFCL's classes cannot load, a malformed `long_context` or `missed_function`) is refused with one
message naming the file, row and field, never a traceback: by `check-data` (exit 1), `score` and `eval` (exit 2), and
the rows training loads (`load_rows`, whole rows and per-turn rows alike)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest


pytest.importorskip("bfcl_eval", reason="bfcl-eval is not installed (`make install` installs it)")

from grpo_tools.cli import main
from grpo_tools.data.converters import convert_rows, load_ground_truth, read_source
from grpo_tools.data.converters.bfcl import bfcl_files
from grpo_tools.data.prompts import load_rows
from grpo_tools.data.rows import DataError, check_rows
from grpo_tools.tools.bfcl_turns import per_turn_rows


@pytest.fixture(scope="module")
def base_row() -> dict:
    """multi_turn_base_0 (GorillaFileSystem and TwitterAPI), converted."""
    questions, answers = bfcl_files("multi_turn_base")
    source = [(number, entry) for number, entry in read_source(questions) if entry["id"] == "multi_turn_base_0"]
    result = convert_rows("bfcl", source, ground_truth=load_ground_truth(answers), category="multi_turn")
    return result.rows[0]


def _refused(env: dict) -> None:
    env["involved_classes"] = [*env["involved_classes"], "WebSearchAPI"]


def _unknown(env: dict) -> None:
    env["involved_classes"][0] = "NoSuchAPI"


def _config_list(env: dict) -> None:
    env["initial_config"] = [1, 2]


def _class_config_text(env: dict) -> None:
    env["initial_config"]["GorillaFileSystem"] = "root"


def _class_config_list(env: dict) -> None:
    env["initial_config"]["GorillaFileSystem"] = [1]


def _root_not_a_folder(env: dict) -> None:
    env["initial_config"]["GorillaFileSystem"] = {"root": 5}


def _tweets_not_an_object(env: dict) -> None:
    env["initial_config"]["TwitterAPI"]["tweets"] = 5


def _class_name_misspelt(env: dict) -> None:
    env["initial_config"]["GorillaFilesystem"] = env["initial_config"].pop("GorillaFileSystem")


def _long_context_text(env: dict) -> None:
    env["long_context"] = "yes"


def _missed_function_list(env: dict) -> None:
    env["missed_function"] = ["cd"]


# (edit of the row's env, the field named, a piece of the message)
CASES = [
    (_refused, "env.involved_classes[2]", "WebSearchAPI is not supported"),
    (_unknown, "env.involved_classes[0]", "'NoSuchAPI' is not one of BFCL's API classes"),
    (_config_list, "env.initial_config", "expected an object"),
    (_class_config_text, "env.initial_config.GorillaFileSystem", "expected an object"),
    (_class_config_list, "env.initial_config.GorillaFileSystem", "expected an object"),
    (_root_not_a_folder, "env.initial_config.GorillaFileSystem", "BFCL's GorillaFileSystem cannot load it"),
    (_tweets_not_an_object, "env.initial_config.TwitterAPI", "BFCL's TwitterAPI cannot load it"),
    (_class_name_misspelt, "env.initial_config.GorillaFilesystem", "not one of BFCL's API classes"),
    (_long_context_text, "env.long_context", "expected true or false"),
    (_missed_function_list, "env.missed_function", "expected {turn index: [function names]}"),
]
IDS = [case[0].__name__.lstrip("_") for case in CASES]


def _broken(row: dict, edit) -> dict:
    broken = copy.deepcopy(row)
    broken["id"] = "broken"
    edit(broken["env"])
    return broken


def _write(path: Path, *rows: dict) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def test_converted_rows_pass(base_row):
    assert check_rows([base_row]) == []
    assert check_rows(per_turn_rows(base_row)) == []


@pytest.mark.parametrize(("edit", "field", "message"), CASES, ids=IDS)
def test_check_rows_names_the_field(base_row, edit, field, message):
    problems = check_rows([base_row, _broken(base_row, edit)])
    assert [(p.row, p.id, p.field) for p in problems] == [(2, "broken", field)]
    assert message in problems[0].message


@pytest.mark.parametrize(("edit", "field", "message"), CASES, ids=IDS)
def test_check_data_score_and_eval_name_the_row(base_row, edit, field, message, tmp_path, capsys):
    data = _write(tmp_path / "data.jsonl", base_row, _broken(base_row, edit))
    results = _write(tmp_path / "results.jsonl", {"id": base_row["id"], "result": [[]] * len(base_row["expected"])})
    where = f"{data}: row 2 (id=broken): {field}: "
    assert main(["check-data", str(data)]) == 1
    assert where in capsys.readouterr().out
    assert main(["score", "--data", str(data), "--predictions", str(results)]) == 2
    error = capsys.readouterr().err
    assert where in error and message in error and "Traceback" not in error
    # eval refuses the rows before it looks for a model
    assert main(["eval", "--model", str(tmp_path / "no-model"), "--data", str(data)]) == 2
    error = capsys.readouterr().err
    assert where in error and message in error


@pytest.mark.parametrize(("edit", "field", "message"), CASES[:7], ids=IDS[:7])
def test_training_refuses_per_turn_rows(base_row, edit, field, message, tmp_path):
    turns = per_turn_rows(base_row)
    broken = _broken(turns[1], edit)
    data = _write(tmp_path / "turns.jsonl", *turns, broken)
    with pytest.raises(DataError) as raised:
        load_rows(data)
    assert f"{data}: row {len(turns) + 1} (id=broken): {field}: " in str(raised.value)
    assert message in str(raised.value)


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        (lambda row: row["expected"][0].__setitem__(1, "mkdir(dir_name="), "expected[0][1]"),
        (lambda row: row["expected"][0].__setitem__(0, "__import__('os').getcwd()"), "expected[0][0]"),
        (lambda row: row["expected"].__setitem__(1, "cd(folder='temp')"), "expected[1]"),
        (lambda row: row["expected"][2].__setitem__(0, 7), "expected[2][0]"),
    ],
    ids=["not_python", "not_a_plain_call", "turn_not_a_list", "call_not_text"],
)
def test_score_and_eval_name_a_ground_truth_call_that_cannot_be_read(base_row, edit, field, tmp_path, capsys):
    """A ground-truth call that does not parse would make every trajectory fail in silence."""
    broken = copy.deepcopy(base_row)
    broken["id"] = "broken"
    edit(broken)
    data = _write(tmp_path / "data.jsonl", base_row, broken)
    results = _write(tmp_path / "results.jsonl", {"id": base_row["id"], "result": [[]] * len(base_row["expected"])})
    where = f"{data}: row 2 (id=broken): {field}: "
    assert main(["score", "--data", str(data), "--predictions", str(results)]) == 2
    assert where in capsys.readouterr().err
    assert main(["eval", "--model", str(tmp_path / "no-model"), "--data", str(data)]) == 2
    assert where in capsys.readouterr().err


def test_an_env_written_as_json_text_is_checked_too(base_row):
    """A Hub dataset holds `env` as JSON text (Arrow cannot hold each row's own state as one column type)."""
    broken = _broken(base_row, _root_not_a_folder)
    broken["env"] = json.dumps(broken["env"])
    problems = check_rows([{**base_row, "env": json.dumps(base_row["env"])}, broken])
    assert [(p.row, p.field) for p in problems] == [(2, "env.initial_config.GorillaFileSystem")]


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"GorillaFileSystem": {"root": 5}}, "initial_config.GorillaFileSystem: BFCL's GorillaFileSystem cannot load"),
        ({"GorillaFilesystem": {}}, "initial_config.GorillaFilesystem: 'GorillaFilesystem' is not one of BFCL's"),
        ([1], "initial_config: expected an object"),
    ],
)
def test_convert_names_a_source_row_whose_initial_config_cannot_load(tmp_path, capsys, config, message):
    entry = {
        "id": "multi_turn_base_0",
        "question": [[{"role": "user", "content": "List the files."}]],
        "initial_config": config,
        "involved_classes": ["GorillaFileSystem"],
    }
    questions = tmp_path / "BFCL_v4_multi_turn_base.json"
    questions.write_text(json.dumps(entry) + "\n")
    (tmp_path / "possible_answer").mkdir()
    (tmp_path / "possible_answer" / questions.name).write_text(
        json.dumps({"id": entry["id"], "ground_truth": [["ls()"]]})
    )
    assert main(["convert", "--from", "bfcl", str(questions), "--output", str(tmp_path / "out.jsonl")]) == 1
    error = capsys.readouterr().err
    assert error.startswith(f"{questions}: row 1: ") and message in error and "Traceback" not in error
