"""Hostile model outputs against the BFCL executor and verdict: code in a call's text (`__import__`, attribute access,
calls as arguments), dunder and private names, names the row does not offer at that turn (another class's method, a
builtin, a `miss_func` function called before its turn) and huge arguments. Nothing runs that is not an offered
method (`eval`, `exec`, `compile` and `os.system` are watched while they are tried), nothing reaches the file system,
and the API state stays what the offered calls made it."""

from __future__ import annotations

import ast
import builtins
import json
import os

import pytest


pytest.importorskip("bfcl_eval", reason="bfcl-eval is not installed (`make install` installs it)")

from benchmarks import bfcl_multi_turn_reference as reference
from grpo_tools.tools.bfcl import BFCLEnvironment, BFCLSession
from grpo_tools.tools.bfcl_verdict import bfcl_verdict
from grpo_tools.tools.trajectories import dispatch_tool_call


def _hostile_calls(marker: str) -> list[str]:
    """Call strings a model might write; `marker` is a file that appears if any of them runs code."""
    touch = f"__import__('os').system('touch {marker}')"
    return [
        touch,
        "__import__('os').getcwd()",
        f"cd(folder={touch})",
        f"echo(content='x', file_name=open('{marker}', 'w').name)",
        "cd.__globals__['__builtins__']['eval']('1')",
        "__class__()",
        "__init__()",
        "_load_scenario({})",
        "ls.__self__._load_scenario({})",
        "eval('1+1')",
        "exec('x=1')",
        "print('hello')",
        "add(a=1, b=2)",  # MathAPI's: not a class of this row
        "cd(**{'folder': 'document'})",
        "cd(*['document'])",
        "cd(folder='document'); __import__('os')",
        "lambda: 0",
        "[cd(folder='document')]",
        "cd(folder=" + "[" * 5_000 + "]" * 5_000 + ")",
        "cd(folder='\x00')",
    ]


@pytest.fixture
def watched(monkeypatch):
    """Make `eval`, `exec`, `compile` (except to a syntax tree, which is how `ast.parse` reads text) and `os.system`
    fail the test if anything calls them."""
    calls: list[str] = []
    real_compile = builtins.compile

    def parse_only(source, filename, mode, flags=0, *args, **kwargs):
        if flags & ast.PyCF_ONLY_AST:
            return real_compile(source, filename, mode, flags, *args, **kwargs)
        calls.append("compile")
        raise AssertionError("compile was called to make code")

    def forbidden(name):
        def record(*args, **kwargs):
            calls.append(name)
            raise AssertionError(f"{name} was called")

        return record

    for name in ("eval", "exec"):
        monkeypatch.setattr(builtins, name, forbidden(name))
    monkeypatch.setattr(builtins, "compile", parse_only)
    monkeypatch.setattr(os, "system", forbidden("os.system"))
    return calls


@pytest.fixture(scope="module")
def file_system_row() -> reference.Row:
    return next(
        r for r in reference.rows("multi_turn_base") if r.row["env"]["involved_classes"][0] == "GorillaFileSystem"
    )


def test_hostile_call_strings_run_nothing_and_leave_the_state_alone(file_system_row, watched, tmp_path):
    marker = tmp_path / "pwned"
    env = file_system_row.row["env"]
    legit = ["cd(folder='document')", "mkdir(dir_name='temp')"]
    reference_session = BFCLSession.from_env(env)
    for text in legit:
        reference_session.call_text(text)
    session = BFCLSession.from_env(env)
    outcomes = []
    for text in [legit[0], *_hostile_calls(str(marker)), legit[1], *_hostile_calls(str(marker))]:
        outcomes.append(session.call_text(text))
    hostile = [
        outcome for outcome in outcomes if outcome.arguments not in ({"folder": "document"}, {"dir_name": "temp"})
    ]
    assert all(outcome.status != "ok" for outcome in hostile), [o for o in hostile if o.status == "ok"]
    assert all(outcome.result.startswith("Error during execution: ") for outcome in hostile)
    assert session.state() == reference_session.state()
    assert not marker.exists() and watched == []


