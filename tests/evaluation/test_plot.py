"""Tests for `grpo_tools.evaluation.plot` and `grpo-tools plot`: the training-curves figure drawn from a synthetic
`trainer_state.json` (panel titles, the plotted values equal the logged ones, the KL target from `run_info.json`),
a valid PNG written, the fallback to the newest checkpoint by step number for an unfinished run, "not logged" panels
for missing metrics, which reward's error kinds are drawn, one clear message (exit 2) for each kind of bad input, and
the accuracy-by-category bars `grpo-tools eval` draws."""

import json

import numpy as np
import pytest

from grpo_tools.cli import main as cli
from grpo_tools.evaluation.plot import (
    HistoryError,
    build_accuracy_figure,
    build_run_figure,
    load_history,
    main,
    plot_accuracy_by_category,
    plot_run,
)


PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
TITLES = [
    "reward", "KL vs target", "KL coefficient", "completion length", "tool-call errors (tool_exact)",
    "decision to call (samples)",
]  # fmt: skip
STEPS = 30


def make_history(steps=STEPS, every=1):
    """A GRPO history shaped like trl's, with values that are simple functions of the step, plus the final summary."""
    history = []
    for step in range(every, steps + 1, every):
        history.append(
            {
                "step": step,
                "epoch": step / steps,
                "loss": 0.01 * step,
                "reward": 0.02 * step,
                "rewards/tool_exact_reward/mean": 0.01 * step,
                "rewards/tool_format_reward/mean": 0.5,
                "kl": 0.001 * step,
                "kl_coef": 0.04 * 1.5 ** (step % 4),
                "completions/mean_length": 40.0 - step / 2,
                "completions/min_length": 10.0,
                "completions/max_length": 80.0,
                "tool_exact/parse_error": 0.5 - 0.01 * step,
                "tool_exact/wrong_value": 0.1,
                "tool_exact/wrong_type": 0.0,  # zero throughout: not drawn
                "tool_format/parse_error": 0.5 - 0.01 * step,
                "decision/call_rows/call": 0.3 + 0.02 * step,
                "decision/call_rows/right": 0.01 * step,
                "decision/no_call_rows/call": 0.6 - 0.02 * step,
                "decision/no_call_rows/right": 0.4 + 0.02 * step,
            }
        )
    history.append({"step": steps, "train_runtime": 12.5, "train_loss": 0.1, "epoch": 1.0})  # the summary entry
    return history


def write_state(folder, history):
    folder.mkdir(parents=True, exist_ok=True)
    state = {"global_step": max(entry["step"] for entry in history), "log_history": history}
    (folder / "trainer_state.json").write_text(json.dumps(state))


@pytest.fixture
def run_dir(tmp_path):
    folder = tmp_path / "run"
    write_state(folder, make_history())
    (folder / "run_info.json").write_text(json.dumps({"kl": {"adaptive_kl": True, "kl_target": 0.02}}))
    return folder


def lines_by_label(ax):
    return {line.get_label(): line for line in ax.get_lines()}


def test_plot_run_writes_a_readable_png(run_dir):
    from matplotlib.image import imread

    path = plot_run(run_dir)
    assert path == run_dir / "training_curves.png"
    assert path.read_bytes()[:8] == PNG_SIGNATURE
    pixels = imread(path)
    assert pixels.ndim == 3 and pixels.shape[0] > 800 and pixels.shape[1] > 1000
    assert np.ptp(pixels[..., :3]) > 0.5  # drawn on, not a blank canvas


def test_figure_panels_draw_the_logged_values():
    history = make_history()
    steps = list(range(1, STEPS + 1))
    figure = build_run_figure(history, kl_target=0.02)
    reward, kl, kl_coef, length, errors, decision = figure.axes
    assert [ax.get_title() for ax in figure.axes] == TITLES

    lines = lines_by_label(reward)
    assert set(lines) == {"reward (total)", "tool_exact_reward", "tool_format_reward"}
    assert list(lines["reward (total)"].get_xdata()) == steps  # the summary entry has no reward: skipped
    np.testing.assert_allclose(lines["reward (total)"].get_ydata(), [0.02 * s for s in steps])
    np.testing.assert_allclose(lines["tool_exact_reward"].get_ydata(), [0.01 * s for s in steps])

    lines = lines_by_label(kl)
    np.testing.assert_allclose(lines["KL"].get_ydata(), [0.001 * s for s in steps])
    np.testing.assert_allclose(lines["target 0.02"].get_ydata(), [0.02, 0.02])

    assert kl_coef.get_yscale() == "log"
    np.testing.assert_allclose(kl_coef.get_lines()[0].get_ydata(), [0.04 * 1.5 ** (s % 4) for s in steps])

    lines = lines_by_label(length)
    np.testing.assert_allclose(lines["mean"].get_ydata(), [40.0 - s / 2 for s in steps])
    np.testing.assert_allclose(lines["min"].get_ydata(), 10.0)
    np.testing.assert_allclose(lines["max"].get_ydata(), 80.0)

    lines = lines_by_label(errors)
    assert set(lines) == {"parse error", "wrong value"}  # wrong_type is zero throughout
    np.testing.assert_allclose(lines["parse error"].get_ydata(), [0.5 - 0.01 * s for s in steps])

    lines = lines_by_label(decision)
    assert set(lines) == {"call rows: call", "call rows: right", "no-call rows: call"}
    np.testing.assert_allclose(lines["call rows: call"].get_ydata(), [0.3 + 0.02 * s for s in steps])
    np.testing.assert_allclose(lines["call rows: right"].get_ydata(), [0.01 * s for s in steps])
    np.testing.assert_allclose(lines["no-call rows: call"].get_ydata(), [0.6 - 0.02 * s for s in steps])


