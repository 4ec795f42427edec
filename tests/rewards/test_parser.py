"""Tests for `grpo_tools.rewards.parsing`: reading tool calls in every format, the quirks real models write, and the
promise that no text, however malformed or large, makes the parser raise or hang."""

import json
import warnings

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from grpo_tools.rewards.parsing import PARSERS, ParseResult, ToolCall, parse_tool_calls


WEATHER = ToolCall("get_weather", {"city": "Lyon", "unit": "celsius"})
TIME = ToolCall("get_time", {"zone": "CET"})

TIMER_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "set_timer",
            "parameters": {
                "type": "object",
                "properties": {
                    "minutes": {"type": "integer"},
                    "ratio": {"type": "number"},
                    "loud": {"type": "boolean"},
                    "tags": {"type": "array", "items": {"type": "string"}},
                    "label": {"type": "string"},
                },
            },
        },
    }
]


@pytest.mark.parametrize(
    ("text", "calls", "format"),
    [
        # Hermes / Qwen2.5 / Qwen3
        (
            '<tool_call>{"name": "get_weather", "arguments": {"city": "Lyon", "unit": "celsius"}}</tool_call>',
            [WEATHER],
            "hermes",
        ),
        (
            'Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Lyon", "unit": "celsius"}}\n'
            '</tool_call>\n<tool_call>\n{"name": "get_time", "arguments": {"zone": "CET"}}\n</tool_call>',
            [WEATHER, TIME],
            "hermes",
        ),
        (
            '<think>I could call <tool_call>{"name": "nope", "arguments": {}}</tool_call>.</think>\n'
            '<tool_call>{"name": "get_time", "arguments": {"zone": "CET"}}</tool_call>',
            [TIME],
            "hermes",
        ),
        # Tolerated: Python-literal dicts, arguments as a JSON string, the closing tag inside a string value
        (
            "<tool_call>{'name': 'get_weather', 'arguments': {'city': 'Lyon', 'unit': 'celsius'}}</tool_call>",
            [WEATHER],
            "hermes",
        ),
        (
            '<tool_call>{"name": "get_weather", "arguments": "{\\"city\\": \\"Lyon\\", \\"unit\\": \\"celsius\\"}"}</tool_call>',
            [WEATHER],
            "hermes",
        ),
        (
            '<tool_call>{"name": "echo", "arguments": {"text": "wrap it in </tool_call> tags"}}</tool_call>',
            [ToolCall("echo", {"text": "wrap it in </tool_call> tags"})],
            "hermes",
        ),
        (
            "<tool_call>{'name': 'echo', 'arguments': {'text': 'a </tool_call> b', 'ok': True}}</tool_call>",
            [ToolCall("echo", {"text": "a </tool_call> b", "ok": True})],
            "hermes",
        ),
        ('<tool_call>{"name": "get_time", "arguments": {"zone": "CET"}}', [TIME], "hermes"),  # complete, tag cut off
        ('<tool_call>{"name": "ping"}</tool_call>', [ToolCall("ping", {})], "hermes"),
        # Llama 3.x JSON
        ('{"name": "get_weather", "parameters": {"city": "Lyon", "unit": "celsius"}}', [WEATHER], "json"),
        (
            '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Lyon", "unit": "celsius"}}; '
            '{"name": "get_time", "parameters": {"zone": "CET"}}<|eom_id|>',
            [WEATHER, TIME],
            "llama",
        ),
        ('{"type": "function", "name": "get_time", "parameters": {"zone": "CET"}}', [TIME], "json"),
        # Mistral
        (
            '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Lyon", "unit": "celsius"}}]</s>',
            [WEATHER],
            "mistral",
        ),
        (
            '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Lyon", "unit": "celsius"}, "id": "abc123XYZ"}, '
            '{"name": "get_time", "arguments": {"zone": "CET"}}]',
            [WEATHER, TIME],
            "mistral",
        ),
        (
            '[TOOL_CALLS]get_weather[ARGS]{"city": "Lyon", "unit": "celsius"}[TOOL_CALLS]get_time[ARGS]{"zone": "CET"}',
            [WEATHER, TIME],
            "mistral",
        ),
        ('[TOOL_CALLS]get_time[CALL_ID]a1b2c3d4e[ARGS]{"zone": "CET"}', [TIME], "mistral"),
        # pythonic
        ('[get_weather(city="Lyon", unit="celsius"), get_time(zone="CET")]', [WEATHER, TIME], "pythonic"),
        ("get_time(zone='CET')", [TIME], "pythonic"),
        (
            "[math.factorial(n=5), f(xs=[1, 2.5, -3], d={'k': None}, t=(1, 2), flag=true)]",
            [
                ToolCall("math.factorial", {"n": 5}),
                ToolCall("f", {"xs": [1, 2.5, -3], "d": {"k": None}, "t": [1, 2], "flag": True}),
            ],
            "pythonic",
        ),
        ('<|python_start|>[get_time(zone="CET")]<|python_end|>', [TIME], "llama"),
        # bare JSON, code fences, OpenAI-style objects
        ('[{"name": "get_weather", "arguments": {"city": "Lyon", "unit": "celsius"}}]', [WEATHER], "json"),
        ('```json\n{"name": "get_time", "arguments": {"zone": "CET"}}\n```', [TIME], "json"),
        (
            '{"type": "function", "function": {"name": "get_time", "arguments": "{\\"zone\\": \\"CET\\"}"}}',
            [TIME],
            "json",
        ),
        ('{"tool_calls": [{"function": {"name": "get_time", "arguments": {"zone": "CET"}}}]}', [TIME], "json"),
    ],
)
def test_parses_each_format(text, calls, format):
    result = parse_tool_calls(text)
    assert result == ParseResult(tuple(calls), (), format)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "<tool_call>\n<function=set_timer>\n<parameter=minutes>\n10\n</parameter>\n<parameter=ratio>\n2\n"
            '</parameter>\n<parameter=loud>\nTrue\n</parameter>\n<parameter=tags>\n["a", "b"]\n</parameter>\n'
            "<parameter=label>\n  tea time \n</parameter>\n</function>\n</tool_call>",
            {"minutes": 10, "ratio": 2, "loud": True, "tags": ["a", "b"], "label": "  tea time "},
        ),
        # A value that does not fit its type stays text, for the schema reward to flag.
        ("<function=set_timer>\n<parameter=minutes>\nten\n</parameter>\n</function>", {"minutes": "ten"}),
        ("<function=set_timer>\n<parameter=ratio>\n0.5\n</parameter>\n</function>", {"ratio": 0.5}),
    ],
)
def test_qwen3_coder_values_are_cast_by_the_schema(text, expected):
    result = parse_tool_calls(text, tools=TIMER_TOOLS)
    assert result.calls == (ToolCall("set_timer", expected),)
    assert result.errors == ()


