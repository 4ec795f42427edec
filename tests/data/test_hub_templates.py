"""Hub chat templates on every converted source fixture: trl's bundled Qwen2.5 and Llama 3.2 templates, loaded onto
the tiny tokenizer, render each row as a prompt, a gold turn (`gold_in_group`) and a warm-start example, or the row is
reported by id with the template's own reason and counted, and then either stops the run (`unrenderable_rows:
error`, one `DataError`) or is left out with one warning line (`skip`). Never a jinja traceback, never a row dropped
without a word."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
import trl

from grpo_tools.data.converters import bfcl_category, convert_rows, load_ground_truth, read_source
from grpo_tools.data.prompts import prompt_dataset
from grpo_tools.data.rows import DataError
from grpo_tools.training.warm_start import sft_dataset


TEMPLATES = Path(trl.__file__).parent / "chat_templates"
SOURCES = Path(__file__).parents[1] / "fixtures" / "sources"
FIXTURES = {
    "xlam": ("xlam", SOURCES / "xlam.json"),
    "hermes": ("hermes", SOURCES / "hermes.jsonl"),
    "glaive": ("glaive", SOURCES / "glaive.jsonl"),
    "toolace": ("toolace", SOURCES / "toolace.jsonl"),
    "openai": ("openai", SOURCES / "openai.jsonl"),
    "bfcl-parallel": ("bfcl", SOURCES / "bfcl" / "BFCL_v3_parallel.json"),
    "bfcl-irrelevance": ("bfcl", SOURCES / "bfcl" / "BFCL_v3_irrelevance.json"),
}
LLAMA_REASON = "This model only supports single tool-calls at once!"
# The rows Llama 3.2's template cannot render, by fixture: as a prompt (an assistant turn with several calls in the
# history), and as a gold turn (several gold calls, or an unrenderable prompt). Qwen2.5's renders every row.
LLAMA_PROMPT_FAILURES = {"hermes": {"hermes-b-1", "hermes-b-2"}, "openai": {"oa-2-1"}}
LLAMA_GOLD_FAILURES = {
    "xlam": {"0"},
    "hermes": {"hermes-b-0", "hermes-b-1", "hermes-b-2"},
    "toolace": {"0-0"},
    "openai": {"oa-2-0", "oa-2-1"},
    "bfcl-parallel": {"parallel_0", "parallel_1"},
}
EXPECTED_FAILURES = {
    ("qwen2_5", False): {},
    ("qwen2_5", True): {},
    ("llama3_2", False): LLAMA_PROMPT_FAILURES,
    ("llama3_2", True): LLAMA_GOLD_FAILURES,
}


def fixture_rows(name: str) -> list[dict[str, Any]]:
    source, path = FIXTURES[name]
    options: dict[str, Any] = {}
    if source == "bfcl":
        options["category"] = bfcl_category(str(path))
        if options["category"] != "irrelevance":
            options["ground_truth"] = load_ground_truth(str(SOURCES / "bfcl" / "possible_answer" / path.name))
    rows = convert_rows(source, read_source(str(path)), **options).rows
    assert rows, name
    return rows


def hub_tokenizer(model_dir: str, template: str) -> Any:
    """The tiny tokenizer with one of trl's bundled Hub templates as its chat template."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    tokenizer.chat_template = (TEMPLATES / f"{template}.jinja").read_text(encoding="utf-8")
    return tokenizer


@pytest.fixture(scope="module", params=["qwen2_5", "llama3_2"])
def template(request, tiny_model_dir):
    return request.param, hub_tokenizer(tiny_model_dir, request.param)


@pytest.mark.parametrize("with_gold", [False, True], ids=["prompt", "gold-turn"])
@pytest.mark.parametrize("fixture", list(FIXTURES))
def test_every_row_renders_or_stops_the_run_naming_it(template, fixture, with_gold):
    name, tokenizer = template
    rows = fixture_rows(fixture)
    failures = EXPECTED_FAILURES[name, with_gold].get(fixture, set())
    if not failures:
        dataset = prompt_dataset(rows, tokenizer, with_gold=with_gold)
        assert dataset["id"] == [str(row["id"]) for row in rows]
        return
    with pytest.raises(DataError) as raised:
        prompt_dataset(rows, tokenizer, with_gold=with_gold)
    error = raised.value
    assert {failure.row_id for failure in error.failures} == failures
    assert {failure.reason for failure in error.failures} == {LLAMA_REASON}
    message = str(error)
    assert message.startswith(f"{len(failures)} of {len(rows)} rows cannot be rendered by the chat template")
    for row_id in failures:
        assert f"row id={row_id}: " in message
    assert LLAMA_REASON in message
    assert message.endswith("set `unrenderable_rows: skip` (--unrenderable_rows skip) to go on without them")


@pytest.mark.parametrize("with_gold", [False, True], ids=["prompt", "gold-turn"])
@pytest.mark.parametrize("fixture", list(FIXTURES))
def test_skip_leaves_out_exactly_the_reported_rows_with_one_warning(template, fixture, with_gold, caplog):
    name, tokenizer = template
    rows = fixture_rows(fixture)
    failures = EXPECTED_FAILURES[name, with_gold].get(fixture, set())
    if len(failures) == len(rows):  # nothing left to train on: one message, as with `error`
        with pytest.raises(DataError, match="no row is left to train on"):
            prompt_dataset(rows, tokenizer, with_gold=with_gold, unrenderable_rows="skip")
        return
    with caplog.at_level(logging.WARNING, logger="grpo_tools"):
        dataset = prompt_dataset(rows, tokenizer, with_gold=with_gold, unrenderable_rows="skip", source="d.jsonl")
    assert dataset["id"] == [str(row["id"]) for row in rows if str(row["id"]) not in failures]
    warnings = [record.getMessage() for record in caplog.records if record.levelno == logging.WARNING]
    if not failures:
        assert warnings == []
        return
    [warning] = warnings
    assert f"d.jsonl: left out {len(failures)} of {len(rows)} rows" in warning
    assert "\n" not in warning
    first = next(str(row["id"]) for row in rows if str(row["id"]) in failures)
    assert f"row id={first}: " in warning and LLAMA_REASON in warning
    if name == "llama3_2":  # the header tokens are text to the tiny vocabulary, written as the template says
        assert all("<|start_header_id|>user<|end_header_id|>" in prompt for prompt in dataset["prompt"])


@pytest.mark.parametrize("fixture", list(FIXTURES))
def test_warm_start_examples_render_or_are_reported(template, fixture, caplog):
    name, tokenizer = template
    rows = fixture_rows(fixture)
    failures = EXPECTED_FAILURES[name, True].get(fixture, set())
    kept = [row for row in rows if str(row["id"]) not in failures]
    if not kept:
        with pytest.raises(DataError, match="no row is left to train on"):
            sft_dataset(rows, tokenizer, unrenderable_rows="skip")
        return
    with caplog.at_level(logging.WARNING, logger="grpo_tools"):
        dataset = sft_dataset(rows, tokenizer, unrenderable_rows="skip", source="warm.jsonl")
    assert dataset["prompt"] == prompt_dataset(kept, tokenizer)["prompt"]
    assert len(dataset) == len(kept)
    if failures:
        assert f"warm.jsonl: left out {len(failures)} of {len(rows)} rows" in caplog.text
        with pytest.raises(DataError, match="row id=") as raised:
            sft_dataset(rows, tokenizer)
        assert {failure.row_id for failure in raised.value.failures} == failures
