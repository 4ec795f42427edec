"""Tests for multi-turn tool use (grpo_tools.tools.environments, grpo_tools.tools.trajectories, tasks.multiturn).

Covers: the tool boundary (schema validation before a tool runs; exceptions and timeouts become tool messages and are
counted by kind); the workbench tools and the calculator's safe grammar; the outcome comparison and the trajectory
rewards; the bundled multi-turn data (reproducible, held out, every gold trajectory really solves its row); a rollout
through trl's own loop driven by scripted generations (a valid call, an invalid argument, a tool that raises, a tool
that times out, an unknown tool, no call), checked message by message and token mask by token mask, with the tool
metrics the trainer logs; the evaluation loop building the same ids and masks as trl's; a training step in which the
tool-result tokens provably do not enter the loss; and the multi-turn recipe for a few steps on the tiny model.
"""

from __future__ import annotations

import builtins
import functools
import json
import os
import subprocess
import sys
import threading
import warnings
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
import yaml

from grpo_tools.data.rows import DataError, check_rows
from grpo_tools.rewards import tool_exact_reward, tool_partial_reward
from grpo_tools.rewards.budget import record_hit
from grpo_tools.tools.environments import (
    ENVIRONMENTS,
    FAILURE_KINDS,
    ExpressionError,
    ToolEnvironment,
    WorkbenchEnvironment,
    evaluate_expression,
    format_number,
    is_multi_turn,
    make_environment_factory,
)
from grpo_tools.tools.rollouts import evaluate_multi_turn, run_rollouts
from grpo_tools.tools.trajectories import (
    answer_matches,
    extra_calls_reward,
    gold_trajectory,
    multi_turn_dataset,
    outcome_reward,
    rollout_stats,
    sft_example,
    tool_suffix_ids,
    trajectory_calls_text,
    trajectory_reward,
)
from tasks.multiturn import BUNDLED_FILES, BUNDLED_ROWS, TASKS, generate_rows
from tasks.synthetic import call_split


DATA_DIR = Path(__file__).resolve().parents[2] / "data"
RECIPE = Path(__file__).resolve().parents[2] / "recipes" / "tiny" / "grpo" / "multi-turn-cpu.yaml"


class LabEnvironment(ToolEnvironment):
    """A test environment with a tool that works, one that raises and one that overruns its time limit.

    The overrunning tool, `nap`, sleeps until its environment's `wake_up` is set (or `seconds` pass), so that it
    overruns a short limit however busy the machine is; `rested` is set when it has finished."""

    name = "lab"

    def __init__(self, timeout: float = 0.05) -> None:
        super().__init__(timeout)
        self.wake_up = threading.Event()
        self.rested = threading.Event()

    def add(self, a: int, b: int) -> str:
        """Add two integers.

        Args:
            a: The first integer.
            b: The second integer.
        """
        return str(a + b)

    def explode(self, reason: str) -> str:
        """Fail on purpose.

        Args:
            reason: Why it fails.
        """
        raise RuntimeError(f"boom: {reason}")

    def nap(self, seconds: float) -> str:
        """Sleep, then answer.

        Args:
            seconds: How long to sleep.
        """
        self.wake_up.wait(seconds)
        self.rested.set()
        return "rested"

    def leave(self, code: int) -> str:
        """Exit the interpreter, which a tool must not be able to do.

        Args:
            code: The exit status.
        """
        raise SystemExit(code)

    def pick(self, colour: str) -> dict:
        """Pick a colour.

        Args:
            colour: The colour. (choices: ["red", "blue"])
        """
        return {"picked": colour}


@pytest.fixture(autouse=True)
def lab_registered(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(ENVIRONMENTS, "lab", LabEnvironment)


def lab(timeout: float = 0.05) -> LabEnvironment:
    environment = LabEnvironment(timeout=timeout)
    environment.reset(env={"name": "lab"})
    return environment


def tool_call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "arguments": arguments}}


def load(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle]


# ---------------------------------------------------------------------------------------------------------------
# The tool boundary


@pytest.mark.parametrize(
    ("tool", "arguments", "status", "message"),
    [
        ("add", {"a": 2, "b": 3}, "ok", "5"),
        ("add", {"a": "two", "b": 3}, "validation", "invalid arguments for add: a: 'two' is not of type 'integer'"),
        ("add", {"a": 2.0, "b": 3}, "validation", "a: 2.0 is not of type 'integer'"),
        ("add", {"a": 2}, "validation", "b: 'b' is a required property"),
        ("add", {"a": 2, "b": 3, "c": 4}, "validation", "c: Additional properties are not allowed"),
        ("pick", {"colour": "green"}, "validation", "colour: 'green' is not one of ['red', 'blue']"),
        ("pick", {"colour": "red"}, "ok", '{"picked": "red"}'),
        ("explode", {"reason": "test"}, "exception", "explode failed: boom: test"),
        ("nap", {"seconds": 60.0}, "timeout", "nap timed out after 0.05 s"),
        ("leave", {"code": 3}, "exception", "leave failed: the tool tried to stop the program (SystemExit)"),
    ],
)
def test_a_call_is_validated_run_under_a_time_limit_and_recorded(tool, arguments, status, message):
    # Tools that finish get a limit no busy machine reaches; the one that overruns gets a short one.
    environment = lab(timeout=0.05 if status == "timeout" else 60.0)
    try:
        result = getattr(environment, tool)(**arguments)
        if status == "timeout":  # the call came back while the tool still slept: the limit does not wait for it
            assert not environment.rested.is_set()
    finally:
        environment.wake_up.set()
    assert message in result
    if status != "ok":
        assert json.loads(result) == {"error": json.loads(result)["error"]}  # a JSON error message the model reads
    [record] = environment.records
    assert (record.name, record.arguments, record.status, record.result) == (tool, arguments, status, result)


