"""Tests for `grpo_tools.evaluation.scoring` and `grpo-tools score`: a report computed by hand on a small dataset, the join and
counting rules (missing, unmatched, duplicate, unreadable predictions), per-row verdicts, identical reports for any
number of workers, and one clear message for each kind of bad input."""

import json
import subprocess
import sys

import pytest

from grpo_tools.cli import main as cli
from grpo_tools.data.rows import DataError
from grpo_tools.evaluation.scoring import SCORERS, index_data, score_files


def tool(name, properties, required=()):
    parameters = {"type": "object", "properties": properties, "required": list(required)}
    return {"type": "function", "function": {"name": name, "description": name, "parameters": parameters}}


WEATHER = tool("get_weather", {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["c", "f"]}}, ["city"])
TIMER = tool("set_timer", {"minutes": {"type": "integer"}}, ["minutes"])
MESSAGES = [{"role": "user", "content": "..."}]

DATA = [
    {"id": "a", "messages": MESSAGES, "tools": [WEATHER], "category": "simple",
     "answers": [{"name": "get_weather", "arguments": {"city": "Lyon", "unit": "c"}}]},
    {"id": "b", "messages": MESSAGES, "tools": [WEATHER], "category": "simple",
     "answers": [{"name": "get_weather", "arguments": {"city": "Rome"}}],
     "possible_answers": [{"get_weather": {"city": ["Rome"], "unit": ["c", ""]}}]},
    {"id": "c", "messages": MESSAGES, "tools": [WEATHER, TIMER],  # no category: derived as "multiple"
     "answers": [{"name": "set_timer", "arguments": {"minutes": 5}}]},
    {"id": "d", "messages": MESSAGES, "tools": [WEATHER], "category": "parallel",
     "answers": [{"name": "get_weather", "arguments": {"city": "Oslo"}}, {"name": "get_weather", "arguments": {"city": "Lima"}}]},
    {"id": "e", "messages": MESSAGES, "tools": [TIMER], "answers": []},  # derived: irrelevance
    {"id": "f", "messages": MESSAGES, "tools": [TIMER], "category": "simple",
     "answers": [{"name": "set_timer", "arguments": {"minutes": 10}}]},
]  # fmt: skip


def hermes(*calls):
    return "".join(f"<tool_call>{json.dumps(call)}</tool_call>" for call in calls)


PREDICTIONS = [
    {"id": "a", "completion": '[get_weather(city="lyon", unit="c")]'},  # bfcl: right (normalised); exact: wrong
    {"id": "b", "completion": hermes({"name": "get_weather", "arguments": {"city": "Rome", "unit": "c"}})},  # right
    {"id": "c", "completion": hermes({"name": "set_timer", "arguments": {"minutes": "5"}})},  # wrong_type
    {"id": "d", "completion": hermes({"name": "get_weather", "arguments": {"city": "Lima"}})},  # wrong_count
    {"id": "e", "completion": "No tool fits that."},  # right
    {"id": "ghost", "completion": "x"},  # unmatched
    {"id": "a", "completion": "a second prediction for a"},  # duplicate: ignored, counted
]
PREDICTION_LINES = [json.dumps(p) for p in PREDICTIONS[:5]] + ["{not json", json.dumps({"id": "z"})]
PREDICTION_LINES += [json.dumps(p) for p in PREDICTIONS[5:]]
# f has no prediction: missing_prediction, scores 0.


@pytest.fixture
def files(tmp_path):
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in DATA))
    predictions = tmp_path / "pred.jsonl"
    predictions.write_text("\n".join(PREDICTION_LINES) + "\n")
    return data, predictions


