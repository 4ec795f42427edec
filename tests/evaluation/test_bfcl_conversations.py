"""`grpo-tools eval` on BFCL's multi-turn rows: whole conversations (each user turn in order, the model's calls run
by the row's session and their results fed back, a `miss_func` row's held-out function offered only from its turn
with BFCL's own user message), judged by the verdict BFCL's own checker gives on the same decoded calls, reported
per BFCL category; runaway conversations stop at BFCL's step limit or the token budget; the tiny model runs rows of
all four categories end to end through the CLI, with an adapter beside its base; bad rows get one message; and
training still refuses these rows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


pytest.importorskip("bfcl_eval", reason="bfcl-eval is not installed (`make install` installs it)")

from benchmarks import bfcl_multi_turn_reference as reference
from grpo_tools.cli import main as cli
from grpo_tools.data.rows import DataError
from grpo_tools.evaluation.bfcl_conversations import evaluate_bfcl_multi_turn, run_conversations
from grpo_tools.tools.environments import is_multi_turn


# One row of each category, each of another scenario (rows N of the four categories share scenario N).
PICKS = {"multi_turn_base": 0, "multi_turn_miss_func": 1, "multi_turn_miss_param": 2, "multi_turn_long_context": 3}


@pytest.fixture(scope="module")
def picked():
    """{category: reference.Row}: one BFCL row per category."""
    return {category: reference.rows(category)[index] for category, index in PICKS.items()}


def _turn_calls(row: dict) -> list[list[dict]]:
    """The row's ground-truth calls per turn, arguments by name (the converter binds positional ones)."""
    calls, position = [], 0
    for turn in row["expected"]:
        calls.append(row["answers"][position : position + len(turn)])
        position += len(turn)
    return calls


def _text(calls: list[dict]) -> str:
    """Calls written as a Hermes-style model writes them, which our parser reads."""
    return "\n".join(f"<tool_call>\n{json.dumps(call)}\n</tool_call>" for call in calls)


def _call_string(call: dict) -> str:
    return f"{call['name']}({', '.join(f'{key}={value!r}' for key, value in call['arguments'].items())})"


class ScriptedModel:
    """Stands in for a model: each row's steps come from its script (per turn, the texts of its steps, the last
    without a call), the row found by its first user message in the prompt; every prompt is kept with its turn."""

    def __init__(self, scripts: dict[str, list[list[str]]], rows: list[dict]) -> None:
        self.queues = {
            row["id"]: [(t, text) for t, turn in enumerate(scripts[row["id"]]) for text in turn] for row in rows
        }
        self.firsts = {row["id"]: row["env"]["turns"][0][0]["content"] for row in rows}
        self.prompts: dict[str, list[tuple[int, str]]] = {row["id"]: [] for row in rows}
        self.batches: list[int] = []

    def __call__(self, prompts: list[str], max_new_tokens: int) -> list[str]:
        self.batches.append(len(prompts))
        texts = []
        for prompt in prompts:
            (row_id,) = [row_id for row_id, first in self.firsts.items() if first in prompt]
            turn, text = self.queues[row_id].pop(0)
            self.prompts[row_id].append((turn, prompt))
            texts.append(text)
        return texts


def _script(row: dict, wrong: bool) -> tuple[list[list[str]], list[list[list[str]]]]:
    """A conversation's steps (all of a turn's calls in one step, then a reply without a call) and the same calls as
    BFCL's checker takes them (per turn, per step, call strings; a step without a call dropped). `wrong` drops the
    last call of the first turn that has any."""
    script, decoded, dropped = [], [], not wrong
    for calls in _turn_calls(row):
        if calls and not dropped:
            calls, dropped = calls[:-1], True
        script.append(([_text(calls)] if calls else []) + ["All done."])
        decoded.append([[_call_string(call) for call in calls]] if calls else [])
    return script, decoded