def test_a_tool_never_runs_when_its_arguments_are_invalid():
    ran = []

    class Spy(ToolEnvironment):
        name = "spy"

        def touch(self, path: str) -> str:
            """Touch.

            Args:
                path: Where.
            """
            ran.append(path)
            return "done"

    environment = Spy()
    environment.reset(env={})
    environment.touch(path=["not", "a", "string"])
    environment.touch(path="x", mode="rw")
    assert ran == []
    assert environment.touch(path="x") == "done" and ran == ["x"]


def test_a_tool_without_documented_arguments_fails_when_the_class_is_defined():
    from transformers.utils.chat_template_utils import DocstringParsingException

    with pytest.raises(DocstringParsingException):

        class Undocumented(ToolEnvironment):
            def tool(self, x: int) -> str:
                """No Args section."""
                return str(x)


@pytest.mark.parametrize(
    "module",
    ["grpo_tools.tools.base", "grpo_tools.tools.workbench", "grpo_tools.tools.trajectories", "tasks.multiturn"],
)
def test_docstring_examples(module):
    import doctest
    import importlib

    result = doctest.testmod(importlib.import_module(module), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0 and result.attempted > 0


def test_tools_are_the_public_methods_with_schemas_trl_would_build():
    from transformers.utils import get_json_schema

    environment = WorkbenchEnvironment()
    assert [schema["function"]["name"] for schema in WorkbenchEnvironment.tool_schemas()] == [
        "calculate",
        "convert_units",
        "days_between",
        "find_event",
    ]
    # trl renders the prompt from the bound methods; the row's `tools` must be exactly what it renders.
    for schema in WorkbenchEnvironment.tool_schemas():
        assert get_json_schema(getattr(environment, schema["function"]["name"])) == schema


def test_reset_starts_each_rollout_fresh_from_the_row():
    environment = WorkbenchEnvironment()
    environment.reset(env=json.dumps({"name": "workbench", "events": [{"name": "Concert", "date": "2025-03-14"}]}))
    assert environment.find_event(name="concert") == "concert: 2025-03-14 (Friday)"
    environment.reset(env={"name": "workbench", "events": [{"name": "concert", "date": "2025-03-15"}]})
    assert environment.records == []
    assert environment.find_event(name="concert") == "concert: 2025-03-15 (Saturday)"
    with pytest.raises(ValueError, match="needs the row's `env`"):
        environment.reset(prompt="no env column")
    with pytest.raises(ValueError, match="timeout must be > 0"):
        WorkbenchEnvironment(timeout=0)


@pytest.mark.parametrize(
    ("tool", "arguments", "result"),
    [
        ("convert_units", {"value": 42, "from_unit": "km", "to_unit": "mi"}, "26.1 mi"),
        ("convert_units", {"value": 100, "from_unit": "celsius", "to_unit": "fahrenheit"}, "212 fahrenheit"),
        ("convert_units", {"value": 2.5, "from_unit": "gal", "to_unit": "l"}, "9.46 l"),
        ("convert_units", {"value": 1, "from_unit": "km", "to_unit": "kg"}, "cannot convert km (length) to kg (mass)"),
        ("find_event", {"name": "dentist appointment"}, "dentist appointment: 2025-03-14 (Friday)"),
        ("find_event", {"name": "gym"}, "no event named 'gym'; the calendar has dentist appointment"),
        ("days_between", {"start": "2025-03-14", "end": "2025-04-01"}, "18"),
        ("days_between", {"start": "2025-04-01", "end": "2025-03-14"}, "-18"),
        ("days_between", {"start": "March 14", "end": "2025-04-01"}, "start must be a date written YYYY-MM-DD"),
        ("calculate", {"expression": "(12 + 30) * 4"}, "168"),
        ("calculate", {"expression": "10 / 3"}, "3.33"),
    ],
)
def test_workbench_tools_compute_their_answers(tool, arguments, result):
    environment = WorkbenchEnvironment()
    environment.reset(env={"name": "workbench", "events": [{"name": "dentist appointment", "date": "2025-03-14"}]})
    assert result in getattr(environment, tool)(**arguments)


# ---------------------------------------------------------------------------------------------------------------
# The calculator's grammar


@pytest.mark.parametrize(
    ("expression", "value"),
    [("1 + 2 * 3", 7), ("(1 + 2) * 3", 9), ("-2 ** 2", -4), ("2 ** -1", 0.5), ("7 / 2 - 0.5", 3), ("+-+3", -3)],
)
def test_calculator_follows_python_arithmetic(expression, value):
    assert evaluate_expression(expression) == value


@pytest.mark.parametrize(
    "expression",
    [
        "__import__('os').system('echo hacked')",
        "open('/etc/passwd').read()",
        "x + 1",
        "(lambda: 1)()",
        "[1, 2]",
        "'a' * 3",
        "1 if 1 else 2",
        "1 < 2",
        "True + 1",
        "3 // 2",
        "5 % 2",
        "1j * 2",
        "2 ** 11",
        "9 ** 9 ** 9",
        "1e300 * 1e300",
        "1 / 0",
        "0 ** -1",
        "(-8) ** 0.5",
        "1 +",
        "",
        "1" + " + 1" * 60,
        "1\x00",
    ],
)
def test_calculator_refuses_everything_outside_its_grammar(expression):
    with pytest.raises(ExpressionError):
        evaluate_expression(expression)


def test_calculator_refuses_a_string_without_a_warning_even_with_warnings_as_errors():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(ExpressionError, match="not Constant"):
            evaluate_expression(r'"\d" + 1')
    assert caught == []
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ExpressionError, match="not Constant"):
            evaluate_expression(r'"\d" + 1')


