"""How `grpo-tools score` reads a raw-text step of a BFCL multi-turn result: grpo-tools' parser, or the decoder of a
BFCL model handler, reimplemented without `eval`.

BFCL decodes a prompting model's step with its handler's `decode_execute`; the local (OSS) handlers and the prompting
API handlers use `default_decode_execute_prompting` (bfcl_eval/model_handler/utils.py): strip backticks, newlines and
spaces, wrap the text in `[...]` unless it already starts or ends with a bracket, parse it as one Python expression,
read each element as a call (keyword arguments only: positional ones are dropped), and write each call back as a call
string (`decoded_output_to_execution_list`), which its checker runs. A step it cannot decode is dropped, so
`[{"name": ...}]` JSON, Hermes `<tool_call>` blocks and `<think>...</think>[...]` text make no call there, where
grpo-tools' parser reads them. `bfcl_prompting_calls` follows the same rules and builds the same call strings, but
never evaluates anything: BFCL `eval`s an argument written as a binary operation (`a=1+2`), which is computed here
only for numbers and strings within small bounds (anything else drops the step, as BFCL's `eval` drops a name it
cannot resolve). The call strings then run through the safe executor like every call string.

`bfcl_qwen_fc_calls` is `QwenFCHandler.decode_execute` (Qwen3's function-calling handlers): each
`<tool_call>\n...\n</tool_call>` block (the newlines required) read as JSON, a block that is not JSON skipped, the step
dropped unless every block is an object with `name` and `arguments` (an object, or its JSON text), each call written
`name(k=repr(v),...)`.
"""

from __future__ import annotations

import ast
import json
import operator
import re
from collections.abc import Callable
from typing import Any


__all__ = [
    "BFCL_DECODERS",
    "DECODERS",
    "DECODER_HELP",
    "MAX_STEP_CHARS",
    "bfcl_prompting_calls",
    "bfcl_qwen_fc_calls",
    "decode_result",
]

# The decoders `score --decoder` offers for raw-text steps, with what each is.
DECODERS: dict[str, str] = {
    "grpo-tools": "grpo-tools' parser (pythonic, JSON, Hermes <tool_call>, code fences, <think> text); not BFCL's "
    "prompting figure for text BFCL's decoder cannot read",
    "bfcl-prompting": "BFCL's prompting decoder (default_decode_execute_prompting, as its OSS and prompting handlers "
    "decode), reimplemented without eval: BFCL's prompting figure",
    "bfcl-qwen-fc": "BFCL's QwenFCHandler decoder (Qwen3's FC handlers: JSON in <tool_call> blocks): BFCL's figure "
    "for those models",
}

DECODER_HELP = "BFCL multi-turn rows: how raw-text steps are read; " + "; ".join(
    f"{name}: {text}" for name, text in DECODERS.items()
)


class _Undecodable(Exception):
    """What BFCL's decoder raises on a step, which it then drops."""


_BINARY: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY: dict[type, Callable[[Any], Any]] = {
    ast.USub: operator.neg,
    ast.UAdd: operator.pos,
    ast.Invert: operator.invert,
    ast.Not: operator.not_,
}
# Bounds on what an argument written as arithmetic may compute: larger operands drop the step.
_MAX_NUMBER = 10**100
_MAX_TEXT = 20_000
# A step's text longer than this is dropped unread (parsing a megabyte of Python takes seconds); BFCL's longest
# ground-truth call has 6,839 characters.
MAX_STEP_CHARS = 100_000


def _arithmetic(node: ast.AST) -> Any:
    """What Python would compute for arithmetic on literal numbers and strings, within bounds; `_Undecodable` for
    anything else (BFCL `eval`s it: a name fails there too, a builtin's call would run)."""
    if isinstance(node, ast.Constant) and type(node.value) in (int, float, str, bool):
        return node.value
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _bounded(_UNARY[type(node.op)](_arithmetic(node.operand)))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _arithmetic(node.left), _arithmetic(node.right)
        if isinstance(node.op, ast.Pow) and isinstance(right, int | float) and abs(right) > 64:
            raise _Undecodable("an exponent beyond 64")
        if isinstance(node.op, ast.Mult) and (isinstance(left, str) or isinstance(right, str)):
            text, times = (left, right) if isinstance(left, str) else (right, left)
            if isinstance(times, int) and len(text) * times > _MAX_TEXT:
                raise _Undecodable("a repeated string beyond the bound")
        return _bounded(_BINARY[type(node.op)](left, right))
    raise _Undecodable(f"{type(node).__name__} in arithmetic")


