"""Tests for `make eval-bfcl`'s two steps (`grpo_tools.evaluation.leaderboard`): the leaderboard table from known per-category
figures (non-live overall unweighted, live overall weighted by rows, `–` for a category without rows, the rows each
figure covers); BFCL's categories converted from the installed bfcl-eval, sampled, scored by `grpo-tools score
--per-row` and told apart by their ids (live from non-live) in the table; `bfcl_summary.json` with each change's
95% interval, rows paired by id, from `table --summary` and from training's own evaluations; and one clear message,
exit 2, for bad input."""

import doctest
import json
import math
from pathlib import Path

import pytest

import grpo_tools.evaluation.leaderboard
from grpo_tools.cli import main as cli
from grpo_tools.evaluation.leaderboard import (
    CATEGORIES,
    MISSING,
    Tally,
    format_table,
    leaderboard_cells,
    main,
    select_rows,
    source_category,
    tally_verdicts,
)


def write_lines(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def gold_text(row: dict) -> str:
    """The row's gold calls as Hermes text, the form `tool_bfcl` reads from a model."""
    calls = [{"name": call["name"], "arguments": call["arguments"]} for call in row["answers"]]
    return "".join(f"<tool_call>\n{json.dumps(call)}\n</tool_call>\n" for call in calls)


def first_lines(out: str) -> dict[str, list[str]]:
    """The printed summary's lines by label, the first of each (the usable table below repeats the labels)."""
    lines: dict[str, list[str]] = {}
    for line in out.splitlines():
        lines.setdefault(line.split("  ")[0].strip(), line.split())
    return lines


def verdicts(category: str, correct: int, wrong: int) -> list[dict]:
    """`score --per-row` lines for one BFCL category, ids in BFCL's own forms."""
    suffix = "{}-0-0" if category.startswith("live_") else "{}"
    return [
        {"id": f"{category}_{suffix.format(index)}", "category": "x", "score": 1.0, "correct": index < correct}
        for index in range(correct + wrong)
    ]


BEFORE = {
    "simple_python": (2, 2),  # 50%
    "multiple": (1, 1),  # 50%
    "parallel": (0, 2),  # 0%; parallel_multiple has no rows
    "live_simple": (3, 1),  # 75% of 4 rows
    "live_multiple": (1, 5),  # 16.7% of 6 rows
    "irrelevance": (3, 0),
}
AFTER = {**BEFORE, "simple_python": (4, 0), "live_multiple": (4, 2), "irrelevance": (0, 3)}


def runs() -> dict[str, dict[str, Tally]]:
    return {
        label: tally_verdicts([line for category, (c, w) in figures.items() for line in verdicts(category, c, w)])
        for label, figures in (("before", BEFORE), ("after", AFTER))
    }


def test_table_follows_the_leaderboards_columns_and_says_how_many_rows_each_figure_covers():
    before, after, rows = leaderboard_cells(runs())
    # Non-live overall: the unweighted mean of the categories with rows, (50 + 50 + 0) / 3 (weighted would be 37.5).
    # Live overall: weighted by rows, 4 of 10 right (unweighted would be 45.8).
    assert before[:11] == ["before", "50.0", "50.0", "0.0", MISSING, "33.3", "75.0", "16.7", MISSING, MISSING, "40.0"]
    assert after[:11] == ["after", "100.0", "50.0", "0.0", MISSING, "50.0", "75.0", "66.7", MISSING, MISSING, "70.0"]
    assert rows == ["rows", "4", "2", "2", "0", "8", "4", "6", "0", "0", "10", "3", "0"]


def test_irrelevance_columns_and_a_category_without_rows():
    before, after, _ = leaderboard_cells(runs())
    assert before[11:] == ["100.0", MISSING]  # irrelevance, live_irrelevance
    assert after[11:] == ["0.0", MISSING]


def test_formatted_table_has_the_groups_the_columns_and_a_line_per_run():
    text = format_table(runs())
    assert "Non-live" in text.splitlines()[0] and "Live" in text.splitlines()[0]
    lines = {line.split()[0]: line.split() for line in text.splitlines() if line.split()[:1] in (["before"], ["rows"])}
    assert lines["before"][1:] == leaderboard_cells(runs())[0][1:]
    assert lines["rows"] == leaderboard_cells(runs())[2]
    assert len({len(line) for line in text.splitlines()[1:] if line.startswith(("before", "after", "rows"))}) == 1


def test_runs_over_different_rows_are_refused():
    figures = runs()
    figures["after"] = {**figures["after"], "parallel": Tally(3, 0)}
    with pytest.raises(ValueError, match="differ"):
        leaderboard_cells(figures)


def test_source_category_keeps_live_and_non_live_apart():
    assert [source_category(i) for i in ("simple_python_3", "live_simple_3-1-0", "parallel_multiple_9")] == [
        "simple_python",
        "live_simple",
        "parallel_multiple",
    ]
    with pytest.raises(ValueError, match="weather-0007"):
        source_category("weather-0007")
    assert doctest.testmod(grpo_tools.evaluation.leaderboard).failed == 0


def test_select_spreads_rows_over_the_file_and_takes_the_next_row_for_one_check_data_rejects():
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}
    rows = [
        {"id": f"multiple_{i}", "messages": [{"role": "user", "content": "hi"}], "tools": [tool], "answers": []}
        for i in range(10)
    ]
    rows[0]["answers"] = [{"name": "not_offered", "arguments": {}}]
    chosen, skipped = select_rows(rows, 3)
    assert skipped == 1
    assert [row["id"] for row in chosen] == ["multiple_1", "multiple_3", "multiple_6"]
    assert select_rows(rows, 50) == (rows[1:], 1)
    for row in rows[7:]:  # the walk runs off the end: the sound rows of the whole file are spread instead
        row["answers"] = [{"name": "not_offered", "arguments": {}}]
    chosen, skipped = select_rows(rows, 4)
    assert ([row["id"] for row in chosen], skipped) == (["multiple_1", "multiple_2", "multiple_4", "multiple_5"], 4)


