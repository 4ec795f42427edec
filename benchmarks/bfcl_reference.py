"""BFCL's own checker and data, as the parity test (`tests/test_bfcl_parity.py`) and `bench_bfcl.py` use them.

`load_ast_checker()` imports bfcl-eval's `ast_checker` module without its model registry: the module imports
`bfcl_eval.constants.model_config` only for `MODEL_CONFIG_MAPPING[model].underscore_to_dot` (`convert_func_name`),
and that module imports every provider SDK, which `pip install --no-deps bfcl-eval` leaves out. A stub says "keep
dots in function names", as for a model that writes names as the tools give them.

`cases(category)` reads one category from the installed package, converts it with `convert_rows("bfcl", ...)`, and
builds model outputs of our design for each case (`model_outputs`): the gold answer, every acceptable value of every
parameter, wrong types, string variants, dropped and extra parameters, and dropped, extra, renamed and reordered calls.
"""

from __future__ import annotations

import copy
import json
import sys
import types
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grpo_tools.data.converters import bfcl_category, convert_rows, load_ground_truth, read_source
from grpo_tools.data.converters.bfcl import plain_value


AST_CATEGORIES = (
    "simple_python",
    "multiple",
    "parallel",
    "parallel_multiple",
    "live_simple",
    "live_multiple",
    "live_parallel",
    "live_parallel_multiple",
)
CATEGORIES = (*AST_CATEGORIES, "irrelevance", "live_irrelevance")
MODEL_NAME = "grpo-tools-reference"


def data_dir() -> Path:
    """The question files of the installed bfcl-eval (`possible_answer/` beside them)."""
    import bfcl_eval

    return Path(bfcl_eval.__file__).parent / "data"


def load_ast_checker() -> types.ModuleType:
    """bfcl-eval's `ast_checker` module, with the one constant it needs from the model registry stubbed."""
    name = "bfcl_eval.constants.model_config"
    if name not in sys.modules:

        class _Config:
            underscore_to_dot = False

        class _Mapping(dict):
            def __missing__(self, key: str) -> _Config:
                return _Config()

        stub = types.ModuleType(name)
        stub.MODEL_CONFIG_MAPPING = _Mapping()
        sys.modules[name] = stub
    from bfcl_eval.eval_checker.ast_eval import ast_checker

    return ast_checker


@dataclass
class Case:
    """One BFCL case: BFCL's own entry (functions, possible answer) and our canonical row converted from it."""

    category: str
    functions: list[dict[str, Any]]
    possible: list[dict[str, Any]]  # [] for irrelevance
    row: dict[str, Any]


def cases(category: str) -> list[Case]:
    """Every case of one category from the installed package, converted with `convert_rows("bfcl", ...)`."""
    questions = data_dir() / f"BFCL_v4_{category}.json"
    answers = data_dir() / "possible_answer" / questions.name
    truth = load_ground_truth(str(answers)) if answers.exists() else {}
    raw = {row["id"]: row for _, row in read_source(str(questions))}
    result = convert_rows("bfcl", read_source(str(questions)), ground_truth=truth, category=bfcl_category(category))
    if result.failures:
        raise ValueError(f"{category}: {len(result.failures)} rows did not convert: {result.failures[:3]}")
    return [
        Case(category, raw[row["id"]]["function"], truth[row["id"]]["ground_truth"] if truth else [], row)
        for row in result.rows
    ]


def bfcl_verdict(checker: types.ModuleType, case: Case, decoded: list[dict[str, Any]] | None) -> bool:
    """BFCL's verdict on decoded calls (`[{name: {param: value}}]`); None means the output did not decode.

    AST categories go to `ast_checker` as `_evaluate_single_ast_entry` calls it; irrelevance follows
    `_evaluate_single_relevance_entry`: correct unless the output decodes to a call."""
    from bfcl_eval.constants.enums import Language

    if not case.possible:
        return decoded is None or len(decoded) == 0
    if decoded is None:
        return False
    verdict = checker.ast_checker(case.functions, decoded, case.possible, Language.PYTHON, case.category, MODEL_NAME)
    return verdict["valid"]


def hermes(decoded: list[dict[str, Any]] | None) -> str:
    """Decoded calls as a Hermes completion, as a model trained with our template writes them; None: a broken call."""
    if decoded is None:
        return '<tool_call>\n{"name": "get_weather", "arguments": {"city": \n</tool_call>'
    calls = [{"name": name, "arguments": arguments} for call in decoded for name, arguments in call.items()]
    return "".join(f"<tool_call>\n{json.dumps(call)}\n</tool_call>\n" for call in calls) or "I will not call a tool."


