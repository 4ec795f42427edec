"""Tests for `grpo-tools eval --cache-dir` (`grpo_tools.evaluation.eval_cache`) on the tiny model: an unchanged
evaluation reuses its completions without loading the model and writes the same files as one that generated them;
a change to any part of the key (the model's files, an adapter, the rows, the template's prompts, the decoding
settings) generates afresh; a damaged entry is generated over; the status reaches the BFCL table and its summary."""

import json
import shutil
from pathlib import Path

import pytest

import grpo_tools.evaluation.evaluate
from grpo_tools.cli import main as cli
from grpo_tools.evaluation.leaderboard import main as leaderboard


OUTPUT_FILES = ("base_predictions.jsonl", "base_rows.jsonl", "base_data.jsonl")


@pytest.fixture(scope="module")
def rows():
    lines = Path("data/tool_calls_eval.jsonl").read_text().splitlines()[:6]
    return [json.loads(line) for line in lines]


def write_rows(path: Path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(path)


def run(model: str, data: str, out: Path, cache: Path | None, *extra: str) -> dict | None:
    """`grpo-tools eval` on the tiny model; the `<label>_cache.json` it writes (None without one)."""
    cache_args = ["--cache-dir", str(cache)] if cache is not None else []
    argv = ["eval", "--model", model, "--data", data, "--max-new-tokens", "16", "--batch-size", "4", "--quiet"]
    assert cli([*argv, "--output-dir", str(out), *cache_args, *extra]) == 0
    note = out / "base_cache.json"
    return json.loads(note.read_text()) if note.is_file() else None


def outputs(folder: Path) -> dict[str, object]:
    """What an evaluation wrote; the report less the paths it names (each evaluation has its own folder)."""
    report = json.loads((folder / "base_report.json").read_text())
    report = {key: value for key, value in report.items() if key not in ("data", "predictions")}
    return {"report": report, **{name: (folder / name).read_bytes() for name in OUTPUT_FILES}}


@pytest.fixture(scope="module")
def first(tiny_model_dir, rows, tmp_path_factory):
    """One evaluation with the cache, computed: its data file, cache folder, output folder and status."""
    folder = tmp_path_factory.mktemp("first")
    data, cache = write_rows(folder / "eval.jsonl", rows), folder / "cache"
    note = run(tiny_model_dir, data, folder / "out", cache)
    return {"data": data, "cache": cache, "out": folder / "out", "note": note}


def test_an_unchanged_evaluation_reuses_its_completions_without_loading_the_model(
    tiny_model_dir, first, tmp_path, monkeypatch
):
    assert first["note"]["status"] == "computed" and (first["cache"] / f"{first['note']['key']}.json").is_file()

    def no_model(args):
        raise AssertionError("the model was loaded although every completion was kept")

    monkeypatch.setattr(grpo_tools.evaluation.evaluate, "_load", no_model)
    second = run(tiny_model_dir, first["data"], tmp_path / "second", first["cache"])
    assert second == {**first["note"], "status": "reused"}
    assert outputs(tmp_path / "second") == outputs(first["out"])


def test_an_evaluation_without_the_cache_leaves_no_earlier_status_behind(tmp_path):
    from argparse import Namespace

    from grpo_tools.evaluation import eval_cache

    (tmp_path / "base_cache.json").write_text('{"status": "reused", "key": "0", "cache_dir": "x"}')
    eval_cache.record(Namespace(output_dir=str(tmp_path)), None, "base")
    assert not (tmp_path / "base_cache.json").exists()


def change_model_file(model: str, tmp_path: Path) -> dict:
    changed = tmp_path / "model"
    shutil.copytree(model, changed)
    config = json.loads((changed / "generation_config.json").read_text())
    (changed / "generation_config.json").write_text(json.dumps({**config, "note": "a byte more"}))
    return {"model": str(changed)}


def change_template(model: str, tmp_path: Path) -> dict:
    changed = tmp_path / "model"
    shutil.copytree(model, changed)
    template = changed / "chat_template.jinja"
    if template.is_file():
        template.write_text("{# another template #}" + template.read_text())
    else:
        config = json.loads((changed / "tokenizer_config.json").read_text())
        config["chat_template"] = "{# another template #}" + config["chat_template"]
        (changed / "tokenizer_config.json").write_text(json.dumps(config))
    return {"model": str(changed)}


def change_rows(model: str, tmp_path: Path) -> dict:
    return {"rows": lambda rows: [*rows[:-1], {**rows[-1], "id": "another-id"}]}


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(change_model_file, id="model-files"),
        pytest.param(change_template, id="template"),
        pytest.param(change_rows, id="rows"),
        pytest.param(lambda model, tmp_path: {"extra": ["--max-new-tokens", "12"]}, id="max-new-tokens"),
        pytest.param(lambda model, tmp_path: {"extra": ["--batch-size", "3"]}, id="batch-size"),
    ],
)
def test_a_change_to_any_part_of_the_key_generates_afresh(change, tiny_model_dir, rows, first, tmp_path):
    changed = change(tiny_model_dir, tmp_path)
    data = write_rows(tmp_path / "changed.jsonl", changed.get("rows", lambda rows: rows)(rows))
    cache = tmp_path / "cache"
    shutil.copytree(first["cache"], cache)
    second = run(changed.get("model", tiny_model_dir), data, tmp_path / "second", cache, *changed.get("extra", []))
    assert second["status"] == "computed" and second["key"] != first["note"]["key"]
    # Each key keeps its own completions: the first evaluation's entry is still there, beside the new one.
    assert sorted(path.stem for path in cache.glob("*.json")) == sorted([first["note"]["key"], second["key"]])