def test_calculator_never_evaluates_code(monkeypatch):
    def forbidden(*args, **kwargs):
        raise AssertionError("eval/exec must never run")

    monkeypatch.setattr(builtins, "eval", forbidden)
    monkeypatch.setattr(builtins, "exec", forbidden)
    environment = WorkbenchEnvironment()
    environment.reset(env={"name": "workbench"})
    assert environment.calculate(expression="2 ** 10 - 24") == "1000"
    assert "not Call" in environment.calculate(expression="__import__('os').system('true')")


@pytest.mark.parametrize(("value", "text"), [(26.1, "26.1"), (395.0, "395"), (-0.5, "-0.5"), (1 / 3, "0.33")])
def test_numbers_are_written_with_at_most_two_decimals(value, text):
    assert format_number(value) == text


# ---------------------------------------------------------------------------------------------------------------
# Outcome and trajectory rewards


@pytest.mark.parametrize(
    ("answer", "expected", "correct"),
    [
        ("The answer is 26.1.", 26.1, True),
        ("About 26.10 miles", 26.1, True),
        ("26.105", 26.1, True),  # within 0.01
        ("26.2", 26.1, False),
        ("It is 1,609.34 meters.", 1609.34, True),
        ("Between 1, 2 and 3 or 26.1", 26.1, False),  # more than three numbers: a list of guesses
        ("-18 days", -18, True),
        ("18 days", -18, False),
        ("no number", 5, False),
        ("The answer is Friday.", "Friday", True),
        ("friday", "Friday", True),
        ("Fridays are nice", "Friday", False),
        ("It is on 2025-03-14.", "2025-03-14", True),
        ("It is on 2025-03-15.", "2025-03-14", False),
        (" ".join(["Friday"] * 31), "Friday", False),  # too long to be an answer
        (None, 5, False),
    ],
)
def test_answer_matches(answer, expected, correct):
    assert answer_matches(answer, expected) is correct


def test_outcome_reward_reads_the_final_answer_only():
    call = tool_call("calculate", expression="2 + 3")
    answered = [
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "name": "calculate", "content": "5"},
        {"role": "assistant", "content": "The answer is 5."},
    ]
    # The result appears in a tool message, but the rollout ran out of turns before answering.
    unanswered = [*answered[:2], {"role": "assistant", "content": "", "tool_calls": [call]}]
    wrong = [*answered[:2], {"role": "assistant", "content": "The answer is 6."}]
    assert outcome_reward([answered, unanswered, wrong], ["5", "5", "5"]) == [1.0, 0.0, 0.0]
    assert outcome_reward([answered], ['"5"']) == [1.0]  # a text expectation compares as words


def test_call_rewards_score_every_call_of_the_trajectory():
    tools = json.dumps(WorkbenchEnvironment.tool_schemas())
    gold = [
        {"name": "convert_units", "arguments": {"value": 5, "from_unit": "mi", "to_unit": "km"}},
        {"name": "calculate", "arguments": {"expression": "8.05 + 8"}},
    ]
    first = tool_call("convert_units", value=5, from_unit="mi", to_unit="km")
    second = tool_call("calculate", expression="8.05 + 8")
    both = [
        {"role": "assistant", "content": "", "tool_calls": [first]},
        {"role": "tool", "name": "convert_units", "content": "8.05 km"},
        {"role": "assistant", "content": "", "tool_calls": [second]},
        {"role": "tool", "name": "calculate", "content": "16.05"},
        {"role": "assistant", "content": "The answer is 16.05."},
    ]
    only_first = [*both[:2], {"role": "assistant", "content": "The answer is 16.05."}]
    malformed = [{"role": "assistant", "content": '<tool_call>\n{"name": "calculate", "arguments": \n</tool_call>'}]
    exact = trajectory_reward(tool_exact_reward)
    partial = trajectory_reward(tool_partial_reward)
    assert exact.__name__ == "tool_exact_reward"  # logged under the call reward's own name
    completions = [both, only_first, malformed]
    assert exact(completions, tools=[tools] * 3, answers=[json.dumps(gold)] * 3) == [1.0, 0.0, 0.0]
    scores = partial(completions, tools=[tools] * 3, answers=[json.dumps(gold)] * 3)
    assert scores[0] == 1.0 and scores[1] == pytest.approx(0.5) and scores[2] == 0.0
    assert trajectory_calls_text(malformed) == malformed[0]["content"]  # kept as written: a parse error


