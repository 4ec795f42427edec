"""Raw-text steps of BFCL multi-turn results: `score --decoder bfcl-prompting` decodes them as BFCL's prompting
decoder (`default_decode_execute_prompting`) does, call string for call string, and gives BFCL's checker's verdict
on the first 40 rows of multi_turn_base written in nine text styles (pythonic lists, code fences, bare calls, JSON,
Hermes `<tool_call>` blocks, `<think>` text, keyword arguments, arithmetic in an argument); the default decoder
(grpo-tools' parser) prints that its figure is not BFCL's prompting figure.

BFCL's decoder `eval`s an argument written as arithmetic: it is given only texts built here from BFCL's ground truth,
never a model's text."""

from __future__ import annotations

import ast
import functools
import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest


pytest.importorskip("bfcl_eval", reason="bfcl-eval is not installed (`make install` installs it)")

from benchmarks import bfcl_multi_turn_reference as reference
from grpo_tools.cli import main
from grpo_tools.data.converters.bfcl_multi_turn import bfcl_module


ROWS = 40


def _keywords(call: dict, arithmetic: bool = False) -> str:
    """A canonical call as a pythonic call with keyword arguments; the first integer written as `n - 1 + 1`."""
    parts, done = [], not arithmetic
    for key, value in call["arguments"].items():
        if not done and type(value) is int:
            parts.append(f"{key}={value - 1} + 1")
            done = True
        else:
            parts.append(f"{key}={value!r}")
    return f"{call['name']}({', '.join(parts)})"


def _json(call: dict) -> str:
    return json.dumps({"name": call["name"], "arguments": call["arguments"]})


STYLES = {
    "pythonic": lambda texts, calls: "[" + ", ".join(texts) + "]",
    "fenced": lambda texts, calls: "```\n[" + ", ".join(texts) + "]\n```",
    "fenced_python": lambda texts, calls: "```python\n[" + ", ".join(texts) + "]\n```",
    "bare": lambda texts, calls: ", ".join(texts),
    "json": lambda texts, calls: "[" + ", ".join(map(_json, calls)) + "]",
    "hermes": lambda texts, calls: "\n".join(f"<tool_call>\n{_json(call)}\n</tool_call>" for call in calls),
    "hermes_inline": lambda texts, calls: "".join(f"<tool_call>{_json(call)}</tool_call>" for call in calls),
    "hermes_text_arguments": lambda texts, calls: (
        "I will do it.\n"
        + "\n".join(
            f"<tool_call>\n{json.dumps({**call, 'arguments': json.dumps(call['arguments'])})}\n</tool_call>"
            for call in calls
        )
    ),
    "think": lambda texts, calls: "<think>The user wants this done.</think>\n[" + ", ".join(texts) + "]",
    "keywords": lambda texts, calls: "[" + ", ".join(map(_keywords, calls)) + "]",
    "arithmetic": lambda texts, calls: "[" + ", ".join(_keywords(call, True) for call in calls) + "]",
}


@pytest.fixture(scope="module")
def rows() -> list[reference.Row]:
    return reference.rows("multi_turn_base")[:ROWS]


def _texts(row: reference.Row, style: str) -> list[list[str]]:
    """Per turn, one step: the turn's ground-truth calls as text in `style` (no step where BFCL expects no call)."""
    answers, turns = iter(row.row["answers"]), []
    for texts in row.ground_truth:
        calls = [next(answers) for _ in texts]
        turns.append([STYLES[style](texts, calls)] if texts else [])
    return turns


@functools.cache
def _bfcl_decoder() -> Callable[[str], list[str]]:
    """bfcl-eval's own `default_decode_execute_prompting`, with the functions it calls, compiled from its installed
    source: importing its module needs tree-sitter and tenacity, which grpo-tools does not install."""
    utils = Path(bfcl_module("bfcl_eval").__file__).parent / "model_handler" / "utils.py"
    names = {"default_decode_execute_prompting", "ast_parse", "resolve_ast_call", "resolve_ast_by_type"}
    names |= {"parse_nested_value", "decoded_output_to_execution_list"}
    tree = ast.parse(utils.read_text(encoding="utf-8"))
    functions = [node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name in names]
    assert {node.name for node in functions} == names
    namespace = {"ast": ast, "re": re, "json": json}
    namespace["ReturnFormat"] = bfcl_module("bfcl_eval.constants.enums").ReturnFormat
    exec(compile(ast.Module(body=functions, type_ignores=[]), str(utils), "exec"), namespace)  # BFCL's code, not text
    return namespace["default_decode_execute_prompting"]