@pytest.fixture(scope="module")
def bfcl_eval_file(tmp_path_factory):
    """Two rows per category converted from the installed bfcl-eval by `grpo-tools convert` and `select`."""
    pytest.importorskip("bfcl_eval")
    folder = tmp_path_factory.mktemp("bfcl")
    for category in CATEGORIES:
        assert cli(["convert", "--from", "bfcl", category, "--output", str(folder / f"{category}.jsonl")]) == 0
    converted = [str(folder / f"{category}.jsonl") for category in CATEGORIES]
    assert main(["select", "--rows", "2", "--output", str(folder / "bfcl.jsonl"), *converted]) == 0
    return folder / "bfcl.jsonl"


def test_converted_categories_are_told_apart_by_id_through_score(bfcl_eval_file, tmp_path, capsys):
    rows = [json.loads(line) for line in bfcl_eval_file.read_text().splitlines()]
    assert len(rows) == 2 * len(CATEGORIES)
    assert {row["category"] for row in rows if row["id"].startswith("live_simple")} == {"simple"}  # hence the ids
    # The gold answer for non-live rows, nothing for live ones: live AST all wrong, non-live all right.
    predictions = [{"id": r["id"], "completion": "" if r["id"].startswith("live_") else gold_text(r)} for r in rows]
    write_lines(tmp_path / "pred.jsonl", predictions)
    for label in ("before", "after"):
        argv = ["score", "--data", str(bfcl_eval_file), "--predictions", str(tmp_path / "pred.jsonl"), "--quiet"]
        assert cli([*argv, "--scorer", "bfcl", "--per-row", str(tmp_path / f"{label}.jsonl")]) == 0
    capsys.readouterr()
    assert main(["table", str(tmp_path / "before.jsonl"), str(tmp_path / "after.jsonl")]) == 0
    table = {line.split()[0]: line.split()[1:] for line in capsys.readouterr().out.splitlines()[1:] if line.strip()}
    assert table["before"] == ["100.0"] * 5 + ["0.0"] * 5 + ["100.0", "100.0"]
    assert table["rows"] == ["2", "2", "2", "2", "8", "2", "2", "2", "2", "8", "2", "2"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["table", "{verdicts}", "{missing}"], "no such file"),
        (["table", "{foreign}", "{foreign}"], "weather-0007"),
        (["table", "{rows}", "{rows}"], "not a `grpo-tools score --per-row` verdict"),
        (["select", "--rows", "2", "--output", "{out}", "{foreign}"], "row 1: id 'weather-0007'"),
        (["select", "--rows", "0", "--output", "{out}", "{rows}"], "--rows must be at least 1"),
    ],
)
def test_bad_input_gets_one_message_and_exit_2(tmp_path, capsys, argv, message):
    paths = {
        "verdicts": write_lines(tmp_path / "v.jsonl", verdicts("multiple", 1, 1)),
        "foreign": write_lines(tmp_path / "f.jsonl", [{"id": "weather-0007", "correct": True}]),
        "rows": write_lines(tmp_path / "r.jsonl", [{"id": "multiple_0"}]),
        "missing": tmp_path / "absent.jsonl",
        "out": tmp_path / "out.jsonl",
    }
    argv = [part.format(**paths) for part in argv]
    if argv[0] == "select" and "0" in argv:
        with pytest.raises(SystemExit) as exit_info:
            main(argv)
        code = exit_info.value.code
    else:
        code = main(argv)
    err = capsys.readouterr().err
    assert code == 2
    assert message in err and "Traceback" not in err


