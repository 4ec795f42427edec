"""Tests for grpo_tools.data.rows: reading and writing canonical JSONL, `derive_category`, the linter `check_rows` and
the `grpo-tools check-data` command (problem lines, summary, exit codes, bad files)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from grpo_tools.cli import main
from grpo_tools.data.rows import (
    DataError,
    JsonlWriter,
    Problem,
    check_rows,
    derive_category,
    number_rows,
    read_jsonl,
    write_jsonl,
)
from grpo_tools.rewards.parsing import ToolCall


WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["city"],
        },
    },
}
TIME = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "Local time in a zone.",
        "parameters": {"type": "object", "properties": {"zone": {"type": "string"}}, "required": ["zone"]},
    },
}


def good_row(row_id: str, **changes: object) -> dict:
    """A sound canonical row, with some fields replaced (a value of None deletes the field)."""
    row = {
        "id": row_id,
        "messages": [{"role": "user", "content": "Is it warm in Lyon today? Use celsius."}],
        "tools": [WEATHER],
        "answers": [{"name": "get_weather", "arguments": {"city": "Lyon", "unit": "celsius"}}],
        "possible_answers": [{"get_weather": {"city": ["Lyon", "Lyon, France"], "unit": ["celsius", ""]}}],
        "category": "simple",
    }
    row.update(changes)
    return {key: value for key, value in row.items() if value is not None}


def call(name: str, **arguments: object) -> dict:
    return {"name": name, "arguments": arguments}


# ------------------------------------------------------------------------------------------------ derive_category


@pytest.mark.parametrize(
    ("answers", "tools", "expected"),
    [
        ([], [WEATHER], "irrelevance"),
        ([], [WEATHER, TIME], "irrelevance"),
        ([call("get_weather", city="Lyon")], [WEATHER], "simple"),
        ([call("get_weather", city="Lyon")], [WEATHER, TIME], "multiple"),
        ([call("get_weather", city="Lyon"), call("get_weather", city="Rome")], [WEATHER], "parallel"),
        ([call("get_weather", city="Lyon"), call("get_weather", city="Rome")], [WEATHER, TIME], "parallel"),
        ([call("get_weather", city="Lyon"), call("get_time", zone="CET")], [WEATHER, TIME], "parallel_multiple"),
        ([ToolCall("get_weather", {}), ToolCall("get_time", {})], [WEATHER, TIME], "parallel_multiple"),
        ([ToolCall("get_weather", {})], {"get_weather": object()}, "simple"),
    ],
)
def test_derive_category(answers: list, tools: list, expected: str) -> None:
    assert derive_category(answers, tools) == expected


# ----------------------------------------------------------------------------------------------- reading, writing


def test_read_jsonl_numbers_lines_and_reports_bad_ones(tmp_path: Path) -> None:
    path = tmp_path / "rows.jsonl"
    path.write_bytes(b'\xef\xbb\xbf{"a": 1}\n\n[1, 2]\nnot json\n\xff\xfe\n{"b": 2}\n')
    items = list(read_jsonl(path))
    assert [number for number, _ in items] == [1, 3, 4, 5, 6]
    assert items[0][1] == {"a": 1} and items[-1][1] == {"b": 2}
    errors = {number: str(row) for number, row in items if isinstance(row, DataError)}
    assert errors[3] == "expected a JSON object, got a list"
    assert errors[4].startswith("not valid JSON (Expecting value at column 1")
    assert errors[5] == "not UTF-8 text (byte 0)"


@pytest.mark.parametrize(("name", "expected"), [("missing.jsonl", "no such file"), (".", "is a directory")])
def test_read_jsonl_raises_naming_the_file(tmp_path: Path, name: str, expected: str) -> None:
    with pytest.raises(DataError, match=expected) as raised:
        read_jsonl(tmp_path / name)  # at the call, before any iteration
    assert str(tmp_path) in str(raised.value)


def test_write_jsonl_round_trips_and_creates_folders(tmp_path: Path) -> None:
    rows = [good_row("a"), {"id": "é", "note": "ünïcode"}]
    path = tmp_path / "deep" / "er" / "out.jsonl"
    assert write_jsonl(path, rows) == 2
    assert [row for _, row in read_jsonl(path)] == rows
    assert "ünïcode" in path.read_text(encoding="utf-8")  # written as UTF-8, not \u escapes


def test_jsonl_writer_names_a_file_it_cannot_write(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(DataError, match=r"file/out\.jsonl: cannot be written"):
        JsonlWriter(tmp_path / "file" / "out.jsonl")


def test_number_rows_numbers_plain_rows_and_keeps_given_numbers() -> None:
    assert list(number_rows([{"a": 1}, {"b": 2}])) == [(1, {"a": 1}), (2, {"b": 2})]
    assert list(number_rows([(4, {"a": 1}), (9, {"b": 2})])) == [(4, {"a": 1}), (9, {"b": 2})]


# ---------------------------------------------------------------------------------------------------- check_rows


def test_a_sound_row_has_no_problem() -> None:
    rows = [
        good_row("a"),
        good_row("b", possible_answers=None, category=None),  # both optional
        good_row("c", tools=[WEATHER, TIME], answers=[], possible_answers=None, category="irrelevance"),
        good_row(
            "d",
            messages=[
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "Weather in Lyon?"},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": {}}}],
                },
                {"role": "tool", "content": '{"temperature": 21}'},
            ],
            answers=[],
            possible_answers=None,
            category="irrelevance",
        ),
        good_row("e", category="multi_turn"),  # an environment's category: not checked against the answers
    ]
    assert check_rows(rows) == []


KEYS = {"type": "function", "function": {"name": "bit_op", "parameters": {"type": "object", "properties": {
    "keys": {"type": "array", "items": {"type": "string"}}, "mod": {"type": "number"}}, "required": ["keys"]}}}  # fmt: skip


def bfcl_row(row_id: str, answers: list, possible: list, tools: list | None = None, **changes: object) -> dict:
    """A row as the BFCL converter writes it: gold calls and BFCL's acceptable values for each."""
    return good_row(row_id, tools=tools or [KEYS], answers=answers, possible_answers=possible, **changes)


