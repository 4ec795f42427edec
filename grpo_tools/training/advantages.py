"""Group advantages when a group holds a gold turn (`gold_in_group` with `gold_baseline: samples`).

trl's advantage of a completion is its reward minus the mean reward of its group, divided by the group's standard
deviation (`scale_rewards: group`). With a gold turn in the group, the gold turn's reward (the highest a completion
can earn) enters that mean: with four completions a group, the samples' baseline rises by a quarter of the gap to the
gold turn, so a sample that is nearly right still gets a negative advantage, and the loss pushes down the tokens of
most samples, right names included, as well as pulling up the gold turn's. With `gold_baseline: samples` the baseline
of every completion of a group, the gold turn's included, is the mean reward of the group's samples alone: the samples'
advantages sum to zero, as in GRPO without gold turns, and the gold turn's is its margin over them. The scale stays
trl's (the standard deviation of the whole group, or of the batch, or none), so the gold turn's advantage is bounded.
"""

from __future__ import annotations

import torch


__all__ = ["GOLD_BASELINES", "samples_baseline_advantages"]

GOLD_BASELINES = ("group", "samples")


def samples_baseline_advantages(
    rewards: torch.Tensor, gold: torch.Tensor, num_generations: int, scale_rewards: str
) -> torch.Tensor:
    """Advantages (B,) of `rewards` (B,), grouped by `num_generations` consecutive completions, each measured against
    the mean reward of its group's completions that are not gold (`gold` (B,) bool) and divided, as trl divides, by
    the group's or the batch's standard deviation plus 1e-4 (`scale_rewards` "group" or "batch"; "none": not divided).
    A group whose completions are all gold has advantage 0."""
    grouped = rewards.view(-1, num_generations)  # (groups, G)
    samples = (~gold).view(-1, num_generations).to(rewards.dtype)  # (groups, G)
    count = samples.sum(dim=1, keepdim=True)  # (groups, 1)
    baseline = (grouped * samples).sum(dim=1, keepdim=True) / count.clamp(min=1.0)  # (groups, 1)
    advantages = grouped - baseline  # (groups, G)
    advantages = torch.where(count > 0, advantages, torch.zeros_like(advantages))
    if scale_rewards == "group":
        advantages = advantages / (grouped.std(dim=1, keepdim=True) + 1e-4)
    elif scale_rewards == "batch":
        advantages = advantages / (rewards.std() + 1e-4)
    elif scale_rewards != "none":
        raise ValueError(f"scale_rewards must be group, batch or none, got {scale_rewards!r}")
    return advantages.reshape(-1)  # (B,)
