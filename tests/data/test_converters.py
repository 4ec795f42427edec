"""Tests for grpo_tools.data.converters and `grpo-tools convert`: every source format against small sample files in
tests/fixtures/sources (exact canonical rows, multi-turn histories, rows that cannot be converted), BFCL's answer
join and categories, the source readers (JSON array, JSONL, Parquet, Hub), and the command's messages and exit
codes. Converted rows must also pass the linter."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

from grpo_tools.cli import main
from grpo_tools.data.converters import (
    CONVERTERS,
    ConversionResult,
    RowFailure,
    bfcl_category,
    convert_rows,
    load_ground_truth,
    read_source,
)
from grpo_tools.data.rows import DataError, check_rows, read_jsonl


SOURCES = Path(__file__).parents[1] / "fixtures" / "sources"
BFCL_PARALLEL = SOURCES / "bfcl" / "BFCL_v3_parallel.json"
BFCL_PARALLEL_ANSWERS = SOURCES / "bfcl" / "possible_answer" / "BFCL_v3_parallel.json"
BFCL_IRRELEVANCE = SOURCES / "bfcl" / "BFCL_v3_irrelevance.json"


def tool(name: str, description: str, properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    parameters = {"type": "object", "properties": properties, "required": required}
    return {"type": "function", "function": {"name": name, "description": description, "parameters": parameters}}


def convert_file(source: str, path: Path, **options: Any) -> ConversionResult:
    if source == "bfcl":
        options.setdefault("category", bfcl_category(str(path)))
        if options["category"] != "irrelevance":
            options.setdefault("ground_truth", load_ground_truth(str(BFCL_PARALLEL_ANSWERS)))
    return convert_rows(source, read_source(str(path)), **options)


def rows_by_id(source: str, path: Path) -> dict[str, dict[str, Any]]:
    return {row["id"]: row for row in convert_file(source, path).rows}


# ------------------------------------------------------------------------------ exact rows, one per converter

WEATHER_TOOLACE = tool(
    "get_weather",
    "Current weather in a city.",
    {
        "city": {"type": "string", "description": "City name."},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "description": "Temperature unit."},
    },
    ["city"],
)
TRIANGLE = tool(
    "calculate_triangle_area",
    "Calculate the area of a triangle.",
    {
        "base": {"type": "integer", "description": "The base of the triangle."},
        "height": {"type": "integer", "description": "The height of the triangle."},
        "unit": {"type": "string", "description": "The unit of measure.", "default": "units"},
    },
    ["base", "height"],
)

EXACT = {
    "xlam": (
        SOURCES / "xlam.json",
        {
            "id": "1",
            "messages": [{"role": "user", "content": "Find me 5 pairs of red shoes."}],
            "tools": [
                tool(
                    "search_products",
                    "Search the product catalogue.",
                    {
                        "query": {"type": "string", "description": "Search text."},
                        # "int, optional": an integer that may be left out
                        "limit": {"type": "integer", "description": "Most results to return.", "default": 10},
                    },
                    ["query"],
                ),
                tool(
                    "get_product",
                    "Get one product by id.",
                    {"product_id": {"type": "integer", "description": "Product id."}},
                    ["product_id"],
                ),
            ],
            "answers": [{"name": "search_products", "arguments": {"query": "red shoes", "limit": 5}}],
            "category": "multiple",
        },
    ),
    "glaive": (
        SOURCES / "glaive.jsonl",
        {
            "id": "0-0",
            "messages": [
                {"role": "user", "content": "Hi, I need to calculate my BMI. I weigh 70 kg and I am 1.75 m tall."}
            ],
            "tools": [
                tool(
                    "calculate_bmi",
                    "Calculate the Body Mass Index",
                    {
                        "weight": {"type": "number", "description": "Weight in kilograms"},
                        "height": {"type": "number", "description": "Height in meters"},
                    },
                    ["weight", "height"],
                )
            ],
            # `arguments` was a single-quoted JSON string in the source
            "answers": [{"name": "calculate_bmi", "arguments": {"weight": 70, "height": 1.75}}],
            "category": "simple",
        },
    ),
    "hermes": (
        SOURCES / "hermes.jsonl",
        {
            "id": "hermes-a-0",
            "messages": [{"role": "user", "content": "Show me the front door camera in HD."}],
            "tools": [
                tool(
                    "get_camera_live_feed",
                    "Retrieves the live feed from a security camera.",
                    {
                        "camera_id": {"type": "string", "description": "The camera's id."},
                        "hd": {"type": "boolean", "description": "Whether to stream in high definition."},
                    },
                    ["camera_id"],
                )
            ],
            # a Python-literal dict in the source (single quotes, True)
            "answers": [{"name": "get_camera_live_feed", "arguments": {"camera_id": "front_door", "hd": True}}],
            "category": "simple",  # the source's own "category" is a topic, not ours
        },
    ),
    "toolace": (
        SOURCES / "toolace.jsonl",
        {
            "id": "0-0",
            "messages": [
                {"role": "user", "content": "What's the weather in Paris in celsius, and what time is it there?"}
            ],
            "tools": [
                WEATHER_TOOLACE,
                tool(
                    "get_time",
                    "Current local time in a time zone.",
                    {"timezone": {"type": "string", "description": "IANA zone."}},
                    ["timezone"],
                ),
            ],
            "answers": [
                {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}},
                {"name": "get_time", "arguments": {"timezone": "Europe/Paris"}},
            ],
            "category": "parallel_multiple",
        },
    ),
    "bfcl": (
        BFCL_PARALLEL,
        {
            "id": "parallel_0",
            "messages": [
                {
                    "role": "user",
                    "content": "Find the area of a triangle with base 10 and height 5 units, "
                    "and of one with base 8 and height 3.",
                }
            ],
            "tools": [TRIANGLE],
            # unit: ["units", ""] gives "units"; unit: [""] alone leaves it out
            "answers": [
                {"name": "calculate_triangle_area", "arguments": {"base": 10, "height": 5, "unit": "units"}},
                {"name": "calculate_triangle_area", "arguments": {"base": 8, "height": 3}},
            ],
            "possible_answers": [
                {"calculate_triangle_area": {"base": [10], "height": [5], "unit": ["units", ""]}},
                {"calculate_triangle_area": {"base": [8], "height": [3], "unit": [""]}},
            ],
            "category": "parallel",
        },
    ),
    "openai": (
        SOURCES / "openai.jsonl",
        {
            "id": "oa-1-0",
            "messages": [
                {"role": "system", "content": "You are a weather bot."},
                {"role": "user", "content": "Is it warm in Lyon today? Use celsius."},
            ],
            "tools": [
                tool(
                    "get_weather",
                    "Current weather in a city.",
                    {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
                    ["city"],
                )
            ],
            # arguments was a JSON string
            "answers": [{"name": "get_weather", "arguments": {"city": "Lyon", "unit": "celsius"}}],
            "category": "simple",
        },
    ),
}


def test_every_converter_has_an_exact_case() -> None:
    assert set(EXACT) == set(CONVERTERS)


@pytest.mark.parametrize("source", list(EXACT))
def test_converter_gives_the_exact_canonical_row(source: str) -> None:
    path, expected = EXACT[source]
    assert rows_by_id(source, path)[expected["id"]] == expected


# --------------------------------------------------------------------------- every row of every sample file

# source, file, ids in order, categories in order, failures (row number, part of the reason), source rows,
# source rows that offer no tool and make no call.
SUMMARIES = [
    (
        "xlam", SOURCES / "xlam.json", ["0", "1"], ["parallel", "multiple"],
        [(3, "answers: not valid JSON")], 3, 0,
    ),
    (
        "glaive", SOURCES / "glaive.jsonl", ["0-0", "0-1", "1-0", "3-0", "3-1", "3-2"],
        ["simple", "irrelevance", "irrelevance", "multiple", "irrelevance", "multiple"],
        [(5, "assistant turn 0: cannot read the tool call")], 5, 1,
    ),
    (
        "hermes", SOURCES / "hermes.jsonl", ["hermes-a-0", "hermes-b-0", "hermes-b-1", "hermes-b-2"],
        ["simple", "parallel", "irrelevance", "multiple"],
        [(3, "assistant turn 0: a call names 'lock_door', which is not an offered tool")], 3, 0,
    ),
    (
        "toolace", SOURCES / "toolace.jsonl", ["0-0", "1-0", "1-1"], ["parallel_multiple", "multiple", "irrelevance"],
        [(3, "assistant turn 0: cannot read the tool call (not a list of Python calls")], 3, 0,
    ),
    (
        "openai", SOURCES / "openai.jsonl", ["oa-1-0", "oa-2-0", "oa-2-1", "3-0"],
        ["simple", "parallel", "irrelevance", "simple"],
        [(3, "messages[1]: cannot read the tool call"), (5, "not valid JSON")], 5, 0,
    ),
    (
        "bfcl", BFCL_PARALLEL, ["parallel_0", "parallel_1"], ["parallel", "parallel"],
        [(3, "no possible answer with id 'parallel_2' in the answers file")], 3, 0,
    ),
    ("bfcl", BFCL_IRRELEVANCE, ["irrelevance_0"], ["irrelevance"], [], 1, 0),
]  # fmt: skip


@pytest.mark.parametrize(
    ("source", "path", "ids", "categories", "failures", "source_rows", "no_tool_rows"),
    SUMMARIES,
    ids=[f"{case[0]}-{case[1].stem}" for case in SUMMARIES],
)
def test_sample_file_converts_row_by_row(
    source: str,
    path: Path,
    ids: list[str],
    categories: list[str],
    failures: list[tuple[int, str]],
    source_rows: int,
    no_tool_rows: int,
) -> None:
    result = convert_file(source, path)
    assert [row["id"] for row in result.rows] == ids
    assert [row["category"] for row in result.rows] == categories
    assert [failure.row for failure in result.failures] == [row for row, _ in failures]
    for failure, (_, reason) in zip(result.failures, failures, strict=True):
        assert reason in failure.reason
    assert (result.source_rows, result.converted, result.no_tool_rows) == (source_rows, len(ids), no_tool_rows)
    assert check_rows(result.rows) == []  # what a converter writes, the linter accepts


# ------------------------------------------------------------------------------------------------ multi-turn


def test_glaive_later_turns_carry_the_history_in_openai_layout() -> None:
    rows = rows_by_id("glaive", SOURCES / "glaive.jsonl")
    assert rows["3-2"]["messages"] == [
        {"role": "user", "content": "What's in the news in France today?"},
        {
            "role": "assistant",
            "content": "Let me look.",  # the text before <functioncall> stays
            "tool_calls": [
                {"type": "function", "function": {"name": "get_news_headlines", "arguments": {"country": "France"}}}
            ],
        },
        {"role": "tool", "content": '{"headlines": ["Strike in Paris", "Heatwave in Lyon"]}'},
        {"role": "assistant", "content": "Today's headlines: a strike in Paris and a heatwave in Lyon."},
        {"role": "user", "content": "And how is Apple's stock doing?"},
    ]
    assert rows["3-2"]["answers"] == [{"name": "get_stock_price", "arguments": {"symbol": "AAPL"}}]
    # The turn that answers the function response in words: calling nothing is right.
    assert rows["3-1"]["answers"] == [] and rows["3-1"]["messages"][-1]["role"] == "tool"


def test_hermes_parallel_calls_and_responses_become_one_message_each() -> None:
    row = rows_by_id("hermes", SOURCES / "hermes.jsonl")["hermes-b-1"]
    assert row["messages"][1:] == [
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"type": "function", "function": {"name": "get_stock_price", "arguments": {"symbol": "AAPL"}}},
                {"type": "function", "function": {"name": "get_stock_price", "arguments": {"symbol": "MSFT"}}},
            ],
        },
        {"role": "tool", "content": '{"symbol": "AAPL", "price": 191.2}'},
        {"role": "tool", "content": '{"symbol": "MSFT", "price": 402.5}'},
    ]
    assert row["answers"] == []


def test_openai_history_keeps_call_ids_and_drops_api_noise() -> None:
    row = rows_by_id("openai", SOURCES / "openai.jsonl")["oa-2-1"]
    assistant, first_result = row["messages"][1], row["messages"][2]
    assert assistant == {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"id": "call_a", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Rome"}}},
            {"id": "call_b", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}},
        ],
    }  # no "refusal": None
    assert first_result == {"role": "tool", "content": '{"temperature": 24}', "tool_call_id": "call_a"}


def test_toolace_tool_result_and_final_answer() -> None:
    rows = rows_by_id("toolace", SOURCES / "toolace.jsonl")
    assert rows["1-1"]["messages"][1:] == [
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}],
        },
        {"role": "tool", "content": '[{"name": "get_weather", "results": {"temperature": 3, "unit": "celsius"}}]'},
    ]


def test_toolace_tool_names_with_spaces_are_read() -> None:
    tools = [{"name": "Get Weather", "parameters": {"type": "dict", "properties": {"city": {"type": "string"}}}}]
    row = {
        "system": f"Here is a list of functions in JSON format that you can invoke:\n{json.dumps(tools)}.",
        "conversations": [
            {"from": "user", "value": "Paris weather?"},
            {"from": "assistant", "value": '[Get Weather(city="Paris (France)"), Get Weather(city="Nice")]'},
        ],
    }
    result = convert_rows("toolace", [row])
    assert result.failures == []
    assert result.rows[0]["answers"] == [
        {"name": "Get Weather", "arguments": {"city": "Paris (France)"}},
        {"name": "Get Weather", "arguments": {"city": "Nice"}},
    ]


def test_hermes_tools_written_one_per_line_instead_of_a_list() -> None:
    first = {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}
    second = {"type": "function", "function": {"name": "g", "parameters": {"type": "object", "properties": {}}}}
    row = {
        "conversations": [
            {"from": "system", "value": f"<tools>\n{first!r}\n{json.dumps(second)}\n</tools>"},
            {"from": "human", "value": "Call g."},
            {"from": "gpt", "value": "<tool_call>\n{'name': 'g', 'arguments': {}}\n</tool_call>"},
        ]
    }
    result = convert_rows("hermes", [row])
    assert result.failures == []
    assert [tool["function"]["name"] for tool in result.rows[0]["tools"]] == ["f", "g"]
    assert result.rows[0]["category"] == "multiple"


def test_conversation_without_tools_or_calls_gives_no_row_but_is_counted() -> None:
    row = {"system": "SYSTEM: You are a helpful assistant.", "chat": "USER: Hi\n\n\nASSISTANT: Hello! <|endoftext|>"}
    result = convert_rows("glaive", [row])
    assert (result.rows, result.failures, result.no_tool_rows) == ([], [], 1)
    assert result.summary() == "converted 0 rows from 1 source row; 1 source row offered no tool and made no call"


@pytest.mark.parametrize(
    ("source", "row", "reason"),
    [
        ("glaive", {"system": "SYSTEM: hi", "chat": "USER: Hi"}, "the conversation has no assistant turn"),
        ("glaive", {"system": 'SYSTEM: {"name": ', "chat": "USER: Hi"}, "system: tool definition 0 is not valid JSON"),
        ("glaive", {"chat": "USER: Hi"}, "system: expected str, got NoneType"),
        ("hermes", {"conversations": [{"from": "robot", "value": "x"}]}, "conversations[0].from: unknown speaker"),
        ("hermes", {"conversations": ["hi"]}, 'conversations[0]: expected {"from", "value"}'),
        ("xlam", {"query": "q", "tools": '[{"name": 3}]', "answers": "[]"}, "tools[0].name: expected a non-empty"),
        (
            "xlam",
            {"query": "q", "tools": "[]", "answers": '[{"name": "f"}]'},
            "a call names 'f', which is not an offered tool (offered: none)",
        ),
        ("openai", {"messages": [{"role": "wizard", "content": "x"}]}, "messages[0]: expected a message with role"),
        (
            "openai",
            {"messages": [{"role": "assistant", "content": "Hi"}], "tools": [EXACT["openai"][1]["tools"][0]]},
            "assistant turn 0 comes before any other message",
        ),
        (
            "bfcl",
            {
                "id": "x",
                "question": [[{"role": "user", "content": "a"}], [{"role": "user", "content": "b"}]],
                "function": [],
            },
            "2 turns; multi-turn BFCL entries are not supported",
        ),
    ],
)
def test_unconvertible_rows_are_reported_with_the_reason(source: str, row: dict[str, Any], reason: str) -> None:
    result = convert_rows(source, [row])
    assert result.rows == []
    assert len(result.failures) == 1 and result.failures[0].row == 1
    assert reason in result.failures[0].reason


# ------------------------------------------------------------------------------------------------------- BFCL


def test_bfcl_answers_take_the_first_acceptable_value_and_resolve_object_parameters() -> None:
    row = rows_by_id("bfcl", BFCL_PARALLEL)["parallel_1"]
    assert row["answers"] == [
        # floor: ["", "first", "1st"] -> "first"; details.notes: [""] only -> left out
        {"name": "book_room", "arguments": {"details": {"location": "Room 2", "duration": 30}, "floor": "first"}},
        {"name": "book_room", "arguments": {"details": {"location": "Room 5", "duration": 60}, "floor": "first"}},
    ]
    ground_truth = load_ground_truth(str(BFCL_PARALLEL_ANSWERS))
    assert row["possible_answers"] == ground_truth["parallel_1"]["ground_truth"]


@pytest.mark.parametrize(
    ("name", "category"),
    [
        ("BFCL_v3_simple.json", "simple"),
        ("BFCL_v3_multiple.json", "multiple"),
        ("BFCL_v3_parallel.json", "parallel"),
        ("data/BFCL_v3_parallel_multiple.json", "parallel_multiple"),
        ("BFCL_v3_live_multiple.json", "multiple"),
        ("BFCL_v3_live_irrelevance.json", "irrelevance"),
        ("BFCL_v3_irrelevance.json", "irrelevance"),
        ("BFCL_v3_java.json", "simple"),
        ("BFCL_v4_multi_turn_base.json", "multi_turn"),
        ("BFCL_v4_multi_turn_long_context.json", "multi_turn"),
        ("my_questions.jsonl", None),
    ],
)
def test_bfcl_category_from_the_file_name(name: str, category: str | None) -> None:
    assert bfcl_category(name) == category


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("BFCL_v3_live_relevance.json", "has no gold calls"),
        ("BFCL_v4_multi_turn_composite.json", "multi_turn_composite set is not one of multi_turn_base"),
    ],
)
def test_bfcl_sets_we_cannot_convert_are_refused(name: str, message: str) -> None:
    with pytest.raises(DataError, match=message):
        bfcl_category(name)


def test_bfcl_without_a_file_category_derives_it_from_the_answers() -> None:
    result = convert_file("bfcl", BFCL_PARALLEL, category=None)
    assert [row["category"] for row in result.rows] == ["parallel", "parallel"]


# ---------------------------------------------------------------------------------------------- the readers


def test_parquet_reads_like_json(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = json.loads((SOURCES / "xlam.json").read_text())
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "xlam.parquet")
    from_parquet = convert_rows("xlam", read_source(str(tmp_path / "xlam.parquet")))
    from_json = convert_rows("xlam", read_source(str(SOURCES / "xlam.json")))
    assert from_parquet.rows == from_json.rows
    assert from_parquet.failures == from_json.failures == [RowFailure(3, from_json.failures[0].reason)]


def test_json_array_items_that_are_not_objects_are_reported(tmp_path: Path) -> None:
    path = tmp_path / "rows.json"
    path.write_text('[{"a": 1}, 5]')
    items = list(read_source(str(path)))
    assert items[0] == (1, {"a": 1})
    assert items[1][0] == 2 and isinstance(items[1][1], DataError)


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("missing.jsonl", None, "missing.jsonl: no such file"),
        ("missing.parquet", None, "missing.parquet: no such file"),
        ("broken.json", '[{"a": 1},', "broken.json: not valid JSON"),
        ("table.csv", "a,b\n1,2\n", "table.csv: unsupported file type .csv"),
        ("fake.parquet", "not parquet", "fake.parquet: not a readable Parquet file"),
    ],
)
def test_bad_source_files_raise_naming_the_file(tmp_path: Path, name: str, content: str | None, message: str) -> None:
    if content is not None:
        (tmp_path / name).write_text(content)
    with pytest.raises(DataError, match=message):
        list(read_source(str(tmp_path / name)))


def test_a_name_that_is_not_a_file_is_loaded_from_the_hub(monkeypatch: pytest.MonkeyPatch) -> None:
    import datasets

    calls = []

    def fake_load_dataset(name: str, split: str) -> list[dict[str, Any]]:
        calls.append((name, split))
        if name == "nobody/nothing":
            raise ConnectionError("Couldn't reach 'nobody/nothing' on the Hub")
        return [{"query": "q", "tools": "[]", "answers": "[]"}]

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    assert list(read_source("Salesforce/xlam-function-calling-60k", split="test")) == [
        (1, {"query": "q", "tools": "[]", "answers": "[]"})
    ]
    with pytest.raises(DataError, match="nobody/nothing: not a local file, and not loadable as a Hugging Face"):
        read_source("nobody/nothing")
    assert calls == [("Salesforce/xlam-function-calling-60k", "test"), ("nobody/nothing", "train")]


def test_convert_rows_api() -> None:
    with pytest.raises(ValueError, match="unknown source format 'sharegpt'"):
        convert_rows("sharegpt", [])
    taken: list[dict[str, Any]] = []
    source = [(7, json.loads((SOURCES / "xlam.json").read_text())[0]), (8, DataError("not valid JSON")), (9, [1])]
    result = convert_rows("xlam", source, sink=taken.append)
    assert result.rows == [] and [row["id"] for row in taken] == ["0"]  # the sink took them
    assert result.failures == [RowFailure(8, "not valid JSON"), RowFailure(9, "expected an object, got list")]
    assert result.summary() == "converted 1 row from 3 source rows; 2 source rows could not be converted (see above)"


# ---------------------------------------------------------------------------------------------- the command

CLI_CASES = [
    ("xlam", SOURCES / "xlam.json", []),
    ("glaive", SOURCES / "glaive.jsonl", []),
    ("hermes", SOURCES / "hermes.jsonl", []),
    ("toolace", SOURCES / "toolace.jsonl", []),
    ("openai", SOURCES / "openai.jsonl", []),
    ("bfcl", BFCL_PARALLEL, ["--answers", str(BFCL_PARALLEL_ANSWERS)]),
    ("bfcl", BFCL_IRRELEVANCE, []),
]


@pytest.mark.parametrize(("source", "path", "extra"), CLI_CASES, ids=[f"{c[0]}-{c[1].stem}" for c in CLI_CASES])
def test_convert_command_writes_rows_and_reports_failures(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], source: str, path: Path, extra: list[str]
) -> None:
    output = tmp_path / "out" / "rows.jsonl"
    assert main(["convert", "--from", source, str(path), *extra, "--output", str(output)]) == 0
    captured = capsys.readouterr()
    expected = convert_file(source, path)
    assert [row for _, row in read_jsonl(output)] == expected.rows
    assert captured.out == f"{expected.summary()}; wrote {output}\n"
    assert captured.err.splitlines() == [f"{path}: row {f.row}: {f.reason}" for f in expected.failures]

    # The converted file lints clean.
    assert main(["check-data", str(output)]) == 0


def test_convert_summary_line_counts_every_source_row(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    output = tmp_path / "glaive.jsonl"
    assert main(["convert", "--from", "glaive", str(SOURCES / "glaive.jsonl"), "-o", str(output)]) == 0
    assert capsys.readouterr().out == (
        "converted 6 rows from 5 source rows; 1 source row offered no tool and made no call; "
        f"1 source row could not be converted (see above); wrote {output}\n"
    )


def test_convert_strict_fails_on_any_unconvertible_row(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    output = tmp_path / "out.jsonl"
    assert main(["convert", "--from", "xlam", str(SOURCES / "xlam.json"), "-o", str(output), "--strict"]) == 1
    assert "row 3: answers: not valid JSON" in capsys.readouterr().err
    assert len(list(read_jsonl(output))) == 2  # what converted is still written


def test_convert_fails_when_nothing_converts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Hermes rows read as xLAM rows: every row fails.
    assert main(["convert", "--from", "xlam", str(SOURCES / "hermes.jsonl"), "-o", str(tmp_path / "o.jsonl")]) == 1
    captured = capsys.readouterr()
    assert captured.err.count("query: expected str, got NoneType") == 3
    assert "converted 0 rows from 3 source rows; 3 source rows could not be converted" in captured.out


# A category name is read from the installed bfcl-eval; without it, the message says that instead.
NO_SUCH_CATEGORY = (
    "no_such_category: no such BFCL category in"
    if importlib.util.find_spec("bfcl_eval")
    else "no_such_category: no such file, and bfcl-eval is not installed to read it as a BFCL category"
)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--from", "xlam", "{tmp}/missing.json"], "grpo-tools convert: {tmp}/missing.json: no such file"),
        (
            ["--from", "bfcl", "{tmp}/BFCL_v3_parallel.json"],
            "no possible-answer file at {tmp}/possible_answer/BFCL_v3_parallel.json",
        ),
        (["--from", "bfcl", "no_such_category"], NO_SUCH_CATEGORY),
        (["--from", "bfcl", str(BFCL_PARALLEL), "--answers", "{tmp}/nope.json"], "{tmp}/nope.json: no such file"),
        (["--from", "bfcl", "{tmp}/BFCL_v3_live_relevance.json"], "has no gold calls to convert"),
        (["--from", "openai", str(SOURCES / "openai.jsonl"), "-o", "{tmp}/file/out.jsonl"], "cannot be written"),
    ],
)
def test_convert_bad_input_gives_one_message_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    (tmp_path / "file").write_text("")
    (tmp_path / "BFCL_v3_parallel.json").write_text(BFCL_PARALLEL.read_text())  # no possible_answer/ beside it
    args = [arg.format(tmp=tmp_path) for arg in args]
    if "-o" not in args:
        args += ["--output", str(tmp_path / "out.jsonl")]
    assert main(["convert", *args]) == 2
    captured = capsys.readouterr()
    assert message.format(tmp=tmp_path) in captured.err
    assert len(captured.err.splitlines()) == 1 and "Traceback" not in captured.err
    assert captured.out == ""


def test_bfcl_answers_file_with_a_bad_row_names_file_and_row(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    answers = tmp_path / "answers.json"
    answers.write_text('{"id": "parallel_0", "ground_truth": []}\n{"id": 5}\n')
    args = ["--from", "bfcl", str(BFCL_PARALLEL), "--answers", str(answers), "-o", str(tmp_path / "o.jsonl")]
    assert main(["convert", *args]) == 2
    assert f'{answers}: row 2: expected {{"id", "ground_truth": [...]}}' in capsys.readouterr().err


@pytest.mark.parametrize(
    "args",
    [
        ["--from", "sharegpt", "x.json", "-o", "o.jsonl"],  # not in the registry
        ["--from", "xlam", "x.json", "--answers", "a.json", "-o", "o.jsonl"],  # --answers is BFCL's
        ["--from", "xlam", "x.json"],  # no --output
    ],
)
def test_convert_usage_errors_exit_2(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as raised:
        main(["convert", *args])
    assert raised.value.code == 2
    assert "usage: grpo-tools convert" in capsys.readouterr().err


def test_convert_help_lists_every_registered_format(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as raised:
        main(["convert", "--help"])
    assert raised.value.code == 0
    help_text = capsys.readouterr().out
    assert "{" + ",".join(CONVERTERS) + "}" in help_text
    for name, converter in CONVERTERS.items():
        assert f"  {name:<8}  {converter.description}" in help_text


def test_bfcl_finds_the_possible_answer_file_beside_the_questions(tmp_path: Path) -> None:
    # BFCL's layout: possible_answer/<same file name> beside the question file; --answers is not needed.
    output = tmp_path / "o.jsonl"
    assert main(["convert", "--from", "bfcl", str(BFCL_PARALLEL), "-o", str(output)]) == 0
    assert [row["id"] for _, row in read_jsonl(output)] == ["parallel_0", "parallel_1"]


def test_bfcl_category_name_reads_the_installed_package(tmp_path: Path) -> None:
    pytest.importorskip("bfcl_eval", reason="bfcl-eval is not installed (`make install` installs it)")
    output = tmp_path / "simple.jsonl"
    assert main(["convert", "--from", "bfcl", "simple_python", "--output", str(output)]) == 0
    rows = [row for _, row in read_jsonl(output)]
    assert len(rows) == 400 and rows[0]["id"] == "simple_python_0" and rows[0]["category"] == "simple"
    assert main(["convert", "--from", "bfcl", "live_irrelevance", "--output", str(output)]) == 0
    assert {row["category"] for _, row in read_jsonl(output)} == {"irrelevance"}


def test_bfcl_gold_answers_hold_plain_values_inside_lists_of_objects() -> None:
    # live_multiple_63-25-0 and live_multiple_121-46-0: acceptable-value lists inside objects, inside lists of
    # objects; inside an acceptable object the values are plain (BFCL compares one level deep).
    tool = {
        "name": "order",
        "parameters": {
            "type": "dict",
            "required": ["items"],
            "properties": {
                "items": {"type": "array", "items": {"type": "dict"}},
                "ego": {
                    "type": "dict",
                    "properties": {"position": {"type": "dict"}, "orientation": {"type": "float"}},
                },
            },
        },
    }
    row = {"id": "o-1", "question": [[{"role": "user", "content": "Order."}]], "function": [tool]}
    truth = {"o-1": {"id": "o-1", "ground_truth": [{"order": {
        "items": [[{"item": ["burgers"], "quantity": [5]}, {"item": ["chicken wings", "wings"], "quantity": ["", 6]}]],
        "ego": [{"position": [{"lateral": 10.5, "longitudinal": 50}], "orientation": [30]}]}}]}}  # fmt: skip
    result = convert_rows("bfcl", [row], ground_truth=truth, category="simple")
    assert result.failures == []
    assert result.rows[0]["answers"] == [{"name": "order", "arguments": {
        "items": [{"item": "burgers", "quantity": 5}, {"item": "chicken wings", "quantity": 6}],
        "ego": {"position": {"lateral": 10.5, "longitudinal": 50}, "orientation": 30}}}]  # fmt: skip
