"""Tests for `grpo_tools.evaluation.usable`, the measure a user reads (issue 54): calls (the mean of the call
categories' accuracy), irrelevance, and usable (their mean), each with its 95% interval, checked against a naive
reference; a model that never calls scores exactly 50; the published small models' usable figures; and the table
`leaderboard table --base --summary` prints and writes for the base model, the warm start and after GRPO."""

import json
import math
import statistics

import pytest

from grpo_tools.evaluation.leaderboard import PUBLISHED, bfcl_summary, main
from grpo_tools.evaluation.usable import change_measures, model_measures, published_measures


Z = statistics.NormalDist().inv_cdf(0.975)


def verdicts(counts: dict[str, tuple[int, int]]) -> list[dict]:
    """`score --per-row` lines: per BFCL category, (correct, wrong) rows."""
    return [
        {"id": f"{category}_{index}", "correct": index < correct}
        for category, (correct, wrong) in counts.items()
        for index in range(correct + wrong)
    ]


def reference_interval(parts: list[tuple[float, int, int]]) -> tuple[float, float, float]:
    """Naively: the weighted sum of accuracies and its 95% interval, each category's variance from its counts with
    z^2/2 right and z^2/2 wrong rows added (Agresti-Coull), categories independent; (weight, correct, rows)."""
    value = sum(weight * correct / rows for weight, correct, rows in parts)
    variance = 0.0
    for weight, correct, rows in parts:
        adjusted = (correct + Z**2 / 2) / (rows + Z**2)
        variance += weight**2 * adjusted * (1 - adjusted) / (rows + Z**2)
    error = math.sqrt(variance)
    return value, max(0.0, value - Z * error), min(1.0, value + Z * error)


def test_known_rows_give_known_calls_irrelevance_usable_and_intervals():
    counts = {"simple_python": (8, 2), "multiple": (5, 5), "irrelevance": (3, 1)}
    measures = model_measures(verdicts(counts))
    assert measures["calls"][0] == pytest.approx(0.65)  # (0.8 + 0.5) / 2
    assert measures["irrelevance"][0] == pytest.approx(0.75)
    assert measures["usable"][0] == pytest.approx(0.70)  # (0.65 + 0.75) / 2
    expected = {
        "calls": [(0.5, 8, 10), (0.5, 5, 10)],
        "irrelevance": [(1.0, 3, 4)],
        "usable": [(0.25, 8, 10), (0.25, 5, 10), (0.5, 3, 4)],
    }
    for name, parts in expected.items():
        assert measures[name] == pytest.approx(reference_interval(parts), abs=1e-4), name


def test_a_model_that_never_calls_scores_exactly_50():
    counts = {"simple_python": (0, 80), "multiple": (0, 80), "irrelevance": (80, 0)}
    measures = model_measures(verdicts(counts))
    assert measures["calls"][0] == 0.0 and measures["irrelevance"][0] == 1.0
    assert measures["usable"][0] == 0.5
    low, high = measures["usable"][1:]
    assert low < 0.5 < high  # 240 rows do not pin the rates down exactly, even at 0 and 100%
    assert measures["calls"][1] == 0.0 and measures["irrelevance"][2] == 1.0  # clipped to what can be


def test_a_change_has_its_interval_from_the_rows_paired_by_id():
    """Per category, each row's change (1, 0 or -1), weighted as the measure weighs the category; the categories'
    errors add as independent ones."""
    before = verdicts({"simple_python": (1, 3), "multiple": (2, 2), "irrelevance": (2, 2)})
    later = {"simple_python_1": True, "multiple_0": False, "irrelevance_3": True, "irrelevance_2": True}
    after = [{**line, "correct": later.get(line["id"], line["correct"])} for line in before]
    changes = change_measures(before, after)
    per_row = {"simple_python": [0, 1, 0, 0], "multiple": [-1, 0, 0, 0], "irrelevance": [0, 0, 1, 1]}

    def reference(weights: dict[str, float]) -> list[float]:
        mean = sum(weight * sum(per_row[name]) / 4 for name, weight in weights.items())
        error = math.sqrt(sum(weight**2 * statistics.variance(per_row[name]) / 4 for name, weight in weights.items()))
        return [mean - Z * error, mean + Z * error]

    assert changes["calls"] == pytest.approx(reference({"simple_python": 0.5, "multiple": 0.5}), abs=1e-4)
    assert changes["irrelevance"] == pytest.approx(reference({"irrelevance": 1.0}), abs=1e-4)
    usable = reference({"simple_python": 0.25, "multiple": 0.25, "irrelevance": 0.5})
    assert changes["usable"] == pytest.approx(usable, abs=1e-4)


