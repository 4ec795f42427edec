"""Tool definitions (OpenAI, bare, BFCL, xLAM) normalised to JSON Schema, and argument validation against them.

Every format is read into one `Tool` whose `parameters` is a Draft 2020-12 object schema, the form chat templates
take with `tools=`. `validate_arguments` checks a call's arguments with `jsonschema` and names each problem with one
of the reward error kinds (`missing_argument`, `unexpected_argument`, `wrong_type`, `wrong_value`).
"""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import jsonschema.exceptions
from jsonschema import Draft202012Validator, validators


class SchemaError(ValueError):
    """A tool definition that cannot be read as a JSON Schema; the message starts with the path of the bad field."""


# Type names the field writes, lower-cased, -> JSON Schema type (None: no constraint). BFCL adds dict/float/tuple/any
# and, in its Java and JavaScript sets, Java names; xLAM writes Python names.
_TYPE_ALIASES: dict[str, str | None] = {
    **dict.fromkeys(["string", "str", "char", "character"], "string"),
    **dict.fromkeys(["integer", "int", "long", "short", "byte"], "integer"),
    **dict.fromkeys(["number", "float", "double"], "number"),
    **dict.fromkeys(["boolean", "bool"], "boolean"),
    **dict.fromkeys(["array", "list", "tuple", "set", "frozenset", "sequence", "arraylist"], "array"),
    **dict.fromkeys(["object", "dict", "mapping", "hashmap", "map"], "object"),
    **dict.fromkeys(["null", "none", "nonetype"], "null"),
    **dict.fromkeys(["any", ""], None),  # BFCL's JavaScript set writes "" for a type it leaves open
}
# Keywords whose value is a schema, a list of schemas, or a mapping name -> schema: the places types can hide.
_ONE_SCHEMA = {"items", "additionalProperties", "not", "contains", "propertyNames", "if", "then", "else"}
_SCHEMA_LISTS = {"anyOf", "oneOf", "allOf", "prefixItems"}
_SCHEMA_MAPS = {"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"}


_TYPE_CHECKER = Draft202012Validator.TYPE_CHECKER.redefine_many(
    {
        # A model that writes 10.0 for an integer parameter made a type error, though JSON Schema says 10.0 is 10.
        "integer": lambda checker, instance: isinstance(instance, int) and not isinstance(instance, bool),
        "number": lambda checker, instance: isinstance(instance, int | float) and not isinstance(instance, bool),
    }
)
_StrictValidator = validators.extend(Draft202012Validator, type_checker=_TYPE_CHECKER)


@dataclass(frozen=True)
class Tool:
    """One tool the model may call: its name, description and JSON Schema (`{"type": "object", ...}`) parameters."""

    name: str
    description: str
    # Left out of the hash (dicts are unhashable); equality still compares it.
    parameters: dict[str, Any] = field(hash=False)

    @property
    def properties(self) -> dict[str, Any]:
        """Parameter name -> the JSON Schema of that parameter."""
        return self.parameters.get("properties", {})

    @property
    def required(self) -> tuple[str, ...]:
        """Names of the parameters a call must give."""
        return tuple(self.parameters.get("required", ()))

    def param_types(self, name: str) -> frozenset[str]:
        """JSON Schema type names of one top-level parameter; empty when it is untyped or not declared."""
        return self._param_types.get(name, frozenset())

    def to_openai(self) -> dict[str, Any]:
        """The OpenAI function format, as chat templates take it; a copy, so callers cannot change this tool."""
        function = {"name": self.name, "description": self.description, "parameters": self.parameters}
        return {"type": "function", "function": copy.deepcopy(function)}

    @cached_property
    def _param_types(self) -> dict[str, frozenset[str]]:
        return {name: _schema_types(schema) for name, schema in self.properties.items()}

    @cached_property
    def _validator(self) -> Draft202012Validator:
        # Unknown parameters are errors, but only for validation: `parameters` goes to chat templates unchanged.
        # A tool that states its own `additionalProperties` keeps it.
        schema = self.parameters
        if "additionalProperties" not in schema:
            schema = {**schema, "additionalProperties": False}
        return _StrictValidator(schema)

    def __getstate__(self) -> dict[str, Any]:
        # The cached validator's class is built at import time and does not pickle; it is rebuilt on demand.
        return {key: value for key, value in self.__dict__.items() if key not in ("_validator", "_param_types")}


@dataclass(frozen=True)
class ArgumentError:
    """One problem with a call's arguments: its error kind, the dotted path of the argument and jsonschema's message."""

    kind: str
    path: str
    message: str