def test_summary_gives_fractions_per_category_and_the_mean_of_the_call_categories(tmp_path, capsys):
    verdicts = {
        "before": [
            ("simple_python_0", True),
            ("simple_python_1", False),
            ("multiple_0", False),
            ("irrelevance_0", True),
        ],
        "after": [
            ("simple_python_0", True),
            ("simple_python_1", True),
            ("multiple_0", True),
            ("irrelevance_0", False),
        ],
    }
    paths = [
        write_lines(tmp_path / f"{label}.jsonl", [{"id": i, "correct": correct} for i, correct in rows])
        for label, rows in verdicts.items()
    ]
    summary_path = tmp_path / "bfcl_summary.json"
    assert main(["table", *map(str, paths), "--summary", str(summary_path)]) == 0
    summary = json.loads(summary_path.read_text())
    assert summary.pop("usable")["models"]["warm start"]["usable"][0] == 0.625  # (0.25 + 1.0) / 2 (test_usable.py)
    assert summary == {  # one row cannot measure its own spread: no interval for multiple or irrelevance
        "categories": {
            "simple_python": {"rows": 2, "before": 0.5, "after": 1.0, "change_95": [-0.48, 1.48]},
            "multiple": {"rows": 1, "before": 0.0, "after": 1.0, "change_95": None},
            "irrelevance": {"rows": 1, "before": 1.0, "after": 0.0, "change_95": None},
        },
        "calls": {"categories": ["simple_python", "multiple"], "before": 0.25, "after": 1.0, "change_95": None},
    }
    out = capsys.readouterr().out
    lines = first_lines(out)
    # simple_python, multiple, irrelevance, then the mean of simple_python and multiple
    assert lines["warm start"][-4:] == ["50.0", "0.0", "100.0", "25.0"]
    assert lines["after GRPO"][-4:] == ["100.0", "100.0", "0.0", "100.0"]
    assert lines["change"][-4:] == ["50.0", "100.0", "-100.0", "75.0"]
    assert "Llama-3.2-1B-Instruct (FC)" in out and "44.0" in out  # published figures beside ours


def test_is_bfcl_tells_bfcl_rows_from_others():
    assert grpo_tools.evaluation.leaderboard.is_bfcl([{"id": "multiple_3"}, {"id": "irrelevance_0"}])
    assert not grpo_tools.evaluation.leaderboard.is_bfcl([{"id": "multiple_3"}, {"id": "weather-0007"}])
    assert not grpo_tools.evaluation.leaderboard.is_bfcl([])


