"""The BFCL environments (`grpo_tools.tools.bfcl`): BFCL's API classes run by the safe executor give the results and
states BFCL's own executor gives on BFCL's ground truth, each session starts fresh from a copy of the row's
configuration, functions are offered turn by turn as BFCL offers them, and the backends we do not carry are refused
by name."""

from __future__ import annotations

import json
import re
from itertools import count

import pytest


pytest.importorskip("bfcl_eval", reason="bfcl-eval is not installed (`make install` installs it)")

from benchmarks import bfcl_multi_turn_reference as reference
from grpo_tools.data.converters.bfcl_multi_turn import (
    REFUSED_BACKENDS,
    UnsupportedBackend,
    bfcl_module,
    bind_call,
    parse_call,
)
from grpo_tools.tools import ENVIRONMENTS, get_environment
from grpo_tools.tools.bfcl import BFCLEnvironment, BFCLSession
from grpo_tools.tools.trajectories import dispatch_tool_call


_names = count()


@pytest.fixture(scope="module")
def rows_by_category() -> dict[str, list[reference.Row]]:
    return {category: reference.rows(category) for category in reference.MULTI_TURN_CATEGORIES}


def _converted_to_float(session: BFCLSession, text: str) -> bool:
    """Whether the executor gave a float where the call gave an integer (a `float` parameter): the one place its
    result may read differently from BFCL's (`8.0` for `8`)."""
    call = parse_call(text)
    if call.name not in session.offered():
        return False
    arguments = bind_call(getattr(session.instances[session._owners[call.name]], call.name), call)
    return any(
        session.tools[call.name].param_types(key) == {"number"} and type(value) is int
        for key, value in arguments.items()
    )


@pytest.mark.parametrize("category", reference.MULTI_TURN_CATEGORIES)
def test_ground_truth_results_and_states_equal_bfcls_executor(category, rows_by_category):
    utils = bfcl_module("bfcl_eval.eval_checker.multi_turn_eval.multi_turn_utils")
    compared = 0
    for row in rows_by_category[category][::4]:
        env = row.row["env"]
        session = BFCLSession.from_env(env, as_checker=True)
        model_name = f"grpotools_executor_{next(_names)}"
        try:
            for turn, calls in enumerate(row.ground_truth):
                session.start_turn(turn)
                ours = [session.call_text(text).result for text in calls]
                theirs, instances = utils.execute_multi_turn_func_call(
                    calls,
                    env["initial_config"],
                    env["involved_classes"],
                    model_name,
                    row.row["id"],
                    env["long_context"],
                )
                for text, mine, bfcl in zip(calls, ours, theirs, strict=True):
                    if not _converted_to_float(session, text):
                        assert mine == bfcl, f"{row.row['id']} turn {turn}: {text}"
                        compared += 1
                assert session.state() == {
                    name: {k: v for k, v in vars(instance).items() if not k.startswith("_")}
                    for name, instance in instances.items()
                }, f"{row.row['id']} turn {turn}"
        finally:
            prefix = re.sub(r"[-./:]", "_", model_name) + "_"
            for name in [name for name in vars(utils) if name.startswith(prefix)]:
                del vars(utils)[name]
    assert compared > 100  # most ground-truth calls are compared, not skipped


def test_each_session_starts_from_a_copy_of_the_rows_configuration(rows_by_category):
    env = rows_by_category["multi_turn_base"][0].row["env"]
    before = json.dumps(env["initial_config"], sort_keys=True)
    first = BFCLSession.from_env(env)
    assert first.call_text("cd(folder='document')").status == "ok"
    assert first.call_text("mkdir(dir_name='temp')").status == "ok"
    second = BFCLSession.from_env(env)
    assert json.dumps(env["initial_config"], sort_keys=True) == before
    assert second.state() != first.state()
    assert second.call_text("ls()").result != first.call_text("ls()").result
    assert second.state() == BFCLSession.from_env(env).state()


def test_positional_arguments_are_bound_by_the_signature(rows_by_category):
    env = rows_by_category["multi_turn_base"][0].row["env"]
    results = []
    for call in ("sort('final_report.pdf')", "sort(file_name='final_report.pdf')"):
        session = BFCLSession.from_env(env)
        session.call_text("cd(folder='document')")
        outcome = session.call_text(call)
        results.append((outcome.status, outcome.arguments, outcome.result))
    assert results[0] == results[1]
    assert results[0][1] == {"file_name": "final_report.pdf"}


