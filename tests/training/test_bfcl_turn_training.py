"""A GRPO step on BFCL's per-turn rows with the tiny model, through the CPU recipe
(`recipes/tiny/grpo/bfcl-multi-turn-cpu.yaml`) as a user launches it: the rows reach the trainer, the `bfcl_turn`
reward rebuilds each row's APIs from its `env` column and pays the turn's ground truth (each group's gold turn) 1, and
the adapter is saved; `bfcl_turn` on rows that are not per-turn rows is refused before a model loads."""

import json
from pathlib import Path

import pytest


pytest.importorskip("bfcl_eval", reason="bfcl-eval is not installed (`make install` installs it)")

from grpo_tools.cli import main as cli
from grpo_tools.data.rows import read_jsonl, write_jsonl


RECIPE = "recipes/tiny/grpo/bfcl-multi-turn-cpu.yaml"


@pytest.fixture(scope="module")
def per_turn_rows(tmp_path_factory):
    """Eight short per-turn rows of multi_turn_base whose turn needs one or two calls."""
    out = tmp_path_factory.mktemp("bfcl-per-turn")
    assert cli(["convert", "--from", "bfcl", "multi_turn_base", "--per-turn", "--output", str(out / "all.jsonl")]) == 0
    rows = [row for _, row in read_jsonl(out / "all.jsonl")]
    short = [r for r in rows if r["env"]["turn"] <= 1 and 1 <= len(r["answers"]) <= 2 and len(r["tools"]) <= 18]
    write_jsonl(out / "train.jsonl", short[:8])
    return str(out / "train.jsonl")


def test_a_training_step_on_per_turn_rows_scores_the_gold_turn_with_bfcls_verdict(
    tiny_model_dir, per_turn_rows, tmp_path
):
    output_dir = tmp_path / "out"
    flags = ["--model_name_or_path", tiny_model_dir, "--dataset_name", per_turn_rows, "--output_dir", str(output_dir)]
    flags += ["--max_steps", "1", "--logging_steps", "1", "--disable_tqdm", "true"]
    assert cli(["train", "--config", RECIPE, *flags]) == 0
    history = json.loads(Path(output_dir, "trainer_state.json").read_text())["log_history"]
    logged = next(entry for entry in history if "rewards/bfcl_turn_reward/mean" in entry)
    # one completion in each group of 4 is the row's gold turn, which BFCL's verdict passes; samples rarely do
    assert logged["rewards/bfcl_turn_reward/mean"] >= 0.25
    assert Path(output_dir, "adapter_model.safetensors").is_file()


def test_bfcl_turn_on_rows_that_are_not_per_turn_rows_is_refused_before_the_model_loads(
    tiny_model_dir, small_data, tmp_path, capsys
):
    flags = ["--model_name_or_path", tiny_model_dir, "--dataset_name", small_data["train"]]
    code = cli(
        ["train", "--config", RECIPE, *flags, "--output_dir", str(tmp_path / "out"), "--gold_in_group", "false"]
    )
    assert code == 2
    assert f"bfcl_turn: {small_data['train']}: row 1 (id=" in capsys.readouterr().err