# ------------------------------------------------------------------------------------------- model outputs


def _wrong_types(value: Any) -> Iterator[Any]:
    """Values of other types a model might write for `value`."""
    if isinstance(value, bool):
        yield int(value)
        yield str(value).lower()
    elif isinstance(value, int):
        yield float(value)
        yield str(value)
        yield value != 0
    elif isinstance(value, float):
        yield str(value)
        if value.is_integer():
            yield int(value)
    elif isinstance(value, str):
        yield [value]
        if value.strip().lstrip("-").isdigit():
            yield int(value)
        if value.lower() in ("true", "false"):
            yield value.lower() == "true"
    elif isinstance(value, list):
        if value:
            yield value[0]
            yield [str(element) for element in value]
            yield [element + 0.5 if type(element) is int else element for element in value]
        yield json.dumps(value)
    elif isinstance(value, dict):
        yield json.dumps(value)
        yield [value]


def _variants(value: Any) -> Iterator[Any]:
    """Near misses of the same type: string spellings, reordered and shortened lists, objects with a key changed."""
    if isinstance(value, str):
        yield value.upper()
        yield f" {value}. "
        yield value.replace(" ", "_")
        yield value.replace("'", '"')
        yield value + "x"
        yield ""
    elif isinstance(value, list) and value:
        yield value[::-1]
        yield value[:-1]
        yield [*value, value[-1]]
        yield [element.upper() if isinstance(element, str) else element for element in value]
        if isinstance(value[0], dict):
            yield [dict(list(value[0].items())[1:]), *value[1:]]
    elif isinstance(value, dict) and value:
        first = next(iter(value))
        yield {key: sub for key, sub in value.items() if key != first}
        yield {**value, "extra_key": 1}
        yield {**value, first: _change(value[first])}
        yield {key: sub.upper() if isinstance(sub, str) else sub for key, sub in value.items()}
    elif isinstance(value, bool):
        yield not value
    elif isinstance(value, int | float):
        yield value + 1


def _change(value: Any) -> Any:
    return value + "x" if isinstance(value, str) else [value] if not isinstance(value, list) else value[:-1]


def _gold_calls(case: Case) -> list[dict[str, Any]]:
    return [{call["name"]: call["arguments"]} for call in case.row["answers"]]


def _declared(case: Case, name: str) -> dict[str, Any]:
    tool = next((tool for tool in case.functions if tool["name"] == name), None)
    return tool["parameters"].get("properties", {}) if tool else {}


def model_outputs(case: Case) -> list[list[dict[str, Any]] | None]:
    """Decoded model outputs for one case (None: an output that does not decode), the gold answer first."""
    if not case.possible:
        if not case.functions:
            return [[], None, [{"any_tool": {}}]]
        tool = case.functions[0]
        arguments = dict.fromkeys(tool["parameters"].get("required", []), "x")
        return [[], None, [{tool["name"]: arguments}], [{tool["name"]: {}}, {tool["name"]: arguments}]]
    gold = _gold_calls(case)
    outputs: list[list[dict[str, Any]] | None] = [gold, None, []]

    def with_call(index: int, name: str, arguments: dict[str, Any]) -> None:
        outputs.append([*gold[:index], {name: arguments}, *gold[index + 1 :]])

    for index, entry in enumerate(case.possible):
        ((name, acceptable),) = entry.items()
        arguments = next(iter(gold[index].values()))
        for param, options in acceptable.items():
            for option in options:  # every acceptable value; "" leaves the parameter out
                if option == "":
                    with_call(index, name, {k: v for k, v in arguments.items() if k != param})
                else:
                    with_call(index, name, {**arguments, param: plain_value(option)})
            value = arguments.get(param)
            if value is None:
                continue
            for changed in [*_wrong_types(value), *_variants(value)]:
                with_call(index, name, {**arguments, param: changed})
        for param in set(_declared(case, name)) - set(acceptable):  # declared, but not in the possible answer
            with_call(index, name, {**arguments, param: "x"})
        with_call(index, name, {**arguments, "undeclared_param": 1})
        other = next((tool["name"] for tool in case.functions if tool["name"] != name), name + "_other")
        with_call(index, other, arguments)
    if len(gold) > 1:
        outputs += [gold[::-1], gold[1:] + gold[:1], gold[1:], gold[:-1]]
    outputs += [[*gold, gold[0]], [*gold, {case.functions[-1]["name"]: {}}]]
    return [copy.deepcopy(output) for output in outputs]


# ------------------------------------------------------------------------------------ rows BFCL can score