def test_qwen3_coder_without_tools_keeps_text():
    text = "<function=set_timer>\n<parameter=minutes>\n10\n</parameter>\n</function>"
    assert parse_tool_calls(text).calls == (ToolCall("set_timer", {"minutes": "10"}),)


@pytest.mark.parametrize(
    "completion",
    [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"type": "function", "function": {"name": "get_time", "arguments": '{"zone": "CET"}'}}],
        },
        {"role": "assistant", "tool_calls": [{"function": {"name": "get_time", "arguments": {"zone": "CET"}}}]},
        {"role": "assistant", "content": '<tool_call>{"name": "get_time", "arguments": {"zone": "CET"}}</tool_call>'},
        [
            {
                "role": "assistant",
                "content": '<tool_call>{"name": "get_time", "arguments": {"zone": "CET"}}</tool_call>',
            }
        ],
        {"role": "assistant", "content": [{"type": "text", "text": '[get_time(zone="CET")]'}]},
    ],
)
def test_message_dicts_and_conversational_completions(completion):
    assert parse_tool_calls(completion).calls == (TIME,)


def test_conversation_reads_only_assistant_messages_in_order():
    conversation = [
        {"role": "assistant", "content": '[get_weather(city="Lyon", unit="celsius")]'},
        {"role": "tool", "content": '[get_time(zone="UTC")]'},
        {"role": "assistant", "content": '[get_time(zone="CET")]'},
    ]
    assert parse_tool_calls(conversation).calls == (WEATHER, TIME)


