"""The BFCL task (`tasks.bfcl`), built from the installed bfcl-eval: no training row shares a function
name or a question with a non-live row, the splits are disjoint (no API in two of them) and the size asked for, the prompt and gold-turn
limits hold, the held-out sample is spread evenly over each category, gold turns leave out what BFCL lets be left
out, the command writes the same files every time, and the long GRPO split (for a GPU) keeps dev's and the warm
start's APIs out and is written only when asked, and the no-call rows of the warm-start and GRPO splits are
settings that leave the rest of the task alone."""

import json

import pytest

from grpo_tools.data.prompts import gold_completion, load_rows, render_prompt
from grpo_tools.rewards import make_gold, score_completion
from tasks import bfcl as bfcl_task
from tasks.bfcl import HELD_OUT, api_group, build_task, load_category, minimal_answers, spread


pytest.importorskip("bfcl_eval", reason="bfcl-eval is not installed (`make install` installs it)")

SIZES = {
    "dev": {"live_simple": 5, "live_multiple": 5, "live_irrelevance": 5},
    "train": {"live_simple": 10, "live_multiple": 20, "live_irrelevance": 10},
    "warmup": {"live_simple": 20, "live_multiple": 10_000, "live_irrelevance": 20},
}
MAX_PROMPT, MAX_COMPLETION = 400, 160


@pytest.fixture(scope="module")
def task(tokenizer):
    return build_task(tokenizer, SIZES, MAX_PROMPT, MAX_COMPLETION, eval_rows=12, seed=0)


def _question(row):
    return " ".join(" ".join(m["content"] for m in row["messages"] if m["role"] == "user").casefold().split())


def test_no_training_row_shares_a_function_name_or_question_with_a_non_live_row(task):
    splits, _ = task
    names, questions = bfcl_task._non_live_names_and_questions()
    for split in ("dev", "train", "warmup"):
        for row in splits[split]:
            assert not {tool["function"]["name"] for tool in row["tools"]} & names, row["id"]
            assert _question(row) not in questions, row["id"]


def test_splits_are_disjoint_live_rows_of_the_sizes_asked(task):
    splits, manifest = task
    ids = {split: {row["id"] for row in splits[split]} for split in ("dev", "train", "warmup")}
    assert not ids["dev"] & ids["train"] and not ids["dev"] & ids["warmup"] and not ids["train"] & ids["warmup"]
    assert manifest["splits"]["dev"] == SIZES["dev"]
    assert manifest["splits"]["train"] == SIZES["train"]
    # The warm start takes what is left of live_multiple: every kept row is in some split or counted as not drawn.
    for category, kept in manifest["kept"].items():
        drawn = sum(manifest["splits"][split].get(category, 0) for split in ("dev", "train", "warmup"))
        assert drawn + manifest["dropped"][category]["not drawn into any split"] == kept
    assert manifest["splits"]["warmup"]["live_multiple"] > 100  # what dev and train left


def test_no_api_is_in_two_splits(task):
    splits, _ = task
    groups = {split: {api_group(row["id"]) for row in splits[split]} for split in ("dev", "train", "warmup")}
    assert not groups["dev"] & groups["train"] and not groups["dev"] & groups["warmup"]
    assert not groups["train"] & groups["warmup"]
    assert api_group("live_simple_193-116-1") == "live_simple-116"


def test_length_limits_hold(task, tokenizer):
    splits, manifest = task
    for row in splits["train"] + splits["warmup"]:
        assert len(tokenizer(render_prompt(tokenizer, row)).input_ids) <= MAX_PROMPT
        assert len(tokenizer(gold_completion(tokenizer, row)).input_ids) <= MAX_COMPLETION
    assert manifest["dropped"]["live_multiple"][f"prompt over {MAX_PROMPT} tokens"] > 0


def test_held_out_sample_spreads_each_category_evenly(task):
    splits, manifest = task
    assert manifest["splits"]["eval"] == dict.fromkeys(HELD_OUT, 12)
    # every held-out row but the one check-data rejects (eval refuses it), which the manifest names
    assert manifest["splits"]["eval_full"] == {"simple_python": 399, "multiple": 200, "irrelevance": 240}
    assert manifest["held_out_left_out"] == {"simple_python": ["simple_python_307"]}
    simple = [row["id"] for row in splits["eval"] if row["id"].startswith("simple_python")]
    assert simple == [f"simple_python_{index * 400 // 12}" for index in range(12)]


def test_every_gold_turn_is_right_by_bfcl_and_leaves_out_what_may_be_left_out(task, tokenizer):
    splits, _ = task
    for row in splits["train"] + splits["warmup"]:
        for call, possible in zip(row["answers"], row.get("possible_answers") or [], strict=True):
            acceptable = possible[call["name"]]
            assert all("" not in acceptable[name] for name in call["arguments"]), row["id"]
        gold = make_gold(row["tools"], row["answers"], row.get("possible_answers"))
        assert score_completion("tool_bfcl", gold_completion(tokenizer, row), gold).score == 1.0, row["id"]


