"""A supervised anchor during GRPO (`gold_anchor`): the policy's negative log-likelihood of each group's gold turn,
weighted and added to GRPO's loss, as SASR mixes supervised and GRPO steps (Chen et al., 2025, arXiv 2505.13026) and
LUFFY's off-policy guidance leans on gold answers (Yan et al., 2025).

With `gold_in_group` the gold turn is already a completion of the batch and its per-token log-probabilities are
already computed for GRPO's loss, so the anchor costs no extra forward pass: `AnchorHooks` keeps the policy's
log-probabilities of the micro-batch being trained (`_keep_policy_logps`) and adds `gold_anchor` times their mean
over the gold turns' tokens, negated. The log-probabilities are GRPO's own, at the sampling temperature (trl divides
the logits by it), so at temperature 1 the anchor is exactly supervised learning's token-mean cross-entropy. It is
logged each step as `gold_anchor/nll`. A run with it is GRPO plus a supervised term, never GRPO alone.
"""

from __future__ import annotations

from typing import Any

import torch


__all__ = ["GOLD_TURN_KEY", "AnchorHooks"]

# The batch's column marking each completion that is its group's gold turn (bool (B,)), carried through trl's
# shuffling and splitting like every per-completion tensor.
GOLD_TURN_KEY = "gold_turn"


class AnchorHooks:
    """What `ToolGRPOTrainer` does for `gold_anchor`, as methods it inherits before `DecisionHooks`."""

    _policy_logps: torch.Tensor | None = None

    def _keep_policy_logps(self, logps: torch.Tensor) -> None:
        """Keep the policy's per-token log-probabilities (B, T) of the micro-batch being trained (those computed with
        gradients); the reference's and the old policy's are computed without."""
        if torch.is_grad_enabled() and logps.requires_grad:
            self._policy_logps = logps

    def _mark_gold_turns(self, output: dict[str, Any], gold: list[str | None]) -> None:
        """Mark this process's gold turns in the batch, for the anchor."""
        slots = self._gold_slots(gold, self.num_generations)
        output[GOLD_TURN_KEY] = torch.tensor(slots, dtype=torch.bool, device=output["completion_ids"].device)

    def policy_loss(self, model: torch.nn.Module, inputs: dict[str, Any]) -> torch.Tensor:
        self._policy_logps = None
        loss = super().policy_loss(model, inputs)
        logps, self._policy_logps = self._policy_logps, None  # (B, T); not held past this micro-batch
        weight = getattr(self.args, "gold_anchor", 0.0)
        if not (weight and self.model.training and GOLD_TURN_KEY in inputs):
            return loss
        if logps is None or logps.size(0) != inputs[GOLD_TURN_KEY].size(0):
            raise RuntimeError("gold_anchor: the policy's log-probabilities of this micro-batch were not kept")
        gold = inputs[GOLD_TURN_KEY]  # (B,)
        mask = inputs["completion_mask"][gold].to(logps.dtype)  # (gold, T)
        nll = -(logps[gold] * mask).sum() / mask.sum().clamp(min=1.0)
        counts = self.accelerator.gather(torch.stack([nll.detach(), gold.any().to(nll.dtype)]))
        counts = counts.view(-1, 2)  # (processes, 2): each process's mean and whether it held a gold turn
        if counts[:, 1].any():
            self.step_metrics["gold_anchor/nll"].append(counts[counts[:, 1] > 0, 0].mean().item())
        return loss + weight * nll / self.current_gradient_accumulation_steps
