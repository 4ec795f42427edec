"""Tests for grpo_tools.rewards.schemas: reading OpenAI, bare, BFCL and xLAM tool definitions into JSON Schema, the errors
malformed definitions raise, argument validation (error kinds, paths, messages, strict integer/number/bool types,
unknown parameters) and the cheap `tool_names`."""

from __future__ import annotations

import copy
import json
import pickle
from typing import Any

import pytest

from grpo_tools.rewards.schemas import (
    ArgumentError,
    SchemaError,
    Tool,
    normalize_tool,
    normalize_tools,
    tool_names,
    validate_arguments,
)


WEATHER_SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "description": "City name"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
    },
    "required": ["city"],
}
WEATHER_OPENAI = {
    "type": "function",
    "function": {"name": "get_weather", "description": "Current weather", "parameters": WEATHER_SCHEMA},
}
NO_ARGUMENTS = {"type": "object", "properties": {}, "required": []}

BFCL_TOOL = {
    "name": "geometry.area",
    "description": "Area of a shape",
    "parameters": {
        "type": "dict",
        "properties": {
            "point": {"type": "tuple", "items": {"type": "float"}},
            "options": {
                "type": "dict",
                "properties": {"scale": {"type": "Float"}, "label": {"type": "String"}},
                "required": ["scale"],
            },
            "extra": {"type": "any", "description": "Anything"},
            "flags": {"type": "array", "items": {"type": "Boolean"}},
            "count": {"type": "integer", "default": 1},
        },
        "required": ["point", "options"],
    },
}
BFCL_EXPECTED = {
    "type": "object",
    "properties": {
        "point": {"type": "array", "items": {"type": "number"}},
        "options": {
            "type": "object",
            "properties": {"scale": {"type": "number"}, "label": {"type": "string"}},
            "required": ["scale"],
        },
        "extra": {"description": "Anything"},
        "flags": {"type": "array", "items": {"type": "boolean"}},
        "count": {"type": "integer", "default": 1},
    },
    "required": ["point", "options"],
}


@pytest.mark.parametrize(
    ("definition", "name", "description", "parameters"),
    [
        pytest.param(WEATHER_OPENAI, "get_weather", "Current weather", WEATHER_SCHEMA, id="openai"),
        pytest.param(
            {"name": "get_weather", "description": "Current weather", "parameters": WEATHER_SCHEMA},
            "get_weather",
            "Current weather",
            WEATHER_SCHEMA,
            id="bare",
        ),
        pytest.param(
            {"type": "function", "name": "ping", "parameters": WEATHER_SCHEMA},
            "ping",
            "",
            WEATHER_SCHEMA,
            id="flat-typed",
        ),
        pytest.param({"type": "function", "function": {"name": "now"}}, "now", "", NO_ARGUMENTS, id="no-parameters"),
        pytest.param({"name": "now", "parameters": None}, "now", "", NO_ARGUMENTS, id="null-parameters"),
        pytest.param({"name": "now", "parameters": {}}, "now", "", NO_ARGUMENTS, id="empty-parameters"),
        pytest.param(
            {"name": "f", "description": None, "parameters": {"type": "object", "properties": {"a": {"type": "int"}}}},
            "f",
            "",
            {"type": "object", "properties": {"a": {"type": "integer"}}, "required": []},
            id="missing-required",
        ),
        pytest.param(
            {"name": "f", "parameters": {"properties": {"a": {"type": "STRING"}}}},
            "f",
            "",
            {"properties": {"a": {"type": "string"}}, "type": "object", "required": []},
            id="missing-type-with-properties",
        ),
        pytest.param(BFCL_TOOL, "geometry.area", "Area of a shape", BFCL_EXPECTED, id="bfcl-nested"),
        pytest.param(
            {"name": "f", "parameters": {"type": "object", "properties": {"a": {"type": ["String", "null"]}}}},
            "f",
            "",
            {"type": "object", "properties": {"a": {"type": ["string", "null"]}}, "required": []},
            id="type-list",
        ),
        pytest.param(
            {"name": "f", "parameters": {"type": "object", "properties": {"a": {"type": ["integer", "any"]}}}},
            "f",
            "",
            {"type": "object", "properties": {"a": {}}, "required": []},
            id="type-list-with-any",
        ),
        pytest.param(
            {"name": "f", "parameters": {"properties": {"xy": {"type": "array", "items": [{"type": "float"}]}}}},
            "f",
            "",
            {
                "properties": {"xy": {"type": "array", "prefixItems": [{"type": "number"}]}},
                "type": "object",
                "required": [],
            },
            id="draft4-tuple-items",
        ),
        pytest.param(
            {
                "name": "f",
                "parameters": {"type": "object", "properties": {"a": {"anyOf": [{"type": "long"}, {"type": "dict"}]}}},
            },
            "f",
            "",
            {
                "type": "object",
                "properties": {"a": {"anyOf": [{"type": "integer"}, {"type": "object"}]}},
                "required": [],
            },
            id="anyof-members",
        ),
        pytest.param(
            {
                "name": "search",
                "description": "Search",
                "parameters": {
                    "query": {"type": "str", "description": "Text", "default": ""},
                    "limit": {"type": "int, optional", "default": 10},
                    "ids": {"type": "List[int]"},
                },
            },
            "search",
            "Search",
            {
                "type": "object",
                "properties": {
                    "query": {"type": "string", "description": "Text", "default": ""},
                    "limit": {"type": "integer", "default": 10},
                    "ids": {"type": "array", "items": {"type": "integer"}},
                },
                "required": ["query", "ids"],
            },
            id="xlam",
        ),
        pytest.param(
            {"name": "f", "parameters": {"type": {"type": "str"}, "n": {"type": "int"}}},
            "f",
            "",
            {
                "type": "object",
                "properties": {"type": {"type": "string"}, "n": {"type": "integer"}},
                "required": ["type", "n"],
            },
            id="xlam-parameter-named-type",
        ),
    ],
)
def test_normalize_tool_formats(definition: Any, name: str, description: str, parameters: dict[str, Any]) -> None:
    before = copy.deepcopy(definition)
    tool = normalize_tool(definition)
    assert (tool.name, tool.description, tool.parameters) == (name, description, parameters)
    assert definition == before  # the caller's definition is left as it was