def test_minimal_answers_keeps_required_and_drops_optional_parameters():
    row = {
        "answers": [{"name": "area", "arguments": {"base": 10, "unit": "units"}}],
        "possible_answers": [{"area": {"base": [10], "unit": ["units", ""]}}],
    }
    assert minimal_answers(row) == [{"name": "area", "arguments": {"base": 10}}]


def test_spread_takes_evenly_spaced_rows():
    assert spread(list(range(10)), 3) == [0, 3, 6]
    assert spread([1, 2], 5) == [1, 2]


def test_the_command_writes_the_same_splits_every_time(task, tiny_model_dir, tmp_path, monkeypatch, capsys):
    sizes = {"dev": {"live_simple": 2}, "train": {"live_multiple": 3}, "warmup": {"live_irrelevance": 4}}
    monkeypatch.setattr(bfcl_task, "DEFAULT_SIZES", sizes)
    arguments = ["--tokenizer", tiny_model_dir, "--max-prompt-tokens", "400", "--max-completion-tokens", "160"]
    assert bfcl_task.main([*arguments, "--out", str(tmp_path / "a")]) == 0
    assert bfcl_task.main([*arguments, "--out", str(tmp_path / "b")]) == 0
    for name in ("dev", "train", "warmup", "eval", "eval_full", "manifest"):
        suffix = ".json" if name == "manifest" else ".jsonl"
        assert (tmp_path / "a" / f"{name}{suffix}").read_bytes() == (tmp_path / "b" / f"{name}{suffix}").read_bytes()
    assert len(load_rows(tmp_path / "a" / "warmup.jsonl")) == 4  # and every row passes check-data
    assert "train.jsonl: 3 rows (live_multiple 3)" in capsys.readouterr().out


def test_an_unknown_category_is_one_clear_error():
    with pytest.raises(bfcl_task.DataError, match="no such BFCL category"):
        load_category("no_such_category")