@pytest.mark.parametrize("wrong", [False, True], ids=["ground_truth", "call_dropped"])
def test_conversations_get_bfcl_checkers_verdict_per_category(picked, tokenizer, tmp_path, wrong):
    rows = [row.row for row in picked.values()]
    scripts, decoded = {}, {}
    for row in rows:
        scripts[row["id"]], decoded[row["id"]] = _script(row, wrong)
    model = ScriptedModel(scripts, rows)
    report = evaluate_bfcl_multi_turn(rows, tokenizer, model, tmp_path, label="scripted", progress=False)

    verdicts = {
        line["id"]: line for line in map(json.loads, (tmp_path / "scripted_rows.jsonl").read_text().splitlines())
    }
    for category, row in picked.items():
        valid, error_type = reference.bfcl_checker_verdict(row, decoded[row.row["id"]])
        assert valid is not wrong  # the ground truth passes, a dropped call fails
        assert verdicts[row.row["id"]]["correct"] is valid
        assert verdicts[row.row["id"]]["errors"] == ([error_type] if error_type else [])
        assert report["by_category"][category] == {"rows": 1, "correct": int(valid), "accuracy": float(valid),
                                                   "mean_reward": float(valid)}  # fmt: skip
    assert report["overall"] == (0.0 if wrong else 1.0)
    assert all(not queue for queue in model.queues.values())  # every scripted step was asked for
    assert model.batches[0] == len(rows)  # the conversations step together
    # The predictions are BFCL's result layout: `grpo-tools score` re-scores them to the same report.
    assert cli(["score", "--data", str(tmp_path / "scripted_data.jsonl"), "--predictions",
                str(tmp_path / "scripted_predictions.jsonl"), "--output", str(tmp_path / "rescored.json")]) == 0  # fmt: skip
    rescored = json.loads((tmp_path / "rescored.json").read_text())
    assert rescored["by_category"] == report["by_category"] and rescored["errors"] == report["errors"]


def test_a_held_out_function_is_offered_only_from_its_turn_with_bfcls_message(picked, tokenizer):
    row = picked["multi_turn_miss_func"].row
    ((turn, (name,)),) = [(int(t), names) for t, names in row["env"]["missed_function"].items()]
    model = ScriptedModel({row["id"]: _script(row, wrong=False)[0]}, [row])
    (conversation,) = run_conversations([row], tokenizer, model)
    signature = next(tool["function"]["name"] for tool in row["tools"] if tool["function"]["name"] == name) + "("
    offered = {step_turn: signature in prompt for step_turn, prompt in model.prompts[row["id"]]}
    assert offered == {t: t >= turn for t in range(len(row["expected"]))}
    message = "I have updated some more functions you can choose from. What about now?"
    assert all((message in prompt) is (t >= turn) for t, prompt in model.prompts[row["id"]])
    assert conversation.stopped is None and len(conversation.result) == len(row["expected"])


def test_a_held_out_function_called_early_is_refused_and_fails_the_row(picked, tokenizer):
    row = picked["multi_turn_miss_func"].row
    turn = int(next(iter(row["env"]["missed_function"])))
    script = _script(row, wrong=False)[0]
    script[turn - 1] = [script[turn][0], "All done."]  # the held-out turn's calls made a turn early
    (conversation,) = run_conversations([row], tokenizer, ScriptedModel({row["id"]: script}, [row]))
    results = [m["content"] for m in conversation.messages if m["role"] == "tool"]
    assert any("is not defined" in result for result in results)


@pytest.mark.parametrize(
    ("step", "budget", "stopped", "turns"),
    [
        ('<tool_call>\n{"name": "pwd", "arguments": {}}\n</tool_call>', 10_000, "step_limit", 1),  # BFCL's 20 steps
        ('<tool_call>\n{"name": "pwd", "arguments": {}}\n</tool_call>', 60, "token_budget", 1),
    ],
)
def test_runaway_conversations_stop_and_fail_as_force_terminated(picked, tokenizer, tmp_path, step, budget, stopped,
                                                                 turns):  # fmt: skip
    row = picked["multi_turn_base"].row
    model = ScriptedModel({row["id"]: [[step] * 100]}, [row])
    report = evaluate_bfcl_multi_turn(
        [row], tokenizer, model, tmp_path, max_conversation_tokens=budget, progress=False
    )
    assert report["conversations"]["stopped"] == {stopped: 1}
    assert report["errors"] == {"multi_turn:force_terminated": 1}
    steps = json.loads((tmp_path / "eval_predictions.jsonl").read_text())["result"]
    assert len(steps) == turns
    if stopped == "step_limit":
        assert len(steps[0]) == 21  # BFCL quits when its step count passes MAXIMUM_STEP_LIMIT (20)
    else:
        assert report["conversations"]["generated_tokens_per_conversation"] <= budget


def test_tiny_model_runs_all_four_categories_end_to_end_with_an_adapter(picked, tiny_model_dir, tmp_path, capsys):
    data = tmp_path / "bfcl.jsonl"
    data.write_text("".join(json.dumps(row.row) + "\n" for row in picked.values()))
    out = tmp_path / "eval"
    assert cli(["eval", "--model", tiny_model_dir, "--data", str(data), "--output-dir", str(out), "--quiet",
                "--max-new-tokens", "8", "--max-conversation-tokens", "48"]) == 0  # fmt: skip
    report = json.loads((out / "base_report.json").read_text())
    assert set(report["by_category"]) == set(PICKS)
    assert report["scorer"] == "bfcl_multi_turn" and report["rows"]["scored"] == 4
    lines = [json.loads(line) for line in (out / "base_predictions.jsonl").read_text().splitlines()]
    assert [line["id"] for line in lines] == [row.row["id"] for row in picked.values()]
    # every conversation generated: it ran to its last turn, or stopped by a bound it reports
    for line in lines:
        assert line["result"] and line["result"][0], line["id"]
        assert line["stopped"] in (None, "context", "token_budget", "step_limit")
        if line["stopped"] is None:
            assert len(line["result"]) == len(
                next(r.row for r in picked.values() if r.row["id"] == line["id"])["expected"]
            )
    assert "BFCL multi-turn overall: base" in capsys.readouterr().out


