"""The canonical dataset row: reading and writing canonical JSONL, deriving categories, and the linter.

A canonical row (one JSON object per line; every field is described in data/README.md)::

    {"id": "weather-0007",
     "messages": [{"role": "user", "content": "Is it warm in Lyon today? Use celsius."}],
     "tools": [{"type": "function", "function": {"name": "get_weather", "description": "...", "parameters": {...}}}],
     "answers": [{"name": "get_weather", "arguments": {"city": "Lyon", "unit": "celsius"}}],
     "possible_answers": [{"get_weather": {"city": ["Lyon"], "unit": ["celsius", ""]}}],   # optional
     "category": "simple"}                                                                 # optional

`read_jsonl` streams such a file with line numbers, `check_rows` lints rows (`grpo-tools check-data`), and
`derive_category` names a row's category from its answers and tools (`grpo-tools check-data` is
`grpo_tools.data.check_data`). A row whose `env.name` is `bfcl` also has its `env` checked (`check_bfcl_env`).
The converters from public formats (`grpo-tools convert`) build on this module in `grpo_tools.data.converters`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence, Sized
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, TextIO

from grpo_tools.data.bfcl_backends import check_bfcl_env
from grpo_tools.data.jsonl import DataError, parse_jsonl_line
from grpo_tools.data.jsonl import json_type as _json_type


__all__ = [
    "CATEGORIES",
    "ROLES",
    "DataError",
    "JsonlWriter",
    "Problem",
    "check_rows",
    "derive_category",
    "number_rows",
    "read_jsonl",
    "write_jsonl",
]

CATEGORIES = ("simple", "multiple", "parallel", "parallel_multiple", "irrelevance", "multi_turn")
ROLES = ("system", "user", "assistant", "tool")


def derive_category(answers: Sequence[Any], tools: Sized) -> str:
    """The category a row's gold calls and offered tools make, as data/README.md defines the categories.

    `answers` holds gold calls as `{"name", "arguments"}` dicts or `ToolCall`s; `tools` is the offered tool list.
    `multi_turn` is never derived: it describes an environment, not a set of calls.

    >>> derive_category([{"name": "f", "arguments": {}}, {"name": "f", "arguments": {}}], tools=[{}, {}])
    'parallel'
    """
    names = [call["name"] if isinstance(call, Mapping) else call.name for call in answers]
    if not names:
        return "irrelevance"
    if len(names) == 1:
        return "simple" if len(tools) <= 1 else "multiple"
    return "parallel" if len(set(names)) == 1 else "parallel_multiple"


def _read_lines(handle: Any) -> Iterator[tuple[int, dict[str, Any] | DataError]]:
    with handle:
        for number, raw in enumerate(handle, start=1):
            row = parse_jsonl_line(raw, number)
            if row is not None:
                yield number, row


def read_jsonl(path: str | os.PathLike[str]) -> Iterator[tuple[int, dict[str, Any] | DataError]]:
    """Stream a JSONL file as `(line number, row)` pairs, numbered from 1; blank lines are skipped.

    A line that is not a JSON object comes back as `(line number, DataError(reason))`, so callers report it and go
    on. A file that is missing or cannot be opened raises `DataError` naming it, at the call (not on iteration).

    >>> for number, row in read_jsonl("data/tool_calls_eval.jsonl"):  # doctest: +SKIP
    ...     if isinstance(row, DataError):
    ...         print(f"row {number}: {row}")
    """
    path = Path(path)
    try:
        handle = path.open("rb")
    except FileNotFoundError:
        raise DataError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise DataError(f"{path}: is a directory, not a file") from None
    except OSError as error:
        raise DataError(f"{path}: cannot be read ({error.strerror or error})") from None
    return _read_lines(handle)


def number_rows(rows: Iterable[Any]) -> Iterator[tuple[int, Any]]:
    """Pair rows with 1-based row numbers; `(number, row)` pairs, as `read_jsonl` yields them, keep their numbers."""
    for index, item in enumerate(rows, start=1):
        if isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], int):
            yield item
        else:
            yield index, item


class JsonlWriter:
    """Write rows to a JSONL file, one object per line, creating its folder; `DataError` names a file it cannot write.

    >>> with JsonlWriter("out/rows.jsonl") as writer:  # doctest: +SKIP
    ...     writer.write({"id": "a", "messages": [...]})
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.count = 0
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._handle: TextIO = self.path.open("w", encoding="utf-8")
        except OSError as error:
            raise DataError(f"{self.path}: cannot be written ({error.strerror or error})") from None

    def write(self, row: Mapping[str, Any]) -> None:
        """Append one row."""
        try:
            self._handle.write(json.dumps(row, ensure_ascii=False) + "\n")
        except OSError as error:
            raise DataError(f"{self.path}: cannot be written ({error.strerror or error})") from None
        self.count += 1

    def close(self) -> None:
        """Flush and close the file."""
        self._handle.close()

    def __enter__(self) -> JsonlWriter:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()


