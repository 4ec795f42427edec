"""Tests for `grpo_tools.rewards.parsing.fastjson`: `loads` gives exactly what `json.loads` gives (value, types,
errors), where orjson alone would not (NaN, infinities, integers beyond 64 bits, lone surrogates), and Hermes calls
holding such values parse as `json` reads them."""

import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from grpo_tools.rewards.parsing import parse_tool_calls
from grpo_tools.rewards.parsing.fastjson import loads


def _same(left, right) -> bool:
    """Equal as JSON values, with equal types at every depth (1 and 1.0 differ) and NaN equal to NaN."""
    if type(left) is not type(right):
        return False
    if isinstance(left, dict):
        return list(left) == list(right) and all(_same(left[key], right[key]) for key in left)
    if isinstance(left, list):
        return len(left) == len(right) and all(_same(a, b) for a, b in zip(left, right, strict=True))
    if isinstance(left, float) and math.isnan(left):
        return math.isnan(right)
    return left == right


@pytest.mark.parametrize(
    "text",
    [
        '{"city": "Lyon", "days": [1, 2.5, true, null]}',
        '{"id": 123456789012345678901234567890}',  # beyond 64 bits: orjson would give a float
        '{"id": -9223372036854775809, "max": 18446744073709551615}',
        '{"ratio": 0.12345678901234567890123}',  # 19 digits in a row, a float: json reads it too
        '{"phone": "0123456789012345678901"}',
        "[NaN, Infinity, -Infinity]",  # orjson rejects these, json reads them
        '{"x": 1e400, "y": -1e400}',
        '{"s": "\\ud800"}',  # an escaped lone surrogate
        '{"s": "\ud800"}',  # a raw one
        '{"a": 1, "a": 2}',  # the last duplicate wins, in both
        ' \n{"a": "é\\u00e9\u2028"} \t',
    ],
)
def test_loads_gives_what_json_gives(text: str) -> None:
    assert _same(loads(text), json.loads(text))


@pytest.mark.parametrize("text", ["", "{", '{"a": 1,}', "[1, 2] x", "01", '"\x01"', "\xa0{}", "{'a': 1}"])
def test_loads_raises_where_json_raises(text: str) -> None:
    with pytest.raises(ValueError) as ours:
        loads(text)
    with pytest.raises(ValueError) as theirs:
        json.loads(text)
    assert str(ours.value) == str(theirs.value)  # json's own message, which the gold-row errors quote


JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
)


@given(JSON_VALUES)
def test_loads_agrees_with_json_on_any_value(value) -> None:
    text = json.dumps(value)
    assert _same(loads(text), json.loads(text))


@given(JSON_VALUES)
def test_hermes_arguments_read_as_json_reads_them(value) -> None:
    text = json.dumps({"name": "f", "arguments": {"v": value}})
    (call,) = parse_tool_calls(f"<tool_call>\n{text}\n</tool_call>").calls
    assert _same(call.arguments, json.loads(text)["arguments"])


def test_hermes_call_with_a_big_integer_keeps_it_exact() -> None:
    text = '<tool_call>\n{"name": "pay", "arguments": {"account": 123456789012345678901234567890}}\n</tool_call>'
    (call,) = parse_tool_calls(text).calls
    assert call.arguments["account"] == 123456789012345678901234567890
    assert type(call.arguments["account"]) is int


@pytest.mark.parametrize("offset", range(9))
def test_long_text_with_a_big_integer_at_any_offset_is_read_as_json_reads_it(offset: int) -> None:
    # Long texts (a row's tools) are first sampled every ninth character: 19 digits, the shortest integer orjson
    # reads as a float, cannot slip between.
    text = json.dumps({"description": "x" * (600 + offset)})[:-1] + ', "id": -9999999999999999999}'
    assert _same(loads(text), json.loads(text))
    assert type(loads(text)["id"]) is int and loads(text)["id"] == -9999999999999999999


def test_hermes_call_with_a_big_integer_inside_a_list_keeps_it_exact() -> None:
    text = '<tool_call>\n{"name": "pay", "arguments": {"to": "x", "ids": [1, 123456789012345678901234567890]}}\n</tool_call>'
    (call,) = parse_tool_calls(text).calls
    assert call.arguments["ids"] == [1, 123456789012345678901234567890]
    assert type(call.arguments["ids"][1]) is int


@pytest.mark.parametrize("run", [18, 19, 20])
@pytest.mark.parametrize("length", [100, 600, 5000])
def test_no_nineteen_digits_finds_every_run_at_any_offset(run, length) -> None:
    """A run of 19 digits in a JSONL line is found wherever it starts (the long-line shortcut looks at every ninth
    byte first), and 18 digits in a row are not such a run."""
    from grpo_tools.rewards.parsing.fastjson import no_nineteen_digits

    for start in range(length - run):
        line = b'{"a": "' + b"x" * start + b"7" * run + b"y" * (length - run - start) + b'", "b": 2025}'
        assert no_nineteen_digits(line) is (run < 19), start
