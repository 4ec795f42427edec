"""Tests for `ToolGRPOTrainer` on trl's vLLM branch, without vLLM: trl's `VLLMGeneration` is replaced by a stub that
returns scripted completions with log-probabilities that name their row and token. With `gold_in_group`, every
log-probability row returned beside a completion belongs to it: a sample keeps its own, a gold turn (longer than every
sample here) gets NaN ones of its own length, which trl's importance-sampling correction neutralises (ratio 1)."""

import math

import pytest
import torch
from trainer_builders import make_trainer


def scripted_logprob(row, token):
    """The log-probability the stub reports for `token` in batch row `row`: distinct for every (row, token)."""
    return -(token / 100 + row / 10_000)


class StubVLLMGeneration:
    """Stands in for `trl.generation.vllm_generation.VLLMGeneration`: two-token completions per row."""

    def __init__(self, **kwargs):
        self.calls = 0

    def sync_weights(self):
        pass

    def generate(self, prompts, images, num_generations, profiler=None):
        self.calls += 1
        completions = [[5 + row % 7, 6] for row in range(len(prompts))]
        logprobs = [[[scripted_logprob(row, token)] for token in ids] for row, ids in enumerate(completions)]
        return prompts, completions, logprobs, None


@pytest.fixture
def vllm_trainer(tiny_model_dir, small_data, tmp_path, monkeypatch):
    monkeypatch.setattr("trl.trainer.grpo_trainer.VLLMGeneration", StubVLLMGeneration)
    return make_trainer(
        tiny_model_dir, small_data["train"], tmp_path, use_vllm=True, gold_in_group=True, max_completion_length=160,
        max_steps=1, vllm_importance_sampling_mode="token_truncate",
    )  # fmt: skip


def test_every_log_probability_row_belongs_to_the_completion_beside_it(vllm_trainer):
    trainer = vllm_trainer
    returned = []
    generate = trainer._generate_single_turn

    def recording(*args, **kwargs):
        returned.append(generate(*args, **kwargs))
        return returned[-1]

    trainer._generate_single_turn = recording
    batches = []
    generate_and_score = trainer.generate_and_score

    def recording_batch(inputs):
        batches.append(generate_and_score(inputs))
        return batches[-1]

    trainer.generate_and_score = recording_batch
    trainer.train()
    assert trainer.vllm_generation.calls == 1  # trl's vLLM branch generated the batch
    ((completion_ids, logprobs),), (batch,) = returned, batches
    assert len(completion_ids) == len(logprobs) == 8
    for row, (ids, row_logprobs) in enumerate(zip(completion_ids, logprobs, strict=True)):
        assert len(row_logprobs) == len(ids)
        if row % 4 == 3:  # the gold turn: no sampling log-probability of its own
            assert len(ids) > 2 and all(math.isnan(value) for value in row_logprobs)
        else:
            assert row_logprobs == [scripted_logprob(row, token) for token in ids]

    sampling = batch["sampling_per_token_logps"]  # (B, T), T the gold turn's length: longer than every sample
    assert sampling.shape == batch["completion_ids"].shape
    gold_rows = torch.arange(8) % 4 == 3
    assert sampling[gold_rows].isnan().any(dim=1).all()
    ratio = batch["importance_sampling_ratio"]  # (B, T)
    mask = batch["completion_mask"].bool()
    assert (ratio[gold_rows][mask[gold_rows]] == 1).all()  # no correction on the gold turns' tokens
    assert torch.isfinite(ratio).all()
