"""`gold_baseline`: advantages measured against a group's samples rather than the whole group with its gold turn."""

import pytest
import torch

from grpo_tools.training.advantages import samples_baseline_advantages
from grpo_tools.training.configs import ConfigError, ToolGRPOConfig


def trl_group_advantages(rewards, num_generations):
    """trl's `scale_rewards: group` advantages: the group's mean subtracted, divided by its std (Bessel) + 1e-4."""
    grouped = rewards.view(-1, num_generations)
    return ((grouped - grouped.mean(dim=1, keepdim=True)) / (grouped.std(dim=1, keepdim=True) + 1e-4)).reshape(-1)


def test_without_gold_turns_the_advantages_are_trls():
    rewards = torch.tensor([0.0, 0.5, 1.0, 0.2, 1.7, 1.7, 0.3, 0.9])
    gold = torch.zeros(8, dtype=torch.bool)
    assert torch.allclose(samples_baseline_advantages(rewards, gold, 4, "group"), trl_group_advantages(rewards, 4))


def test_the_samples_advantages_sum_to_zero_and_the_gold_turn_gets_its_margin_over_them():
    rewards = torch.tensor([0.2, 0.5, 0.8, 1.7])  # three samples and the gold turn last
    gold = torch.tensor([False, False, False, True])
    advantages = samples_baseline_advantages(rewards, gold, 4, "group")
    scale = rewards.std() + 1e-4
    assert advantages[:3].sum().item() == pytest.approx(0.0, abs=1e-6)
    assert advantages[3].item() == pytest.approx((1.7 - 0.5) / scale.item())
    # The best sample is pushed up: against the whole group's mean (0.8) trl gives it advantage 0.
    assert advantages[2] > 0 and trl_group_advantages(rewards, 4)[2].item() == pytest.approx(0.0, abs=1e-6)


def test_samples_that_all_score_alike_are_not_pushed_down_by_the_gold_turn():
    rewards = torch.tensor([0.0, 0.0, 0.0, 1.0, 0.3, 0.3, 0.3, 0.3])  # a gold turn in the first group only
    gold = torch.tensor([False, False, False, True, False, False, False, False])
    advantages = samples_baseline_advantages(rewards, gold, 4, "group")
    assert advantages.tolist()[:3] == [0.0, 0.0, 0.0] and advantages[3] > 0
    assert advantages[4:].tolist() == [0.0] * 4  # a group without spread has no signal either way


@pytest.mark.parametrize(("scale_rewards", "scale"), [("none", 1.0), ("batch", None)])
def test_the_scale_follows_scale_rewards(scale_rewards, scale):
    rewards = torch.tensor([0.0, 1.0, 0.5, 1.5])
    gold = torch.tensor([False, True, False, True])
    scale = scale if scale is not None else rewards.std().item() + 1e-4
    advantages = samples_baseline_advantages(rewards, gold, 2, scale_rewards)
    assert advantages.tolist() == pytest.approx([0.0, 1.0 / scale, 0.0, 1.0 / scale])


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"gold_baseline": "samples"}, "gold_baseline: samples needs gold_in_group: true"),
        ({"gold_baseline": "gold", "gold_in_group": True}, "gold_baseline must be group or samples, got 'gold'"),
    ],
)
def test_a_gold_baseline_that_cannot_apply_is_refused(settings, message, tmp_path):
    with pytest.raises(ConfigError, match=message):
        ToolGRPOConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False, **settings)