@pytest.mark.parametrize(
    ("type_text", "schema", "required"),
    [
        ("str", {"type": "string"}, True),
        ("int", {"type": "integer"}, True),
        ("float", {"type": "number"}, True),
        ("bool", {"type": "boolean"}, True),
        ("list", {"type": "array"}, True),
        ("dict", {"type": "object"}, True),
        ("set", {"type": "array"}, True),
        ("Any", {}, True),
        ("datetime.date", {}, True),
        ("list of str", {}, True),
        ("str, optional", {"type": "string"}, False),
        ("str,Optional", {"type": "string"}, False),
        ("List[int] of ids", {}, True),
        ("int, optional, default=5", {"type": "integer"}, False),
        ("str, default='a, b'", {"type": "string"}, True),
        ("List[int]", {"type": "array", "items": {"type": "integer"}}, True),
        ("List[str], optional", {"type": "array", "items": {"type": "string"}}, False),
        ("typing.List[float]", {"type": "array", "items": {"type": "number"}}, True),
        ("List[Dict[str, Any]]", {"type": "array", "items": {"type": "object"}}, True),
        ("List[Optional[int]]", {"type": "array", "items": {"type": ["integer", "null"]}}, True),
        ("Dict[str, Any]", {"type": "object"}, True),
        ("Dict[str, int]", {"type": "object", "additionalProperties": {"type": "integer"}}, True),
        (
            "Dict[str, List[int]], optional",
            {"type": "object", "additionalProperties": {"type": "array", "items": {"type": "integer"}}},
            False,
        ),
        ("Tuple[int, int]", {"type": "array", "items": {"type": "integer"}}, True),
        ("Tuple[int, str]", {"type": "array", "items": {"type": ["integer", "string"]}}, True),
        ("Tuple[float, ...]", {"type": "array", "items": {"type": "number"}}, True),
        ("Optional[str]", {"type": "string"}, False),
        ("Optional[Union[int, str]]", {"type": ["integer", "string"]}, False),
        ("Union[int, float]", {"type": ["integer", "number"]}, True),
        ("Union[int, Any]", {}, True),
        (
            "Union[int, List[str]]",
            {"anyOf": [{"type": "integer"}, {"type": "array", "items": {"type": "string"}}]},
            True,
        ),
        ("List[int", {}, True),
    ],
)
def test_xlam_types(type_text: str, schema: dict[str, Any], required: bool) -> None:
    tool = normalize_tool({"name": "f", "parameters": {"p": {"type": type_text}, "q": {"type": "str"}}})
    assert tool.properties["p"] == schema
    assert tool.required == (("p", "q") if required else ("q",))


