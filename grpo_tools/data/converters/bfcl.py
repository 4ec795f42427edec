"""The Berkeley Function Calling Leaderboard (`--from bfcl`): question files joined by id with their possible
answers, and where the installed bfcl-eval keeps them."""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from grpo_tools.data.converters.base import (
    ConversionError,
    SourceContext,
    canonical_row,
    canonical_tools,
    require,
    source_id,
)
from grpo_tools.data.converters.bfcl_multi_turn import convert_bfcl_multi_turn
from grpo_tools.data.converters.sources import read_source
from grpo_tools.data.rows import DataError


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
    return given, plain_value(value)


def plain_value(option: Any) -> Any:
    """One acceptable value as a call gives it. BFCL writes an object (a parameter's value, or an element of a list of
    objects) with each key mapped to its own acceptable values; the gold answer takes the first of each. Inside those
    values everything is plain, as BFCL compares them (`dict_checker` and `list_dict_checker` go one level deep)."""
    if isinstance(option, dict):
        return {key: first for key, (given, first) in ((k, _first_of(v)) for k, v in option.items()) if given}
    if isinstance(option, list):
        return [plain_value(element) if isinstance(element, dict) else element for element in option]
    return option


def _first_of(values: Any) -> tuple[bool, Any]:
    """The first acceptable value of an object's key, as it stands; a key mapped to a bare value gives that value."""
    if not isinstance(values, list):
        return True, values
    return next(((True, value) for value in values if not (isinstance(value, str) and value == "")), (False, None))


def _bfcl_call(entry: Any, where: str, declared: dict[str, Any]) -> dict[str, Any]:
    """The gold call a possible-answer entry gives; `declared` maps each offered tool to its parameter schemas."""
    if not isinstance(entry, dict) or len(entry) != 1 or not isinstance(next(iter(entry.values())), dict):
        raise ConversionError(f"{where}: expected {{function name: {{parameter: [acceptable values]}}}}")
    ((name, parameters),) = entry.items()
    arguments = {}
    for parameter, values in parameters.items():
        given, value = _first_acceptable(values, f"{where}.{name}.{parameter}")
        # A parameter the tool does not declare is left out where BFCL allows it (parallel_multiple_12): BFCL's
        # checker rejects any call that gives it.
        if given and (parameter in declared.get(name, {}) or "" not in values):
            arguments[parameter] = value
    return {"name": name, "arguments": arguments}


def convert_bfcl(row: Mapping[str, Any], index: int, context: SourceContext) -> list[dict[str, Any]]:
    """Berkeley Function Calling Leaderboard: a question file joined by `id` with its possible-answer file; the
    multi-turn sets (category `multi_turn`) go to `convert_bfcl_multi_turn`."""
    if context.category == "multi_turn":
        return convert_bfcl_multi_turn(row, index, context)
    row_id = source_id(row, index)
    messages = _bfcl_messages(row.get("question"))
    tools = canonical_tools(require(row, "function", list), "function")
    if context.category == "irrelevance":
        return [canonical_row(row_id, messages, tools, [], category="irrelevance")]
    truth = context.ground_truth.get(row_id)
    if truth is None:
        raise ConversionError(f"no possible answer with id {row_id!r} in the answers file")
    possible = require(truth, "ground_truth", list)
    declared = {tool["function"]["name"]: tool["function"]["parameters"]["properties"] for tool in tools}
    calls = [_bfcl_call(entry, f"ground_truth[{i}]", declared) for i, entry in enumerate(possible)]
    return [canonical_row(row_id, messages, tools, calls, possible_answers=possible, category=context.category)]


_BFCL_CATEGORIES = {"simple", "multiple", "parallel", "parallel_multiple", "irrelevance", "multi_turn"}
# BFCL's multi-turn sets, each converted to `multi_turn` rows; its other multi-turn-like sets (memory, web search)
# run backends grpo-tools does not carry.
_MULTI_TURN_SETS = {"multi_turn_base", "multi_turn_miss_func", "multi_turn_miss_param", "multi_turn_long_context"}


def bfcl_category(path: str) -> str | None:
    """The canonical category a BFCL file name gives (`BFCL_v3_live_multiple.json` -> "multiple"), or None.

    The `live_` sets map to their plain categories; Java and JavaScript are simple; the four multi-turn sets
    (`multi_turn_base`, `_miss_func`, `_miss_param`, `_long_context`) are `multi_turn`. The relevance set, which has
    no gold calls, raises `DataError`.
    """
    stem = re.sub(r"^BFCL_v\d+_", "", Path(path).name.split(".")[0])
    name = stem.removeprefix("live_")
    if name in _MULTI_TURN_SETS:
        return "multi_turn"
    if name in _BFCL_CATEGORIES - {"multi_turn"}:
        return name
    if name in ("java", "javascript"):
        return "simple"
    if name == "relevance":
        raise DataError(f"{path}: BFCL's {stem} set has no gold calls to convert")
    if name.startswith("multi_turn"):
        raise DataError(f"{path}: BFCL's {stem} set is not one of {', '.join(sorted(_MULTI_TURN_SETS))}")
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