@functools.cache
def _bfcl_qwen_fc_decoder() -> Callable[[str], list[str]]:
    """bfcl-eval's `QwenFCHandler.decode_execute` (Qwen3's function-calling handlers) with `_extract_tool_calls` and
    `convert_to_function_call`, compiled from the installed source: its module needs packages grpo-tools lacks."""
    root = Path(bfcl_module("bfcl_eval").__file__).parent / "model_handler"
    tree = ast.parse((root / "local_inference" / "qwen_fc.py").read_text(encoding="utf-8"))
    handler = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "QwenFCHandler")
    methods = [
        n
        for n in handler.body
        if isinstance(n, ast.FunctionDef) and n.name in ("decode_execute", "_extract_tool_calls")
    ]
    for method in methods:
        method.decorator_list = [d for d in method.decorator_list if getattr(d, "id", None) == "staticmethod"]
    utils = ast.parse((root / "utils.py").read_text(encoding="utf-8"))
    convert = [n for n in utils.body if isinstance(n, ast.FunctionDef) and n.name == "convert_to_function_call"]
    assert len(methods) == 2 and len(convert) == 1
    handler_class = ast.ClassDef(name="QwenFC", bases=[], keywords=[], body=methods, decorator_list=[])
    if "type_params" in ast.ClassDef._fields:  # Python 3.12 and later
        handler_class.type_params = []
    body = [*convert, handler_class]
    namespace = {"json": json, "re": re}
    exec(compile(ast.fix_missing_locations(ast.Module(body=body, type_ignores=[])), str(root), "exec"), namespace)
    handler = namespace["QwenFC"]()
    return lambda text: handler.decode_execute(text, has_tool_call_tag=False)


BFCL_DECODERS = {"bfcl-prompting": lambda: _bfcl_decoder(), "bfcl-qwen-fc": lambda: _bfcl_qwen_fc_decoder()}


def _bfcl_decode(text: str, decoder: str = "bfcl-prompting") -> list[str] | None:
    try:
        return BFCL_DECODERS[decoder]()(text)
    except Exception:  # BFCL's runner drops a step its decoder raises on, whatever the exception
        return None


@pytest.mark.parametrize("decoder", BFCL_DECODERS)
@pytest.mark.parametrize("style", STYLES)
def test_call_strings_are_bfcls(rows, style, decoder):
    from grpo_tools.evaluation.bfcl_decoding import BFCL_DECODERS as OURS

    texts = [text for row in rows for turn in _texts(row, style) for text in turn]
    assert len(texts) > ROWS
    assert [OURS[decoder](text) for text in texts] == [_bfcl_decode(text, decoder) for text in texts]


def _score(rows: list[reference.Row], style: str, folder: Path, *options: str) -> list[dict]:
    data, predictions, per_row = folder / "data.jsonl", folder / f"{style}.jsonl", folder / f"{style}_rows.jsonl"
    data.write_text("".join(json.dumps(row.row) + "\n" for row in rows))
    predictions.write_text(
        "".join(json.dumps({"id": row.row["id"], "result": _texts(row, style)}) + "\n" for row in rows)
    )
    assert (
        main(["score", "--data", str(data), "--predictions", str(predictions), "--per-row", str(per_row), *options])
        == 0
    )
    return [json.loads(line) for line in per_row.read_text().splitlines()]


@pytest.mark.parametrize("decoder", BFCL_DECODERS)
@pytest.mark.parametrize("style", STYLES)
def test_verdicts_are_bfcls_verdicts(rows, style, decoder, tmp_path):
    ours = _score(rows, style, tmp_path, "--decoder", decoder, "--quiet")
    for row, line in zip(rows, ours, strict=True):
        decoded = [[calls for text in turn if (calls := _bfcl_decode(text, decoder))] for turn in _texts(row, style)]
        valid, error = reference.bfcl_checker_verdict(row, decoded)
        assert (line["correct"], line["errors"]) == (valid, [error] if error else []), (style, row.row["id"])


def test_the_default_decoder_says_its_figure_is_not_bfcls(rows, tmp_path, capsys):
    ours = _score(rows, "hermes", tmp_path)
    assert sum(line["correct"] for line in ours) > 0  # our parser reads Hermes blocks; BFCL's decoder reads none
    error = capsys.readouterr().err
    assert "not BFCL's prompting figure" in error and "--decoder bfcl-prompting" in error
    _score(rows, "pythonic", tmp_path)
    assert "not BFCL's prompting figure" in capsys.readouterr().err  # raw text is read by our parser: always said


