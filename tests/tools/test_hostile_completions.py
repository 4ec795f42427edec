"""Generated hostile completions (Hypothesis) through every registered call reward, the per-turn BFCL reward and the
multi-turn verdict: huge integer literals in JSON and pythonic calls, numbers written as text, deep nesting, many
calls, unclosed and repeated tags, long lines. Each gets a number, nothing raises, nothing hangs (a deadline far above
what a completion takes), and nothing outside the session changes: `decimal`'s and `mpmath`'s precision and what BFCL's
classes keep in module globals are as they were."""

from __future__ import annotations

import copy
import decimal
import json
import math
import sys
import tracemalloc

import mpmath
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from grpo_tools.rewards import REWARDS
from grpo_tools.tools.bfcl_turn_reward import bfcl_turn_reward
from grpo_tools.tools.bfcl_verdict import bfcl_verdict


pytest.importorskip("bfcl_eval", reason="bfcl-eval is not installed (`make install` installs it)")

from grpo_tools.data.converters.bfcl_multi_turn import api_class


TOOLS = [
    {"type": "function", "function": {"name": name, "parameters": {"type": "object", "properties": {
        "a": {"type": "integer"}, "b": {"type": "number"}, "file_name": {"type": "string"}}, "required": ["a"]}}}
    for name in ("add", "cat")
]  # fmt: skip
ANSWERS = [{"name": "add", "arguments": {"a": 1, "b": 2}}]
ENVS = [
    {"involved_classes": ["MathAPI"], "turn": 0, "ground_truth": [["add(a=1, b=2)"]]},
    {"involved_classes": ["GorillaFileSystem"], "initial_config": {"GorillaFileSystem": {"root": {"alex": {
        "type": "directory", "contents": {"f.txt": {"type": "file", "content": "x" * 20_000}}}}}},
     "turn": 0, "ground_truth": [["cat(file_name='f.txt')"]]},
    {"involved_classes": ["MessageAPI"], "initial_config": {}, "turn": 0,
     "ground_truth": [["message_login(user_id='USR001')"]]},
]  # fmt: skip
NAMES = ["add", "logarithm", "square_root", "cat", "touch", "find", "send_message", "message_login", "echo", "f"]

huge_integer = st.sampled_from(["0x" + "f" * 3572, "9" * 5000, "-" + "1" * 400, "10" + "0" * 100])
number_text = st.sampled_from(["'1e" + "9" * 4300 + "'", "'" + "1" * 150 + "'", "'1e999999'", "'nan'", "'-inf'"])
small = st.one_of(st.integers(-5, 5), st.sampled_from(["'f.txt'", "'x'", "2.5", "None", "True", "'USR002'"]))
nested = st.integers(1, 3000).map(lambda depth: "[" * depth + "]" * depth)
value = st.one_of(
    huge_integer, number_text, small, nested, st.sampled_from([20_001, 100_001]).map(lambda n: "'" + "x" * n + "'")
)
keywords = st.sampled_from(["a", "b", "value", "base", "number", "precision", "file_name", "content", "user_id"])


@st.composite
def pythonic_call(draw: st.DrawFn) -> str:
    arguments = draw(st.lists(st.tuples(keywords, value), max_size=4, unique_by=lambda pair: pair[0]))
    return f"{draw(st.sampled_from(NAMES))}({', '.join(f'{key}={item}' for key, item in arguments)})"


def _as_json(call: str) -> str:
    name, _, rest = call.partition("(")
    body = ", ".join(f'"{part.split("=", 1)[0]}": {part.split("=", 1)[1]}' for part in rest[:-1].split(", ") if part)
    return '{"name": "' + name + '", "arguments": {' + body.replace("'", '"') + "}}"


@st.composite
def completion(draw: st.DrawFn) -> str:
    return draw(_completion())[:200_000]  # the 1 MB line has its own test below


@st.composite
def _completion(draw: st.DrawFn) -> str:
    calls = draw(st.lists(pythonic_call(), min_size=1, max_size=6))
    repeat = draw(st.sampled_from([1, 1, 2, 150]))
    layout = draw(st.sampled_from(["pythonic", "hermes", "json", "tags", "junk"]))
    if layout == "pythonic":
        return "[" + ", ".join(calls * repeat) + "]"
    if layout == "hermes":
        return "".join(f"<tool_call>{_as_json(call)}</tool_call>" for call in calls * repeat)
    if layout == "json":
        return "[" + ", ".join(_as_json(call) for call in calls * repeat) + "]"
    if layout == "tags":
        tag = draw(st.sampled_from(["<tool_call>", "<think>", "```", "<|python_tag|>", "[", "{"]))
        return tag * draw(st.integers(1, 20_000)) + draw(st.sampled_from(["", calls[0], _as_json(calls[0])]))
    return draw(st.text(max_size=200)) * draw(st.integers(1, 1_000))


def _globals_snapshot() -> dict[str, object]:
    """Every upper-case module global of BFCL's API modules (their default states, long-context extensions)."""
    for env in ENVS:
        for class_name in env["involved_classes"]:
            api_class(class_name)  # imported before the first snapshot
    prefix = "bfcl_eval.eval_checker.multi_turn_eval.func_source_code."
    return {
        f"{module_name}.{name}": copy.deepcopy(item)
        for module_name, module in list(sys.modules.items())
        if module_name.startswith(prefix)
        for name, item in vars(module).items()
        if name.isupper() and not callable(item)
    }


BEFORE = None


@settings(max_examples=60, deadline=60_000, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(text=completion(), env_index=st.integers(0, len(ENVS) - 1))
def test_every_reward_and_the_verdict_give_a_number_and_change_nothing_outside(text, env_index):
    global BEFORE
    BEFORE = BEFORE or _globals_snapshot()
    contexts = decimal.getcontext().prec, mpmath.mp.prec
    for name, spec in REWARDS.items():
        (score,) = spec.function([text], [TOOLS], [ANSWERS])
        assert isinstance(score, float) and math.isfinite(score), name
    env = ENVS[env_index]
    (score,) = bfcl_turn_reward([text], env=[env])
    assert score in (0.0, 1.0)
    verdict = bfcl_verdict(env, env["ground_truth"], [[text]])
    assert isinstance(verdict.valid, bool)
    json.dumps([verdict.error_type, verdict.message])
    assert (decimal.getcontext().prec, mpmath.mp.prec) == contexts
    assert _globals_snapshot() == BEFORE


def test_a_megabyte_of_calls_scores_as_wrong_with_bounded_memory():
    """The per-turn reward on a 1 MB completion of 41,666 reads of a 20 KB file: a number, memory kept afterwards a
    few times the line, and at its peak (the parser's syntax tree of the whole list) far below the 800 MB the reads
    would return: the budget stops them at the 129th call."""
    call = "cat(file_name='f.txt')"
    text = "[" + ", ".join([call] * (1_000_000 // (len(call) + 2))) + "]"
    tracemalloc.start()
    try:
        assert bfcl_turn_reward([text], env=[ENVS[1]]) == [0.0]
        kept, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert kept < 20 * len(text) and peak < 250 * len(text), (kept, peak)