def test_hostile_model_text_through_the_environment(file_system_row, watched, tmp_path):
    """A model's text read by our parser (Hermes) reaches only offered methods, by name."""
    environment = BFCLEnvironment()
    environment.reset(env=file_system_row.row["env"])
    names = ["__import__", "__class__", "_load_scenario", "__init__", "eval", "add", "cd.__globals__", "", "ls "]
    for name in names:
        message = dispatch_tool_call(environment, {"function": {"name": name, "arguments": {"folder": "x"}}})
        assert "not found" in message["content"], name
    huge = dispatch_tool_call(
        environment, {"function": {"name": "echo", "arguments": {"content": "x" * 100_000, "file_name": "a.txt"}}}
    )
    assert "longer than" in huge["content"]
    assert [record.status for record in environment.records] == ["budget"]  # refused before it ran
    assert environment.session.state() == BFCLSession.from_env(file_system_row.row["env"]).state()
    assert watched == []


def test_held_out_function_called_early_is_refused_and_changes_nothing(watched):
    row = next(
        r
        for r in reference.rows("multi_turn_miss_func")
        if any(
            text.startswith(f"{name}(")
            for turn, names in r.row["env"]["missed_function"].items()
            for name in names
            for text in r.ground_truth[int(turn)]
        )
    )
    env = row.row["env"]
    ((turn, names),) = env["missed_function"].items()
    call = next(text for text in row.ground_truth[int(turn)] if text.split("(")[0] in names)
    early, fresh = BFCLSession.from_env(env), BFCLSession.from_env(env)
    outcome = early.call_text(call)
    assert outcome.status == "unknown_tool" and early.state() == fresh.state()
    early.start_turn(int(turn))
    assert early.call_text(call).status != "unknown_tool"
    assert watched == []


def test_huge_numbers_do_not_hold_the_process():
    session = BFCLSession(["MathAPI"])
    assert session.call_text("square_root(number=2, precision=1000000)").status == "budget"
    assert session.exceeded.kind == "precision"
    session = BFCLSession(["MathAPI"])
    assert session.call_text("add(a=1, b=10**100)").status == "parse_error"  # an expression, not a literal
    assert session.call_text(f"add(a=1, b={10**100})").status == "budget"
    assert session.exceeded.kind == "integer_digits"
    session = BFCLSession(["GorillaFileSystem"])
    assert session.call_text("echo(content='" + "x" * 200_000 + "', file_name='big.txt')").status == "budget"
    assert session.exceeded.kind == "argument_chars" and session.call_text("pwd()").status == "budget"
    session = BFCLSession(["MathAPI"])
    # A float parameter receives a float: the power overflows at once instead of computing a 100-million-digit integer.
    outcome = session.call_text("power(base=10, exponent=100000000)")
    assert outcome.status == "exception" and "Error during execution" in outcome.result


def test_the_verdict_of_a_hostile_trajectory_is_a_fail_and_runs_nothing(file_system_row, watched, tmp_path):
    marker = tmp_path / "pwned"
    truth = file_system_row.ground_truth
    hostile = [[[text] for text in _hostile_calls(str(marker))] for _ in truth]
    verdict = bfcl_verdict(file_system_row.row["env"], truth, hostile)
    assert not verdict.valid
    # Hostile calls added to the ground truth's do not change a right trajectory's verdict.
    padded = [[[*turn], *([[text] for text in _hostile_calls(str(marker))])] for turn in truth]
    assert (
        bfcl_verdict(file_system_row.row["env"], truth, padded).valid
        == bfcl_verdict(file_system_row.row["env"], truth, [[list(turn)] if turn else [] for turn in truth]).valid
    )
    assert not marker.exists() and watched == []
    json.dumps(verdict.message)  # the verdict is plain data