@pytest.mark.parametrize(
    "text",
    [
        "The weather in Lyon is mild today.",
        "",
        "   ",
        "[]",
        "I would call get_weather, but I need a city.",
        "<think>calling [f(a=1)]",
    ],
)
def test_text_without_calls_is_no_attempt(text):
    result = parse_tool_calls(text)
    assert result.calls == () and result.errors == () and not result.attempted


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('<tool_call>{"name": "get_weather", "arguments": {"city": "Ly', "not valid JSON"),
        ("<tool_call>get_weather(city='Lyon')</tool_call>", "does not hold a JSON object"),
        ('<tool_call>{"arguments": {"city": "Lyon"}}</tool_call>', "no 'name'"),
        ('<tool_call>{"name": "f", "arguments": [1, 2]}</tool_call>', "arguments must be an object"),
        ('<tool_call>{"name": "f", "arguments": {}}} </tool_call>', "unexpected text"),
        ('<tool_call>{"name": "f", "arguments": "{not json"}</tool_call>', "not valid JSON"),
        ("[get_weather('Lyon')]", "only keyword arguments"),
        ("[get_weather(city=lookup('Lyon'))]", "not a literal"),
        ("[get_weather(**kwargs)]", "only keyword arguments"),
        ("[get_weather(city=", "not a list of Python calls"),
        ("[TOOL_CALLS]get_weather", "neither JSON nor name[ARGS]"),
        ('[TOOL_CALLS]get_weather[ARGS]{"city": ', "is not valid JSON"),
        ("<function=set_timer>\n<parameter=minutes>\n10\n", "unterminated"),
        ('{"name": "get_weather", "arguments": {"city": "Lyon"', "invalid JSON"),
    ],
)
def test_malformed_calls_are_parse_errors(text, message):
    result = parse_tool_calls(text)
    assert result.calls == ()
    assert result.attempted
    assert any(message in error for error in result.errors), result.errors


def test_one_bad_block_does_not_hide_the_good_ones():
    text = (
        '<tool_call>{"name": "get_time", "arguments": {"zone": "CET"}}</tool_call>'
        '<tool_call>{"name": broken}</tool_call>'
        '<tool_call>{"name": "get_weather", "arguments": {"city": "Lyon", "unit": "celsius"}}</tool_call>'
    )
    result = parse_tool_calls(text)
    assert result.calls == (TIME, WEATHER)
    assert len(result.errors) == 1


def test_explicit_format_reads_only_that_format():
    text = '[get_time(zone="CET")]'
    assert parse_tool_calls(text, format="pythonic").calls == (TIME,)
    assert parse_tool_calls(text, format="hermes") == ParseResult()
    assert parse_tool_calls(text, format="json").errors  # not JSON: an attempt that failed


def test_an_escape_python_does_not_know_keeps_its_backslash_silently_even_with_warnings_as_errors():
    text = r'[find(pattern="\d+ items")]'  # Python 3.12 warns of the escape; the text is a model's, not code
    expected = (ToolCall("find", {"pattern": r"\d+ items"}),)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert parse_tool_calls(text, format="pythonic").calls == expected
    assert caught == []
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # as a program run with -W error: the warning would refuse the call
        assert parse_tool_calls(text, format="pythonic").calls == expected


def test_unknown_format_is_a_programming_error():
    with pytest.raises(ValueError, match="unknown tool-call format 'yaml'"):
        parse_tool_calls("x", format="yaml")
    assert set(PARSERS) == {"hermes", "llama", "mistral", "pythonic", "qwen3_coder", "json", "openai"}


