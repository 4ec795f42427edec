"""Tests for `gold_anchor` (grpo_tools.training.anchor): the loss is GRPO's plus the weight times the policy's mean
negative log-likelihood of the gold turns, measured here by an independent forward pass; the anchor alone moves the
model towards the gold turns; the settings it cannot work with are refused."""

import pytest
import torch
from trainer_builders import make_trainer

from grpo_tools.training.anchor import GOLD_TURN_KEY
from grpo_tools.training.configs import ConfigError, ToolGRPOConfig


def constant_reward(completions, **kwargs):
    """Every completion equal: the advantages are 0 and GRPO's loss carries no signal."""
    return [1.0] * len(completions)


def gold_nll(trainer, inputs):
    """The policy's mean negative log-likelihood of the gold turns of `inputs`, per token, at the run's
    temperature, from a plain forward pass of the model (not through trl's or the fast path's code)."""
    gold = inputs[GOLD_TURN_KEY]
    prompt_ids, completion_ids = inputs["prompt_ids"][gold], inputs["completion_ids"][gold]  # (g, P), (g, T)
    mask = torch.cat([inputs["prompt_mask"][gold], inputs["completion_mask"][gold]], dim=1)  # (g, P + T)
    with torch.no_grad():
        logits = trainer.model(input_ids=torch.cat([prompt_ids, completion_ids], dim=1), attention_mask=mask).logits
    logits = logits[:, prompt_ids.size(1) - 1 : -1].float() / trainer.temperature  # (g, T, V)
    logps = torch.log_softmax(logits, dim=-1).gather(-1, completion_ids.unsqueeze(-1)).squeeze(-1)  # (g, T)
    completion_mask = inputs["completion_mask"][gold].float()
    return (-(logps * completion_mask).sum() / completion_mask.sum()).item()


@pytest.mark.parametrize(("weight", "fast_path"), [(0.0, "auto"), (0.5, "auto"), (0.5, "off")])
def test_the_anchor_adds_its_weight_times_the_gold_turns_nll_to_grpos_loss(
    tiny_model_dir, small_data, tmp_path, monkeypatch, weight, fast_path
):
    """On the CPU fast path's log-probabilities and on trl's own (the path a GPU takes)."""
    from trl import GRPOTrainer

    seen = []
    compute_loss = GRPOTrainer._compute_loss

    def recording_compute_loss(self, model, inputs):
        loss = compute_loss(self, model, inputs)
        seen.append((loss.item(), inputs, gold_nll(self, inputs)))  # the weights this loss is computed with
        return loss

    monkeypatch.setattr(GRPOTrainer, "_compute_loss", recording_compute_loss)
    trainer = make_trainer(
        tiny_model_dir, small_data["train"], tmp_path, gold_in_group=True, gold_anchor=weight, max_steps=1,
        max_completion_length=160, temperature=0.7, beta=0.0, adaptive_kl=False, cpu_fast_path=fast_path,
    )  # fmt: skip
    total = []
    policy_loss = type(trainer).policy_loss

    def recording_policy_loss(self, model, inputs):
        loss = policy_loss(self, model, inputs)
        total.append(loss.item())
        return loss

    monkeypatch.setattr(type(trainer), "policy_loss", recording_policy_loss)
    trainer.train()
    ((grpo_loss, inputs, expected_nll),), (loss,) = seen, total
    assert inputs[GOLD_TURN_KEY].tolist().count(True) == 2  # one gold turn in each of the two groups
    logged = trainer.state.log_history[0]
    if weight == 0.0:
        assert loss == grpo_loss
        assert "gold_anchor/nll" not in logged
    else:
        assert logged["gold_anchor/nll"] == pytest.approx(expected_nll, rel=1e-4)
        assert loss - grpo_loss == pytest.approx(weight * logged["gold_anchor/nll"], rel=1e-5)


def test_with_gradient_accumulation_the_anchor_is_divided_as_grpos_loss_is(
    tiny_model_dir, small_data, tmp_path, monkeypatch
):
    """trl divides each micro-batch's loss by the accumulation steps, so that a step's gradient is their mean; the
    anchor is divided alike, or it would weigh `gradient_accumulation_steps` times `gold_anchor`."""
    from trl import GRPOTrainer

    seen = []
    compute_loss = GRPOTrainer._compute_loss

    def recording_compute_loss(self, model, inputs):
        loss = compute_loss(self, model, inputs)
        has_gold = bool(inputs[GOLD_TURN_KEY].any())
        seen.append((loss.item(), gold_nll(self, inputs) if has_gold else None))
        return loss

    monkeypatch.setattr(GRPOTrainer, "_compute_loss", recording_compute_loss)
    weight, accumulation = 0.5, 2
    trainer = make_trainer(
        tiny_model_dir, small_data["train"], tmp_path, gold_in_group=True, gold_anchor=weight, max_steps=1,
        gradient_accumulation_steps=accumulation, max_completion_length=160, beta=0.0, adaptive_kl=False,
    )  # fmt: skip
    total = []
    policy_loss = type(trainer).policy_loss

    def recording_policy_loss(self, model, inputs):
        loss = policy_loss(self, model, inputs)
        total.append(loss.item())
        return loss

    monkeypatch.setattr(type(trainer), "policy_loss", recording_policy_loss)
    trainer.train()
    assert len(seen) == len(total) == accumulation  # two micro-batches of 8 from one generation batch of 16
    assert any(nll is not None for _, nll in seen)  # four gold turns between them
    for (grpo_loss, nll), loss in zip(seen, total, strict=True):
        anchor = 0.0 if nll is None else weight * nll / accumulation
        assert loss - grpo_loss == pytest.approx(anchor, rel=1e-4, abs=1e-6)


def test_the_anchor_alone_makes_the_gold_turns_more_likely(tiny_model_dir, small_data, tmp_path):
    """With a reward that gives every completion the same score and no KL term, GRPO's loss has no gradient: the
    weights move only under the anchor, and they move towards the gold turns."""
    nll = {}
    for weight in (0.0, 1.0):
        trainer = make_trainer(
            tiny_model_dir, small_data["train"], tmp_path / str(weight), reward_funcs=(constant_reward,),
            gold_in_group=True, gold_anchor=weight, max_steps=3, max_completion_length=160, beta=0.0,
            learning_rate=5e-3, adaptive_kl=False,
        )  # fmt: skip
        before = {name: value.detach().clone() for name, value in trainer.model.named_parameters() if "lora_B" in name}
        trainer.train()
        moved = any(
            not torch.equal(value, dict(trainer.model.named_parameters())[name]) for name, value in before.items()
        )
        nll[weight] = [entry["gold_anchor/nll"] for entry in trainer.state.log_history if "gold_anchor/nll" in entry]
        assert moved == (weight > 0)
    assert nll[0.0] == []
    assert len(nll[1.0]) == 3 and nll[1.0][-1] < nll[1.0][0]


@pytest.mark.parametrize(
    ("settings", "message"),
    [({"gold_anchor": 0.1}, "needs gold_in_group"), ({"gold_anchor": -0.1, "gold_in_group": True}, ">= 0")],
)
def test_an_anchor_without_gold_turns_or_below_zero_is_refused(tmp_path, settings, message):
    with pytest.raises(ConfigError, match=message):
        ToolGRPOConfig(output_dir=str(tmp_path), use_cpu=True, report_to=[], **settings)
