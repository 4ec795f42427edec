"""Tests for `grpo_tools.data.prompts`: canonical rows rendered with their own tools by the model's chat template, the
gold turn (tests/training/test_warm_start.py checks the warm start's examples), the columns trl and the rewards read,
and bad rows reported with their row and field."""

import json
from types import SimpleNamespace

import pytest

from grpo_tools.data.prompts import (
    NO_CALL_REPLY,
    gold_message,
    load_rows,
    prompt_dataset,
    render_prompt,
)
from grpo_tools.data.rows import DataError
from grpo_tools.rewards import tool_exact_reward


def test_each_prompt_lists_its_own_tools(tokenizer, call_and_no_call_rows):
    first, second = (render_prompt(tokenizer, row) for row in call_and_no_call_rows)
    assert "get_weather(city: string, unit: celsius|fahrenheit)" in first and "set_timer" not in first
    assert "set_timer(minutes: integer)" in second and "get_weather" not in second
    assert first.endswith("<|im_start|>assistant\n")


def test_gold_message_layout(call_and_no_call_rows):
    assert gold_message(call_and_no_call_rows[0]) == {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Lyon", "unit": "celsius"}}}
        ],
    }
    assert gold_message(call_and_no_call_rows[1]) == {"role": "assistant", "content": NO_CALL_REPLY}


def test_prompt_dataset_carries_reward_columns_as_json(tokenizer, call_and_no_call_rows):
    dataset = prompt_dataset(call_and_no_call_rows, tokenizer)
    assert dataset.column_names == ["prompt", "id", "category", "tools", "answers", "possible_answers"]
    assert json.loads(dataset[0]["tools"]) == call_and_no_call_rows[0]["tools"]
    assert json.loads(dataset[0]["answers"]) == call_and_no_call_rows[0]["answers"]
    assert dataset[0]["possible_answers"] is None
    columns = {name: dataset[name] for name in ("tools", "answers", "possible_answers")}
    completions = ['[get_weather(city="Lyon", unit="celsius")]', "No joke tools here."]
    assert tool_exact_reward(completions, **columns) == [1.0, 1.0]


class BosTokenizer:
    """A tokenizer whose template writes BOS and whose encoder adds it again (Llama 3 does both)."""

    bos_token, bos_token_id = "<s>", 1

    def apply_chat_template(self, messages, tools=None, add_generation_prompt=False, tokenize=False):
        return "<s>[user] " + messages[-1]["content"] + (" [assistant]" if add_generation_prompt else "")

    def __call__(self, text):
        return SimpleNamespace(input_ids=[1, 5, 6])


def test_bos_written_by_the_template_is_not_doubled(call_and_no_call_rows):
    assert render_prompt(BosTokenizer(), call_and_no_call_rows[0]) == "[user] Weather in Lyon, celsius? [assistant]"


def test_load_rows_reports_every_bad_row(tmp_path, call_and_no_call_rows):
    path = tmp_path / "rows.jsonl"
    bad = {
        **call_and_no_call_rows[0],
        "id": "w-2",
        "answers": [{"name": "get_weather", "arguments": {"city": "Lyon", "unit": "kelvin"}}],
    }
    path.write_text(json.dumps(call_and_no_call_rows[0]) + "\nnot json\n" + json.dumps(bad) + "\n")
    with pytest.raises(DataError) as error:
        load_rows(path)
    message = str(error.value)
    assert "rows.jsonl: row 2: not valid JSON" in message
    assert "row 3 (id=w-2): answers[0].arguments.unit: 'kelvin' is not one of" in message


def test_load_rows_limit_and_missing_file(tmp_path, call_and_no_call_rows):
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in call_and_no_call_rows))
    assert [row["id"] for row in load_rows(path, limit=1)] == ["w-1"]
    with pytest.raises(DataError, match=r"nope\.jsonl: no such file"):
        load_rows(tmp_path / "nope.jsonl")


def test_parquet_is_refused_with_the_reason(tmp_path):
    with pytest.raises(DataError, match=r"rows\.parquet: training reads canonical rows from JSONL files"):
        load_rows(tmp_path / "rows.parquet")