@pytest.mark.parametrize(
    ("definition", "required"),
    [
        (WEATHER_OPENAI, ("city",)),
        (BFCL_TOOL, ("point", "options")),
        ({"name": "f", "parameters": {"type": "object", "properties": {"a": {}}}}, ()),
        ({"name": "f"}, ()),
        ({"name": "f", "parameters": {"a": {"type": "int, optional"}, "b": {"type": "Optional[int]"}}}, ()),
        ({"name": "f", "parameters": {"b": {"type": "int"}, "a": {"type": "str"}}}, ("b", "a")),
    ],
)
def test_required(definition: dict[str, Any], required: tuple[str, ...]) -> None:
    assert normalize_tool(definition).required == required


@pytest.mark.parametrize(
    ("name", "types"),
    [
        ("point", {"array"}),
        ("count", {"integer"}),
        ("extra", set()),  # BFCL "any"
        ("missing", set()),
        ("either", {"integer", "number"}),
        ("nullable", {"string", "null"}),
        ("union", {"integer", "string"}),
        ("loose_union", set()),
    ],
)
def test_param_types(name: str, types: set[str]) -> None:
    parameters = copy.deepcopy(BFCL_TOOL["parameters"])
    parameters["properties"] |= {
        "either": {"type": ["integer", "float"]},
        "nullable": {"type": ["string", "null"]},
        "union": {"anyOf": [{"type": "integer"}, {"type": "string"}]},
        "loose_union": {"anyOf": [{"type": "integer"}, {"minimum": 1}]},
    }
    tool = normalize_tool({"name": "t", "parameters": parameters})
    assert tool.param_types(name) == frozenset(types)


def test_tool_record_behaviour() -> None:
    tool = normalize_tool(WEATHER_OPENAI)
    same = normalize_tool({"name": "get_weather", "description": "Current weather", "parameters": WEATHER_SCHEMA})
    assert tool == same and hash(tool) == hash(same) and len({tool, same}) == 1
    assert tool.properties == WEATHER_SCHEMA["properties"]

    openai = tool.to_openai()
    assert openai == WEATHER_OPENAI
    openai["function"]["parameters"]["properties"].clear()  # a copy: the tool keeps its schema
    assert tool.parameters == WEATHER_SCHEMA

    assert validate_arguments(tool, {"city": 1})  # builds the cached validator, which must not stop pickling
    restored = pickle.loads(pickle.dumps(tool))
    assert restored == tool
    assert [e.kind for e in validate_arguments(restored, {"city": "Lyon", "unit": "kelvin"})] == ["wrong_value"]


def test_tool_does_not_share_the_callers_objects() -> None:
    definition = {"name": "f", "parameters": {"type": "object", "properties": {"u": {"enum": ["a"], "default": "a"}}}}
    tool = normalize_tool(definition)
    definition["parameters"]["properties"]["u"]["enum"].append("b")
    assert tool.properties["u"] == {"enum": ["a"], "default": "a"}


WEATHER = normalize_tool(WEATHER_OPENAI)
NESTED = normalize_tool(
    {
        "name": "book",
        "parameters": {
            "type": "object",
            "properties": {
                "details": {
                    "type": "object",
                    "properties": {"location": {"type": "string"}, "duration": {"type": "integer", "minimum": 1}},
                    "required": ["location"],
                },
                "strict_details": {
                    "type": "object",
                    "properties": {"room": {"type": "string"}},
                    "additionalProperties": False,
                },
                "items": {"type": "array", "items": {"type": "integer"}},
                "code": {"type": "string", "pattern": "^[A-Z]{3}$"},
                "either": {"anyOf": [{"type": "integer"}, {"type": "array"}]},
                "positive_or_list": {"anyOf": [{"type": "integer", "minimum": 0}, {"type": "array"}]},
            },
        },
    }
)