def write_jsonl(path: str | os.PathLike[str], rows: Iterable[Mapping[str, Any]]) -> int:
    """Write rows to a JSONL file (see `JsonlWriter`); returns how many were written."""
    with JsonlWriter(path) as writer:
        for row in rows:
            writer.write(row)
    return writer.count


# ---------------------------------------------------------------------------------------------------- the linter


@dataclass(frozen=True)
class Problem:
    """One problem `check_rows` found: the row number (1 = first line), the row's id if it has one, the dotted path
    of the bad field ("" for the row as a whole) and what is wrong."""

    row: int
    id: str | None
    field: str
    message: str

    def __str__(self) -> str:
        where = f"row {self.row}" if self.id is None else f"row {self.row} (id={self.id})"
        return f"{where}: {self.field}: {self.message}" if self.field else f"{where}: {self.message}"


def _check_messages(messages: Any) -> Iterator[tuple[str, str]]:
    if not isinstance(messages, list) or not messages:
        found = "an empty list" if messages == [] else _json_type(messages)
        yield "messages", f"expected a non-empty list of messages, got {found}"
        return
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(message, dict):
            yield where, f"expected a message object {{role, content}}, got {_json_type(message)}"
            continue
        role = message.get("role")
        if role not in ROLES:
            yield f"{where}.role", f"expected one of {', '.join(ROLES)}, got {role!r}"
        content = message.get("content")
        # An assistant turn that only calls tools may leave its text out, as OpenAI's API writes it.
        if not isinstance(content, str) and not (content is None and message.get("tool_calls")):
            yield f"{where}.content", f"expected a string, got {_json_type(content)}"
        tool_calls = message.get("tool_calls")
        if tool_calls is not None and not isinstance(tool_calls, list):
            yield f"{where}.tool_calls", f"expected a list, got {_json_type(tool_calls)}"
        for j, tool_call in enumerate(tool_calls if isinstance(tool_calls, list) else []):
            function = tool_call.get("function") if isinstance(tool_call, dict) else None
            if not isinstance(function, dict) or not isinstance(function.get("name"), str):
                yield f"{where}.tool_calls[{j}]", 'expected {"type": "function", "function": {"name", "arguments"}}'
    if isinstance(messages[-1], dict) and messages[-1].get("role") == "assistant":
        yield (
            f"messages[{len(messages) - 1}].role",
            "the prompt ends with an assistant turn: there is nothing to answer",
        )


def _check_tools(tools: Any) -> tuple[dict[str, Any] | None, list[tuple[str, str]]]:
    """The row's tools by name (None when they cannot be read) and the problems found."""
    from grpo_tools.rewards.schemas import SchemaError, normalize_tools

    if not isinstance(tools, list):
        return None, [("tools", f"expected a list of tool definitions, got {_json_type(tools)}")]
    try:
        return normalize_tools(tools, where="tools"), []
    except SchemaError as error:
        # SchemaError's message starts with the path of the bad field: split it off into the field.
        path, _, message = str(error).partition(": ")
        return None, [(path, message) if message else ("tools", str(error))]


def _check_answers(answers: Any, tools: dict[str, Any] | None, possible: Any) -> Iterator[tuple[str, str]]:
    from grpo_tools.rewards.bfcl import accepted_arguments
    from grpo_tools.rewards.schemas import validate_arguments

    if not isinstance(answers, list):
        yield "answers", f"expected a list of calls ([] when no call is right), got {_json_type(answers)}"
        return
    for i, call in enumerate(answers):
        where = f"answers[{i}]"
        if not isinstance(call, dict):
            yield where, f'expected a call {{"name", "arguments"}}, got {_json_type(call)}'
            continue
        name, arguments = call.get("name"), call.get("arguments")
        if not isinstance(name, str):
            yield f"{where}.name", f"expected a tool name, got {_json_type(name)}"
        if not isinstance(arguments, dict):
            yield f"{where}.arguments", f"expected an object, got {_json_type(arguments)}"
        if tools is None or not isinstance(name, str):
            continue
        if name not in tools:
            offered = ", ".join(repr(tool) for tool in tools) or "none"
            yield f"{where}.name", f"{name!r} is not one of the row's tools (offered: {offered})"
        elif isinstance(arguments, dict):
            # A row with acceptable values is scored against them by BFCL's rules (`tool_bfcl`): a gold value they
            # accept is right where the schema disagrees (`is_variable`: a Java variable's name for an array).
            entry = possible[i] if isinstance(possible, list) and i < len(possible) else None
            acceptable = entry.get(name) if isinstance(entry, dict) else None
            accepted = accepted_arguments(arguments, acceptable, tools[name].properties)
            for error in validate_arguments(tools[name], arguments):
                value_error = error.kind in ("wrong_type", "wrong_value")
                if not (value_error and any(error.path == n or error.path.startswith(f"{n}.") for n in accepted)):
                    yield f"{where}.arguments" + (f".{error.path}" if error.path else ""), error.message