def _schema_types(schema: Any) -> frozenset[str]:
    declared = schema.get("type") if isinstance(schema, dict) else None
    if declared is not None:
        return frozenset([declared] if isinstance(declared, str) else declared)
    members = [_schema_types(member) for member in schema.get("anyOf", [])] if isinstance(schema, dict) else []
    # One untyped member accepts anything, so the union of the others says nothing.
    return frozenset().union(*members) if members and all(members) else frozenset()


def _convert_type(value: Any, path: str) -> str | list[str] | None:
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, list) or not names:
        raise SchemaError(f"{path}: expected a type name or a non-empty list of type names, got {value!r}")
    converted: list[str] = []
    for name in names:
        if not isinstance(name, str):
            raise SchemaError(f"{path}: expected a type name, got {name!r}")
        key = name.strip().lower()
        if key not in _TYPE_ALIASES:
            raise SchemaError(f"{path}: {name!r} is not a known type")
        mapped = _TYPE_ALIASES[key]
        if mapped is None:
            return None
        if mapped not in converted:
            converted.append(mapped)
    return converted[0] if isinstance(value, str) else converted


def _convert_schema(schema: Any, path: str) -> Any:
    """Copy a JSON Schema (or BFCL's dialect of it), mapping type names to JSON Schema's, recursively."""
    if isinstance(schema, bool):
        return schema
    if not isinstance(schema, dict):
        raise SchemaError(f"{path}: expected a JSON Schema object, got {type(schema).__name__}")
    out: dict[str, Any] = {}
    for key, value in schema.items():
        where = f"{path}.{key}"
        if key == "type":
            converted = _convert_type(value, where)
            if converted is not None:
                out[key] = converted
        elif key in _SCHEMA_MAPS and isinstance(value, dict):
            out[key] = {name: _convert_schema(sub, f"{where}.{name}") for name, sub in value.items()}
        elif key in _SCHEMA_LISTS and isinstance(value, list):
            out[key] = [_convert_schema(sub, f"{where}[{i}]") for i, sub in enumerate(value)]
        elif key == "items" and isinstance(value, list):
            # The tuple form of `items` (draft 4 to 2019-09) is `prefixItems` in 2020-12.
            out["prefixItems"] = [_convert_schema(sub, f"{where}[{i}]") for i, sub in enumerate(value)]
        elif key in _ONE_SCHEMA and isinstance(value, dict | bool):
            out[key] = _convert_schema(value, where)
        else:
            out[key] = copy.deepcopy(value)
    return out


_PY_TOKEN = re.compile(r"[A-Za-z_][\w.]*|\.\.\.|\S")


def _any_of(options: list[dict[str, Any]]) -> dict[str, Any]:
    if not all(options):  # one member is Any
        return {}
    if all(list(option) == ["type"] for option in options):
        seen: dict[str, None] = {}  # an ordered set
        for option in options:
            seen.update(dict.fromkeys([option["type"]] if isinstance(option["type"], str) else option["type"]))
        types = list(seen)
        return {"type": types[0] if len(types) == 1 else types}
    return options[0] if len(options) == 1 else {"anyOf": options}


def _python_type(name: str, args: list[dict[str, Any] | None]) -> dict[str, Any]:
    key = name.rsplit(".", 1)[-1].lower()
    known = [arg for arg in args if arg is not None]
    if key == "optional" and known:
        return _any_of([known[0], {"type": "null"}])
    if key == "union" and known:
        return _any_of(known)
    mapped = _TYPE_ALIASES.get(key)
    if mapped is None:  # Any, and names we do not know (datetime, Callable, ...): no constraint
        return {}
    schema: dict[str, Any] = {"type": mapped}
    if mapped == "array" and known and _any_of(known):  # Tuple[int, str] -> items int or str; no fixed length
        schema["items"] = _any_of(known)
    elif mapped == "object" and len(args) == 2 and args[1]:
        schema["additionalProperties"] = args[1]
    return schema


def _parse_python_type(text: str) -> dict[str, Any]:
    """Read the Python-ish type opening an xLAM type string (`List[int], optional`) as a JSON Schema."""
    tokens = _PY_TOKEN.findall(text)

    def parse(position: int) -> tuple[dict[str, Any] | None, int]:
        name, position, args = tokens[position], position + 1, []
        if not (name[0].isalpha() or name[0] in "_."):
            raise ValueError(text)
        if position < len(tokens) and tokens[position] == "[":
            while tokens[position] in ("[", ","):
                arg, position = parse(position + 1)
                args.append(arg)
            if tokens[position] != "]":
                raise ValueError(text)
            position += 1
        return (None if name == "..." else _python_type(name, args)), position

    try:
        schema, end = parse(0)
    except (ValueError, IndexError):
        return {}
    # After the type comes ", optional", ", default=..." or nothing; other text (xLAM has some) is not a type we can
    # read, and no constraint is better than a guess.
    return schema if schema is not None and tokens[end : end + 1] in ([], [","]) else {}