@pytest.mark.parametrize(
    ("tool", "arguments", "expected"),
    [
        (WEATHER, {"city": "Lyon"}, []),
        (WEATHER, {"city": "Lyon", "unit": "celsius"}, []),
        (WEATHER, {}, [("missing_argument", "city", "'city' is a required property")]),
        (
            normalize_tool({"name": "f", "parameters": {"a": {"type": "int"}, "b": {"type": "int"}}}),
            {},
            [
                ("missing_argument", "a", "'a' is a required property"),
                ("missing_argument", "b", "'b' is a required property"),
            ],
        ),
        (
            WEATHER,
            {"city": "Lyon", "zip": 1, "country": "FR"},
            [
                ("unexpected_argument", "zip", "Additional properties are not allowed ('zip' was unexpected)"),
                ("unexpected_argument", "country", "Additional properties are not allowed ('country' was unexpected)"),
            ],
        ),
        (WEATHER, {"city": 7}, [("wrong_type", "city", "7 is not of type 'string'")]),
        (
            WEATHER,
            {"city": "Lyon", "unit": "kelvin"},
            [("wrong_value", "unit", "'kelvin' is not one of ['celsius', 'fahrenheit']")],
        ),
        (NESTED, {"details": {"location": "Room 2", "duration": 30}}, []),
        (NESTED, {"details": {}}, [("missing_argument", "details.location", "'location' is a required property")]),
        (
            NESTED,
            {"details": {"location": "Room 2", "duration": 0}},
            [("wrong_value", "details.duration", "0 is less than the minimum of 1")],
        ),
        (NESTED, {"details": {"location": "Room 2", "floor": 3}}, []),  # nested objects keep their own rules
        (
            NESTED,
            {"strict_details": {"room": "A", "floor": 3}},
            [
                (
                    "unexpected_argument",
                    "strict_details.floor",
                    "Additional properties are not allowed ('floor' was unexpected)",
                )
            ],
        ),
        (NESTED, {"items": [1, "a"]}, [("wrong_type", "items.1", "'a' is not of type 'integer'")]),
        (NESTED, {"code": "lyon"}, [("wrong_value", "code", "'lyon' does not match '^[A-Z]{3}$'")]),
        (NESTED, {"either": "x"}, [("wrong_type", "either", "'x' is not valid under any of the given schemas")]),
        (
            NESTED,
            {"positive_or_list": -1},
            [("wrong_value", "positive_or_list", "-1 is not valid under any of the given schemas")],
        ),
        (WEATHER, "Lyon", [("wrong_type", "", "'Lyon' is not of type 'object'")]),
        (WEATHER, None, [("wrong_type", "", "None is not of type 'object'")]),
        (WEATHER, ["Lyon"], [("wrong_type", "", "['Lyon'] is not of type 'object'")]),
        (
            normalize_tool({"name": "f", "parameters": {"s": {"type": "Optional[str]"}}}),
            {"s": None},
            [("wrong_type", "s", "None is not of type 'string'")],
        ),
    ],
)
def test_validate_arguments(tool: Tool, arguments: Any, expected: list[tuple[str, str, str]]) -> None:
    assert validate_arguments(tool, arguments) == [ArgumentError(*error) for error in expected]


@pytest.mark.parametrize(
    ("declared", "value", "valid"),
    [
        ("integer", 10, True),
        ("integer", -3, True),
        ("integer", 10.0, False),
        ("integer", True, False),
        ("integer", "10", False),
        ("number", 10, True),
        ("number", 1.5, True),
        ("number", True, False),
        ("number", "1.5", False),
        ("boolean", True, True),
        ("boolean", 1, False),
        ("boolean", 0, False),
        ("string", "a", True),
        ("string", 1, False),
        (["integer", "null"], None, True),
        (["integer", "null"], 1.0, False),
        ("array", [1], True),
        ("array", (1,), False),
        ("object", {}, True),
    ],
)
def test_strict_types(declared: str | list[str], value: Any, valid: bool) -> None:
    tool = normalize_tool({"name": "f", "parameters": {"type": "object", "properties": {"x": {"type": declared}}}})
    expected_types = ", ".join(repr(name) for name in ([declared] if isinstance(declared, str) else declared))
    expected = ArgumentError("wrong_type", "x", f"{value!r} is not of type {expected_types}")
    assert validate_arguments(tool, {"x": value}) == ([] if valid else [expected])