def test_a_missing_tokenizer_folder_exits_2_with_one_message(tmp_path, capsys):
    assert bfcl_task.main(["--tokenizer", str(tmp_path / "nothing"), "--out", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err == f"python -m tasks.bfcl: {tmp_path / 'nothing'}: no such folder\n"


def test_the_long_split_keeps_dev_and_warm_start_apis_out_and_holds_the_grpo_splits_call_rows(task, tokenizer):
    splits, _ = task
    long_rows = bfcl_task.long_train_split(tokenizer, splits, 2 * MAX_PROMPT, MAX_COMPLETION, irrelevance_rows=7)
    groups = {api_group(row["id"]) for row in long_rows}
    for split in ("dev", "warmup"):
        assert not groups & {api_group(row["id"]) for row in splits[split]}, split
    calls = {row["id"] for row in splits["train"] if not row["id"].startswith("live_irrelevance")}
    assert calls <= {row["id"] for row in long_rows}
    assert [row["id"].startswith("live_irrelevance") for row in long_rows[-8:]] == [False] + [True] * 7
    lengths = [len(tokenizer(render_prompt(tokenizer, row)).input_ids) for row in long_rows]
    assert MAX_PROMPT < max(lengths) <= 2 * MAX_PROMPT  # longer prompts than the task's own limit, up to the new one


def test_the_command_writes_the_long_split_and_counts_it_only_when_asked(task, tiny_model_dir, tmp_path, monkeypatch):
    splits, manifest = task
    asked = []

    def long_split(tokenizer, splits_, max_prompt_tokens, max_completion_tokens, seed):
        asked.append((max_prompt_tokens, max_completion_tokens, seed))
        return splits_["train"][:3]

    monkeypatch.setattr(bfcl_task, "build_task", lambda *args: ({**splits}, {**manifest, "splits": {}}))
    monkeypatch.setattr(bfcl_task, "long_train_split", long_split)
    assert bfcl_task.main(["--tokenizer", tiny_model_dir, "--out", str(tmp_path / "short")]) == 0
    assert not (tmp_path / "short" / "train_long.jsonl").exists() and not asked
    arguments = ["--tokenizer", tiny_model_dir, "--out", str(tmp_path / "long"), "--long-train-tokens", "900"]
    assert bfcl_task.main(arguments) == 0
    assert asked == [(900, 96, 0)]
    assert [row["id"] for row in load_rows(tmp_path / "long" / "train_long.jsonl")] == [
        row["id"] for row in splits["train"][:3]
    ]
    written = json.loads((tmp_path / "long" / "manifest.json").read_text())
    assert written["max_prompt_tokens_train_long"] == 900
    assert sum(written["splits"]["train_long"].values()) == 3


@pytest.mark.parametrize("tokens", ["0", "-5"])
def test_a_long_split_of_no_tokens_is_refused_before_anything_is_built(tokens, tiny_model_dir, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        bfcl_task.main(["--tokenizer", tiny_model_dir, "--out", str(tmp_path / "out"), "--long-train-tokens", tokens])
    assert exit_.value.code == 2 and not (tmp_path / "out").exists()
    assert f"--long-train-tokens must be a positive number of tokens, got {tokens}" in capsys.readouterr().err


def test_the_no_call_rows_of_the_warm_start_and_grpo_split_are_settings_that_leave_the_rest_alone(
    tiny_model_dir, tmp_path, monkeypatch
):
    asked = []

    def build(tokenizer, sizes, *args):
        asked.append(sizes)
        return {}, {"splits": {}}

    monkeypatch.setattr(bfcl_task, "build_task", build)
    arguments = ["--tokenizer", tiny_model_dir, "--out", str(tmp_path / "out")]
    assert bfcl_task.main(arguments) == 0
    assert bfcl_task.main([*arguments, "--warmup-no-call-rows", "200", "--train-no-call-rows", "0"]) == 0
    assert asked[0] == bfcl_task.DEFAULT_SIZES
    warmup = {**bfcl_task.DEFAULT_SIZES["warmup"], "live_irrelevance": 200}
    train = {**bfcl_task.DEFAULT_SIZES["train"], "live_irrelevance": 0}
    assert asked[1] == {"dev": bfcl_task.DEFAULT_SIZES["dev"], "train": train, "warmup": warmup}
    assert list(asked[1]) == ["dev", "train", "warmup"]  # dev still drawn first, so its rows do not move


def test_a_negative_number_of_no_call_rows_is_refused_before_anything_is_built(tiny_model_dir, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        bfcl_task.main(["--tokenizer", tiny_model_dir, "--out", str(tmp_path / "out"), "--train-no-call-rows", "-1"])
    assert exit_.value.code == 2 and not (tmp_path / "out").exists()
    assert "--train-no-call-rows must be a number of rows, 0 or more, got -1" in capsys.readouterr().err


def test_swapped_rows_come_from_their_own_split_and_dev_gets_a_file_of_its_own(task, tokenizer):
    built, manifest = task
    splits = {split: list(rows) for split, rows in built.items()}
    manifest = {**manifest, "splits": dict(manifest["splits"])}
    bfcl_task.add_swapped(splits, manifest, {"warmup": 6, "train": 4, "dev": 3}, tokenizer, MAX_PROMPT)
    assert splits["dev"] == built["dev"]  # dev's own rows never change
    for split, target, count in (("warmup", "warmup", 6), ("train", "train", 4), ("dev", "dev_swapped", 3)):
        live = {row["id"]: row for row in built[split]}
        made = [row for row in splits[target] if row["id"].startswith("swapped_irrelevance")]
        assert len(made) == count and splits[target][: len(splits[target]) - count] == built.get(target, [])
        for row in made:
            question, donor = manifest["swapped"][target][row["id"]]
            assert row["messages"] == live[question]["messages"] and row["tools"] == live[donor]["tools"]
            assert row["answers"] == [] and api_group(question) != api_group(donor)
            assert len(tokenizer(render_prompt(tokenizer, row)).input_ids) <= MAX_PROMPT
        assert manifest["splits"][target]["swapped_irrelevance"] == count


def test_the_command_writes_dev_swapped_rows_by_default_and_refuses_a_negative_count(
    task, tiny_model_dir, tmp_path, monkeypatch, capsys
):
    splits, manifest = task
    monkeypatch.setattr(bfcl_task, "build_task", lambda *args: ({**splits}, {**manifest, "splits": {}}))
    assert bfcl_task.main(["--tokenizer", tiny_model_dir, "--out", str(tmp_path / "out")]) == 0
    assert len(load_rows(tmp_path / "out" / "dev_swapped.jsonl")) == min(
        bfcl_task.DEFAULT_SWAPPED["dev"], sum(1 for row in splits["dev"] if row["answers"])
    )
    assert all(not row["id"].startswith("swapped") for row in load_rows(tmp_path / "out" / "warmup.jsonl"))
    with pytest.raises(SystemExit) as exit_:
        bfcl_task.main(["--tokenizer", tiny_model_dir, "--out", str(tmp_path / "bad"), "--warmup-swapped-rows", "-2"])
    assert exit_.value.code == 2 and not (tmp_path / "bad").exists()
    assert "--warmup-swapped-rows must be a number of rows, 0 or more, got -2" in capsys.readouterr().err