def _bounded(value: Any) -> Any:
    if isinstance(value, int | float) and not isinstance(value, bool) and abs(value) > _MAX_NUMBER:
        raise _Undecodable("a number beyond the bound")
    if isinstance(value, str) and len(value) > _MAX_TEXT:
        raise _Undecodable("a string beyond the bound")
    return value


def _value(node: ast.AST) -> Any:
    """BFCL's `resolve_ast_by_type`, without `eval`."""
    if isinstance(node, ast.Constant):
        return "..." if node.value is Ellipsis else node.value
    if isinstance(node, ast.UnaryOp):  # BFCL negates the operand's value, whatever the operator
        operand = getattr(node.operand, "value", None)
        if not isinstance(node.operand, ast.Constant) or not isinstance(operand, int | float | complex):
            raise _Undecodable("a unary operator on something other than a number")
        return -operand
    if isinstance(node, ast.List):
        return [_value(item) for item in node.elts]
    if isinstance(node, ast.Dict):
        if any(key is None for key in node.keys):
            raise _Undecodable("** in a dict")
        return {_value(key): _value(value) for key, value in zip(node.keys, node.values, strict=True)}
    if isinstance(node, ast.BinOp):
        return _arithmetic(node)
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Call):
        return ast.unparse(node) if not node.keywords else _call(node)
    if isinstance(node, ast.Tuple):
        return tuple(_value(item) for item in node.elts)
    if isinstance(node, ast.Subscript):
        return ast.unparse(node.value) + "[" + ast.unparse(node.slice) + "]"
    raise _Undecodable(f"unsupported {type(node).__name__}")  # a lambda fails in BFCL too


def _call(node: ast.Call) -> dict[str, dict[Any, Any]]:
    """BFCL's `resolve_ast_call`: the dotted name and the keyword arguments (positional ones are dropped)."""
    parts, func = [], node.func
    while isinstance(func, ast.Attribute):
        parts.append(func.attr)
        func = func.value
    if isinstance(func, ast.Name):
        parts.append(func.id)
    return {".".join(reversed(parts)): {keyword.arg: _value(keyword.value) for keyword in node.keywords}}


def _nested(value: Any) -> str:
    """BFCL's `parse_nested_value`: a value as it writes it into a call string."""
    if isinstance(value, dict):
        if all(isinstance(item, dict) for item in value.values()):  # read as a call, as BFCL reads it
            if not value:
                raise _Undecodable("an empty object read as a call")
            name = next(iter(value))
            return f"{name}({', '.join(f'{k}={_nested(v)}' for k, v in value[name].items())})"
        return "{" + ", ".join(f"'{k}': {_nested(v)}" for k, v in value.items()) + "}"
    return repr(value)


def bfcl_prompting_calls(text: str) -> list[str] | None:
    """The call strings BFCL's `default_decode_execute_prompting` makes of a step's text, or None where it raises
    (BFCL then drops the step). Nothing is evaluated; a text longer than `MAX_STEP_CHARS` is dropped unread.

    >>> bfcl_prompting_calls("```[cd(folder='temp'), ls(a=True)]```")
    ["cd(folder='temp')", 'ls(a=True)']
    >>> bfcl_prompting_calls("mkdir(dir_name='new', mode=2*8)")
    ["mkdir(dir_name='new', mode=16)"]
    >>> print(bfcl_prompting_calls('<tool_call>{"name": "ls", "arguments": {}}</tool_call>'))
    None
    """
    if len(text) > MAX_STEP_CHARS:
        return None
    text = text.strip("`\n ")
    text = ("" if text.startswith("[") else "[") + text + ("" if text.endswith("]") else "]")
    try:
        tree = ast.parse(text.strip().strip("'"), mode="eval")
        body = tree.body
        if isinstance(body, ast.Call):
            calls = [body]
        elif isinstance(body, ast.List | ast.Tuple | ast.Set) and all(isinstance(e, ast.Call) for e in body.elts):
            calls = list(body.elts)
        else:
            return None
        decoded = [_call(call) for call in calls]
        return [
            f"{name}({', '.join(f'{k}={_nested(v)}' for k, v in arguments.items())})"
            for call in decoded
            for name, arguments in call.items()
        ]
    except (_Undecodable, SyntaxError, ValueError, TypeError, ArithmeticError, RecursionError, MemoryError):
        # SyntaxError: not Python; ValueError: an integer too long to write, null bytes; TypeError: an unhashable
        # key, arithmetic on mixed types; ArithmeticError: a division by zero; RecursionError, MemoryError: nesting
        # too deep: each is an exception BFCL's decoder raises too.
        return None


