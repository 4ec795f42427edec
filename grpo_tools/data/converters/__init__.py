"""Converters from public tool-calling datasets to canonical rows (`grpo-tools convert`).

`CONVERTERS` is the one registry of source formats. Each converter turns one source row into a list of canonical
rows (see `grpo_tools.data.rows`) or raises `ConversionError` saying why it cannot:

- Single-turn sources (xLAM, BFCL) give one row and keep the source id.
- Conversations (Glaive, Hermes, ToolACE, OpenAI chat) give one row per assistant turn that calls tools, and one per
  assistant turn that answers without calling while tools are offered (`answers: []`). The row's `messages` are the
  conversation before that turn, in OpenAI layout (assistant turns with `tool_calls`, `{"role": "tool"}` turns); its
  id is `<source id, or the 0-based row index>-<index of that assistant turn among the assistant turns>`.
  A conversation that offers no tool and makes no call gives no row: there is nothing to learn about tool calling.
- The system prompts of Glaive, Hermes and ToolACE are dropped: they only list the tools and teach that dataset's
  call syntax, which the model's own chat template supplies when it renders `tools`.

`category` is derived from answers and tools (`derive_category`), except for BFCL, whose file name gives it.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grpo_tools.calls import ToolCall, load_json_or_literal, parse_tool_calls
from grpo_tools.data.rows import DataError, derive_category, number_rows, read_jsonl
from grpo_tools.schemas import normalize_tools


__all__ = [
    "CONVERTERS",
    "ConversionError",
    "ConversionResult",
    "Converter",
    "RowFailure",
    "SourceContext",
    "bfcl_category",
    "bfcl_files",
    "convert_rows",
    "load_ground_truth",
    "read_source",
]


class ConversionError(ValueError):
    """A source row that cannot be converted; the message says why."""


@dataclass(frozen=True)
class SourceContext:
    """What a converter may need besides the row: BFCL's possible answers by id and the category its file names."""

    ground_truth: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    category: str | None = None


@dataclass(frozen=True)
class Converter:
    """A source format: `function(row, index, context) -> canonical rows` and a one-line description for `--help`."""

    function: Callable[[Mapping[str, Any], int, SourceContext], list[dict[str, Any]]]
    description: str


@dataclass(frozen=True)
class RowFailure:
    """A source row that could not be converted: its row number (from 1) and why."""

    row: int
    reason: str