def _check_possible_answers(possible: Any, answers: Any, tools: dict[str, Any] | None) -> Iterator[tuple[str, str]]:
    if not isinstance(possible, list):
        yield "possible_answers", f"expected a list with one entry per gold call, got {_json_type(possible)}"
        return
    gold = answers if isinstance(answers, list) else []
    if len(possible) != len(gold):
        yield "possible_answers", f"{len(possible)} entries for {len(gold)} gold calls in answers"
    names = []
    for i, entry in enumerate(possible):
        where = f"possible_answers[{i}]"
        if not isinstance(entry, dict) or len(entry) != 1 or not isinstance(next(iter(entry.values())), dict):
            yield where, "expected {tool name: {parameter: [acceptable values]}}"
            continue
        ((name, parameters),) = entry.items()
        names.append(name)
        declared = tools[name].properties if tools is not None and name in tools else None
        for parameter, values in parameters.items():
            if not isinstance(values, list) or not values:
                yield f"{where}.{name}.{parameter}", f"expected a non-empty list of acceptable values, got {values!r}"
            elif declared is not None and parameter not in declared and "" not in values:
                # One that may be left out ("") does no harm: the right answer leaves it out.
                yield f"{where}.{name}.{parameter}", f"{name!r} has no parameter {parameter!r}"
    gold_names = [call.get("name") for call in gold if isinstance(call, dict)]
    if len(names) == len(possible) == len(gold_names) and sorted(names) != sorted(map(str, gold_names)):
        yield "possible_answers", f"names the tools {sorted(names)}, but answers calls {sorted(map(str, gold_names))}"


def _check_category(row: dict[str, Any], tools: dict[str, Any] | None) -> Iterator[tuple[str, str]]:
    category = row["category"]
    if category not in CATEGORIES:
        yield "category", f"{category!r} is not one of {', '.join(CATEGORIES)}"
        return
    answers = row.get("answers")
    readable = isinstance(answers, list) and all(
        isinstance(call, dict) and isinstance(call.get("name"), str) for call in answers
    )
    if category == "multi_turn" or tools is None or not readable:
        return
    derived = derive_category(answers, tools)
    # BFCL's parallel_multiple offers several tools and may call one of them several times.
    if derived != category and not ((category, derived) == ("parallel_multiple", "parallel") and len(tools) > 1):
        yield "category", f"{category!r}, but its answers and tools make it {derived!r}"


def _check_row(row: dict[str, Any]) -> Iterator[tuple[str, str]]:
    for key in ("id", "messages", "tools", "answers"):
        if key not in row:
            yield key, "missing"
    if "id" in row and (isinstance(row["id"], bool) or not isinstance(row["id"], str | int) or row["id"] == ""):
        yield "id", f"expected a non-empty string or an integer, got {row['id']!r}"
    if "messages" in row:
        yield from _check_messages(row["messages"])
    tools, problems = _check_tools(row["tools"]) if "tools" in row else (None, [])
    yield from problems
    if "answers" in row:
        yield from _check_answers(row["answers"], tools, row.get("possible_answers"))
    if "possible_answers" in row:
        yield from _check_possible_answers(row["possible_answers"], row.get("answers"), tools)
    if "category" in row:
        yield from _check_category(row, tools)
    env = _decoded(row.get("env"))  # a Hub dataset holds it as JSON text
    if isinstance(env, dict) and env.get("name") == "bfcl":  # what BFCL's APIs start from
        yield from check_bfcl_env(env)


def _decoded(value: Any) -> Any:
    """JSON text as the value it holds (the text itself when it is not JSON); any other value as it is."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except (ValueError, RecursionError):
            return value
    return value


def check_rows(rows: Iterable[Any]) -> list[Problem]:
    """Lint canonical rows; `[]` when every row is sound.

    `rows` holds row dicts, numbered from 1, or `(row number, row)` pairs as `read_jsonl` yields them (a `DataError`
    in place of a row is reported as it is). Each row is checked for: `id` present and unique; `messages` a
    non-empty list of `{role, content}`; `tools` valid definitions; every gold call naming an offered tool, with
    arguments valid for its schema or, in a row with `possible_answers`, values BFCL's rules accept; those holding
    one entry per gold call, each parameter mapped to acceptable values; `category` known and its answers' and tools';
    a BFCL multi-turn row's `env` what BFCL's APIs can start from (`check_bfcl_env`).

    >>> [str(problem) for problem in check_rows([{"id": "a", "messages": [], "tools": [], "answers": []}])]
    ['row 1 (id=a): messages: expected a non-empty list of messages, got an empty list']
    """
    problems: list[Problem] = []
    first_row_of_id: dict[Any, int] = {}
    for number, row in number_rows(rows):
        if isinstance(row, DataError):
            problems.append(Problem(number, None, "", str(row)))
            continue
        if not isinstance(row, dict):
            problems.append(Problem(number, None, "", f"expected a JSON object, got {_json_type(row)}"))
            continue
        row_id = row.get("id")
        shown_id = None if row_id is None else str(row_id)
        if isinstance(row_id, str | int) and row_id != "":
            if row_id in first_row_of_id:
                problems.append(Problem(number, shown_id, "id", f"duplicate of row {first_row_of_id[row_id]}"))
            else:
                first_row_of_id[row_id] = number
        problems += [Problem(number, shown_id, field, message) for field, message in _check_row(row)]
    return problems
