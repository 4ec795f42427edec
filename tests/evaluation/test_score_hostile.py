"""`grpo-tools score` on prediction lines a hostile model could write (issue 72): BFCL multi-turn results holding a
huge integer literal, a step of 90,001 `send_message` calls (BFCL's MessageAPI loops forever once its 90,000 ids are
used up), a number written as text too long to compute; and single-turn predictions with huge literals, deep nesting,
tens of thousands of calls and unclosed tags. Every line gets a verdict, the report is written, the exit status is
0."""

from __future__ import annotations

import json

import pytest

from grpo_tools.cli import main


def _score(tmp_path, rows, predictions, *extra):
    data, results, report = tmp_path / "data.jsonl", tmp_path / "predictions.jsonl", tmp_path / "report.json"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    results.write_text("".join(json.dumps(line) + "\n" for line in predictions))
    per_row = tmp_path / "rows.jsonl"
    arguments = ["score", "--data", str(data), "--predictions", str(results), "--output", str(report)]
    assert main([*arguments, "--per-row", str(per_row), *extra]) == 0
    return json.loads(report.read_text()), {
        line["id"]: line for line in map(json.loads, per_row.read_text().splitlines())
    }


def test_score_gives_hostile_bfcl_results_a_verdict(tmp_path):
    pytest.importorskip("bfcl_eval", reason="bfcl-eval is not installed (`make install` installs it)")
    from benchmarks import bfcl_multi_turn_reference as reference

    rows = {row.row["id"]: row for row in reference.rows("multi_turn_base")}
    messages = next(row for row in rows.values() if row.row["env"]["involved_classes"] == ["MessageAPI"]
                    or "MessageAPI" in row.row["env"]["involved_classes"])  # fmt: skip
    math = next(row for row in rows.values() if "MathAPI" in row.row["env"]["involved_classes"])
    flood = ["message_login(user_id='USR001')"] + ["send_message(receiver_id='USR002', message='hi')"] * 90_001

    def with_first_turn(row, calls):
        turns = [[list(calls)] if calls else [] for calls in row.ground_truth]
        turns[0] = [*turns[0], calls]
        return turns

    predictions = [
        {"id": messages.row["id"], "result": with_first_turn(messages, flood)},
        {"id": math.row["id"], "result": with_first_turn(math, ["add(a=0x" + "f" * 3572 + ", b=1)"])},
    ]
    report, verdicts = _score(tmp_path, [messages.row, math.row], predictions)
    assert report["rows"]["scored"] == 2 and report["accuracy"] == 0.0
    assert report["errors"] == {"multi_turn:budget_exceeded": 2}
    assert all(verdict["correct"] is False for verdict in verdicts.values())


def test_score_gives_hostile_single_turn_predictions_a_number(tmp_path):
    tools = [{"type": "function", "function": {"name": "add", "parameters": {"type": "object", "properties": {
        "a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}}}]  # fmt: skip
    hostile = {
        "hex": "[add(a=0x" + "f" * 3572 + ", b=1)]",
        "digits": '<tool_call>{"name": "add", "arguments": {"a": ' + "9" * 5000 + ', "b": 1}}</tool_call>',
        "deep": "[add(a=" + "[" * 50_000 + "]" * 50_000 + ", b=1)]",
        "many": "[" + ", ".join(["add(a=1, b=2)"] * 20_000) + "]",
        "unclosed": "<tool_call>" * 50_000,
        "text": "'1e" + "9" * 5000 + "'",
        "right": "[add(a=1, b=2)]",
    }
    rows = [{"id": key, "messages": [{"role": "user", "content": "add"}], "tools": tools,
             "answers": [{"name": "add", "arguments": {"a": 1, "b": 2}}]} for key in hostile]  # fmt: skip
    predictions = [{"id": key, "completion": text} for key, text in hostile.items()]
    for scorer in ("exact", "bfcl", "partial", "schema", "format", "decision"):
        report, verdicts = _score(tmp_path, rows, predictions, "--scorer", scorer)
        assert report["rows"]["scored"] == len(hostile), scorer
        assert all(isinstance(verdict["score"], float) for verdict in verdicts.values()), scorer
        assert verdicts["right"]["correct"] is True, scorer
        # a huge integer is a well-formed call of the right type (format, schema), but never the gold value
        assert verdicts["hex"]["correct"] is (scorer in ("schema", "format")), scorer


def test_evals_conversation_stops_on_a_completion_past_its_budget(tokenizer):
    pytest.importorskip("bfcl_eval", reason="bfcl-eval is not installed (`make install` installs it)")
    from benchmarks import bfcl_multi_turn_reference as reference
    from grpo_tools.evaluation.bfcl_conversations import run_conversations

    row = next(r for r in reference.rows("multi_turn_base") if "MathAPI" in r.row["env"]["involved_classes"]).row
    steps = []

    def generate(prompts: list[str], max_new_tokens: int) -> list[str]:
        steps.append(len(prompts))
        return ["[add(a=0x" + "f" * 3572 + ", b=1)]"] * len(prompts)

    (conversation,) = run_conversations([row], tokenizer, generate, max_new_tokens=4096,
                                        max_conversation_tokens=10**6)  # fmt: skip
    assert conversation.stopped == "budget:integer_digits" and steps == [1]
    assert conversation.messages[-1]["content"].startswith("Error during execution: over the budget")