@dataclass
class ConversionResult:
    """What `convert_rows` did: the canonical rows (unless a sink took them) and every source row it could not use."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    failures: list[RowFailure] = field(default_factory=list)
    source_rows: int = 0
    converted: int = 0  # canonical rows made, whether kept in `rows` or given to a sink
    no_tool_rows: int = 0  # source rows that offer no tool and make no call, so give no row

    def summary(self) -> str:
        """One line: rows converted from how many source rows, and how many gave nothing and why."""

        def plural(count: int, noun: str) -> str:
            return f"{count} {noun}" if count == 1 else f"{count} {noun}s"

        parts = [f"converted {plural(self.converted, 'row')} from {plural(self.source_rows, 'source row')}"]
        if self.no_tool_rows:
            parts.append(f"{plural(self.no_tool_rows, 'source row')} offered no tool and made no call")
        if self.failures:
            parts.append(f"{plural(len(self.failures), 'source row')} could not be converted (see above)")
        return "; ".join(parts)


# ------------------------------------------------------------------------------------------------------ helpers


def _require(row: Mapping[str, Any], key: str, kind: type | tuple[type, ...]) -> Any:
    value = row.get(key)
    if not isinstance(value, kind):
        names = " or ".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
        raise ConversionError(f"{key}: expected {names}, got {type(value).__name__}")
    return value


def _source_id(row: Mapping[str, Any], index: int) -> str:
    row_id = row.get("id")
    return str(index) if row_id is None or row_id == "" else str(row_id)


def _tools(definitions: Any, where: str) -> list[dict[str, Any]]:
    """Tool definitions in any supported format -> the OpenAI format; SchemaError (a ValueError) names the field."""
    return [tool.to_openai() for tool in normalize_tools(definitions, where=where).values()]


def _gold_call(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict) or not isinstance(value.get("name"), str):
        raise ConversionError(f'{where}: expected a call {{"name", "arguments"}}, got {value!r}')
    arguments = value.get("arguments", {})
    if isinstance(arguments, str):
        arguments = _load_json(arguments, f"{where}.arguments")
    if not isinstance(arguments, dict):
        raise ConversionError(f"{where}.arguments: expected an object, got {type(arguments).__name__}")
    return {"name": value["name"], "arguments": arguments}


def _load_json(text: str, where: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise ConversionError(f"{where}: not valid JSON ({error.msg} at character {error.pos})") from None


def _load_literal(text: str, where: str) -> Any:
    """JSON, else a Python literal (single-quoted dicts, True/None), as some datasets write their tool lists."""
    try:
        return load_json_or_literal(text)
    except ValueError:
        raise ConversionError(f"{where}: neither JSON nor a Python literal") from None


_DECODER = json.JSONDecoder()


def _json_objects(text: str, where: str) -> list[Any]:
    """The JSON objects written one after another in free text, from the first `{` (Glaive's system prompt)."""
    objects: list[Any] = []
    position = text.find("{")
    while 0 <= position < len(text) and text[position] == "{":
        try:
            value, position = _DECODER.raw_decode(text, position)
        except json.JSONDecodeError as error:
            raise ConversionError(f"{where}: tool definition {len(objects)} is not valid JSON ({error.msg})") from None
        objects.append(value)
        while position < len(text) and text[position].isspace():
            position += 1
    return objects


def _json_list(text: str) -> list[Any]:
    """The first JSON list of objects in free text (ToolACE's system prompt); [] when there is none."""
    for match in re.finditer(r"\[", text):
        try:
            value, _ = _DECODER.raw_decode(text, match.start())
        except json.JSONDecodeError:
            continue
        if isinstance(value, list) and value and all(isinstance(item, dict) for item in value):
            return value
    return []


def _assistant(content: str, calls: Sequence[ToolCall]) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = [
            {"type": "function", "function": {"name": call.name, "arguments": call.arguments}} for call in calls
        ]
    return message


def _parsed_calls(text: Any, format: str, where: str) -> list[ToolCall]:
    result = parse_tool_calls(text, format=format)
    if result.errors:
        raise ConversionError(f"{where}: cannot read the tool call ({'; '.join(result.errors)})")
    return list(result.calls)


_DOTTED_NAME = re.compile(r"[A-Za-z_][\w.]*")


def _pythonic_calls(text: str, tools: list[dict[str, Any]], where: str) -> list[ToolCall]:
    """Read `[f(a=1), g(b="x")]`, also when a tool's name is no Python name (ToolACE has "Get Weather")."""
    aliases: dict[str, str] = {}
    names = [tool["function"]["name"] for tool in tools]
    # Longest first, so that "Get Weather Now(" is not half-replaced by "Get Weather(".
    for name in sorted((n for n in names if not _DOTTED_NAME.fullmatch(n)), key=len, reverse=True):
        alias = f"_tool_{len(aliases)}"
        text = text.replace(f"{name}(", f"{alias}(")
        aliases[alias] = name
    calls = _parsed_calls(text, "pythonic", where)
    return [ToolCall(aliases.get(call.name, call.name), call.arguments) for call in calls]


def _canonical(
    row_id: str,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]],
    answers: list[dict[str, Any]],
    possible_answers: list[Any] | None = None,
    category: str | None = None,
) -> dict[str, Any]:
    offered = [tool["function"]["name"] for tool in tools]
    for call in answers:
        if call["name"] not in offered:
            listing = ", ".join(repr(name) for name in offered) or "none"
            raise ConversionError(f"a call names {call['name']!r}, which is not an offered tool (offered: {listing})")
    row = {"id": row_id, "messages": messages, "tools": tools, "answers": answers}
    if possible_answers is not None:
        row["possible_answers"] = possible_answers
    row["category"] = category or derive_category(answers, tools)
    return row


