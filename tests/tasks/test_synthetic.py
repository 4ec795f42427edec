"""Tests for tasks.synthetic: the bundled files are reproducible, canonical, and eval is held out by combination."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from tasks.synthetic import (
    BUNDLED_FILES,
    BUNDLED_ROWS,
    CATEGORIES,
    TOOLS,
    UNRELATED_REQUESTS,
    call_split,
    generate_rows,
    main,
)


DATA_DIR = Path(__file__).resolve().parents[2] / "data"


def _load(split: str) -> list[dict[str, Any]]:
    with (DATA_DIR / BUNDLED_FILES[split]).open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle]


@pytest.fixture(scope="module")
def bundled() -> dict[str, list[dict[str, Any]]]:
    return {split: _load(split) for split in BUNDLED_FILES}


def _call_key(call: dict[str, Any]) -> tuple[str, str]:
    return call["name"], json.dumps(call["arguments"], sort_keys=True)


def _schema_errors(arguments: dict[str, Any], tool: dict[str, Any]) -> list[str]:
    """Every way `arguments` break the tool's JSON Schema, unknown argument names included."""
    schema = {**tool["function"]["parameters"], "additionalProperties": False}
    return [error.message for error in jsonschema.Draft202012Validator(schema).iter_errors(arguments)]


def test_regenerating_equals_committed_files_byte_for_byte(tmp_path: Path) -> None:
    assert main(["--out", str(tmp_path)]) == 0
    for filename in BUNDLED_FILES.values():
        assert (tmp_path / filename).read_bytes() == (DATA_DIR / filename).read_bytes(), filename


def test_generation_is_deterministic_and_depends_on_seed_and_split() -> None:
    assert generate_rows("eval", 30, seed=3) == generate_rows("eval", 30, seed=3)
    assert generate_rows("eval", 30, seed=3) != generate_rows("eval", 30, seed=4)
    first = [row["messages"] for row in generate_rows("train", 30, seed=3)]
    assert first != [row["messages"] for row in generate_rows("eval", 30, seed=3)]


def test_unknown_split_is_rejected() -> None:
    with pytest.raises(ValueError, match="'test'"):
        generate_rows("test", 3, seed=0)


def test_bundled_sizes(bundled: dict[str, list[dict[str, Any]]]) -> None:
    assert {split: len(rows) for split, rows in bundled.items()} == BUNDLED_ROWS


@pytest.mark.parametrize("split", list(BUNDLED_FILES))
def test_rows_are_canonical(bundled: dict[str, list[dict[str, Any]]], split: str) -> None:
    for row in bundled[split]:
        assert list(row) == ["id", "messages", "tools", "answers", "category"], row["id"]
        assert [message["role"] for message in row["messages"]] == ["user"]
        assert row["messages"][0]["content"].strip()
        offered = {}
        for tool in row["tools"]:
            assert tool["type"] == "function"
            assert set(tool["function"]) == {"name", "description", "parameters"}
            assert tool == TOOLS[tool["function"]["name"]]
            offered[tool["function"]["name"]] = tool
        assert len(offered) == len(row["tools"]), f"{row['id']}: a tool is offered twice"
        for answer in row["answers"]:
            assert set(answer) == {"name", "arguments"}
            assert answer["name"] in offered, f"{row['id']}: {answer['name']} is not offered"
            assert _schema_errors(answer["arguments"], offered[answer["name"]]) == [], row["id"]
        assert row["category"] == _derived_category(row), row["id"]


def _derived_category(row: dict[str, Any]) -> str:
    """The category data/README.md derives from `answers` and `tools`."""
    calls, num_tools = row["answers"], len(row["tools"])
    if not calls:
        return "irrelevance"
    if len(calls) == 1:
        return "simple" if num_tools == 1 else "multiple"
    return "parallel" if num_tools == 1 and len({call["name"] for call in calls}) == 1 else "parallel_multiple"


@pytest.mark.parametrize(
    ("arguments", "valid"),
    [
        ({"city": "Lyon", "unit": "celsius"}, True),
        ({"city": "Lyon"}, True),
        ({"city": "Lyon", "unit": "kelvin"}, False),
        ({"unit": "celsius"}, False),
        ({"city": 3}, False),
        ({"city": "Lyon", "country": "France"}, False),
    ],
)
def test_schema_helper_catches_bad_arguments(arguments: dict[str, Any], valid: bool) -> None:
    assert (_schema_errors(arguments, TOOLS["get_weather"]) == []) is valid


def test_integer_and_number_arguments_have_json_types(bundled: dict[str, list[dict[str, Any]]]) -> None:
    calls = [call for rows in bundled.values() for row in rows for call in row["answers"]]
    minutes = [call["arguments"]["minutes"] for call in calls if call["name"] == "set_timer"]
    assert minutes and all(type(value) is int for value in minutes)
    amounts = [call["arguments"]["amount"] for call in calls if call["name"] == "convert_currency"]
    assert {type(value) for value in amounts} == {int, float}


def test_no_eval_combination_occurs_in_train(bundled: dict[str, list[dict[str, Any]]]) -> None:
    train = {_call_key(call) for row in bundled["train"] for call in row["answers"]}
    eval_ = {_call_key(call) for row in bundled["eval"] for call in row["answers"]}
    assert eval_ and not eval_ & train
    assert all(call_split(name, json.loads(arguments)) == "eval" for name, arguments in eval_)


def test_every_eval_value_is_seen_in_train(bundled: dict[str, list[dict[str, Any]]]) -> None:
    """Held out by combination only: each (tool, argument, value) on its own is learnable from train."""

    def values(rows: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
        return {
            (call["name"], key, json.dumps(value))
            for row in rows
            for call in row["answers"]
            for key, value in call["arguments"].items()
        }

    assert values(bundled["eval"]) <= values(bundled["train"])


@pytest.mark.parametrize("split", list(BUNDLED_FILES))
def test_every_category_and_tool_is_present(bundled: dict[str, list[dict[str, Any]]], split: str) -> None:
    rows = bundled[split]
    categories = Counter(row["category"] for row in rows)
    assert set(categories) == set(CATEGORIES)
    assert categories["simple"] == categories["multiple"] == 0.3 * len(rows)
    called = Counter(call["name"] for row in rows for call in row["answers"])
    assert set(called) == set(TOOLS)
    for category in CATEGORIES:
        assert {call["name"] for row in rows if row["category"] == category for call in row["answers"]} in (
            set(),
            set(TOOLS),
        )


def test_ids_are_unique_across_splits(bundled: dict[str, list[dict[str, Any]]]) -> None:
    ids = [row["id"] for rows in bundled.values() for row in rows]
    assert len(ids) == len(set(ids))


def test_irrelevance_rows_include_requests_for_tools_not_offered(bundled: dict[str, list[dict[str, Any]]]) -> None:
    """Half the irrelevance rows ask for a real tool that is missing, so the model must read the tool list."""
    rows = [row for row in bundled["train"] if row["category"] == "irrelevance"]
    near_misses = [row for row in rows if row["messages"][0]["content"] not in UNRELATED_REQUESTS]
    assert 0.3 < len(near_misses) / len(rows) < 0.7


def test_parallel_calls_are_distinct(bundled: dict[str, list[dict[str, Any]]]) -> None:
    for rows in bundled.values():
        for row in rows:
            if row["category"] == "parallel":
                assert len({_call_key(call) for call in row["answers"]}) == len(row["answers"]) == 2