def test_compare_base_runs_the_base_and_the_adapter(picked, tiny_model_dir, adapter_dir, tmp_path, capsys):
    data = tmp_path / "bfcl.jsonl"
    data.write_text(json.dumps(picked["multi_turn_base"].row) + "\n")
    out = tmp_path / "eval"
    assert cli(["eval", "--model", tiny_model_dir, "--adapter", adapter_dir, "--compare-base", "--data", str(data),
                "--output-dir", str(out), "--quiet", "--max-new-tokens", "8", "--max-conversation-tokens", "24"]) == 0  # fmt: skip
    base, adapted = (json.loads((out / f"{label}_predictions.jsonl").read_text()) for label in ("base", "adapter"))
    assert base["result"] != adapted["result"]  # two models wrote them
    assert "BFCL multi-turn overall: base" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        (lambda row: row["env"].pop("involved_classes"), "env.involved_classes"),
        (lambda row: row["env"].update(turns="hello"), "env.turns"),
        (lambda row: row.update(expected=row["expected"][:-1]), "expected"),
        (lambda row: row["env"].update(involved_classes=["WebSearchAPI"]), "env.involved_classes[0]"),
    ],
)
def test_bad_rows_get_one_message_naming_file_row_and_field(picked, tiny_model_dir, tmp_path, capsys, edit, field):
    rows = [json.loads(json.dumps(row.row)) for row in picked.values()]
    edit(rows[1])
    data = tmp_path / "bad.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    assert cli(["eval", "--model", tiny_model_dir, "--data", str(data), "--output-dir", str(tmp_path), "--quiet"]) == 2
    error = capsys.readouterr().err
    assert f"{data}: row 2 (id={rows[1]['id']}): {field}:" in error and "Traceback" not in error


def test_bfcl_rows_mixed_with_other_rows_are_refused(picked, tiny_model_dir, tmp_path, capsys):
    workbench = Path("data/multi_turn_eval.jsonl").read_text().splitlines()[0]
    data = tmp_path / "mixed.jsonl"
    data.write_text(json.dumps(picked["multi_turn_base"].row) + "\n" + workbench + "\n")
    assert cli(["eval", "--model", tiny_model_dir, "--data", str(data), "--output-dir", str(tmp_path), "--quiet"]) == 2
    assert "rows mix BFCL multi-turn rows and other rows" in capsys.readouterr().err


def test_training_refuses_whole_bfcl_conversations_pointing_at_per_turn_rows(picked):
    with pytest.raises(DataError, match=r"to train on them, cut them into per-turn rows .*--per-turn"):
        is_multi_turn([picked["multi_turn_base"].row])
    assert is_multi_turn([picked["multi_turn_base"].row], evaluating=True)


def test_hostile_steps_never_run_and_leave_the_state_alone(picked, tokenizer, tmp_path, monkeypatch):
    """Code in a model's step is parsed, never run: `eval`, `exec` and `os.system` stay uncalled, no file appears,
    and the state is what a conversation without calls leaves."""
    import builtins
    import os

    row = picked["multi_turn_base"].row
    marker = tmp_path / "pwned"
    hostile = [
        f"[__import__('os').system('touch {marker}')]",
        '<tool_call>\n{"name": "__import__", "arguments": {"name": "os"}}\n</tool_call>',
        '<tool_call>\n{"name": "_load_scenario", "arguments": {"scenario": {}}}\n</tool_call>',
        f"[cd(folder=open('{marker}', 'w'))]",
    ]
    # a conversation without calls first: its imports and the compiled chat template are then in place
    untouched = run_conversations([row], tokenizer, ScriptedModel({row["id"]: [["No."] * 10]}, [row]))[0]
    watched = []
    for owner, name in ((builtins, "eval"), (builtins, "exec"), (os, "system")):
        monkeypatch.setattr(owner, name, lambda *args, _name=name, **kwargs: watched.append(_name))
    (conversation,) = run_conversations(
        [row], tokenizer, ScriptedModel({row["id"]: [[*hostile] + ["No."] * 10]}, [row])
    )
    assert not watched and not marker.exists()
    assert conversation.session.state() == untouched.session.state()
    results = [message["content"] for message in conversation.messages if message["role"] == "tool"]
    assert len(results) >= 2 and all(result.startswith("Error during execution: ") for result in results)