def test_an_adapter_is_part_of_the_key(tiny_model_dir, adapter_dir, first, tmp_path):
    # With an adapter, `base` is the adapter's model with the adapter off: its own key, the same completions.
    both = run(tiny_model_dir, first["data"], tmp_path, first["cache"], "--adapter", adapter_dir, "--compare-base")
    assert both["status"] == "computed" and both["key"] != first["note"]["key"]
    assert (tmp_path / "base_predictions.jsonl").read_bytes() == (first["out"] / "base_predictions.jsonl").read_bytes()
    adapter_note = json.loads((tmp_path / "adapter_cache.json").read_text())
    assert adapter_note["status"] == "computed" and adapter_note["key"] not in (first["note"]["key"], both["key"])


def test_a_damaged_entry_is_generated_over(tiny_model_dir, first, tmp_path, caplog):
    cache = tmp_path / "cache"
    shutil.copytree(first["cache"], cache)
    (cache / f"{first['note']['key']}.json").write_text('{"parts": ')
    assert run(tiny_model_dir, first["data"], tmp_path / "second", cache)["status"] == "computed"
    assert "unreadable cache entry" in caplog.text
    assert outputs(tmp_path / "second") == outputs(first["out"])
    assert run(tiny_model_dir, first["data"], tmp_path / "third", cache)["status"] == "reused"


def test_sampling_is_not_cached(tiny_model_dir, first, tmp_path, caplog):
    cache = tmp_path / "cache"
    assert run(tiny_model_dir, first["data"], tmp_path, cache, "--num-samples", "2", "--max-rows", "2") is None
    assert "not used: only greedy" in caplog.text and not cache.exists()


def test_the_bfcl_table_and_summary_say_whether_the_base_model_was_reused(tmp_path, capsys):
    lines = [{"id": "simple_python_0", "correct": True}, {"id": "irrelevance_0", "correct": False}]
    paths = [write_rows(tmp_path / f"{label}_rows.jsonl", lines) for label in ("before", "after", "base")]
    note = {"status": "reused", "key": "ab" * 32, "cache_dir": "outputs/eval-cache"}
    (tmp_path / "base_cache.json").write_text(json.dumps(note))
    summary = tmp_path / "bfcl_summary.json"
    assert leaderboard(["table", paths[0], paths[1], "--base", paths[2], "--summary", str(summary)]) == 0
    assert json.loads(summary.read_text())["base_model_cache"] == note
    assert f"base model: completions reused (cache key {'ab' * 32}, outputs/eval-cache)" in capsys.readouterr().out
    (tmp_path / "base_cache.json").unlink()  # evaluated without the cache: nothing claimed
    assert leaderboard(["table", paths[0], paths[1], "--base", paths[2], "--summary", str(summary)]) == 0
    assert "base_model_cache" not in json.loads(summary.read_text())
    assert "base model: completions" not in capsys.readouterr().out