def test_extra_calls_cost_only_the_calls_beyond_the_gold_ones():
    call = tool_call("calculate", expression="1 + 1")
    turn = {"role": "assistant", "content": "", "tool_calls": [call, call]}
    answers = [json.dumps([{"name": "calculate", "arguments": {"expression": "1 + 1"}}])] * 3
    completions = [[turn, turn], [turn], [{"role": "assistant", "content": "2"}]]
    assert extra_calls_reward(completions, answers) == [-3.0, -1.0, -0.0]


def test_rollout_stats_count_calls_turns_and_failures_by_kind():
    environment = lab()
    messages = [{"role": "assistant", "content": "", "tool_calls": []}]
    for name, arguments in (("add", {"a": 1, "b": 2}), ("add", {"a": "x", "b": 2}), ("explode", {"reason": "r"})):
        messages.append({"role": "tool", "name": name, "content": getattr(environment, name)(**arguments)})
    messages += [{"role": "tool", "name": "fly", "content": "{'error': 'Tool fly not found.'}"}]
    messages += [{"role": "assistant", "content": "done"}]
    stats = rollout_stats(environment, messages)
    assert (stats.calls, stats.turns) == (4, 2)
    assert stats.failures == {"validation": 1, "exception": 1, "timeout": 0, "unknown_tool": 1, "server_error": 0,
                              "server_down": 0, "limit": 0}  # fmt: skip
    assert tuple(stats.failures) == FAILURE_KINDS


def test_rows_must_not_mix_single_and_multi_turn():
    single = load(DATA_DIR / "tool_calls_eval.jsonl")[:2]
    multi = load(DATA_DIR / BUNDLED_FILES["eval"])[:2]
    assert is_multi_turn(multi) and not is_multi_turn(single)
    with pytest.raises(DataError, match="train on one kind at a time"):
        is_multi_turn(single + multi)
    assert isinstance(make_environment_factory(multi)(), WorkbenchEnvironment)
    lab_row = {"id": "l", "env": {"name": "lab"}, "expected": 1}
    assert set(make_environment_factory([*multi, lab_row])) == {"workbench", "lab"}  # trl routes by name
    with pytest.raises(ValueError, match=r"env\.name must be one of"):
        make_environment_factory([{"id": "x", "env": {"name": "nowhere"}, "expected": 1}])


# ---------------------------------------------------------------------------------------------------------------
# The bundled data


@pytest.fixture(scope="module")
def bundled() -> dict[str, list[dict[str, Any]]]:
    return {split: load(DATA_DIR / filename) for split, filename in BUNDLED_FILES.items()}


def test_bundled_files_are_what_the_generator_writes(bundled, tmp_path):
    from tasks.multiturn import main

    assert main(["--out", str(tmp_path)]) == 0
    for filename in BUNDLED_FILES.values():
        assert (tmp_path / filename).read_bytes() == (DATA_DIR / filename).read_bytes()
    assert {split: len(rows) for split, rows in bundled.items()} == BUNDLED_ROWS
    assert generate_rows("eval", 5, seed=1) == generate_rows("eval", 5, seed=1) != generate_rows("eval", 5, seed=2)


def test_bundled_rows_are_canonical_multi_turn_rows(bundled):
    for rows in bundled.values():
        assert check_rows(rows) == []
        assert {row["category"] for row in rows} == {"multi_turn"}
        assert {row["env"]["task"] for row in rows} == set(TASKS)
        assert all(row["tools"] == WorkbenchEnvironment.tool_schemas() for row in rows)
        assert is_multi_turn(rows)


def test_eval_is_held_out_by_combination(bundled):
    def key(row):
        return row["env"]["task"], {"answers": row["answers"], "events": row["env"].get("events", [])}

    for split, rows in bundled.items():
        assert all(call_split(*key(row)) == split for row in rows)
    train = {json.dumps(key(row), sort_keys=True) for row in bundled["train"]}
    assert not any(json.dumps(key(row), sort_keys=True) in train for row in bundled["eval"])


def test_every_gold_trajectory_runs_the_tools_and_reaches_the_expected_answer(bundled):
    for rows in bundled.values():
        for row in rows:
            trajectory = gold_trajectory(row)
            turns = [message for message in trajectory if message["role"] == "assistant"]
            assert len(turns) == len(row["env"]["turns"]) + 1
            assert not any("error" in message["content"] for message in trajectory if message["role"] == "tool")
            assert outcome_reward([trajectory], [json.dumps(row["expected"])]) == [1.0], row["id"]
            # The answer needs the tools: the request does not give it away.
            assert not answer_matches(row["messages"][0]["content"], row["expected"]), row["id"]


def test_a_broken_gold_call_is_refused_with_the_row():
    row = generate_rows("train", 1)[0]
    row = {**row, "answers": [{"name": "calculate", "arguments": {"expression": "1 / 0"}}], "env": {
        "name": "workbench", "turns": [1]}}  # fmt: skip
    with pytest.raises(ValueError, match=r"row id=mt-train-00000: gold call calculate failed: .*division by zero"):
        gold_trajectory(row)


# ---------------------------------------------------------------------------------------------------------------
# Rollouts through trl's loop, driven by scripted generations


def hermes(name: str, **arguments: Any) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call><|im_end|>"