def test_missing_metrics_leave_not_logged_panels():
    history = [{"step": step, "loss": 0.1, "reward": 0.5} for step in (1, 2, 3)]
    figure = build_run_figure(history)
    reward, kl, kl_coef, length, errors, decision = figure.axes
    assert reward.get_lines()
    for ax, message in [
        (kl, "kl not logged"),
        (kl_coef, "kl_coef not logged"),
        (length, "completions/mean_length not logged"),
        (errors, "tool-call error kinds not logged"),
        (decision, "decision/ shares not logged"),
    ]:
        assert not ax.get_lines()
        assert [text.get_text() for text in ax.texts] == [message]


def test_kl_target_line_only_when_known():
    kl = build_run_figure(make_history(), kl_target=None).axes[1]
    assert list(lines_by_label(kl)) == ["KL"]


def test_zero_kl_coef_stays_on_a_linear_axis():
    history = [{"step": step, "kl": 0.01, "kl_coef": 0.0} for step in (1, 2)]
    assert build_run_figure(history).axes[2].get_yscale() == "linear"


def test_error_kinds_of_the_first_reward_without_tool_exact():
    history = [
        {"step": 1, "reward": 0.1, "tool_format/parse_error": 0.0, "tool_partial/wrong_name": 0.3},
        {"step": 2, "reward": 0.2, "tool_format/parse_error": 0.4, "tool_partial/wrong_name": 0.2},
    ]
    errors = build_run_figure(history).axes[4]
    assert errors.get_title() == "tool-call errors (tool_format)"
    assert list(lines_by_label(errors)) == ["parse error"]


def test_string_values_are_read_as_numbers():
    history = [{"step": 1, "reward": "0.25"}, {"step": 2, "reward": "0.5"}]
    np.testing.assert_allclose(build_run_figure(history).axes[0].get_lines()[0].get_ydata(), [0.25, 0.5])


def test_unfinished_run_falls_back_to_the_newest_checkpoint_by_step(tmp_path, caplog):
    run = tmp_path / "killed"
    write_state(run / "checkpoint-3", make_history(steps=3))
    write_state(run / "checkpoint-20", make_history(steps=20))
    (run / "checkpoint-20" / "kl_controller.json").write_text(json.dumps({"coef": 0.1, "target": 0.07}))
    (run / "checkpoint-99").mkdir()  # no trainer_state.json yet (killed while saving): not a candidate

    with caplog.at_level("INFO", logger="grpo_tools.evaluation"):
        history = load_history(run)
    assert max(entry["step"] for entry in history) == 20
    assert "checkpoint-20" in caplog.text

    figure_path = plot_run(run, tmp_path / "out" / "curves.png")
    assert figure_path.read_bytes()[:8] == PNG_SIGNATURE


def test_checkpoint_kl_target_is_drawn(tmp_path, monkeypatch):
    import grpo_tools.evaluation.plot as plot

    run = tmp_path / "killed"
    write_state(run / "checkpoint-4", make_history(steps=4))
    (run / "checkpoint-4" / "kl_controller.json").write_text(json.dumps({"coef": 0.1, "target": 0.07}))
    drawn = {}

    def keep(figure, path):
        drawn["figure"] = figure
        return path

    monkeypatch.setattr(plot, "_save", keep)  # the figure, not the pixels, says which target was drawn
    plot_run(run)
    assert "target 0.07" in lines_by_label(drawn["figure"].axes[1])


def test_main_writes_the_png_where_asked(run_dir, tmp_path, capsys):
    output = tmp_path / "pictures" / "curves.png"
    assert cli(["plot", str(run_dir), "--output", str(output)]) == 0
    assert output.read_bytes()[:8] == PNG_SIGNATURE
    assert f"wrote {output}" in capsys.readouterr().out


