"""Tests for `grpo_tools.data.prompts`: canonical rows rendered with their own tools by the model's chat template, the
gold turn (tests/training/test_warm_start.py checks the warm start's examples), the columns trl and the rewards read,
bad rows reported with their row and field, and `load_tokenizer`'s one message for a model that is neither a folder
here nor on the Hub."""

import json
import re
import shutil
from types import SimpleNamespace

import pytest

from grpo_tools.data.prompts import (
    NO_CALL_REPLY,
    check_model_folder,
    gold_message,
    load_rows,
    load_tokenizer,
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


def test_load_tokenizer_loads_a_folders_tokenizer(tiny_model_dir):
    assert load_tokenizer(tiny_model_dir).chat_template


@pytest.mark.parametrize("relative", ["no-model", "two/levels/deep"])
def test_a_missing_folder_is_named_and_the_hub_left_out(tmp_path, relative):
    name = str(tmp_path / relative)  # absolute: no Hub id looks like it
    with pytest.raises(OSError, match="^" + re.escape(name) + ": no such folder$"):
        load_tokenizer(name)


def test_a_name_shaped_like_a_hub_id_says_the_hub_could_not_give_it_either(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # `outputs/smollm2-135m` is not here, as before `make train` converts it
    with pytest.raises(OSError) as error:
        load_tokenizer("outputs/smollm2-135m")  # HF_HUB_OFFLINE=1 (conftest): the Hub is not asked
    assert str(error.value).startswith(
        "outputs/smollm2-135m: no such folder, and the Hugging Face Hub could not give it"
    )
    assert "\n" not in str(error.value)


def test_a_folder_or_file_that_holds_no_tokenizer_is_refused_by_name(tmp_path):
    with pytest.raises(OSError, match=r": not a model folder \(no tokenizer_config.json or tokenizer.json in it\)$"):
        load_tokenizer(str(tmp_path))  # transformers itself raises a ValueError about slow tokenizers here
    (tmp_path / "model.gguf").write_bytes(b"GGUF")
    with pytest.raises(OSError, match=r"model.gguf: a file, not a model folder$"):
        load_tokenizer(str(tmp_path / "model.gguf"))


def test_a_folder_with_a_tokenizer_but_no_model_is_refused_by_name(tiny_model_dir, tmp_path):
    check_model_folder(tiny_model_dir)  # a model folder passes
    check_model_folder("owner/model")  # no folder here: maybe a Hub id, left to load_tokenizer
    folder = tmp_path / "tokenizer-only"
    shutil.copytree(tiny_model_dir, folder)
    (folder / "config.json").unlink()
    assert load_tokenizer(str(folder)).chat_template  # enough for bfcl_task's --tokenizer
    with pytest.raises(OSError, match=r"tokenizer-only: not a model folder \(no config.json in it\)$"):
        check_model_folder(str(folder))  # transformers raises a ValueError about model_type here
    with pytest.raises(OSError, match=r"tokenizer.json: a file, not a model folder$"):
        check_model_folder(str(folder / "tokenizer.json"))