def _convert_xlam(parameters: dict[str, Any]) -> dict[str, Any]:
    """xLAM's `{param: {"type": "str, optional", ...}}` -> an object schema; optional means not required."""
    properties: dict[str, Any] = {}
    required: list[str] = []
    for name, spec in parameters.items():
        schema = _parse_python_type(spec["type"])
        optional = re.search(r",\s*optional\b", spec["type"], re.IGNORECASE) is not None
        # Optional[X] at the top level means "may be left out", which `required` says; the value itself is an X.
        declared = schema.get("type")
        if isinstance(declared, list) and "null" in declared:
            optional = True
            kept = [type_name for type_name in declared if type_name != "null"]
            schema = {**schema, "type": kept[0] if len(kept) == 1 else kept}
        if isinstance(spec.get("description"), str):
            schema["description"] = spec["description"]
        if "default" in spec:
            schema["default"] = copy.deepcopy(spec["default"])
        properties[name] = schema
        if not optional:
            required.append(name)
    return {"type": "object", "properties": properties, "required": required}


def _normalize_parameters(parameters: Any, path: str) -> dict[str, Any]:
    if parameters is None:
        return {"type": "object", "properties": {}, "required": []}
    if not isinstance(parameters, dict):
        raise SchemaError(f"{path}: expected an object schema, got {type(parameters).__name__}")
    # xLAM: a mapping parameter -> {"type": "<Python type>"}; a JSON Schema's values are not all such dicts.
    if parameters and all(
        isinstance(spec, dict) and isinstance(spec.get("type"), str) for spec in parameters.values()
    ):
        schema = _convert_xlam(parameters)
    else:
        if parameters and "type" not in parameters and "properties" not in parameters:
            bad = next((f"{path}.{key}" for key, spec in parameters.items() if not isinstance(spec, dict)), path)
            raise SchemaError(
                f"{bad}: expected an object schema ('type', 'properties') or xLAM's {{param: {{'type': ...}}}}"
            )
        schema = _convert_schema(parameters, path)
        declared = schema.setdefault("type", "object")
        if declared != "object":
            raise SchemaError(f"{path}.type: parameters must be an object schema, got type {declared!r}")
        schema.setdefault("properties", {})
        schema.setdefault("required", [])
    _check_schema(schema, path)
    return schema


# Parameter schemas already found valid, as JSON text. Checking one against the metaschema takes milliseconds, and
# datasets repeat their tools (the 3,625 single-turn rows of BFCL offer 8,682 tools, 3,151 of them distinct). Bounded.
_VALID_SCHEMAS: set[str] = set()
_VALID_SCHEMAS_SIZE = 1 << 14


def _check_schema(schema: dict[str, Any], path: str) -> None:
    try:
        key: str | None = json.dumps(schema, sort_keys=True)
    except (TypeError, ValueError):  # a value JSON cannot write (schemas built in Python): checked every time
        key = None
    if key is not None and key in _VALID_SCHEMAS:
        return
    try:
        Draft202012Validator.check_schema(schema)
    except jsonschema.exceptions.SchemaError as error:
        where = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in error.absolute_path)
        raise SchemaError(f"{path}{where}: {error.message}") from error
    if key is not None:
        if len(_VALID_SCHEMAS) >= _VALID_SCHEMAS_SIZE:
            _VALID_SCHEMAS.clear()
        _VALID_SCHEMAS.add(key)


def normalize_tool(tool: Any, where: str = "tool") -> Tool:
    """Read one tool definition in any supported format (OpenAI, bare, BFCL, xLAM) into a `Tool`.

    >>> normalize_tool({"name": "f", "parameters": {"n": {"type": "int"}}}).parameters["properties"]
    {'n': {'type': 'integer'}}
    """
    if not isinstance(tool, dict):
        raise SchemaError(f"{where}: expected a tool definition object, got {type(tool).__name__}")
    if tool.get("type", "function") != "function":
        raise SchemaError(f"{where}.type: only function tools are supported, got {tool['type']!r}")
    if "function" in tool:
        where, tool = f"{where}.function", tool["function"]
        if not isinstance(tool, dict):
            raise SchemaError(f"{where}: expected a function definition object, got {type(tool).__name__}")
    name = tool.get("name")
    if not isinstance(name, str) or not name:
        raise SchemaError(f"{where}.name: expected a non-empty string, got {name!r}")
    description = tool.get("description") or ""
    if not isinstance(description, str):
        raise SchemaError(f"{where}.description: expected a string, got {type(description).__name__}")
    parameters = _normalize_parameters(tool.get("parameters"), f"{where}.parameters")
    return Tool(name=name, description=description, parameters=parameters)