def test_rows_whose_gold_bfcls_rules_accept_have_no_problem() -> None:
    """A row BFCL's checker can score is a valid row (issue 54): where the row carries possible answers, a gold value
    BFCL's rules accept stands even where the JSON Schema disagrees."""
    rows = [
        # `is_variable`: a Java variable's name where the schema says array (simple_java_35).
        bfcl_row("var", [call("bit_op", keys="userKeys")], [{"bit_op": {"keys": ["userKeys"]}}]),
        # A `None` BFCL lists as acceptable for a number (parallel_152).
        bfcl_row("none", [call("bit_op", keys=["a"], mod=None)], [{"bit_op": {"keys": [["a"]], "mod": ["", None]}}]),
        # A parameter the tool does not declare, which may be left out (parallel_multiple_12).
        bfcl_row("extra", [call("bit_op", keys=["a"])], [{"bit_op": {"keys": [["a"]], "seed": ["", 0.1]}}]),
        # BFCL's parallel_multiple: several tools offered, one of them called twice (parallel_multiple_3).
        bfcl_row(
            "pm",
            [call("get_weather", city="Lyon"), call("get_weather", city="Rome")],
            [{"get_weather": {"city": ["Lyon"]}}, {"get_weather": {"city": ["Rome"]}}],
            tools=[WEATHER, TIME],
            category="parallel_multiple",
        ),
    ]
    assert check_rows(rows) == []