EDGE_CASES = [
    "[f(a=1/0)]",
    "[f(a=" + "{'a': " * 50 + "1" + "}" * 50 + ")]",
    "[f(a=0x" + "f" * 3572 + ")]",  # an integer too long to write back
    "[f(a=1)]\x00",
    "[f(a=f'{x}')]",
    "[f(a=-5, b=-True, c=not 1, d=+2)]",  # BFCL negates whatever the operator
    "[f(a=-'x')]",
    "[f(a=x[0], b=lambda: 1)]",
    "[f(a=g(b=1), c=h(2), d={'k': {'z': 1}})]",  # nested calls, an object of objects written as a call
    "[f(a=g(b=1), e={})]",
    "[f(**kw)]",
    "[f(a={1: 2, '1': 3})]",
    "[a.b.c(x=1)]",
    "[f()(x=1)]",
    "[f(a=..., b=b'x', c=1j, d=None, e=1e309)]",
    "[f(a=[1, (2, 3)], b=(1,), c={'x': [1, {'y': 2}]})]",
    "f(a=1)\ng(b=2)",
    "'[f(a=1)]'",
    "{f(a=1)}",
    "(f(a=1), g(b=2))",
    "[]",
    "",
    "[f(a=2*3-1, b='a'+'b', c=2**10, d=7//2, e=7%3, f=1.5*2, g=-1+2, h=True+1)]",
    "[f(a=1+x)]",
    "[f(a={**x}, b={1, 2}, c=1 if x else 2)]",
    "[f(a='it''s', b=\"it's\", c={\"k'\": 1})]",
]


@pytest.mark.parametrize("text", EDGE_CASES)
def test_edge_cases_decode_as_bfcl_decodes_them(text):
    from grpo_tools.evaluation.bfcl_decoding import bfcl_prompting_calls

    assert bfcl_prompting_calls(text) == _bfcl_decode(text)


QWEN_EDGE_CASES = [
    '<tool_call>\n{"name": "cd", "arguments": {"folder": "x"}}\n</tool_call>',
    '<tool_call>{"name": "cd", "arguments": {"folder": "x"}}</tool_call>',  # no newlines: BFCL's pattern misses it
    '<tool_call>\n{"name": "cd", "arguments": "{\\"folder\\": \\"x\\"}"}\n</tool_call>',
    '<tool_call>\n{"name": "cd", "arguments": "not json"}\n</tool_call>',
    '<tool_call>\n{"name": "cd"}\n</tool_call>',
    "<tool_call>\n\"__import__('os').getcwd()\"\n</tool_call>",  # a string item: BFCL refuses the step first
    "<tool_call>\n[1, 2]\n</tool_call>",
    '<tool_call>\nnot json\n</tool_call>\n<tool_call>\n{"name": "ls", "arguments": {}}\n</tool_call>',
    '<tool_call>\n{"name": ["x"], "arguments": {}}\n</tool_call>',
    '<tool_call>\n{"name": 5, "arguments": {"a": [1, {"b": null}], "c": 1.5e300, "d": true}}\n</tool_call>',
    '<tool_call>\n{"name": "f", "arguments": [1]}\n</tool_call>',
    '<tool_call>\n{"name": "f", "arguments": {"a b": NaN}}\n</tool_call>',
    "no call at all",
    "",
]


@pytest.mark.parametrize("text", QWEN_EDGE_CASES)
def test_qwen_fc_edge_cases_decode_as_bfcl_decodes_them(text):
    from grpo_tools.evaluation.bfcl_decoding import BFCL_DECODERS as OURS

    assert OURS["bfcl-qwen-fc"](text) == _bfcl_decode(text, "bfcl-qwen-fc")


@pytest.mark.parametrize("text", ["[f(a='x'*10**9)]", "[f(a=2**10**10)]", "[f(a=(10**100)**64)]", "[f(a=1)]" * 20_000])
def test_arithmetic_and_text_past_the_bounds_drop_the_step(text):
    """BFCL would compute these (a gigabyte, a billion-digit integer); here the step is dropped, unevaluated."""
    from grpo_tools.evaluation.bfcl_decoding import bfcl_prompting_calls

    assert bfcl_prompting_calls(text) is None


def test_eval_says_its_figure_is_not_bfcls(rows, tmp_path, capsys):
    """`grpo-tools eval` runs a conversation's calls as our parser reads them, and prints its reports with
    `print_comparison`: the BFCL line says the figure is not BFCL's prompting figure."""
    from grpo_tools.evaluation.bfcl_multi_turn import score_bfcl_multi_turn
    from grpo_tools.evaluation.compare import print_comparison

    data, predictions = tmp_path / "data.jsonl", tmp_path / "predictions.jsonl"
    data.write_text("".join(json.dumps(row.row) + "\n" for row in rows[:2]))
    predictions.write_text(
        "".join(json.dumps({"id": r.row["id"], "result": _texts(r, "hermes")}) + "\n" for r in rows[:2])
    )
    report, _ = score_bfcl_multi_turn(data, predictions)
    print_comparison({"base": report})
    out = capsys.readouterr().out
    assert "BFCL multi-turn overall: base" in out and "not BFCL's prompting figure" in out