def _conversation_rows(base_id: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> list[dict]:
    """One canonical row per assistant turn that calls tools, or answers without calling while tools are offered."""
    if not any(message["role"] == "assistant" for message in messages):
        raise ConversionError("the conversation has no assistant turn")
    rows, turn = [], 0
    for position, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        calls = [
            {"name": call["function"]["name"], "arguments": call["function"]["arguments"]}
            for call in message.get("tool_calls", [])
        ]
        if calls or tools:
            if position == 0:
                raise ConversionError(f"assistant turn {turn} comes before any other message")
            try:
                history, offered = copy.deepcopy(messages[:position]), copy.deepcopy(tools)
                rows.append(_canonical(f"{base_id}-{turn}", history, offered, calls))
            except ConversionError as error:
                raise ConversionError(f"assistant turn {turn}: {error}") from None
        turn += 1
    return rows


# ---------------------------------------------------------------------------------------------------- converters


def convert_xlam(row: Mapping[str, Any], index: int, context: SourceContext) -> list[dict[str, Any]]:
    """Salesforce xLAM function-calling-60k: `query`, and `tools` and `answers` as JSON strings."""
    query = _require(row, "query", str)
    tools = _tools(_require(row, "tools", (str, list)), "tools")
    answers = _require(row, "answers", (str, list))
    answers = _load_json(answers, "answers") if isinstance(answers, str) else answers
    if not isinstance(answers, list):
        raise ConversionError(f"answers: expected a list of calls, got {type(answers).__name__}")
    calls = [_gold_call(answer, f"answers[{i}]") for i, answer in enumerate(answers)]
    return [_canonical(_source_id(row, index), [{"role": "user", "content": query}], tools, calls)]


_GLAIVE_TURN = re.compile(r"(?:^|\n)[ \t]*(USER|ASSISTANT|FUNCTION RESPONSE):[ \t]?")


def convert_glaive(row: Mapping[str, Any], index: int, context: SourceContext) -> list[dict[str, Any]]:
    """Glaive function-calling v2: tools as JSON objects in `system`, `chat` as USER/ASSISTANT/FUNCTION RESPONSE."""
    tools = _tools(_json_objects(_require(row, "system", str), "system"), "system")
    parts = _GLAIVE_TURN.split(_require(row, "chat", str))
    if parts[0].strip():
        raise ConversionError("chat: text before the first USER: or ASSISTANT: marker")
    messages: list[dict[str, Any]] = []
    for speaker, text in zip(parts[1::2], parts[2::2], strict=True):
        text = text.replace("<|endoftext|>", "").strip()
        if speaker == "USER":
            messages.append({"role": "user", "content": text})
        elif speaker == "FUNCTION RESPONSE":
            messages.append({"role": "tool", "content": text})
        elif "<functioncall>" in text:
            # The payload's `arguments` is a single-quoted JSON string; the json parser reads that form.
            before, payload = text.split("<functioncall>", 1)
            where = f"assistant turn {sum(m['role'] == 'assistant' for m in messages)}"
            calls = _parsed_calls(payload, "json", where)
            if not calls:
                raise ConversionError(f"{where}: <functioncall> holds no call")
            messages.append(_assistant(before.strip(), calls))
        else:
            messages.append({"role": "assistant", "content": text})
    return _conversation_rows(_source_id(row, index), messages, tools)


_SHAREGPT_ROLES = {
    "system": "system",
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "assistant": "assistant",
    "tool": "tool",
}


def _sharegpt_turns(row: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    for i, turn in enumerate(_require(row, "conversations", list)):
        if not isinstance(turn, dict) or not isinstance(turn.get("value"), str):
            raise ConversionError(f'conversations[{i}]: expected {{"from", "value"}}, got {turn!r}')
        role = _SHAREGPT_ROLES.get(turn.get("from"))
        if role is None:
            raise ConversionError(f"conversations[{i}].from: unknown speaker {turn.get('from')!r}")
        yield role, turn["value"]


def _hermes_tools(system: str) -> list[Any]:
    # The prompt names the tags in prose ("within <tools> </tools> XML tags") before the real block: skip empty ones.
    for match in re.finditer(r"<tools>(.*?)</tools>", system, re.DOTALL):
        body = match.group(1).strip()
        if not body:
            continue
        try:
            tools = _load_literal(body, "system <tools>")
        except ConversionError:
            # Several definitions one per line rather than a list, in JSON or Python-literal syntax.
            parts = re.split(r"(?<=\})\s*\n\s*(?=\{)", body)
            if len(parts) == 1:
                raise
            tools = [_load_literal(part, f"system <tools> definition {i}") for i, part in enumerate(parts)]
        return tools if isinstance(tools, list) else [tools]
    return []


def convert_hermes(row: Mapping[str, Any], index: int, context: SourceContext) -> list[dict[str, Any]]:
    """NousResearch Hermes function-calling v1: ShareGPT turns, `<tools>` in the system turn, `<tool_call>` blocks."""
    definitions: list[Any] = []
    messages: list[dict[str, Any]] = []
    for role, value in _sharegpt_turns(row):
        if role == "system":
            definitions += _hermes_tools(value)
        elif role == "tool":
            responses = re.findall(r"<tool_response>(.*?)(?:</tool_response>|\Z)", value, re.DOTALL)
            messages += [{"role": "tool", "content": text.strip()} for text in responses or [value]]
        elif role == "assistant" and "<tool_call>" in value:
            where = f"assistant turn {sum(m['role'] == 'assistant' for m in messages)}"
            content = re.sub(r"<tool_call>.*?(?:</tool_call>|\Z)", "", value, flags=re.DOTALL).strip()
            messages.append(_assistant(content, _parsed_calls(value, "hermes", where)))
        else:
            messages.append({"role": role, "content": value.strip()})
    return _conversation_rows(_source_id(row, index), messages, _tools(definitions, "system <tools>"))


def convert_toolace(row: Mapping[str, Any], index: int, context: SourceContext) -> list[dict[str, Any]]:
    """Team-ACE ToolACE: tools as a JSON list inside `system`, assistant calls as `[f(a=1), g(b="x")]`."""
    tools = _tools(_json_list(_require(row, "system", str)), "system")
    messages: list[dict[str, Any]] = []
    for role, value in _sharegpt_turns(row):
        text = value.strip()
        if role == "system":
            continue  # a second system prompt would be an instruction like the first, which is dropped too
        if role == "assistant" and text.startswith("[") and text.endswith("]"):
            where = f"assistant turn {sum(m['role'] == 'assistant' for m in messages)}"
            messages.append(_assistant("", _pythonic_calls(text, tools, where)))
        else:
            messages.append({"role": role, "content": text})
    return _conversation_rows(_source_id(row, index), messages, tools)


def _openai_message(message: Any, where: str) -> dict[str, Any]:
    if not isinstance(message, dict) or message.get("role") not in ("system", "user", "assistant", "tool"):
        raise ConversionError(f"{where}: expected a message with role system, user, assistant or tool")
    content = message.get("content")
    if isinstance(content, list):  # content parts: keep the text ones
        content = "".join(part.get("text", "") for part in content if isinstance(part, dict))
    elif content is None:
        content = ""
    elif not isinstance(content, str):
        raise ConversionError(f"{where}.content: expected a string, got {type(content).__name__}")
    if message["role"] == "assistant":
        raw_calls = message.get("tool_calls") or []
        calls = _parsed_calls({"tool_calls": raw_calls}, "openai", where) if raw_calls else []
        converted = _assistant(content, calls)
        for raw, call in zip(raw_calls, converted.get("tool_calls", []), strict=True):
            if isinstance(raw, dict) and "id" in raw:
                # Templates that pair each result with its call (Mistral's) need the call ids.
                call |= {"id": raw["id"], "type": call.pop("type"), "function": call.pop("function")}
        return converted
    converted = {"role": message["role"], "content": content}
    # The keys chat templates read to pair a result with its call; everything else the API dumps is dropped.
    converted |= {key: message[key] for key in ("tool_call_id", "name") if key in message}
    return converted


def convert_openai(row: Mapping[str, Any], index: int, context: SourceContext) -> list[dict[str, Any]]:
    """OpenAI-style chat rows: `messages` with assistant `tool_calls`, and `tools` in the OpenAI format."""
    messages = [_openai_message(m, f"messages[{i}]") for i, m in enumerate(_require(row, "messages", list))]
    return _conversation_rows(_source_id(row, index), messages, _tools(row.get("tools") or [], "tools"))


def _bfcl_messages(question: Any) -> list[dict[str, Any]]:
    if isinstance(question, str):
        return [{"role": "user", "content": question}]
    if isinstance(question, list) and question and all(isinstance(turn, list) for turn in question):
        if len(question) > 1:
            raise ConversionError(f"question: {len(question)} turns; multi-turn BFCL entries are not supported")
        question = question[0]
    if not isinstance(question, list) or not question:
        raise ConversionError("question: expected a list of turns, each a list of messages")
    for i, message in enumerate(question):
        if not isinstance(message, dict) or not isinstance(message.get("content"), str):
            raise ConversionError(f"question[0][{i}]: expected a message {{role, content}}")
    return [{"role": message.get("role", "user"), "content": message["content"]} for message in question]


def _first_acceptable(values: Any, where: str) -> tuple[bool, Any]:
    """BFCL's acceptable values -> (whether there is a value to give, the first one that is not "")."""
    if not isinstance(values, list):
        raise ConversionError(f"{where}: expected a list of acceptable values, got {values!r}")
    given, value = _first_of(values)  # "" means "may be left out": the gold answer gives the first real value
    return given, _plain(value)


def _plain(option: Any) -> Any:
    """One acceptable value as a call gives it. BFCL writes an object (a parameter's value, or an element of a list of
    objects) with each key mapped to its own acceptable values; the gold answer takes the first of each. Inside those
    values everything is plain, as BFCL compares them (`dict_checker` and `list_dict_checker` go one level deep)."""
    if isinstance(option, dict):
        return {key: first for key, (given, first) in ((k, _first_of(v)) for k, v in option.items()) if given}
    if isinstance(option, list):
        return [_plain(element) if isinstance(element, dict) else element for element in option]
    return option


def _first_of(values: Any) -> tuple[bool, Any]:
    """The first acceptable value of an object's key, as it stands; a key mapped to a bare value gives that value."""
    if not isinstance(values, list):
        return True, values
    return next(((True, value) for value in values if not (isinstance(value, str) and value == "")), (False, None))


def _bfcl_call(entry: Any, where: str) -> dict[str, Any]:
    if not isinstance(entry, dict) or len(entry) != 1 or not isinstance(next(iter(entry.values())), dict):
        raise ConversionError(f"{where}: expected {{function name: {{parameter: [acceptable values]}}}}")
    ((name, parameters),) = entry.items()
    arguments = {}
    for parameter, values in parameters.items():
        given, value = _first_acceptable(values, f"{where}.{name}.{parameter}")
        if given:
            arguments[parameter] = value
    return {"name": name, "arguments": arguments}


def convert_bfcl(row: Mapping[str, Any], index: int, context: SourceContext) -> list[dict[str, Any]]:
    """Berkeley Function Calling Leaderboard: a question file joined by `id` with its possible-answer file."""
    row_id = _source_id(row, index)
    messages = _bfcl_messages(row.get("question"))
    tools = _tools(_require(row, "function", list), "function")
    if context.category == "irrelevance":
        return [_canonical(row_id, messages, tools, [], category="irrelevance")]
    truth = context.ground_truth.get(row_id)
    if truth is None:
        raise ConversionError(f"no possible answer with id {row_id!r} in the answers file")
    possible = _require(truth, "ground_truth", list)
    calls = [_bfcl_call(entry, f"ground_truth[{i}]") for i, entry in enumerate(possible)]
    return [_canonical(row_id, messages, tools, calls, possible_answers=possible, category=context.category)]


CONVERTERS: dict[str, Converter] = {
    "xlam": Converter(convert_xlam, "Salesforce xLAM function-calling-60k (query, tools, answers as JSON strings)"),
    "glaive": Converter(convert_glaive, "Glaive function-calling v2 (system, chat with <functioncall>)"),
    "hermes": Converter(convert_hermes, "NousResearch Hermes function-calling v1 (ShareGPT, <tools>, <tool_call>)"),
    "toolace": Converter(convert_toolace, "Team-ACE ToolACE (system with a JSON tool list, pythonic [f(a=1)] calls)"),
    "bfcl": Converter(convert_bfcl, "BFCL question file + --answers possible-answer file, joined by id"),
    "openai": Converter(convert_openai, "OpenAI-style chat rows (messages with tool_calls, tools)"),
}


# ------------------------------------------------------------------------------------------------- entry points


def convert_rows(
    source: str,
    rows: Iterable[Any],
    *,
    ground_truth: Mapping[str, Mapping[str, Any]] | None = None,
    category: str | None = None,
    sink: Callable[[dict[str, Any]], None] | None = None,
) -> ConversionResult:
    """Convert source rows of one format (a name in `CONVERTERS`) to canonical rows.

    `rows` holds row dicts or `(row number, row)` pairs as `read_source` yields them. A row that cannot be converted
    is recorded in `result.failures` with its number and reason, never dropped silently. BFCL needs `ground_truth`
    (possible-answer rows by id, see `load_ground_truth`) except for irrelevance, and takes `category` from its
    file name (`bfcl_category`). `sink`, when given, receives each canonical row instead of `result.rows`, so big
    datasets stream to a file.

    >>> row = {"id": 1, "query": "Hi?", "tools": '[{"name": "f", "parameters": {}}]', "answers": "[]"}
    >>> convert_rows("xlam", [row]).rows[0]["category"]
    'irrelevance'
    """
    if source not in CONVERTERS:
        raise ValueError(f"unknown source format {source!r}; choose one of {', '.join(CONVERTERS)}")
    function = CONVERTERS[source].function
    context = SourceContext(ground_truth=ground_truth or {}, category=category)
    result = ConversionResult()
    for number, row in number_rows(rows):
        result.source_rows += 1
        if isinstance(row, DataError):
            result.failures.append(RowFailure(number, str(row)))
            continue
        if not isinstance(row, Mapping):
            result.failures.append(RowFailure(number, f"expected an object, got {type(row).__name__}"))
            continue
        try:
            converted = function(row, number - 1, context)
        # ConversionError and SchemaError are ValueErrors; the others come from rows shaped unlike the format.
        except ValueError as error:
            result.failures.append(RowFailure(number, str(error)))
            continue
        except (TypeError, KeyError, AttributeError) as error:
            reason = f"the row is not laid out as {source} rows are ({type(error).__name__}: {error})"
            result.failures.append(RowFailure(number, reason))
            continue
        if not converted:
            result.no_tool_rows += 1
        result.converted += len(converted)
        for canonical in converted:
            (sink or result.rows.append)(canonical)
    return result


_BFCL_CATEGORIES = {"simple", "multiple", "parallel", "parallel_multiple", "irrelevance"}


def bfcl_category(path: str) -> str | None:
    """The canonical category a BFCL file name gives (`BFCL_v3_live_multiple.json` -> "multiple"), or None.

    The `live_` sets map to their plain categories; Java and JavaScript are simple. Multi-turn and relevance sets,
    which have no gold calls, raise `DataError`.
    """
    stem = re.sub(r"^BFCL_v\d+_", "", Path(path).name.split(".")[0])
    name = stem.removeprefix("live_")
    if name in _BFCL_CATEGORIES:
        return name
    if name in ("java", "javascript"):
        return "simple"
    if name.startswith("multi_turn") or name == "relevance":
        raise DataError(f"{path}: BFCL's {stem} set has no gold calls to convert (multi-turn and relevance sets)")
    return None


def bfcl_files(source: str, answers: str | None = None) -> tuple[str, str | None]:
    """Where a BFCL category's question and possible-answer files are: `source` is a question file, or a category
    name (`simple_python`, `live_multiple`) read from the installed bfcl-eval package. The possible answers are
    `answers` when given, else `possible_answer/<same file name>` beside the questions, BFCL's own layout; None for
    the irrelevance categories, which have none. `DataError` names every path it looked for."""
    questions = Path(source)
    if not questions.is_file() and questions.suffix == "" and "/" not in source:
        spec = importlib.util.find_spec("bfcl_eval")
        if spec is None or spec.origin is None:
            raise DataError(f"{source}: no such file, and bfcl-eval is not installed to read it as a BFCL category")
        data = Path(spec.origin).parent / "data"
        by_name = {re.sub(r"^BFCL_v\d+_", "", path.stem): path for path in sorted(data.glob("BFCL_v*.json"))}
        found = [by_name[source]] if source in by_name else []
        if not found:
            names = sorted(by_name)
            raise DataError(f"{source}: no such BFCL category in {data} (categories: {', '.join(names)})")
        questions = found[-1]
    if answers is not None:
        return str(questions), answers
    if bfcl_category(str(questions)) == "irrelevance":
        return str(questions), None
    beside = questions.parent / "possible_answer" / questions.name
    if not beside.is_file():
        raise DataError(f"{questions}: no possible-answer file at {beside}; give it with --answers")
    return str(questions), str(beside)


def _read_json(path: Path) -> Iterator[tuple[int, dict[str, Any] | DataError]]:
    """A JSON array of rows, or JSONL under a .json name (as BFCL writes its files)."""
    try:
        with path.open("rb") as handle:
            head = handle.read(4096).lstrip()
    except OSError as error:
        raise DataError(f"{path}: cannot be read ({error.strerror or error})") from None
    if not head.startswith(b"["):
        return read_jsonl(path)
    try:
        rows = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise DataError(f"{path}: not UTF-8 text") from None
    except json.JSONDecodeError as error:
        raise DataError(f"{path}: not valid JSON ({error.msg} at line {error.lineno})") from None
    return (
        (number, row if isinstance(row, dict) else DataError(f"expected an object, got {type(row).__name__}"))
        for number, row in enumerate(rows, start=1)
    )


def _read_parquet(path: Path) -> Iterator[tuple[int, dict[str, Any] | DataError]]:
    import pyarrow.parquet as parquet

    try:
        reader = parquet.ParquetFile(path)
    except FileNotFoundError:
        raise DataError(f"{path}: no such file") from None
    except (OSError, ValueError) as error:  # pyarrow's ArrowInvalid is a ValueError
        raise DataError(f"{path}: not a readable Parquet file ({error})") from None

    def rows() -> Iterator[tuple[int, dict[str, Any]]]:
        number = 0
        try:
            for batch in reader.iter_batches():
                for row in batch.to_pylist():
                    number += 1
                    yield number, row
        except (OSError, ValueError) as error:
            raise DataError(f"{path}: unreadable after row {number} ({error})") from None

    return rows()


def _read_hub(name: str, split: str) -> Iterator[tuple[int, dict[str, Any]]]:
    import datasets

    try:
        dataset = datasets.load_dataset(name, split=split)
    except (OSError, ValueError, datasets.exceptions.DatasetsError) as error:
        raise DataError(f"{name}: not a local file, and not loadable as a Hugging Face dataset ({error})") from None
    return ((number, dict(row)) for number, row in enumerate(dataset, start=1))


def read_source(source: str, split: str = "train") -> Iterator[tuple[int, dict[str, Any] | DataError]]:
    """Stream a source dataset as `(row number, row)` pairs: a local .json (array or JSONL), .jsonl or .parquet
    file, or else a Hugging Face dataset name loaded with `datasets.load_dataset(source, split=split)`.

    A missing or unreadable file raises `DataError` naming it; a line that is not a JSON object comes back as a
    `DataError` in place of its row.
    """
    path = Path(source)
    suffix = path.suffix.lower()
    if suffix in (".json", ".jsonl", ".parquet") and not path.exists():
        raise DataError(f"{source}: no such file")
    if path.is_file():
        if suffix == ".jsonl":
            return read_jsonl(path)
        if suffix == ".json":
            return _read_json(path)
        if suffix == ".parquet":
            return _read_parquet(path)
        raise DataError(f"{source}: unsupported file type {suffix or '(none)'}; expected .json, .jsonl or .parquet")
    return _read_hub(source, split)


def load_ground_truth(path: str) -> dict[str, dict[str, Any]]:
    """Read a BFCL possible-answer file into `{id: row}`; `DataError` names the file and row of a bad line."""
    if not Path(path).is_file():
        raise DataError(f"{path}: no such file")
    by_id: dict[str, dict[str, Any]] = {}
    for number, row in read_source(path):
        if isinstance(row, DataError):
            raise DataError(f"{path}: row {number}: {row}")
        if not isinstance(row.get("id"), str) or not isinstance(row.get("ground_truth"), list):
            raise DataError(f'{path}: row {number}: expected {{"id", "ground_truth": [...]}}')
        by_id[row["id"]] = row
    return by_id
