"""Tests for `grpo_tools.training.kl.AdaptiveKLController`: both rules against hand-computed sequences, the clamp, the
direction and size of every move (property tests), validation, and the state saved with checkpoints."""

import logging
import math
from dataclasses import asdict

import pytest
from hypothesis import given
from hypothesis import strategies as st

from grpo_tools.training.kl import AdaptiveKLController


def run(controller, kls, num_completions=16):
    return [controller.update(kl, num_completions) for kl in kls]


def test_band_rule_hand_computed_sequence():
    controller = AdaptiveKLController(coef=0.1, target=0.1, rule="band")
    # 0.2 > 0.15 -> x1.5; 0.12 inside [0.05, 0.15] -> same; 0.151 -> x1.5; 0.04 < 0.05 -> /1.5; 0.05 edge -> same
    assert run(controller, [0.2, 0.12, 0.151, 0.04, 0.05, 0.15]) == pytest.approx(
        [0.15, 0.15, 0.225, 0.15, 0.15, 0.15]
    )


def test_proportional_rule_hand_computed_sequence():
    controller = AdaptiveKLController(coef=0.1, target=0.1, rule="proportional", horizon=100)
    # e = clip(KL/target - 1, -0.2, 0.2); coef *= 1 + e * n / horizon with n = 10
    # KL 0.11 -> e 0.1 -> x1.01; KL 1.0 -> e clipped 0.2 -> x1.02; KL 0.0 -> e -0.2 -> x0.98; KL 0.1 -> e 0 -> x1
    expected = [0.1 * 1.01, 0.1 * 1.01 * 1.02, 0.1 * 1.01 * 1.02 * 0.98, 0.1 * 1.01 * 1.02 * 0.98]
    assert run(controller, [0.11, 1.0, 0.0, 0.1], num_completions=10) == pytest.approx(expected)


@pytest.mark.parametrize("rule", ["band", "proportional"])
def test_coefficient_is_clamped(rule):
    controller = AdaptiveKLController(coef=0.5, target=0.01, rule=rule, min_coef=0.1, max_coef=1.0, horizon=1)
    assert run(controller, [10.0] * 50)[-1] == 1.0
    assert run(controller, [0.0] * 50)[-1] == 0.1


@given(
    rule=st.sampled_from(["band", "proportional"]),
    coef=st.floats(1e-3, 1.0),
    target=st.floats(1e-3, 1.0),
    kl=st.floats(0.0, 100.0),
    num_completions=st.integers(1, 512),
)
def test_every_move_has_the_right_direction_and_bounds(rule, coef, target, kl, num_completions):
    controller = AdaptiveKLController(coef=coef, target=target, rule=rule, min_coef=1e-4, max_coef=10.0, horizon=1000)
    new = controller.update(kl, num_completions)
    assert 1e-4 <= new <= 10.0
    if kl > target * (1.5 if rule == "band" else 1.0):
        assert new >= coef  # too much KL never lowers the penalty
    if kl < target * (0.5 if rule == "band" else 1.0):
        assert new <= coef
    up, down = (
        (1.5, 1 / 1.5) if rule == "band" else (1 + 0.2 * num_completions / 1000, 1 - 0.2 * num_completions / 1000)
    )
    assert coef * down * (1 - 1e-12) <= new <= coef * up * (1 + 1e-12)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"rule": "pid"}, "kl_controller must be one of band, proportional, got 'pid'"),
        ({"target": 0.0}, "kl_target must be positive, got 0.0"),
        ({"min_coef": 0.0}, "need 0 < kl_min <= kl_max"),
        ({"coef": 20.0}, "outside \\[kl_min, kl_max\\]"),
        ({"horizon": 0}, "kl_horizon must be at least 1"),
    ],
)
def test_invalid_settings_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        AdaptiveKLController(**{"coef": 0.1, "target": 0.05, **kwargs})


def test_non_finite_kl_is_an_error():
    with pytest.raises(ValueError, match="not finite"):
        AdaptiveKLController(coef=0.1, target=0.05).update(math.nan, 8)


def test_state_round_trips():
    controller = AdaptiveKLController(coef=0.1, target=0.05, rule="proportional", horizon=50)
    run(controller, [0.3, 0.2])
    restored = AdaptiveKLController(coef=0.1, target=0.05, rule="proportional", horizon=50)
    restored.load_state_dict(controller.state_dict())
    assert restored == controller
    assert restored.update(0.3, 16) == controller.update(0.3, 16)


def test_resuming_keeps_the_settings_given_now_and_the_coefficient_in_force(caplog):
    """A resumed run is told its target, rule, bounds and horizon by the command that resumes it: the checkpoint gives
    only the coefficient in force, clamped into the new bounds, and a log line says what changed."""
    saved = AdaptiveKLController(coef=0.5, target=0.05, rule="band", min_coef=1e-4, max_coef=10.0, horizon=10_000)
    now = AdaptiveKLController(coef=0.04, target=0.1, rule="proportional", min_coef=1e-3, max_coef=0.2, horizon=500)
    with caplog.at_level(logging.INFO, logger="grpo_tools.training.kl"):
        now.load_state_dict(saved.state_dict())
    assert asdict(now) == {
        "coef": 0.2,  # 0.5 in force at the checkpoint, clamped into [kl_min, kl_max] given now
        "target": 0.1,
        "rule": "proportional",
        "min_coef": 1e-3,
        "max_coef": 0.2,
        "horizon": 500,
    }
    for line in ("kl_target 0.1 (the checkpoint's 0.05)", "kl_controller proportional (the checkpoint's band)"):
        assert line in caplog.text
    assert "kl_max 0.2 (the checkpoint's 10.0)" in caplog.text and "clamped to 0.2" in caplog.text

    caplog.clear()
    same = AdaptiveKLController(coef=0.04, target=0.05)
    with caplog.at_level(logging.INFO, logger="grpo_tools.training.kl"):
        same.load_state_dict(saved.state_dict())
    assert same.coef == 0.5 and caplog.text == ""