# The failure kinds the scripts below produce, one call each (the others are an MCP server's: tests/tools/test_mcp.py).
LAB_FAILURES = ("validation", "exception", "timeout", "unknown_tool")
# The user message names the script; each entry is what the "model" writes at that turn.
SCRIPTS = {
    "valid": [hermes("add", a=2, b=3), "The answer is 5.<|im_end|>"],
    "invalid": [hermes("add", a="two", b=3), "Sorry.<|im_end|>"],
    "raises": [hermes("explode", reason="test"), "It broke.<|im_end|>"],
    "timeout": [hermes("nap", seconds=1.0), "Too slow.<|im_end|>"],
    "none": ["The answer is 7.<|im_end|>"],
    "unknown": [hermes("fly", to="Rome"), "No such tool.<|im_end|>"],
}
RESULTS = {
    "valid": "5",
    "invalid": "{\"error\": \"invalid arguments for add: a: 'two' is not of type 'integer'\"}",
    "raises": '{"error": "explode failed: boom: test"}',
    "timeout": '{"error": "nap timed out after 0.05 s"}',
    "unknown": "{'error': 'Tool fly not found.'}",  # trl answers an unknown tool itself
}
CALLS = {
    "valid": tool_call("add", a=2, b=3),
    "invalid": tool_call("add", a="two", b=3),
    "raises": tool_call("explode", reason="test"),
    "timeout": tool_call("nap", seconds=1.0),
    "unknown": tool_call("fly", to="Rome"),
}


def lab_rows() -> list[dict[str, Any]]:
    return [
        {
            "id": name,
            "messages": [{"role": "user", "content": name}],
            "tools": LabEnvironment.tool_schemas(),
            "answers": [{"name": "add", "arguments": {"a": 2, "b": 3}}],
            "category": "multi_turn",
            "env": {"name": "lab"},
            "expected": 5,
        }
        for name in SCRIPTS
    ]


def scripted_turn(tokenizer: Any, ids: list[int]) -> list[int]:
    """The scripted next turn for a conversation so far: the script its user message names, at its turn count."""
    text = tokenizer.decode(ids)
    script = text.split("<|im_start|>user\n", 1)[1].split("<|im_end|>", 1)[0]
    turn = text.count("<|im_start|>assistant\n") - 1
    return tokenizer.encode(SCRIPTS[script][turn], add_special_tokens=False)