def test_arguments_are_checked_against_bfcls_schema(rows_by_category):
    session = BFCLSession.from_env(rows_by_category["multi_turn_base"][0].row["env"])
    state = session.state()
    for call in ("cd(folder=3)", "cd()", "cd(folder='document', colour='red')", "cd('a', 'b')"):
        outcome = session.call_text(call)
        assert outcome.status == "validation", call
        assert outcome.result.startswith("Error during execution: ")
    assert session.state() == state


def test_held_out_functions_are_offered_from_their_turn_on(rows_by_category):
    row = next(r for r in rows_by_category["multi_turn_miss_func"] if r.row["env"]["missed_function"])
    env = row.row["env"]
    ((turn, names),) = env["missed_function"].items()
    session = BFCLSession.from_env(env)
    for before in range(int(turn)):
        session.start_turn(before)
        assert not set(names) & session.offered()
    session.start_turn(int(turn))
    assert set(names) <= session.offered()
    # The row offers the held-out functions among its tools, so a chat template can show them at their turn.
    assert set(names) <= {tool["function"]["name"] for tool in row.row["tools"]}


@pytest.mark.parametrize("backend", sorted(REFUSED_BACKENDS))
def test_backends_we_do_not_carry_are_refused_by_name(backend):
    with pytest.raises(UnsupportedBackend, match=f"{backend} is not supported: it needs"):
        BFCLSession([backend])


def test_an_unknown_class_names_bfcls_classes():
    with pytest.raises(UnsupportedBackend, match=r"'Nope' is not one of BFCL's API classes .*GorillaFileSystem"):
        BFCLSession(["Nope"])


def test_the_environment_runs_a_rows_tools_through_the_session(rows_by_category):
    row = rows_by_category["multi_turn_base"][0].row
    assert get_environment(row) is ENVIRONMENTS["bfcl"] is BFCLEnvironment
    environment = BFCLEnvironment()
    environment.reset(env=json.dumps(row["env"]))
    message = dispatch_tool_call(environment, {"function": {"name": "cd", "arguments": {"folder": "document"}}})
    assert message == {"role": "tool", "name": "cd", "content": '{"current_working_directory": "document"}'}
    unknown = dispatch_tool_call(environment, {"function": {"name": "eval", "arguments": {"x": "1"}}})
    assert "not found" in unknown["content"]
    assert [record.status for record in environment.records] == ["ok"]
    environment.reset(env=row["env"])
    assert environment.records == [] and environment.session.state() == BFCLSession.from_env(row["env"]).state()


@pytest.mark.parametrize("module", ["grpo_tools.data.converters.bfcl_multi_turn", "grpo_tools.tools.bfcl"])
def test_docstring_examples(module):
    import doctest
    import importlib

    result = doctest.testmod(importlib.import_module(module), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0 and result.attempted > 0


def test_training_refuses_bfcl_rows_with_one_message(rows_by_category):
    """trl cannot offer tools that change by row and turn: rows of the `bfcl` environment stop training before a
    model loads, with the row named, instead of running rollouts with no tools (`eval` runs them as conversations)."""
    from grpo_tools.data.rows import DataError
    from grpo_tools.tools import is_multi_turn

    row = rows_by_category["multi_turn_base"][3].row
    with pytest.raises(DataError, match=r"row id=multi_turn_base_3: env.name 'bfcl': .*grpo-tools score"):
        is_multi_turn([row])


def test_remembered_argument_checks_tell_arguments_apart():
    """The executor remembers what it found about arguments it has seen; a list, a tuple and a string that print
    alike are still checked apart, every time."""
    session = BFCLSession(["MathAPI"])
    for _ in range(2):
        assert session.call_text("mean(numbers=[1, 2, 3])").status == "ok"
        assert session.call_text("mean(numbers=(1, 2, 3))").status == "validation"
        assert session.call_text("mean(numbers='[1, 2, 3]')").status == "validation"
        assert session.call("mean", {"numbers": [1, 2]}).result == '{"result": 1.5}'