@pytest.mark.parametrize(
    ("row", "field", "message"),
    [
        # BFCL takes a variable's name only where the acceptable values hold it.
        (
            bfcl_row("v", [call("bit_op", keys="other")], [{"bit_op": {"keys": ["userKeys"]}}]),
            "answers[0].arguments.keys",
            "'other' is not of type 'array'",
        ),
        # An integer written as text, where the acceptable values are numbers: BFCL rejects it too.
        (
            bfcl_row("t", [call("bit_op", keys=["a"], mod="10")], [{"bit_op": {"keys": [["a"]], "mod": [10]}}]),
            "answers[0].arguments.mod",
            "'10' is not of type 'number'",
        ),
        # Without possible answers the schema alone decides.
        (good_row("s", tools=[KEYS], answers=[call("bit_op", keys="userKeys")], possible_answers=None, category=None),
         "answers[0].arguments.keys", "'userKeys' is not of type 'array'"),
        # One tool offered: two calls to it are `parallel`, whatever the label.
        (
            bfcl_row(
                "p",
                [call("get_weather", city="Lyon"), call("get_weather", city="Rome")],
                [{"get_weather": {"city": ["Lyon"]}}, {"get_weather": {"city": ["Rome"]}}],
                tools=[WEATHER],
                category="parallel_multiple",
            ),
            "category",
            "'parallel_multiple', but its answers and tools make it 'parallel'",
        ),
    ],
)  # fmt: skip
def test_gold_values_bfcls_rules_reject_stay_problems(row: dict, field: str, message: str) -> None:
    problems = check_rows([row])
    assert [(problem.field, problem.message) for problem in problems] == [(field, message)]


# Each seeded row holds exactly the problems listed with it: (row number, field, part of the message).
SEEDED: list[tuple[object, list[tuple[str, str]]]] = [
    (good_row("w-1"), []),
    (good_row("w-1"), [("id", "duplicate of row 1")]),
    (
        good_row("w-3", answers=[call("get_weather", city="Lyon", unit="kelvin")]),
        [("answers[0].arguments.unit", "'kelvin' is not one of ['celsius', 'fahrenheit']")],
    ),
    (good_row("w-4", messages=[]), [("messages", "expected a non-empty list of messages")]),
    (
        good_row("w-5", messages=[{"role": "robot", "content": "beep"}, {"role": "user"}]),
        [("messages[0].role", "got 'robot'"), ("messages[1].content", "expected a string, got null")],
    ),
    (
        good_row("w-6", tools=[{"name": "get_weather", "parameters": {"properties": {"city": {"type": "txt"}}}}]),
        [("tools[0].parameters.properties.city.type", "'txt' is not a known type")],
    ),
    (
        good_row("w-7", answers=[call("get_time", zone="CET")], possible_answers=None),
        [("answers[0].name", "'get_time' is not one of the row's tools (offered: 'get_weather')")],
    ),
    (
        good_row("w-8", answers=[call("get_weather", unit="celsius")], possible_answers=None),
        [("answers[0].arguments.city", "'city' is a required property")],
    ),
    (
        good_row("w-9", answers=[call("get_weather", city="Lyon", country="FR")], possible_answers=None),
        [("answers[0].arguments.country", "'country' was unexpected")],
    ),
    (good_row("w-10", possible_answers=[]), [("possible_answers", "0 entries for 1 gold calls")]),
    (
        good_row("w-11", possible_answers=[{"get_weather": {"city": "Lyon", "color": ["red"]}}]),
        [
            ("possible_answers[0].get_weather.city", "expected a non-empty list of acceptable values"),
            ("possible_answers[0].get_weather.color", "'get_weather' has no parameter 'color'"),
        ],
    ),
    (good_row("w-12", category="weird"), [("category", "'weird' is not one of simple, multiple")]),
    (
        good_row("w-13", category="multiple"),
        [("category", "'multiple', but its answers and tools make it 'simple'")],
    ),
    (good_row("w-14", answers=None, possible_answers=None), [("answers", "missing")]),
    ("this line is not JSON", [("", "not valid JSON")]),
    ("[1, 2, 3]", [("", "expected a JSON object, got a list")]),
    ("", []),  # a blank line: skipped, but it still counts in the line numbers
    (good_row(None), [("id", "missing")]),
    (
        good_row("w-19", messages=[{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}]),
        [("messages[1].role", "the prompt ends with an assistant turn")],
    ),
    (good_row("w-20", answers={"name": "get_weather"}, possible_answers=None), [("answers", "expected a list")]),
]