def _load_tool_list(tools: Any, where: str) -> list[Any] | tuple[Any, ...]:
    if isinstance(tools, str):
        try:
            tools = json.loads(tools)
        except json.JSONDecodeError as error:
            raise SchemaError(f"{where}: not valid JSON ({error})") from error
    if not isinstance(tools, list | tuple):
        raise SchemaError(f"{where}: expected a list of tool definitions, got {type(tools).__name__}")
    return tools


def normalize_tools(tools: Any, where: str = "tools") -> dict[str, Tool]:
    """Read a list of tool definitions (or a JSON string of one) into `{name: Tool}`, in order; names must be unique."""
    by_name: dict[str, Tool] = {}
    for i, definition in enumerate(_load_tool_list(tools, where)):
        tool = normalize_tool(definition, f"{where}[{i}]")
        if tool.name in by_name:
            first = list(by_name).index(tool.name)  # by_name holds tools 0..i-1 in order while names are unique
            raise SchemaError(f"{where}[{i}].name: duplicate tool name {tool.name!r} (also {where}[{first}])")
        by_name[tool.name] = tool
    return by_name


def tool_names(tools: Any) -> frozenset[str]:
    """The names of the tools in a list (or JSON string) of definitions, without validating them.

    Entries without a readable name are skipped: this runs on the reward hot path, and `normalize_tools` is the check.
    """
    names = set()
    for tool in _load_tool_list(tools, "tools"):
        if isinstance(tool, dict):
            function = tool.get("function")
            name = function.get("name") if isinstance(function, dict) else tool.get("name")
            if isinstance(name, str):
                names.add(name)
    return frozenset(names)


def _argument_errors(error: jsonschema.exceptions.ValidationError, seen: set[Any]) -> list[ArgumentError]:
    path = ".".join(str(part) for part in error.absolute_path)
    prefix = f"{path}." if path else ""
    if error.validator == "required":
        # jsonschema reports each missing name apart without naming it: report them all at the first, skip the rest.
        if (path, id(error.instance)) in seen:
            return []
        seen.add((path, id(error.instance)))
        missing = [name for name in error.validator_value if name not in error.instance]
        return [ArgumentError("missing_argument", f"{prefix}{n}", f"{n!r} is a required property") for n in missing]
    if error.validator == "additionalProperties":
        # jsonschema reports all extra names in one error; each is one unexpected argument.
        declared, patterns = error.schema.get("properties", {}), error.schema.get("patternProperties", {})
        extras = [k for k in error.instance if k not in declared and not any(re.search(p, k) for p in patterns)]
        message = "Additional properties are not allowed ({!r} was unexpected)"
        return [ArgumentError("unexpected_argument", f"{prefix}{k}", message.format(k)) for k in extras]
    # A value that fits none of a union's types (Union[int, float] given "x") is a type error too.
    is_type = error.validator == "type" or (
        error.validator in ("anyOf", "oneOf") and error.context and all(e.validator == "type" for e in error.context)
    )
    return [ArgumentError("wrong_type" if is_type else "wrong_value", path, error.message)]


def validate_arguments(tool: Tool, arguments: dict[str, Any]) -> list[ArgumentError]:
    """Check a call's arguments against the tool's schema; `[]` when they are valid.

    Integers must be Python ints (not `10.0`, not `True`); numbers accept ints and floats but not bools; parameters
    the tool does not declare are `unexpected_argument` errors.

    >>> tool = normalize_tool({"name": "f", "parameters": {"n": {"type": "int"}}})
    >>> [(e.kind, e.path) for e in validate_arguments(tool, {"n": 1.5, "m": 1})]
    [('wrong_type', 'n'), ('unexpected_argument', 'm')]
    """
    if not isinstance(arguments, dict):
        return [ArgumentError("wrong_type", "", f"{arguments!r} is not of type 'object'")]
    seen: set[Any] = set()
    errors: list[ArgumentError] = []
    try:
        for error in tool._validator.iter_errors(arguments):
            errors.extend(_argument_errors(error, seen))
    except ValueError:  # the validator's message writes the value: Python refuses an integer past 4,300 digits
        return [ArgumentError("wrong_value", "", "an integer argument has too many digits to write")]
    return errors
