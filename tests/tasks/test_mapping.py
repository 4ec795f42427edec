"""The bundled mapping task (`tasks.mapping`, what `make train-mapping` trains SmolLM2 on): the committed files are
what the generator writes, and each split does the job data/README.md gives it: the warm start and GRPO see only
literal requests, only the held-out split has mapped ones, a quarter of every split or more needs no call, and the
held-out split shares no call and no phrasing with the others."""

import json
import re
from collections import Counter
from pathlib import Path

import pytest

from grpo_tools.data.prompts import load_rows
from tasks import mapping
from tasks.mapping import (
    CURRENCY_NAMES,
    CURRENCY_TEMPLATES,
    EVAL_REQUEST_TEMPLATES,
    EVAL_UNRELATED,
    HOURS,
    MAPPING_FILES,
    MAPPING_ROWS,
    PLAN,
    TIMER_TEMPLATES,
    generate_mapping_rows,
    write_mapping_data,
)


@pytest.fixture(scope="module")
def splits():
    return {split: load_rows(f"data/{name}") for split, name in MAPPING_FILES.items()}


def _calls(rows):
    return {json.dumps(call, sort_keys=True) for row in rows for call in row["answers"]}


def _template_pattern(template):
    return re.compile("^" + re.sub(r"\\\{\w+\\\}", ".+", re.escape(template)) + "$")


def test_the_bundled_files_are_what_the_generator_writes(tmp_path):
    for split, path in write_mapping_data(tmp_path).items():
        assert path.read_text(encoding="utf-8") == Path("data", MAPPING_FILES[split]).read_text(encoding="utf-8")


def test_each_split_has_its_size_and_categories(splits):
    assert {split: len(rows) for split, rows in splits.items()} == MAPPING_ROWS
    for split, rows in splits.items():
        counts = Counter(row["category"] for row in rows)
        if split != "train":  # train drops its mapped rows, which are simple or multiple
            assert counts == {category: count * len(rows) // 16 for category, count in PLAN[split].items()}, split
        assert counts["irrelevance"] >= len(rows) // 4  # abstaining is a quarter of every split, or more


def _mapped(rows):
    names = [name for names in CURRENCY_NAMES.values() for name in names]
    return [
        row
        for row in rows
        if row["answers"] and any(word in row["messages"][0]["content"] for word in [*names, *HOURS.values()])
    ]


def test_only_the_held_out_split_needs_words_mapped(splits):
    names = [name for names in CURRENCY_NAMES.values() for name in names]
    for row in splits["warmup"]:  # not even a no-call row of the warm start names a currency or hours
        text = row["messages"][0]["content"]
        assert not any(word in text for word in [*names, *HOURS.values()]), text
    assert not _mapped(splits["train"])
    mapped = _mapped(splits["eval"])
    assert len(mapped) >= 15
    for row in mapped:
        text, (call,) = row["messages"][0]["content"], row["answers"]
        if call["name"] == "set_timer":
            assert HOURS[call["arguments"]["minutes"]] in text
        else:
            assert any(name in text for name in CURRENCY_NAMES[call["arguments"]["to_currency"]])
            assert call["arguments"]["to_currency"] not in text  # the code itself is never written


def test_grpo_rows_are_the_draws_less_the_mapped_ones(splits, monkeypatch):
    """Dropping the mapped rows leaves the others as drawn: the rows GRPO was measured on."""
    monkeypatch.setattr(mapping, "DROPS_MAPPED", ())
    drawn = generate_mapping_rows("train", 400)
    mapped = _mapped(drawn)
    assert len(mapped) > 90

    def without_ids(rows):
        return [{key: value for key, value in row.items() if key != "id"} for row in rows]

    assert without_ids([row for row in drawn if row not in mapped]) == without_ids(splits["train"])


def test_the_held_out_split_shares_no_call_and_no_phrasing(splits):
    seen = splits["warmup"] + splits["train"]
    assert not _calls(splits["eval"]) & _calls(seen)
    seen_texts = {row["messages"][0]["content"] for row in seen}
    assert not any(request in seen_texts for request in EVAL_UNRELATED)
    literal = [
        _template_pattern(template)
        for by_arguments in EVAL_REQUEST_TEMPLATES.values()
        for templates in by_arguments.values()
        for template in templates
    ]
    held_out = [_template_pattern(t) for t in CURRENCY_TEMPLATES["eval"] + TIMER_TEMPLATES["eval"]] + literal
    assert not any(pattern.match(text) for pattern in held_out for text in seen_texts)
    # Every held-out request is worded by a held-out template, or is one of the held-out unrelated requests.
    for row in splits["eval"]:
        text = row["messages"][0]["content"]
        assert text in EVAL_UNRELATED or any(pattern.match(text) for pattern in held_out), text
    assert (
        sum(any(pattern.match(row["messages"][0]["content"]) for pattern in literal) for row in splits["eval"]) >= 40
    )