def test_nothing_is_evaluated():
    # Names that would have side effects if evaluated are read as text or rejected, never run.
    result = parse_tool_calls("[f(x=__import__('os').system('false'))]")
    assert result.calls == () and "not a literal" in result.errors[0]
    result = parse_tool_calls("<tool_call>{'name': 'f', 'arguments': open('/etc/passwd')}</tool_call>")
    assert result.calls == () and result.errors


HOSTILE = [
    "[" * 100_000,
    "{" * 100_000,
    "<tool_call>" + "[" * 100_000,
    "<tool_call>{" * 90_000,
    "<tool_call>{'a" + "</tool_call>" * 90_000,
    "[TOOL_CALLS]" * 90_000,
    "<function=" * 100_000,
    "f(" * 100_000,
    '{"name": "f", "arguments": ' + '{"a":' * 200_000,
    "<tool_call>" + json.dumps({"name": "f", "arguments": {"s": "x" * 1_000_000}}) + "</tool_call>",
    "[f(s='" + "y" * 1_000_000 + "')]",
]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("text", HOSTILE, ids=range(len(HOSTILE)))
def test_huge_and_deeply_nested_inputs_never_raise(text):
    result = parse_tool_calls(text)
    assert isinstance(result, ParseResult)
    assert all(isinstance(error, str) for error in result.errors)


def test_one_megabyte_string_argument_is_read_whole():
    text = "<tool_call>" + json.dumps({"name": "f", "arguments": {"s": "x" * 1_000_000}}) + "</tool_call>"
    (call,) = parse_tool_calls(text).calls
    assert len(call.arguments["s"]) == 1_000_000


MARKERS = ["<tool_call>", "</tool_call>", "{", "}", "[", "]", '"name"', ":", ",", '"arguments"', "'", '"', "(", ")",
           "=", "[TOOL_CALLS]", "[ARGS]", "<|python_tag|>", "<function=", "<parameter=", "</parameter>",
           "</function>", "<think>", "</think>", ";", "f", "1", "true", "\\", "\n"]  # fmt: skip


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(st.text(max_size=300), st.lists(st.sampled_from(MARKERS), max_size=60).map("".join)))
def test_arbitrary_text_never_raises(text):
    result = parse_tool_calls(text)
    assert isinstance(result, ParseResult)
    for call in result.calls:
        assert isinstance(call.name, str) and call.name
        assert isinstance(call.arguments, dict)


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20,
)


@settings(max_examples=200)
@given(
    st.text(min_size=1, max_size=20).filter(str.strip), st.dictionaries(st.text(max_size=10), JSON_VALUES, max_size=5)
)
def test_hermes_round_trips_any_json_arguments(name, arguments):
    text = "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"
    assert parse_tool_calls(text, format="hermes").calls == (ToolCall(name.strip(), arguments),)


@pytest.mark.parametrize(
    ("text", "calls"),
    [
        ('<think>maybe [f(a=1)]</think>[get_time(zone="CET")]', [TIME]),
        ('I opened it in the prompt.</think>\n<tool_call>{"name": "get_time", "arguments": {"zone": "CET"}}</tool_call>', [TIME]),
        ('<tool_call>{"name": "say", "arguments": {"text": "<think> and </think> are tags"}}</tool_call>',
         [ToolCall("say", {"text": "<think> and </think> are tags"})]),
        ('<tool_call>{"name": "get_time", "arguments": {"zone": "CET"}}</tool_call>\n</think>', [TIME]),
        ('<think>\n<tool_call>{"name": "get_time", "arguments": {"zone": "CET"}}</tool_call>', []),  # all reasoning
    ],
)  # fmt: skip
def test_reasoning_is_dropped_but_tags_in_values_are_kept(text, calls):
    assert parse_tool_calls(text).calls == tuple(calls)
