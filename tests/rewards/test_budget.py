"""`grpo_tools.rewards.budget`: limits are checked without formatting what they measure, each limit breaks where it
says, the first hit refuses every later call and is counted once per completion by kind."""

from __future__ import annotations

import pytest

from grpo_tools.rewards.budget import Budget, Meter, take_hit_counts


DEEP: list = [1]
for _ in range(40):
    DEEP = [DEEP]


@pytest.mark.parametrize(
    ("arguments", "kind"),
    [
        ({"a": 16**3572}, "integer_digits"),  # would raise if written in decimal
        ({"a": 10**100}, "integer_digits"),
        ({"a": "1e" + "9" * 4300}, "integer_digits"),
        ({"a": "x" * 100_001}, "argument_chars"),
        ({"a": DEEP}, "argument_depth"),
        ({"a": 10**100 - 1, "b": "x" * 99_000, "c": "1" * 100, "d": [[1]]}, None),
    ],
)
def test_argument_limits(arguments, kind):
    hit = Budget().argument_hit(arguments)
    assert (hit.kind if hit else None) == kind


def test_the_first_hit_refuses_every_later_call_and_is_counted_once():
    take_hit_counts()
    meter = Meter(Budget(calls_per_step=2, calls_per_turn=3))
    assert meter.admit({}) is None and meter.admit({}) is None
    assert meter.admit({}).kind == "calls_per_step"
    meter.start_step()
    assert meter.admit({}).kind == "calls_per_step"  # spent: a new step does not lift it
    assert take_hit_counts() == {"calls_per_step": 1}
    meter = Meter(Budget(result_chars=10))
    assert meter.admit({}) is None and meter.spend("x" * 11).kind == "result_chars"
    assert take_hit_counts() == {"result_chars": 1}


def test_a_budget_refuses_limits_that_cannot_hold():
    with pytest.raises(ValueError, match="calls_per_step"):
        Budget(calls_per_step=0)
    with pytest.raises(ValueError, match="integer_digits"):
        Budget(integer_digits=400)  # an integer a float parameter converts must fit a float


def test_time_spent_in_calls_is_bounded_per_completion():
    from grpo_tools.tools.bfcl import BFCLSession

    take_hit_counts()
    session = BFCLSession(["MathAPI"], budget=Budget(seconds=1e-9))  # any call takes longer than a nanosecond
    first, second = session.call_text("add(a=1, b=2)"), session.call_text("add(a=1, b=2)")
    assert first.status == "ok" and session.exceeded.kind == "seconds"  # the call ran; the completion is spent
    assert second.status == "budget" and take_hit_counts() == {"seconds": 1}
