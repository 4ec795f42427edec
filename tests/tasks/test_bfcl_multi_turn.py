"""`python -m tasks.bfcl_multi_turn`: BFCL's multi-turn categories as per-turn rows, split by scenario: every row of a
held-out scenario, in every category, is in `eval.jsonl` and none in `train.jsonl`."""

import pytest


pytest.importorskip("bfcl_eval", reason="bfcl-eval is not installed (`make install` installs it)")

from grpo_tools.data.rows import check_rows, read_jsonl
from tasks.bfcl_multi_turn import main


def test_the_split_goes_by_scenario_never_by_category(tmp_path, capsys):
    assert main(["--out", str(tmp_path), "--categories", "multi_turn_base", "multi_turn_miss_param"]) == 0
    train = [row for _, row in read_jsonl(tmp_path / "train.jsonl")]
    held_out = [row for _, row in read_jsonl(tmp_path / "eval.jsonl")]
    assert check_rows(train + held_out) == []
    scenarios = {
        side: {row["env"]["scenario"] for row in rows} for side, rows in (("train", train), ("eval", held_out))
    }
    assert not scenarios["train"] & scenarios["eval"]
    assert len(scenarios["eval"]) == 40 and len(scenarios["train"]) == 160
    for side, rows in (("train", train), ("eval", held_out)):
        by_category = {category: set() for category in ("multi_turn_base", "multi_turn_miss_param")}
        for row in rows:
            by_category[row["env"]["category"]].add(row["env"]["scenario"])
        assert by_category["multi_turn_base"] == by_category["multi_turn_miss_param"] == scenarios[side]
    assert "40 scenarios" in capsys.readouterr().out
