"""`bfcl_verdict` against bfcl-eval's own multi-turn checker, on every row of the four multi-turn categories: the
ground truth and its perturbations (`benchmarks/bfcl_multi_turn_reference.py`: each call its own step, a call
dropped, an argument changed, calls reordered, an extra read-only call, a turn cut short, a turn left empty, the
last turn missing, a turn's calls made a turn early, which calls a `miss_func` function before its turn, an integer
written as a float, a number as a string, keyword arguments written positionally) must get BFCL's verdict and, when
it fails, BFCL's error type. BFCL's checker runs with a model name of its own per check, its instances
removed after each; ours runs from a fresh session every time, so a verdict never depends on the one before."""

from __future__ import annotations

from collections import Counter

import pytest


pytest.importorskip("bfcl_eval", reason="bfcl-eval is not installed (`make install` installs it)")

from benchmarks import bfcl_multi_turn_reference as reference
from grpo_tools.tools.bfcl_verdict import bfcl_verdict


@pytest.mark.parametrize("category", reference.MULTI_TURN_CATEGORIES)
def test_bfcl_verdict_equals_bfcls_checker_on_every_row(category):
    rows = reference.rows(category)
    assert len(rows) == 200
    disagreements, verdicts, kinds = [], Counter(), Counter()
    for row in rows:
        for label, trajectory in reference.trajectories(row):
            theirs, their_error = reference.bfcl_checker_verdict(row, trajectory)
            ours = bfcl_verdict(row.row["env"], row.ground_truth, trajectory)
            verdicts[(label, theirs)] += 1
            kinds[label] += 1
            # The verdict, and for a failed row the reason BFCL gives (its error type).
            if ours.valid != theirs or ours.error_type != their_error:
                disagreements.append(f"{row.row['id']} {label}: BFCL {theirs} ({their_error}), ours {ours}")
    assert not disagreements, f"{len(disagreements)} of {sum(kinds.values())} differ:\n" + "\n".join(
        disagreements[:20]
    )
    # Every row was checked with its ground truth, which BFCL accepts, and with perturbations it rejects.
    assert verdicts[("ground_truth", True)] == len(rows)
    assert kinds["call_dropped"] == verdicts[("call_dropped", False)] == len(rows)
    assert set(kinds) <= set(reference.PERTURBATIONS) and len(kinds) >= len(reference.PERTURBATIONS) - 1
    if category in ("multi_turn_miss_func", "multi_turn_miss_param"):  # rows with a turn BFCL leaves unchecked
        assert kinds["calls_a_turn_early"] > 0


def test_a_verdict_does_not_depend_on_the_checks_before_it():
    """BFCL's checker keeps a row's instances under the model's name: a wrong trajectory checked first fails the right
    one checked after it under the same name. Ours starts each verdict from a fresh session."""
    row = reference.rows("multi_turn_base")[0]
    right = [[list(turn)] if turn else [] for turn in row.ground_truth]
    wrong = [[[*turn, "mkdir(dir_name='extra')"]] if turn else [] for turn in row.ground_truth]
    assert bfcl_verdict(row.row["env"], row.ground_truth, right).valid
    assert not bfcl_verdict(row.row["env"], row.ground_truth, wrong).valid
    assert bfcl_verdict(row.row["env"], row.ground_truth, right).valid


@pytest.mark.parametrize(
    ("trajectory", "error_type"),
    [
        ("fewer turns", "multi_turn:force_terminated"),
        ("an empty turn", "multi_turn:empty_turn_model_response"),
        ("a changed state", "multi_turn:instance_state_mismatch"),
        ("not a list", "multi_turn:inference_error"),
    ],
)
def test_verdicts_name_bfcls_error_types(trajectory, error_type):
    row = reference.rows("multi_turn_base")[0]
    truth = row.ground_truth
    whole = [[list(turn)] if turn else [] for turn in truth]
    made = {
        "fewer turns": whole[:-1],
        "an empty turn": [[], *whole[1:]],
        "a changed state": [[[*truth[0], "touch(file_name='new.txt')"]], *whole[1:]],
        "not a list": "cd(folder='document')",
    }[trajectory]
    assert bfcl_verdict(row.row["env"], truth, made).error_type == error_type


def test_docstring_examples():
    import doctest

    import grpo_tools.tools.bfcl_verdict

    result = doctest.testmod(grpo_tools.tools.bfcl_verdict, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0 and result.attempted > 0


@pytest.mark.parametrize(
    ("row_id", "turn", "call"),
    [
        ("multi_turn_base_100", 1, "fund_account(amount=1000000001)"),
        ("multi_turn_base_0", 3, "echo(content='" + "x" * 20_001 + "', file_name='previous_report.pdf')"),
    ],
)
def test_a_state_changing_call_beyond_an_old_size_limit_fails_as_in_bfcl(row_id, turn, call):
    """A call that one of our old size limits skipped while BFCL ran it: the row must fail, as BFCL's checker fails it."""
    row = next(r for r in reference.rows("multi_turn_base") if r.row["id"] == row_id)
    trajectory = [[list(calls)] if calls else [] for calls in row.ground_truth]
    trajectory[turn] = [[*row.ground_truth[turn], call]]
    theirs, their_error = reference.bfcl_checker_verdict(row, trajectory)
    ours = bfcl_verdict(row.row["env"], row.ground_truth, trajectory)
    assert (theirs, their_error) == (False, "multi_turn:instance_state_mismatch")
    assert (ours.valid, ours.error_type) == (theirs, their_error)


@pytest.mark.parametrize("category", ["multi_turn_base", "multi_turn_long_context"])
def test_trajectories_past_the_budget_fail_as_in_bfcl(category):
    """State-changing calls past the default budget (`reference.PAST_LIMITS`): BFCL's checker runs them and fails the
    row on the changed state; our verdict refuses them and fails the row on the budget, never passes it."""
    checked, disagreements = Counter(), []
    for row in reference.rows(category):
        for label, trajectory in reference.past_limit_trajectories(row):
            theirs, their_error = reference.bfcl_checker_verdict(row, trajectory)
            ours = bfcl_verdict(row.row["env"], row.ground_truth, trajectory)
            checked[label] += 1
            if ours.valid != theirs or (ours.error_type, ours.message.split(":")[0]) != (
                "multi_turn:budget_exceeded",
                label,
            ):
                disagreements.append(f"{row.row['id']} {label}: BFCL {theirs} ({their_error}), ours {ours}")
    assert not disagreements, "\n".join(disagreements[:20])
    assert set(checked) == set(reference.PAST_LIMITS) and min(checked.values()) >= 10