# Every category BFCL scores with `ast_checker`: the held-out and training sources, Java and JavaScript included.
EVERY_AST_CATEGORY = (
    "simple_python",
    "simple_java",
    "simple_javascript",
    "multiple",
    "parallel",
    "parallel_multiple",
    "live_simple",
    "live_multiple",
    "live_parallel",
    "live_parallel_multiple",
)


@dataclass
class Refusal:
    """A BFCL row that our converter or `check_rows` refuses: why, and whether BFCL's checker accepts an answer to it
    (its gold answer or its shortest one; None when the checker cannot run on the row: `bfcl_error` says why)."""

    id: str
    reason: str
    bfcl_accepts: bool | None
    bfcl_error: str


def python_dialect(functions: list[dict[str, Any]], category: str) -> list[dict[str, Any]]:
    """BFCL's Java and JavaScript function docs with their type names read as BFCL's Python names, through BFCL's own
    tables (`JAVA_TYPE_CONVERSION`, `JS_TYPE_CONVERSION`): a model that writes JSON calls is judged by the Python
    rules, as `tool_bfcl` judges every row. Python categories come back as they are."""
    from bfcl_eval.constants.type_mappings import JAVA_TYPE_CONVERSION, JS_TYPE_CONVERSION

    table = {"simple_java": JAVA_TYPE_CONVERSION, "simple_javascript": JS_TYPE_CONVERSION}.get(category)
    if table is None:
        return functions
    names = {str: "string", int: "integer", float: "float", bool: "boolean", list: "array", set: "array", dict: "dict"}

    def retype(schema: dict[str, Any]) -> dict[str, Any]:
        kind = table.get(schema.get("type"))
        out = {**schema, "type": names[kind]} if kind is not None else dict(schema)
        if isinstance(out.get("items"), dict):
            out["items"] = retype(out["items"])
        return out

    converted = copy.deepcopy(functions)
    for function in converted:
        properties = function["parameters"].get("properties", {})
        function["parameters"]["properties"] = {name: retype(schema) for name, schema in properties.items()}
    return converted


def answers_of(possible: list[dict[str, Any]], shortest: bool) -> list[dict[str, Any]]:
    """An answer BFCL's possible answer describes: each parameter's first acceptable value that is not "", or, when
    `shortest`, every parameter whose acceptable values hold "" left out."""
    calls = []
    for entry in possible:
        ((name, parameters),) = entry.items()
        arguments = {}
        for key, values in parameters.items():
            if shortest and "" in values:
                continue
            value = next((value for value in values if value != ""), "")
            if value != "":
                arguments[key] = plain_value(value)
        calls.append({name: arguments})
    return calls


def refusals(category: str, checker: types.ModuleType) -> tuple[int, list[Refusal]]:
    """How many rows one category has, and each row that `convert_rows("bfcl", ...)` or `check_rows` refuses, with
    whether BFCL's checker, judging by its Python rules, accepts the row's gold answer (the converted `answers`, or
    for a row that did not convert the possible answer's first acceptable values) or its shortest answer."""
    from bfcl_eval.constants.enums import Language

    from grpo_tools.data.rows import check_rows

    questions = data_dir() / f"BFCL_v4_{category}.json"
    truth = load_ground_truth(str(data_dir() / "possible_answer" / questions.name))
    raw = [row for _, row in read_source(str(questions))]
    result = convert_rows("bfcl", read_source(str(questions)), ground_truth=truth, category=bfcl_category(category))
    reasons = {raw[failure.row - 1]["id"]: f"not converted: {failure.reason}" for failure in result.failures}
    for problem in check_rows(result.rows):
        reasons[str(problem.id)] = reasons.get(str(problem.id), "check-data:") + f" {problem.field}: {problem.message}"
    answers = {row["id"]: [{call["name"]: call["arguments"]} for call in row["answers"]] for row in result.rows}
    by_id = {row["id"]: row for row in raw}
    found = []
    for row_id, reason in reasons.items():
        possible = truth[row_id]["ground_truth"]
        functions = python_dialect(by_id[row_id]["function"], category)
        candidates = [answers.get(row_id) or answers_of(possible, shortest=False), answers_of(possible, shortest=True)]
        try:
            verdicts = [
                checker.ast_checker(functions, output, possible, Language.PYTHON, category, MODEL_NAME)
                for output in candidates
            ]
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as error:
            found.append(Refusal(row_id, reason, None, f"BFCL's checker raises {type(error).__name__}: {error}"))
            continue
        accepted = any(verdict["valid"] for verdict in verdicts)
        error = "" if accepted else "; ".join(map(str, verdicts[0].get("error", [])))[:300]
        found.append(Refusal(row_id, reason, accepted, error))
    return len(raw), found