@pytest.mark.parametrize(
    ("extra_keywords", "arguments", "kinds"),
    [
        ({}, {"a": 1, "b": 2}, [("unexpected_argument", "b")]),
        ({"additionalProperties": True}, {"a": 1, "b": 2}, []),
        ({"additionalProperties": {"type": "string"}}, {"a": 1, "b": "x"}, []),
        ({"additionalProperties": {"type": "string"}}, {"a": 1, "b": 2}, [("wrong_type", "b")]),
        ({"patternProperties": {"^x_": {}}}, {"a": 1, "x_b": 2}, []),
        ({"patternProperties": {"^x_": {}}}, {"a": 1, "x_b": 2, "c": 3}, [("unexpected_argument", "c")]),
    ],
)
def test_additional_properties(
    extra_keywords: dict[str, Any], arguments: dict[str, Any], kinds: list[tuple[str, str]]
) -> None:
    parameters = {"type": "object", "properties": {"a": {"type": "integer"}}, **extra_keywords}
    tool = normalize_tool({"name": "f", "parameters": parameters})
    assert [(error.kind, error.path) for error in validate_arguments(tool, arguments)] == kinds
    # `additionalProperties: false` is added for validation only: chat templates see the schema as written.
    assert ("additionalProperties" in tool.parameters) == ("additionalProperties" in extra_keywords)
    assert tool.to_openai()["function"]["parameters"] == {**parameters, "required": []}


def _with_parameters(parameters: Any, index: int = 0) -> list[dict[str, Any]]:
    tools: list[dict[str, Any]] = [{"name": f"t{i}"} for i in range(index)]
    return [*tools, {"type": "function", "function": {"name": "f", "parameters": parameters}}]


@pytest.mark.parametrize(
    ("tools", "message"),
    [
        (["get_weather"], "tools[0]: expected a tool definition object, got str"),
        ([{"name": "a"}, {"description": "no name"}], "tools[1].name: expected a non-empty string, got None"),
        (
            [{"type": "function", "function": {"name": ""}}],
            "tools[0].function.name: expected a non-empty string, got ''",
        ),
        ([{"name": 3}], "tools[0].name: expected a non-empty string, got 3"),
        ([{"type": "function", "function": "f"}], "tools[0].function: expected a function definition object, got str"),
        ([{"type": "retrieval", "name": "f"}], "tools[0].type: only function tools are supported, got 'retrieval'"),
        ([{"name": "f", "description": ["x"]}], "tools[0].description: expected a string, got list"),
        (_with_parameters(["city"]), "tools[0].function.parameters: expected an object schema, got list"),
        (
            _with_parameters({"type": "array", "items": {"type": "string"}}),
            "tools[0].function.parameters.type: parameters must be an object schema, got type 'array'",
        ),
        (
            _with_parameters({"type": "object", "properties": {"unit": {"type": "colour"}}}, index=1),
            "tools[1].function.parameters.properties.unit.type: 'colour' is not a known type",
        ),
        (
            _with_parameters({"type": "dict", "properties": {"xs": {"type": "array", "items": {"type": "widget"}}}}),
            "tools[0].function.parameters.properties.xs.items.type: 'widget' is not a known type",
        ),
        (
            _with_parameters({"type": "object", "properties": {"n": {"type": ["string", "colour"]}}}),
            "tools[0].function.parameters.properties.n.type: 'colour' is not a known type",
        ),
        (
            _with_parameters({"type": "object", "properties": {"n": {"type": 5}}}),
            "tools[0].function.parameters.properties.n.type: expected a type name or a non-empty list of type names",
        ),
        (
            _with_parameters({"type": "object", "properties": {"n": {"type": []}}}),
            "tools[0].function.parameters.properties.n.type: expected a type name or a non-empty list of type names",
        ),
        (
            _with_parameters({"type": "object", "properties": {"n": {"type": [1]}}}),
            "tools[0].function.parameters.properties.n.type: expected a type name, got 1",
        ),
        (
            _with_parameters({"type": "object", "properties": {"n": "string"}}),
            "tools[0].function.parameters.properties.n: expected a JSON Schema object, got str",
        ),
        (
            _with_parameters({"type": "object", "properties": {"n": {"anyOf": [{"type": "int"}, {"type": "x"}]}}}),
            "tools[0].function.parameters.properties.n.anyOf[1].type: 'x' is not a known type",
        ),
        (
            _with_parameters({"type": "object", "properties": {"n": {"type": "integer", "minimum": "a"}}}),
            "tools[0].function.parameters.properties.n.minimum: 'a' is not of type 'number'",
        ),
        (
            _with_parameters({"type": "object", "properties": {"city": {}}, "required": "city"}),
            "tools[0].function.parameters.required: 'city' is not of type 'array'",
        ),
        (
            _with_parameters({"type": "object", "properties": {"city": {"type": "string", "pattern": "("}}}),
            "tools[0].function.parameters.properties.city.pattern: '(' is not a 'regex'",
        ),
        (_with_parameters({"city": "str"}), "tools[0].function.parameters.city: expected an object schema"),
        (
            _with_parameters({"city": {"type": "str"}, "n": {"description": "no type"}}),
            "tools[0].function.parameters: expected an object schema",
        ),
        ([{"name": "a"}, {"name": "b"}, {"name": "a"}], "tools[2].name: duplicate tool name 'a' (also tools[0])"),
        ({"name": "a"}, "tools: expected a list of tool definitions, got dict"),
        (None, "tools: expected a list of tool definitions, got NoneType"),
        ('[{"name": "a"}', "tools: not valid JSON"),
        ('{"name": "a"}', "tools: expected a list of tool definitions, got dict"),
    ],
)
def test_schema_errors(tools: Any, message: str) -> None:
    with pytest.raises(SchemaError) as raised:
        normalize_tools(tools)
    assert str(raised.value).startswith(message), str(raised.value)
    assert isinstance(raised.value, ValueError)