def test_bfcl_report_computed_by_hand(files):
    data, predictions = files
    report, notes = score_files(data, predictions, "bfcl", workers=1, progress=False)
    assert report == {
        "scorer": "bfcl",
        "data": str(data),
        "predictions": str(predictions),
        "rows": {
            "data": 6,
            "predictions": 7,  # readable lines, including the unmatched and the duplicate
            "scored": 5,
            "missing_prediction": 1,
            "unmatched_prediction": 1,
            "duplicate_prediction": 1,
            "unreadable": 2,
            "invalid_data": 0,
        },
        "accuracy": 3 / 6,
        "mean_reward": 3 / 6,
        "by_category": {
            "irrelevance": {"rows": 1, "correct": 1, "accuracy": 1.0, "mean_reward": 1.0},
            "multiple": {"rows": 1, "correct": 0, "accuracy": 0.0, "mean_reward": 0.0},
            "parallel": {"rows": 1, "correct": 0, "accuracy": 0.0, "mean_reward": 0.0},
            "simple": {"rows": 3, "correct": 2, "accuracy": 2 / 3, "mean_reward": 2 / 3},
        },
        "errors": {"wrong_type": 1, "wrong_count": 1, "missing_prediction": 1},
    }
    assert len(notes) == 4
    assert any("row 6: not valid JSON" in note for note in notes)
    assert any("row 7: completion: missing" in note for note in notes)
    assert any("(id=ghost): no data row has this id" in note for note in notes)
    assert any("(id=a): a second prediction" in note for note in notes)


def test_partial_scorer_mean_reward_by_hand(files):
    data, predictions = files
    report, _ = score_files(data, predictions, "partial", workers=1, progress=False)
    # a: city value wrong (lyon vs Lyon): (1 + 1 + 1/2) / 3; b: extra unit: (1 + 1/2 + 1) / 3; c: (1 + 1 + 0) / 3;
    # d: one of two gold calls matched: 1 / 2; e: 1; f: 0 (missing).
    expected = (2.5 / 3 + 2.5 / 3 + 2 / 3 + 0.5 + 1 + 0) / 6
    assert report["mean_reward"] == pytest.approx(expected)
    assert report["accuracy"] == pytest.approx(1 / 6)  # only e earns full credit


def test_per_row_verdicts_cover_every_data_row(files, tmp_path):
    data, predictions = files
    per_row = tmp_path / "rows.jsonl"
    score_files(data, predictions, "exact", workers=1, per_row=per_row, progress=False)
    rows = {row["id"]: row for row in map(json.loads, per_row.read_text().splitlines())}
    assert set(rows) == {"a", "b", "c", "d", "e", "f"}
    assert rows["a"] == {"id": "a", "category": "simple", "score": 0.0, "correct": False, "errors": ["wrong_value"]}
    assert rows["e"] == {"id": "e", "category": "irrelevance", "score": 1.0, "correct": True, "errors": []}
    assert rows["f"]["errors"] == ["missing_prediction"]


def test_workers_give_the_same_report_and_rows(tmp_path):
    data = tmp_path / "data.jsonl"
    predictions = tmp_path / "pred.jsonl"
    rows = [{**DATA[i % len(DATA)], "id": f"r{i}"} for i in range(2_500)]  # several chunks of 1,000
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    completions = [PREDICTIONS[i % 5]["completion"] for i in range(2_400)]
    predictions.write_text(
        "".join(json.dumps({"id": f"r{i}", "completion": c}) + "\n" for i, c in enumerate(completions))
    )
    one, _ = score_files(data, predictions, "partial", workers=1, per_row=tmp_path / "one.jsonl", progress=False)
    two, _ = score_files(data, predictions, "partial", workers=2, per_row=tmp_path / "two.jsonl", progress=False)
    assert one == two
    assert one["rows"]["missing_prediction"] == 100
    assert (tmp_path / "one.jsonl").read_text() == (tmp_path / "two.jsonl").read_text()