@pytest.mark.parametrize(
    "case, expected",
    [
        ("missing", "no such run folder"),
        ("empty", "no trainer_state.json here nor in any checkpoint-*/ folder"),
        ("no-metrics", "the logged history has no training metrics"),
        ("not-json", "cannot read it as JSON"),
        ("not-a-state", "no `log_history` list"),
    ],
)
def test_bad_input_gets_one_clear_message(tmp_path, capsys, case, expected):
    run = tmp_path / case
    state = run / "trainer_state.json"
    if case != "missing":
        run.mkdir()
    if case == "no-metrics":
        write_state(run, [{"step": 0, "train_runtime": 1.0, "train_loss": 0.0}])
    elif case == "not-json":
        state.write_text("{truncated")
    elif case == "not-a-state":
        state.write_text(json.dumps({"step": 3}))

    assert main([str(run)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("grpo-tools plot: ") and expected in err
    assert str(run) in err
    assert "Traceback" not in err
    with pytest.raises(HistoryError):
        load_history(run)


def test_unwritable_output_gets_one_clear_message(run_dir, capsys):
    blocker = run_dir / "a-file"
    blocker.write_text("")
    assert main([str(run_dir), "--output", str(blocker / "curves.png")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("grpo-tools plot: cannot write") and str(blocker) in err


def report(scorer, accuracy, by_category):
    rows = sum(stats[0] for stats in by_category.values())
    return {
        "scorer": scorer,
        "rows": {"data": rows},
        "accuracy": accuracy,
        "by_category": {name: {"rows": n, "correct": round(n * acc), "accuracy": acc} for name, (n, acc) in by_category.items()},
    }  # fmt: skip


def test_accuracy_bars_equal_the_reports(tmp_path):
    before = report("bfcl", 0.25, {"simple": (4, 0.5), "irrelevance": (4, 0.0)})
    after = report("bfcl", 0.6, {"simple": (4, 1.0), "irrelevance": (4, 0.25), "parallel": (2, 0.5)})
    figure = build_accuracy_figure({"before": before, "after": after})
    ax = figure.axes[0]
    heights = [bar.get_height() for bar in ax.patches]
    # before: simple, irrelevance, all (it never saw parallel: no bar); after: simple, irrelevance, parallel, all
    assert heights == pytest.approx([0.5, 0.0, 0.25, 1.0, 0.25, 0.5, 0.6])
    assert [text.get_text() for text in ax.texts] == ["0.50", "0.00", "0.25", "1.00", "0.25", "0.50", "0.60"]
    assert [label.get_text() for label in ax.get_xticklabels()] == [
        "simple\n(n=4)",
        "irrelevance\n(n=4)",
        "parallel\n(n=2)",
        "all\n(n=8)",
    ]
    assert [text.get_text() for text in ax.get_legend().get_texts()] == ["before", "after"]
    assert "bfcl" in figure.get_suptitle()
    assert ax.get_ylim()[0] == 0 and ax.get_yticks()[-1] == 1.0

    path = plot_accuracy_by_category({"adapter": after}, tmp_path / "eval" / "accuracy.png")
    assert path.read_bytes()[:8] == PNG_SIGNATURE


@pytest.mark.parametrize(
    "reports",
    [
        {},
        {"after": {"scorer": "bfcl", "accuracy": 0.5}},
        {"after": {"scorer": "bfcl", "accuracy": 0.5, "by_category": {"simple": {"rows": 3}}}},
    ],
)
def test_accuracy_plot_rejects_non_reports(tmp_path, reports):
    with pytest.raises(ValueError, match="report"):
        plot_accuracy_by_category(reports, tmp_path / "accuracy.png")


def test_long_runs_draw_a_rolling_mean_over_the_logged_values():
    history = make_history(steps=200)  # 200 logged steps: a rolling mean of 200 // 40 = 5
    figure = build_run_figure(history, kl_target=0.02)
    assert "mean of the last 5 logged steps" in figure.get_suptitle()
    raw, smooth, _target = figure.axes[1].get_lines()
    kl = [0.001 * s for s in range(1, 201)]
    np.testing.assert_allclose(raw.get_ydata(), kl)  # the logged values stay drawn, faint
    np.testing.assert_allclose(smooth.get_ydata()[:2], [0.001, 0.0015])  # fewer values at the start
    np.testing.assert_allclose(smooth.get_ydata()[-1], np.mean(kl[-5:]))  # trailing: never ahead of its step
    assert [text.get_text() for text in figure.axes[1].get_legend().get_texts()] == ["KL", "target 0.02"]
    np.testing.assert_allclose(
        figure.axes[2].get_lines()[0].get_ydata(), [0.04 * 1.5 ** (s % 4) for s in range(1, 201)]
    )