def write_seeded(path: Path) -> None:
    lines = [row if isinstance(row, str) else json.dumps(row) for row, _ in SEEDED]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def expected_seeded_problems() -> list[tuple[int, str, str]]:
    return [(number, field, text) for number, (_, found) in enumerate(SEEDED, start=1) for field, text in found]


def test_check_rows_finds_every_seeded_problem_with_row_and_field(tmp_path: Path) -> None:
    path = tmp_path / "data.jsonl"
    write_seeded(path)
    problems = check_rows(read_jsonl(path))
    assert [(problem.row, problem.field) for problem in problems] == [
        (number, field) for number, field, _ in expected_seeded_problems()
    ]
    for problem, (_, _, text) in zip(problems, expected_seeded_problems(), strict=True):
        assert text in problem.message, problem


def test_check_rows_numbers_plain_rows_from_one_and_keeps_ids() -> None:
    problems = check_rows([good_row("a"), good_row("b", category="weird"), "not a row"])
    assert problems == [
        Problem(2, "b", "category", "'weird' is not one of simple, multiple, parallel, parallel_multiple, "
                                    "irrelevance, multi_turn"),
        Problem(3, None, "", "expected a JSON object, got a string"),
    ]  # fmt: skip


def test_problem_reads_as_one_line() -> None:
    assert str(Problem(17, "weather-0007", "answers[0].arguments.unit", "bad")) == (
        "row 17 (id=weather-0007): answers[0].arguments.unit: bad"
    )
    assert str(Problem(3, None, "", "not valid JSON")) == "row 3: not valid JSON"


# ---------------------------------------------------------------------------------------------- check-data CLI


def test_check_data_prints_each_problem_and_a_summary(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "data.jsonl"
    write_seeded(path)
    assert main(["check-data", str(path)]) == 1
    lines = capsys.readouterr().out.splitlines()
    expected = expected_seeded_problems()
    assert len(lines) == len(expected) + 1
    assert f"{path}: row 3 (id=w-3): answers[0].arguments.unit: 'kelvin' is not one of ['celsius', 'fahrenheit']" in (
        lines
    )
    assert f"{path}: row 15: not valid JSON (Expecting value at column 1)" in lines
    bad_rows = len({number for number, _, _ in expected})
    # 20 lines, one of them blank: 19 rows.
    assert lines[-1] == f"19 rows, {len(expected)} problems in {bad_rows} rows"


def test_check_data_passes_a_sound_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "data.jsonl"
    write_jsonl(path, [good_row("a"), good_row("b")])
    assert main(["check-data", str(path)]) == 0
    assert capsys.readouterr().out == "2 rows, no problems\n"


@pytest.mark.parametrize(
    ("name", "content", "code", "message"),
    [
        ("missing.jsonl", None, 2, "no such file"),
        ("folder", "dir", 2, "is a directory"),
        ("empty.jsonl", "\n\n", 1, "no rows"),
    ],
)
def test_check_data_on_bad_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, content: str | None, code: int, message: str
) -> None:
    path = tmp_path / name
    if content == "dir":
        path.mkdir()
    elif content is not None:
        path.write_text(content)
    assert main(["check-data", str(path)]) == code
    captured = capsys.readouterr()
    output = captured.err if code == 2 else captured.out
    assert f"{path}: {message}" in output
    assert "Traceback" not in captured.out + captured.err