def test_workers_reading_their_own_ranges_give_byte_identical_reports_notes_and_rows(tmp_path, monkeypatch):
    """Ranges of a few hundred bytes, so that each file is cut into many: a row's second prediction in a later range
    than its first, unreadable and unmatched lines, blank lines and a byte-order mark, a last line without a newline.
    One worker and two write the same bytes, the notes come in file order, and each prediction is counted once."""
    import grpo_tools.evaluation.scoring as scoring

    monkeypatch.setattr(scoring, "_RANGE_BYTES", 300)
    data, predictions = tmp_path / "data.jsonl", tmp_path / "pred.jsonl"
    rows = [{**DATA[i % len(DATA)], "id": f"r{i}"} for i in range(60)]
    data.write_bytes(
        b"\xef\xbb\xbf" + "".join(json.dumps(row) + "\n" + "\n" * (i == 7) for i, row in enumerate(rows)).encode()
    )
    lines = [json.dumps({"id": f"r{i}", "completion": PREDICTIONS[i % 5]["completion"]}) for i in range(55)]
    lines[20:20] = ["{not json", "", json.dumps({"id": "r3", "completion": "again"}), json.dumps({"id": 5})]
    lines[40:40] = [json.dumps({"id": "ghost", "completion": "x"}), json.dumps({"id": "r50", "completion": "early"})]
    predictions.write_bytes(b"\xef\xbb\xbf" + "\n".join(lines).encode())  # no newline after the last line
    outputs = {}
    for workers in (1, 2):
        report, notes = score_files(data, predictions, "partial", workers=workers, per_row=tmp_path / f"{workers}.jsonl",
                                    progress=False)  # fmt: skip
        outputs[workers] = (json.dumps(report, indent=2), notes, (tmp_path / f"{workers}.jsonl").read_bytes())
    assert outputs[1] == outputs[2]
    report, notes = json.loads(outputs[1][0]), outputs[1][1]
    assert report["rows"] == {"data": 60, "predictions": 58, "scored": 55, "missing_prediction": 5,
                              "unmatched_prediction": 1, "duplicate_prediction": 2, "unreadable": 2,
                              "invalid_data": 0}  # fmt: skip
    assert [note.split(": ", 2)[1] for note in notes] == ["row 21", "row 23 (id=r3)", "row 24", "row 41 (id=ghost)",
                                                          "row 57 (id=r50)"]  # fmt: skip
    assert notes[1].endswith("a second prediction for this id; the first is scored")
    assert notes[4].endswith("a second prediction for this id; the first is scored")  # the later one, in file order
    per_row = [json.loads(line) for line in outputs[1][2].splitlines()]
    assert len(per_row) == 60 and {row["id"] for row in per_row} == {f"r{i}" for i in range(60)}
    assert next(row for row in per_row if row["id"] == "r50")["score"] == 0.0  # "early", not r50's own completion


def _layouts(tmp_path):
    """Prediction files against one data file: in the data's order, shuffled, and in order with a row's second
    prediction, unreadable, unmatched and blank lines, one missing, and two rows whose tool schema cannot be read."""
    import random

    rows = [{**DATA[i % len(DATA)], "id": f"r{i}"} for i in range(40)]
    broken = {
        "type": "function",
        "function": {"name": "f", "parameters": {"type": "object", "properties": {"x": {"type": "colour"}}}},
    }
    for broken_row in (9, 39):  # the second on the last line: the end of a range
        rows[broken_row] = {"id": f"r{broken_row}", "messages": MESSAGES, "tools": [broken],
                            "answers": [{"name": "f", "arguments": {"x": 1}}]}  # fmt: skip
    rows[33]["id"] = "33"
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    lines = [
        json.dumps({"id": row["id"], "completion": PREDICTIONS[i % 5]["completion"]}) for i, row in enumerate(rows)
    ]
    lines[9], lines[39] = (json.dumps({"id": f"r{row}", "completion": "[f(x=1)]"}) for row in (9, 39))
    files = {"in order": lines, "shuffled": random.Random(0).sample(lines, len(lines))}
    mixed = list(lines)
    mixed[5] = json.dumps({"id": "r6", "completion": "r6, early"})  # r5 missing; r6 twice, the first scored
    mixed[12], mixed[20], mixed[30] = "{not json", "", json.dumps({"id": "ghost", "completion": "x"})
    mixed[33] = json.dumps({"id": 33, "completion": PREDICTIONS[3]["completion"]})  # joined by the id's text
    files["mixed"] = [*mixed, json.dumps({"id": "r0", "completion": "again"})]
    paths = {}
    for name, content in files.items():
        paths[name] = tmp_path / f"{name.replace(' ', '_')}.jsonl"
        paths[name].write_text("\n".join(content) + "\n")
    return data, paths