def test_each_change_comes_with_its_95_percent_interval_from_the_rows_paired_by_id(tmp_path, capsys):
    """Of 4 simple_python rows one became right (changes 1, 0, 0, 0: mean 0.25, standard error 0.25), and of 4
    multiple rows one became right and one wrong (mean 0, standard error sqrt(2/3) / 2): the intervals are the mean
    plus or minus 1.96 errors, and the mean of the two categories' changes has the errors of both, halved."""
    before = [("simple_python_0", False), ("simple_python_1", True), ("simple_python_2", False)]
    before += [("simple_python_3", True), ("multiple_0", False), ("multiple_1", True)]
    before += [("multiple_2", False), ("multiple_3", False)]
    after = dict(before) | {"simple_python_0": True, "multiple_0": True}
    after["multiple_1"] = False
    paths = [
        write_lines(tmp_path / "before.jsonl", [{"id": i, "correct": c} for i, c in before]),
        write_lines(tmp_path / "after.jsonl", [{"id": i, "correct": c} for i, c in reversed(after.items())]),
    ]
    summary_path = tmp_path / "bfcl_summary.json"
    assert main(["table", *map(str, paths), "--summary", str(summary_path)]) == 0
    summary = json.loads(summary_path.read_text())
    z = 1.959964
    simple, multiple = summary["categories"]["simple_python"], summary["categories"]["multiple"]
    assert simple["change_95"] == pytest.approx([0.25 - z * 0.25, 0.25 + z * 0.25], abs=1e-4)
    error = math.sqrt(2 / 3) / 2
    assert multiple["change_95"] == pytest.approx([-z * error, z * error], abs=1e-4)
    both = math.sqrt(0.25**2 + error**2) / 2
    assert summary["calls"]["change_95"] == pytest.approx([0.125 - z * both, 0.125 + z * both], abs=1e-4)
    lines = first_lines(capsys.readouterr().out)
    assert lines["95% ±"][-3:] == [f"{100 * z * 0.25:.1f}", f"{100 * z * error:.1f}", f"{100 * z * both:.1f}"]


def test_runs_of_different_rows_get_no_summary(tmp_path, capsys):
    before = write_lines(tmp_path / "before.jsonl", [{"id": "multiple_0", "correct": True}])
    after = write_lines(tmp_path / "after.jsonl", [{"id": "multiple_1", "correct": True}])
    assert main(["table", str(before), str(after), "--summary", str(tmp_path / "summary.json")]) == 2
    assert "before and after cover different rows" in capsys.readouterr().err
    assert not (tmp_path / "summary.json").exists()


def test_training_writes_bfcl_summary_with_intervals_beside_its_evaluations(bfcl_eval_file, tmp_path, capsys):
    """After training on BFCL rows (what `make train` does), the before and after evaluations' verdicts give
    `bfcl_summary.json`, each change with its interval, and the table with the interval's half width."""
    from grpo_tools.evaluation.compare import write_comparison
    from grpo_tools.evaluation.evaluate import evaluate_model

    rows = [json.loads(line) for line in bfcl_eval_file.read_text().splitlines()]
    rows = [row for row in rows if source_category(row["id"]) in ("simple_python", "multiple", "irrelevance")]
    reports = {  # nothing written before; after, the gold calls on every call row but the first
        label: evaluate_model(None, None, rows, tmp_path, scorer="bfcl", completions=texts, label=label)
        for label, texts in (
            ("before", [""] * len(rows)),
            ("after", ["" if index == 0 else gold_text(row) for index, row in enumerate(rows)]),
        )
    }
    write_comparison(reports["before"], reports["after"], tmp_path)
    summary = json.loads((tmp_path / "bfcl_summary.json").read_text())
    assert set(summary["categories"]) == {"simple_python", "multiple", "irrelevance"}
    assert summary["categories"]["multiple"] == {"rows": 2, "before": 0.0, "after": 1.0, "change_95": [1.0, 1.0]}
    assert summary["categories"]["simple_python"]["after"] == 0.5
    assert summary["calls"]["before"] == 0.0 and summary["calls"]["after"] == 0.75
    low, high = summary["calls"]["change_95"]
    assert low < 0.75 < high < 1.25
    out = capsys.readouterr().out
    assert "bfcl_summary.json" in out and any(line.startswith("95% ±") for line in out.splitlines())