_TOOL_CALL = re.compile(r"<tool_call>\n(.*?)\n</tool_call>", re.DOTALL)


def bfcl_qwen_fc_calls(text: str) -> list[str] | None:
    """The call strings BFCL's `QwenFCHandler.decode_execute` makes of a step's text, or None where it raises (BFCL
    then drops the step). Nothing is evaluated (BFCL's `eval` branch is for items its own check has already refused).

    >>> bfcl_qwen_fc_calls('<tool_call>\\n{"name": "cd", "arguments": {"folder": "x"}}\\n</tool_call>')
    ["cd(folder='x')"]
    """
    if len(text) > MAX_STEP_CHARS:
        return None
    items = []
    for block in _TOOL_CALL.findall(text):
        try:
            items.append(json.loads(block))
        except (ValueError, RecursionError):  # BFCL skips a block that is not JSON
            continue
    if any(type(item) is not dict for item in items):
        return None
    try:
        calls = []
        for item in items:
            name, arguments = item["name"], item["arguments"]
            hash(name)  # BFCL makes it a dict key
            if type(arguments) is str:
                arguments = json.loads(arguments)
            calls.append(f"{name}({','.join(f'{key}={value!r}' for key, value in arguments.items())})")
    except (KeyError, TypeError, ValueError, AttributeError, RecursionError):
        return None
    return calls


# The BFCL decoders by `--decoder` name.
BFCL_DECODERS: dict[str, Callable[[str], list[str] | None]] = {
    "bfcl-prompting": bfcl_prompting_calls,
    "bfcl-qwen-fc": bfcl_qwen_fc_calls,
}


def _same_calls(text: str, bfcl_calls: list[str] | None) -> bool:
    """Whether grpo-tools' parser and a BFCL decoder read the same calls from a step's text."""
    from grpo_tools.data.converters.bfcl_multi_turn import CallSyntaxError, parse_call
    from grpo_tools.tools.bfcl_verdict import decode_step

    ours = [(call.name, call.kwargs) for call in decode_step(text)]
    theirs = []
    for call_text in bfcl_calls or []:
        try:
            call = parse_call(call_text)
        except CallSyntaxError:
            return False
        theirs.append((call.name, call.kwargs))
    return ours == theirs


def decode_result(result: Any, decoder: str, tally: dict[str, int]) -> Any:
    """A BFCL result (per turn, per step) with its raw-text steps decoded by `decoder` where it is one of BFCL's
    (each text replaced by BFCL's call strings, `[]` where BFCL drops it); grpo-tools' parser reads them later, in the
    verdict. `tally` counts the raw-text steps (`steps`) and those grpo-tools' parser reads otherwise than the BFCL
    decoder (`differ`; `bfcl-prompting` where `decoder` is `grpo-tools`)."""
    if not isinstance(result, list):
        return result
    bfcl = BFCL_DECODERS.get(decoder, bfcl_prompting_calls)
    turns = []
    for turn in result:
        steps = []
        for step in turn:
            if isinstance(step, str):
                bfcl_calls = bfcl(step)
                tally["steps"] = tally.get("steps", 0) + 1
                tally["differ"] = tally.get("differ", 0) + int(not _same_calls(step, bfcl_calls))
                if decoder in BFCL_DECODERS:
                    step = bfcl_calls or []
            steps.append(step)
        turns.append(steps)
    return turns