@pytest.mark.parametrize("scorer", ["bfcl", "partial", "schema"])
def test_predictions_scored_while_indexing_give_the_report_of_the_join(tmp_path, monkeypatch, scorer):
    """Where a prediction sits on its data row's line, indexing scores it with the gold it has just read. With that
    turned off (every prediction joined and scored afterwards) the reports, notes and per-row verdicts are the same
    bytes, in the data's order and out of it, with one worker and two, with and without per-row verdicts."""
    import grpo_tools.evaluation.score_ranges as score_ranges
    import grpo_tools.evaluation.scoring as scoring

    monkeypatch.setattr(scoring, "_RANGE_BYTES", 700)  # ranges of a few rows: many per file
    data, predictions = _layouts(tmp_path)
    join_only = score_ranges._prescore
    for name, path in predictions.items():
        outputs = []
        for prescoring in (True, False):
            monkeypatch.setattr(score_ranges, "_prescore", join_only if prescoring else lambda *_: False)
            for workers in (1, 2):
                for per_row in (tmp_path / "rows.jsonl", None):
                    report, notes = score_files(data, path, scorer, workers, per_row, progress=False)
                    verdicts = per_row.read_bytes() if per_row else None
                    outputs.append((prescoring, per_row is not None, json.dumps(report), notes, verdicts))
        with_rows = [output[2:] for output in outputs if output[1]]
        without_rows = [output[2:4] for output in outputs if not output[1]]
        assert all(output == with_rows[0] for output in with_rows), name
        assert all(output == with_rows[0][:2] for output in without_rows), name
    report = json.loads(with_rows[0][0])  # the mixed file
    assert report["rows"] == {"data": 40, "predictions": 39, "scored": 36, "missing_prediction": 4,  # r5, 12, 20, 30
                              "unmatched_prediction": 1, "duplicate_prediction": 2, "unreadable": 1,
                              "invalid_data": 2}  # fmt: skip


def test_predictions_in_the_data_order_are_scored_without_reading_the_data_again(tmp_path, monkeypatch):
    """The point of scoring while indexing: a predictions file in the data's order (as `eval` writes one) reads each
    data row once. Out of order, each joined prediction reads its row a second time."""
    import grpo_tools.evaluation.score_ranges as score_ranges
    import grpo_tools.evaluation.scoring as scoring

    monkeypatch.setattr(scoring, "_RANGE_BYTES", 700)
    data, predictions = _layouts(tmp_path)
    reads = []
    load_row = score_ranges.load_row
    monkeypatch.setattr(score_ranges, "load_row", lambda line: reads.append(line) or load_row(line))
    ids = [json.loads(line)["id"] for line in data.read_text().splitlines()]
    for name, path in predictions.items():
        if name == "mixed":
            continue
        on_own_line = sum(json.loads(line)["id"] == ids[i] for i, line in enumerate(path.read_text().splitlines()))
        reads.clear()
        report, _ = score_files(data, path, "bfcl", workers=1, progress=False)
        assert report["rows"]["scored"] == 40
        assert len(reads) == 40 + (40 - on_own_line), name  # in order, all 40 on their own line
    assert on_own_line < 5  # the shuffled file


def test_line_starts_finds_each_line_across_blocks(tmp_path, monkeypatch):
    import grpo_tools.evaluation.byte_ranges as byte_ranges

    monkeypatch.setattr(byte_ranges, "_BLOCK_BYTES", 7)
    path = tmp_path / "lines.txt"
    content = b"\xef\xbb\xbfone\n\nthree is longer than a block\nfour\nfive"  # no newline after the last line
    path.write_bytes(content)
    lines = content.split(b"\n")
    starts = [sum(len(line) + 1 for line in lines[: number - 1]) for number in range(1, 6)]
    assert byte_ranges.line_starts(path, [1, 2, 3, 4, 5, 6, 9]) == [*starts, len(content), len(content)]
    assert byte_ranges.line_starts(path, [2, 5]) == [starts[1], starts[4]]
    assert byte_ranges.line_starts(path, []) == []