def test_published_usable_figures_are_the_mean_of_calls_and_irrelevance():
    """Issue 54's figures (BFCL v4, 2026-04-12: 49.4, 67.0, 76.2, 77.9, rounded from these), from the published
    simple, multiple and irrelevance columns."""
    published = published_measures(PUBLISHED)
    assert {model: figures["usable"] for model, figures in published.items()} == {
        "Llama-3.2-1B-Instruct (FC)": pytest.approx(49.425),
        "Granite-4.0-350m": pytest.approx(66.95),
        "Hammer2.1-0.5b": pytest.approx(76.25),
        "Qwen3-0.6B": pytest.approx(77.95),
    }
    assert published["Granite-4.0-350m"]["irrelevance"] == 60.8
    assert published["Qwen3-0.6B"]["calls"] == pytest.approx(75.1)


def test_summary_and_table_hold_base_model_warm_start_and_after_grpo(tmp_path, capsys):
    base = verdicts({"simple_python": (0, 4), "multiple": (0, 4), "irrelevance": (4, 0)})
    before = verdicts({"simple_python": (2, 2), "multiple": (1, 3), "irrelevance": (1, 3)})
    after = verdicts({"simple_python": (3, 1), "multiple": (2, 2), "irrelevance": (3, 1)})
    paths = {}
    for label, lines in (("base", base), ("before", before), ("after", after)):
        paths[label] = tmp_path / f"{label}.jsonl"
        paths[label].write_text("".join(json.dumps(line) + "\n" for line in lines))
    summary_path = tmp_path / "bfcl_summary.json"
    argv = ["table", str(paths["before"]), str(paths["after"]), "--base", str(paths["base"])]
    assert main([*argv, "--summary", str(summary_path)]) == 0
    summary = json.loads(summary_path.read_text())
    assert summary == json.loads(json.dumps(bfcl_summary(before, after, base=base)))
    models = summary["usable"]["models"]
    assert list(models) == ["base model", "warm start", "after GRPO"]
    assert models["base model"]["usable"][0] == 0.5
    assert models["warm start"]["usable"][0] == pytest.approx((0.375 + 0.25) / 2)
    assert models["after GRPO"]["usable"][0] == pytest.approx((0.625 + 0.75) / 2)
    assert set(summary["usable"]["change_95"]) == {"calls", "irrelevance", "usable"}
    assert summary["usable"]["published"]["models"]["Granite-4.0-350m"]["usable"] == pytest.approx(66.95)
    assert "2026-04-12" in summary["usable"]["published"]["source"]
    out = capsys.readouterr().out
    lines = {line.split("  ")[0].strip(): line for line in out.splitlines()}
    for label, figures in models.items():  # each figure in %, with its interval
        for value, low, high in figures.values():
            assert f"{100 * value:.1f} [{100 * low:.1f}, {100 * high:.1f}]" in lines[label]
    assert lines["base model"].split()[2:4] == ["0.0", "[0.0,"]
    assert "approximate" in out and "Java and JavaScript" in out
    for model in PUBLISHED:
        assert model in lines


def test_without_a_base_run_the_summary_has_the_two_trained_models():
    before = verdicts({"simple_python": (1, 1), "multiple": (1, 1), "irrelevance": (1, 1)})
    summary = bfcl_summary(before, before)
    assert list(summary["usable"]["models"]) == ["warm start", "after GRPO"]
    assert summary["usable"]["change_95"]["usable"] == [0.0, 0.0]