def scripted_trainer(tiny_model_dir: str, tokenizer: Any, output_dir: Path, seen: list, **overrides: Any) -> Any:
    from grpo_tools.training.configs import ToolGRPOConfig
    from grpo_tools.training.trainer import ToolGRPOTrainer

    def spy_reward(completions, **kwargs):
        seen.extend(completions)
        return [float(index % 2) for index in range(len(completions))]  # differing rewards: non-zero advantages

    settings = {
        "output_dir": str(output_dir),
        "use_cpu": True,
        "num_generations": 2,
        "per_device_train_batch_size": 6,
        "max_completion_length": 200,
        "beta": 0.01,
        "report_to": [],
        "logging_steps": 1,
        "max_steps": 1,
        "gradient_checkpointing": False,
        "disable_tqdm": True,
        "save_strategy": "no",
        **overrides,
    }
    trainer = ToolGRPOTrainer(
        model=tiny_model_dir,
        reward_funcs=[spy_reward],
        args=ToolGRPOConfig(**settings),
        train_dataset=multi_turn_dataset(lab_rows()),
        processing_class=tokenizer,
        environment_factory=functools.partial(LabEnvironment, timeout=0.05),
    )
    trainer.add_reward_func(outcome_reward, 1.0)

    def generate(prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        return [scripted_turn(tokenizer, ids) for ids in prompt_ids], None

    trainer._generate_single_turn = generate  # the model's turns come from the scripts; trl's loop does the rest
    return trainer


def tool_turn_text(content: str) -> str:
    """What the tiny template injects between two assistant turns for one tool message."""
    return f"\n<|im_start|>user\n<tool_response>\n{content}\n</tool_response><|im_end|>\n<|im_start|>assistant\n"


def test_scripted_rollout_message_by_message_and_mask_by_mask(tiny_model_dir, tokenizer, tmp_path):
    seen: list = []
    record_hit("calls_per_step")  # a completion scored before the trainer existed (another run, an evaluation)
    trainer = scripted_trainer(tiny_model_dir, tokenizer, tmp_path, seen)
    trainer.model.train()
    dataset = multi_turn_dataset(lab_rows())
    output = trainer._generate_and_score_completions([dataset[index] for index in range(len(dataset))])

    for name, completion in zip(SCRIPTS, seen, strict=True):
        final = {"role": "assistant", "content": SCRIPTS[name][-1].removesuffix("<|im_end|>")}
        if name == "none":
            assert completion == [final]
            continue
        call_name = CALLS[name]["function"]["name"]
        assert completion == [
            {"role": "assistant", "content": "", "tool_calls": [CALLS[name]]},
            {"role": "tool", "name": call_name, "content": RESULTS[name]},
            final,
        ], name

    for index, name in enumerate(SCRIPTS):
        length = int(output["completion_mask"][index].sum())
        ids = output["completion_ids"][index, :length].tolist()
        mask = output["tool_mask"][index, :length].tolist()
        turns = [tokenizer.encode(turn, add_special_tokens=False) for turn in SCRIPTS[name]]
        if name == "none":
            assert ids == turns[0] and mask == [1] * len(turns[0])
            continue
        injected = tokenizer.encode(tool_turn_text(RESULTS[name]), add_special_tokens=False)
        # Generated turns are trained on (1); the tool turn, result and next assistant header are masked out (0).
        assert ids == turns[0] + injected + turns[1], name
        assert mask == [1] * len(turns[0]) + [0] * len(injected) + [1] * len(turns[1]), name
        # The evaluation loop injects the very same ids.
        message = {"role": "tool", "name": CALLS[name]["function"]["name"], "content": RESULTS[name]}
        assert tool_suffix_ids(tokenizer, [message]) == injected
    # Padding beyond each completion is outside the loss either way.
    assert ((output["completion_mask"] * output["tool_mask"]).sum(dim=1) == torch.tensor(
        [len(tokenizer.encode("".join(SCRIPTS[name]), add_special_tokens=False)) for name in SCRIPTS]
    )).all()  # fmt: skip

    metrics = trainer._metrics["train"]
    assert metrics["tools/calls_per_rollout"] == [pytest.approx(5 / 6)]
    assert metrics["tools/turns"] == [pytest.approx(11 / 6)]
    assert metrics["tools/failure_rate"] == [pytest.approx(4 / 5)]
    for kind in FAILURE_KINDS:  # one call of each of the four kinds a Python environment can fail with
        expected = 1 / 5 if kind in LAB_FAILURES else 0.0
        assert metrics[f"tools/failures/{kind}"] == [pytest.approx(expected)], kind
    # No completion of this step broke a budget (the kinds logged every step); the hit before the trainer is not its own.
    assert metrics["budget/calls_per_step"] == [0.0]


class ScriptedModel:
    """Stands in for a causal LM in the evaluation loop: `generate` appends each conversation's scripted turn."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.config = SimpleNamespace(max_position_embeddings=1024)
        self.device = torch.device("cpu")
        self.training = False

    def eval(self) -> None:
        self.training = False

    def train(self, mode: bool = True) -> None:
        self.training = mode

    def generate(self, input_ids, attention_mask, max_new_tokens, pad_token_id, **kwargs):
        rows = []
        for ids, mask in zip(input_ids.tolist(), attention_mask.tolist(), strict=True):
            turn = scripted_turn(self.tokenizer, [t for t, keep in zip(ids, mask, strict=True) if keep])
            rows.append(turn[:max_new_tokens])
        width = max(len(turn) for turn in rows)
        new = torch.tensor([turn + [pad_token_id] * (width - len(turn)) for turn in rows])
        return torch.cat([input_ids, new], dim=1)


def test_evaluation_builds_the_same_ids_and_masks_as_trl(tiny_model_dir, tokenizer, tmp_path):
    seen: list = []
    trainer = scripted_trainer(tiny_model_dir, tokenizer, tmp_path, seen)
    trainer.model.train()
    dataset = multi_turn_dataset(lab_rows())
    output = trainer._generate_and_score_completions([dataset[index] for index in range(len(dataset))])
    rollouts = run_rollouts(ScriptedModel(tokenizer), tokenizer, lab_rows(), batch_size=4, max_new_tokens=200,
                            timeout=0.05)  # fmt: skip
    for index, rollout in enumerate(rollouts):
        length = int(output["completion_mask"][index].sum())
        assert rollout.completion_ids == output["completion_ids"][index, :length].tolist()
        assert rollout.tool_mask == output["tool_mask"][index, :length].tolist()
        assert rollout.messages == seen[index]


def test_evaluate_multi_turn_reports_outcome_accuracy_and_tool_failures(tokenizer, tmp_path):
    rows = lab_rows()
    report = evaluate_multi_turn(ScriptedModel(tokenizer), tokenizer, rows, tmp_path, label="before", timeout=0.05,
                                 progress=False)  # fmt: skip
    # Only "valid" answers 5; "none" answers 7 without a call.
    assert report["accuracy"] == pytest.approx(1 / 6) == report["mean_reward"]
    assert report["rows"]["data"] == report["rows"]["scored"] == 6
    assert report["by_category"] == {"multi_turn": {"rows": 6, "correct": 1, "accuracy": pytest.approx(1 / 6)}}
    assert report["errors"]["wrong_answer"] == 5
    assert report["tools"]["calls_per_rollout"] == pytest.approx(5 / 6)
    assert report["tools"]["failure_rate"] == pytest.approx(4 / 5)
    assert report["tools"]["failures"] == {
        kind: pytest.approx(1 / 5 if kind in LAB_FAILURES else 0.0) for kind in FAILURE_KINDS
    }
    assert report["call_accuracy"] == pytest.approx(1 / 6)
    assert json.loads((tmp_path / "before_report.json").read_text()) == report
    predictions = [json.loads(line) for line in (tmp_path / "before_predictions.jsonl").read_text().splitlines()]
    assert [prediction["id"] for prediction in predictions] == list(SCRIPTS)
    assert predictions[0]["messages"][1] == {"role": "tool", "name": "add", "content": "5"}
    assert predictions[0]["completion"] == tokenizer.decode(
        tokenizer.encode(SCRIPTS["valid"][0] + tool_turn_text("5") + SCRIPTS["valid"][1], add_special_tokens=False),
        skip_special_tokens=True,
    )


def test_evaluate_multi_turn_shows_one_progress_bar_over_every_row(tokenizer, tmp_path, monkeypatch):
    """Rolled out `batch_size` rows at a time, the rows still count on one bar, from 0 to all of them."""
    import tqdm

    made = []

    class Bar:
        def __init__(self, *args, total=None, **kwargs):
            self.total, self.n = total, 0
            made.append(self)

        def update(self, n=1):
            self.n += n

        def close(self):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    monkeypatch.setattr(tqdm, "tqdm", Bar)
    evaluate_multi_turn(ScriptedModel(tokenizer), tokenizer, lab_rows(), tmp_path, batch_size=2, timeout=0.05)
    assert [(bar.total, bar.n) for bar in made] == [(6, 6)]


def test_evaluation_stops_at_the_turn_limit_and_the_token_budget(tokenizer, tmp_path):
    rows = [row for row in lab_rows() if row["id"] == "valid"]
    [one_turn] = run_rollouts(ScriptedModel(tokenizer), tokenizer, rows, max_turns=1, timeout=0.05)
    assert [message["role"] for message in one_turn.messages] == ["assistant"]  # the call is left unexecuted
    first = len(tokenizer.encode(SCRIPTS["valid"][0], add_special_tokens=False))
    [short] = run_rollouts(ScriptedModel(tokenizer), tokenizer, rows, max_new_tokens=first + 3, timeout=0.05)
    assert short.completion_ids == tokenizer.encode(SCRIPTS["valid"][0], add_special_tokens=False)  # no room left
    assert outcome_reward([short.messages], ["5"]) == [0.0]


def qwen2_5_tokenizer(model_dir: str) -> Any:
    """The tiny tokenizer with trl's bundled Qwen2.5 template and, like a Qwen2.5 tokenizer from the Hub, no
    response template of its own: trl must recognise the template to parse the model's calls."""
    from transformers import AutoTokenizer
    from trl.chat_template_utils import qwen2_5_chat_template

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    tokenizer.chat_template = qwen2_5_chat_template
    tokenizer.response_template = None
    return tokenizer


def valid_trajectory() -> list[dict[str, Any]]:
    return [
        {"role": "assistant", "content": "", "tool_calls": [CALLS["valid"]]},
        {"role": "tool", "name": "add", "content": RESULTS["valid"]},
        {"role": "assistant", "content": "The answer is 5."},
    ]


def test_trl_parses_tool_calls_on_a_qwen2_5_template_in_training(tiny_model_dir, tmp_path):
    """trl's trainer sets the response template for the Qwen2.5 template (`add_response_schema`), and its tool loop
    parses `<tool_call>{...}</tool_call>` into a call that the environment runs."""
    tokenizer = qwen2_5_tokenizer(tiny_model_dir)
    seen: list = []
    trainer = scripted_trainer(tiny_model_dir, tokenizer, tmp_path, seen)
    assert tokenizer.response_template is not None  # set by trl, from the template it recognised
    trainer.model.config.max_position_embeddings = 4096  # Qwen2.5's system prompt and the tools pass 1024 tokens
    dataset = multi_turn_dataset(lab_rows())
    trainer._generate_and_score_completions([dataset[index] for index in range(len(dataset))])
    assert seen[list(SCRIPTS).index("valid")] == valid_trajectory()


def test_evaluation_parses_tool_calls_on_a_qwen2_5_template(tokenizer, tiny_model_dir):
    """`grpo-tools eval` on multi-turn rows loads a Hub model's tokenizer with no response template: the rollouts
    set it as trl's trainer does, so the model's calls are parsed and run rather than read as plain text."""
    qwen = qwen2_5_tokenizer(tiny_model_dir)
    rows = [row for row in lab_rows() if row["id"] == "valid"]
    model = ScriptedModel(qwen)
    model.config.max_position_embeddings = 4096  # Qwen2.5's system prompt and the tools pass 1024 tokens
    [rollout] = run_rollouts(model, qwen, rows, timeout=0.05)
    assert rollout.messages == valid_trajectory()


def test_evaluate_multi_turn_runs_the_tiny_model_on_bundled_rows(tiny_model_dir, tokenizer, tmp_path):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    rows = load(DATA_DIR / BUNDLED_FILES["eval"])[:4]
    report = evaluate_multi_turn(model, tokenizer, rows, tmp_path, max_new_tokens=24, progress=False)
    assert report["rows"]["data"] == 4 and 0.0 <= report["accuracy"] <= 1.0
    assert set(report["by_task"]) <= set(TASKS)
    assert len((tmp_path / "eval_predictions.jsonl").read_text().splitlines()) == 4


def test_tool_results_do_not_enter_the_training_loss(tiny_model_dir, tokenizer, tmp_path):
    """In a real training step, the loss does not move when the reference log-probabilities of tool-result tokens
    change, and does when those of generated tokens change."""
    seen: list = []
    trainer = scripted_trainer(tiny_model_dir, tokenizer, tmp_path, seen, max_steps=2)
    captured = []
    original = trainer._compute_loss

    def compute_loss(model, inputs):
        captured.append({key: value.clone() if torch.is_tensor(value) else value for key, value in inputs.items()})
        return original(model, inputs)

    trainer._compute_loss = compute_loss
    trainer.train()
    assert trainer.state.global_step == 2 and captured
    # Each step rolls out three of the six scripts twice; over the epoch's two steps, each script twice.
    steps = [entry for entry in trainer.state.log_history if "tools/failure_rate" in entry]
    calls = [entry["tools/calls_per_rollout"] for entry in steps]
    assert len(steps) == 2 and sum(calls) / 2 == pytest.approx(5 / 6)
    failures = sum(entry["tools/failure_rate"] * count for entry, count in zip(steps, calls, strict=True))
    assert failures / sum(calls) == pytest.approx(4 / 5)

    inputs = captured[-1]
    assert "tool_mask" in inputs and (inputs["tool_mask"] == 0).any()
    model = trainer.model
    model.eval()  # deterministic, and the adaptive KL controller only counts training batches
    with torch.no_grad():
        loss = original(model, inputs)
        injected = inputs["completion_mask"].bool() & (inputs["tool_mask"] == 0)
        generated = inputs["completion_mask"].bool() & (inputs["tool_mask"] == 1)
        moved_tool = dict(inputs, ref_per_token_logps=inputs["ref_per_token_logps"] + 5.0 * injected)
        moved_generated = dict(inputs, ref_per_token_logps=inputs["ref_per_token_logps"] + 5.0 * generated)
        assert original(model, moved_tool) == pytest.approx(loss.item(), abs=1e-6)
        assert abs(original(model, moved_generated).item() - loss.item()) > 1e-3


# ---------------------------------------------------------------------------------------------------------------
# Warm start and the recipe


def test_warm_start_trains_on_each_assistant_turn_and_never_on_a_tool_result(tokenizer):
    from grpo_tools.training.warm_start import sft_dataset

    row = next(row for row in load(DATA_DIR / BUNDLED_FILES["train"]) if row["env"]["task"] == "days_between")
    example = sft_example(row, tokenizer)
    ids, mask = example["input_ids"], example["completion_mask"]
    trajectory = gold_trajectory(row)
    tools = list(WorkbenchEnvironment()._tools().values())
    assert ids == tokenizer.apply_chat_template([*row["messages"], *trajectory], tools=tools, return_dict=False)
    # Exactly the three assistant turns, each through its end-of-turn token, as trl's tool_mask splits a rollout.
    turns = [message for message in trajectory if message["role"] == "assistant"]
    written = "".join(
        tokenizer.apply_chat_template([turn], tokenize=False).split("<|im_start|>assistant\n", 1)[1].rstrip("\n")
        for turn in turns
    )
    assert tokenizer.decode([token for token, keep in zip(ids, mask, strict=True) if keep]) == written
    assert written.endswith(f"The answer is {row['expected']}.<|im_end|>") and "<tool_response>" not in written
    dataset = sft_dataset([row], tokenizer)
    assert dataset.column_names == ["input_ids", "completion_mask"] and dataset[0] == example
    with pytest.raises(DataError, match="train on one kind at a time"):
        sft_dataset([row, load(DATA_DIR / "tool_calls_eval.jsonl")[0]], tokenizer)


def test_multi_turn_recipe_trains_for_a_few_steps_on_the_tiny_model(tiny_model_dir, tmp_path):
    rows = {split: load(DATA_DIR / filename) for split, filename in BUNDLED_FILES.items()}
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows["train"][:8]))
    (tmp_path / "eval.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows["eval"][:2]))
    recipe = yaml.safe_load(RECIPE.read_text())
    overrides = {
        "model_name_or_path": tiny_model_dir,
        "dataset_name": str(tmp_path / "train.jsonl"),
        "eval_data": str(tmp_path / "eval.jsonl"),
        "output_dir": str(tmp_path / "run"),
        "warmup_sft_epochs": 1,
        "num_generations": 4,
        "per_device_train_batch_size": 8,
        "max_completion_length": 48,
        "max_steps": 2,
        "logging_steps": 1,
        "save_steps": 100,
        "disable_tqdm": True,
    }
    (tmp_path / "recipe.yaml").write_text(yaml.safe_dump({**recipe, **overrides}))
    result = subprocess.run(
        [sys.executable, "-m", "grpo_tools.cli", "train", "--config", str(tmp_path / "recipe.yaml")],
        capture_output=True,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},  # two busy threads on a shared 2-core machine crawl
    )
    assert result.returncode == 0, result.stderr[-3000:]
    run = tmp_path / "run"
    history = json.loads((run / "trainer_state.json").read_text())["log_history"]
    steps = [entry for entry in history if "tools/calls_per_rollout" in entry]
    assert len(steps) == 2
    for key in ("tools/turns", "tools/failure_rate", "rewards/outcome_reward/mean", "rewards/extra_calls_reward/mean"):
        assert all(key in entry for entry in steps), key
    info = json.loads((run / "run_info.json").read_text())  # what the model card reports
    assert info["multi_turn"]["outcome_reward_weight"] == recipe["outcome_reward_weight"]
    assert info["multi_turn"]["extra_call_cost"] == recipe["extra_call_cost"]
    for label in ("before", "after"):
        report = json.loads((run / f"{label}_report.json").read_text())
        assert report["scorer"] == "outcome" and report["rows"]["data"] == 2
        assert set(report["tools"]["failures"]) == set(FAILURE_KINDS)