def test_ids_whose_keys_collide_are_still_told_apart(files, tmp_path, monkeypatch):
    """The index holds 64-bit keys of the ids, not the ids: with a key that collides for most ids, the report, notes
    and verdicts are the same as with the real one, and a repeated id is still found."""
    import grpo_tools.evaluation.score_ranges as score_ranges

    data, predictions = files
    reports = []
    for _ in range(2):
        report, notes = score_files(data, predictions, "exact", workers=1, per_row=tmp_path / "rows.jsonl",
                                    progress=False)  # fmt: skip
        reports.append((report, notes, (tmp_path / "rows.jsonl").read_text()))
        monkeypatch.setattr(score_ranges, "id_key", lambda row_id: len(str(row_id)) % 2)
    assert reports[0] == reports[1]
    assert reports[1][0]["rows"]["unmatched_prediction"] == 1 and reports[1][0]["rows"]["duplicate_prediction"] == 1
    data.write_text(data.read_text() + json.dumps({**DATA[0], "id": "c"}) + "\n")
    with pytest.raises(DataError, match=r"row 7 \(id=c\): id: duplicate of row 3"):
        index_data(data)


def test_cli_prints_tables_and_writes_the_report(files, tmp_path, capsys):
    data, predictions = files
    output = tmp_path / "out" / "report.json"
    code = cli(["score", "--data", str(data), "--predictions", str(predictions), "--output", str(output), "--quiet"])
    captured = capsys.readouterr()
    assert code == 0
    assert json.loads(output.read_text())["accuracy"] == 0.5
    assert "bfcl accuracy" in captured.out and "irrelevance" in captured.out and "wrong_count" in captured.out
    assert "no data row has this id" in captured.err


ALARM = tool("set_alarm", {"hour": {"type": "integer"}, "label": {"type": "string"}}, ["hour"])
QWEN3_CODER = (
    "<function=set_alarm>\n<parameter=hour>\n7\n</parameter>\n<parameter=label>\nwake up\n</parameter>\n</function>"
)


@pytest.mark.parametrize("scorer", list(SCORERS))
def test_cli_casts_qwen3_coder_values_by_the_schema_bare_or_wrapped(tmp_path, scorer, capsys):
    # Qwen3-Coder writes every value as text; `hour` is an integer only once the tool's schema is read, as the rewards
    # read it in training. Unread, "7" against 7 would score 0 (wrong_type).
    answers = [{"name": "set_alarm", "arguments": {"hour": 7, "label": "wake up"}}]
    data = tmp_path / "data.jsonl"
    data.write_text(
        "".join(
            json.dumps({"id": row_id, "messages": MESSAGES, "tools": [ALARM], "answers": answers}) + "\n"
            for row_id in ("bare", "wrapped")
        )
    )
    predictions = tmp_path / "pred.jsonl"
    predictions.write_text(
        json.dumps({"id": "bare", "completion": QWEN3_CODER})
        + "\n"
        + json.dumps({"id": "wrapped", "completion": f"<tool_call>\n{QWEN3_CODER}\n</tool_call>"})
        + "\n"
    )
    output, per_row = tmp_path / "report.json", tmp_path / "rows.jsonl"
    args = ["score", "--data", str(data), "--predictions", str(predictions), "--scorer", scorer, "--quiet"]
    assert cli([*args, "--output", str(output), "--per-row", str(per_row)]) == 0
    capsys.readouterr()
    report = json.loads(output.read_text())
    assert (report["accuracy"], report["mean_reward"], report["errors"]) == (1.0, 1.0, {})
    rows = [json.loads(line) for line in per_row.read_text().splitlines()]
    assert [(row["id"], row["score"]) for row in rows] == [("bare", 1.0), ("wrapped", 1.0)]