def test_where_prefixes_the_path() -> None:
    with pytest.raises(SchemaError, match=r"^data\.jsonl:3 tools\[0\]\.name: "):
        normalize_tools([{"description": "no name"}], where="data.jsonl:3 tools")
    with pytest.raises(SchemaError, match=r"^row\.parameters\.properties\.a\.type: 'widget' is not a known type$"):
        normalize_tool({"name": "f", "parameters": {"properties": {"a": {"type": "widget"}}}}, where="row")


def test_normalize_tools_order_and_json_string() -> None:
    tools = [BFCL_TOOL, WEATHER_OPENAI, {"name": "now"}]
    by_name = normalize_tools(tools)
    assert list(by_name) == ["geometry.area", "get_weather", "now"]
    assert by_name["get_weather"] == WEATHER
    assert normalize_tools(json.dumps(tools)) == by_name
    assert normalize_tools([]) == {}
    assert normalize_tools("[]") == {}


@pytest.mark.parametrize(
    ("tools", "names"),
    [
        ([WEATHER_OPENAI], {"get_weather"}),
        ([BFCL_TOOL, {"name": "now"}], {"geometry.area", "now"}),
        ([WEATHER_OPENAI, {"name": "now", "parameters": {"x": {"type": "int"}}}], {"get_weather", "now"}),
        ((WEATHER_OPENAI,), {"get_weather"}),
        ([], set()),
        (json.dumps([WEATHER_OPENAI, {"name": "now"}]), {"get_weather", "now"}),
        # No validation here: unreadable entries are skipped, normalize_tools is where they are reported.
        (["junk", {"description": "no name"}, {"function": {"name": 3}}, {"name": "ok"}], {"ok"}),
    ],
)
def test_tool_names(tools: Any, names: set[str]) -> None:
    assert tool_names(tools) == frozenset(names)


@pytest.mark.parametrize("tools", [{"name": "a"}, None, "not json", '{"name": "a"}'])
def test_tool_names_rejects_what_is_not_a_list(tools: Any) -> None:
    with pytest.raises(SchemaError, match=r"^tools: "):
        tool_names(tools)