def test_scorer_choices_come_from_the_reward_registry():
    assert list(SCORERS) == ["format", "schema", "exact", "partial", "bfcl", "decision"]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"id": "a", "tools": [], "answers": []}\nnot json\n', "data.jsonl: row 2: not valid JSON"),
        ('{"tools": [], "answers": []}\n', "data.jsonl: row 1: id: missing"),
        ('{"id": "a", "answers": []}\n', r"data.jsonl: row 1 \(id=a\): tools: missing"),
        ('{"id": "a", "tools": []}\n', r"data.jsonl: row 1 \(id=a\): answers: missing"),
        (
            '{"id": "a", "tools": [], "answers": [{"arguments": {}}]}\n',
            r"row 1 \(id=a\): answers\[0\] must be an object",
        ),
        ('{"id": "a", "tools": {}, "answers": []}\n', r"row 1 \(id=a\): tools must be a list"),
        (
            '{"id": "a", "tools": [], "answers": [], "possible_answers": {}}\n',
            r"\(id=a\): possible_answers must be a list",
        ),
        ('{"id": "a", "tools": [], "answers": []}\n{"id": "a", "tools": [], "answers": []}\n', "duplicate of row 1"),
        ("\n\n", "no data rows"),
        (
            '{"id": "a", "tools": [], "answers": [], "category": ["simple"]}\n',
            r"\(id=a\): category: expected a string",
        ),
        ('{"id": "a", "tools": [], "answers": [], "category": 5}\n', r"\(id=a\): category: expected a string"),
    ],
)
def test_bad_data_gets_one_clear_message(tmp_path, content, message):
    data = tmp_path / "data.jsonl"
    data.write_text(content)
    with pytest.raises(DataError, match=message):
        index_data(data)


def test_bad_data_rows_are_listed_in_file_order_whatever_the_workers(tmp_path, monkeypatch):
    import grpo_tools.evaluation.scoring as scoring

    monkeypatch.setattr(scoring, "_RANGE_BYTES", 200)
    good = [json.dumps({**DATA[i % len(DATA)], "id": f"r{i}"}) for i in range(30)]
    good[3], good[12], good[25] = "not json", json.dumps({"tools": [], "answers": []}), good[1]  # r1 again
    data = tmp_path / "data.jsonl"
    data.write_text("\n".join(good) + "\n")
    messages = []
    for workers in (1, 2):
        with pytest.raises(DataError) as error:
            index_data(data, workers)
        messages.append(str(error.value))
    assert messages[0] == messages[1]
    assert [line.split(": ", 2)[1] for line in messages[0].splitlines()[:3]] == ["row 4", "row 13", "row 26 (id=r1)"]
    assert "row 26 (id=r1): id: duplicate of row 2" in messages[0]


def test_bad_input_exits_2_without_a_traceback(tmp_path, capsys):
    data = tmp_path / "data.jsonl"
    data.write_text('{"id": "a", "tools": [], "answers": []}\n')
    assert cli(["score", "--data", str(tmp_path / "missing.jsonl"), "--predictions", str(data)]) == 2
    assert "missing.jsonl: no such file" in capsys.readouterr().err
    assert cli(["score", "--data", str(data), "--predictions", str(tmp_path / "nope.jsonl")]) == 2
    assert "nope.jsonl: no such file" in capsys.readouterr().err
    data.write_text('{"id": "a"}\n')
    assert cli(["score", "--data", str(data), "--predictions", str(data)]) == 2
    err = capsys.readouterr().err
    assert "tools: missing" in err and "Traceback" not in err


def test_a_tool_schema_only_the_scorer_reads_is_reported_and_fails_the_run(tmp_path, capsys):
    broken = {
        "type": "function",
        "function": {"name": "f", "parameters": {"type": "object", "properties": {"x": {"type": "colour"}}}},
    }
    data = tmp_path / "data.jsonl"
    data.write_text(
        json.dumps(
            {"id": "a", "messages": MESSAGES, "tools": [broken], "answers": [{"name": "f", "arguments": {"x": 1}}]}
        )
        + "\n"
    )
    predictions = tmp_path / "pred.jsonl"
    predictions.write_text(json.dumps({"id": "a", "completion": "[f(x=1)]"}) + "\n")
    assert cli(["score", "--data", str(data), "--predictions", str(predictions), "--scorer", "schema", "--quiet"]) == 1
    assert "data.jsonl: row 1" in capsys.readouterr().err


def test_scoring_single_turn_rows_never_imports_torch():
    """`grpo-tools score` on single-turn rows needs no model: importing its modules must not bring torch in (2 s of
    CPU and about 200 MB at each start, and in each of its worker processes)."""
    script = (
        "import sys\n"
        "import grpo_tools.evaluation.scoring, grpo_tools.evaluation.score_ranges\n"
        "print(sorted(name for name in ('torch', 'transformers') if name in sys.modules))\n"
    )
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True)
    assert run.stdout.strip() == "[]"


def test_ranges_merged_at_once_give_the_totals_of_one_row_at_a_time(tmp_path, monkeypatch):
    """Without per-row verdicts, a range whose predictions are each for a row not yet seen is added with numpy. The
    report is the same bytes as the one row at a time gives (with `--per-row`): each category's rewards, fractions
    here, summed in file order, and the categories entering the tally in the order they are met."""
    import random

    import grpo_tools.evaluation.scoring as scoring
    from tasks.synthetic import generate_rows

    monkeypatch.setattr(scoring, "_RANGE_BYTES", 4000)
    rng = random.Random(0)
    rows = generate_rows("train", 1500, seed=1)
    data, predictions = tmp_path / "data.jsonl", tmp_path / "predictions.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    lines = []
    for row in rows:
        calls = [{**call, "arguments": {key: value if rng.random() < 0.6 else "wrong" for key, value in
                                        call["arguments"].items()}} for call in row["answers"]]  # fmt: skip
        text = "".join(f"<tool_call>{json.dumps(call)}</tool_call>" for call in calls) or "No tool fits."
        lines.append(json.dumps({"id": row["id"], "completion": text}))
    # Shuffled, but starting with a row of each category in the reverse of the order the data first has them.
    first_met = list(dict.fromkeys(row["category"] for row in rows))
    category = {row["id"]: row["category"] for row in rows}
    rng.shuffle(lines)
    for name in first_met:
        lines.insert(0, lines.pop(next(i for i, line in enumerate(lines) if category[json.loads(line)["id"]] == name)))
    predictions.write_text("\n".join(lines) + "\n")
    merged, met = [], []  # whether each range was merged at once; the order categories entered the tally
    monkeypatch.setattr(scoring, "_merge_at_once", lambda *args, merge=scoring._merge_at_once: merged.append(
        merge(*args)) or merged[-1])  # fmt: skip
    monkeypatch.setattr(scoring, "_report", lambda *args, report=scoring._report: met.append(list(
        args[3].by_category)) or report(*args))  # fmt: skip
    at_once, _ = score_files(data, predictions, "partial", workers=1, progress=False)
    assert merged and all(merged)
    one_by_one, _ = score_files(data, predictions, "partial", workers=1, per_row=tmp_path / "rows.jsonl",
                                progress=False)  # fmt: skip
    assert json.dumps(at_once) == json.dumps(one_by_one)
    assert met[0] == met[1] == first_met[::-1]  # the mean reward sums the categories in that order
    assert len({round(total["mean_reward"], 3) for total in at_once["by_category"].values()}) > 2


def test_any_number_of_categories_is_scored(tmp_path):
    """A category is any string: 300 of them (past what one byte a row could number) are each reported."""
    data, predictions = tmp_path / "data.jsonl", tmp_path / "predictions.jsonl"
    rows = [{**DATA[5], "id": f"r{i}", "category": f"kind-{i}"} for i in range(300)]
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    right = hermes({"name": "set_timer", "arguments": {"minutes": 10}})
    predictions.write_text("".join(json.dumps({"id": row["id"], "completion": right}) + "\n" for row in rows))
    for per_row in (None, tmp_path / "rows.jsonl"):
        report, _ = score_files(data, predictions, "bfcl", workers=1, per_row=per_row, progress=False)
        assert len(report["by_category"]) == 300 and report["by_category"]["kind-299"]["accuracy"] == 1.0
