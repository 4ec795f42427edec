"""Tests for the decision to call in training (`grpo_tools.training.decision`): advantages against the group, the
batch or the class of row, checked against a naive reference; a no-call group whose samples all agree taught under
the batch baseline and not under trl's; the balanced sampler's shares; the per-class shares logged each step; the
settings refused; and two one-thread runs of the tiny model that repeat step for step."""

import json
import logging
import statistics

import pytest
import torch
from trainer_builders import make_trainer
from trl.trainer.utils import RepeatSampler

from grpo_tools.rewards import get_reward_funcs
from grpo_tools.training.configs import ConfigError, ToolGRPOConfig
from grpo_tools.training.decision import (
    BalancedRepeatSampler,
    DecisionCounts,
    baseline_advantages,
    decision_counts,
    needs_call,
)


def naive_advantages(rewards, num_generations, baseline, scale, call_rows):
    """The advantages written out one completion at a time, for `baseline_advantages` to agree with."""
    n = len(rewards)
    if baseline == "group":
        peers = [[j for j in range(n) if j // num_generations == i // num_generations] for i in range(n)]
    elif baseline == "batch":
        peers = [list(range(n))] * n
    else:
        peers = [[j for j in range(n) if call_rows[j] == call_rows[i]] for i in range(n)]
    advantages = [rewards[i] - statistics.fmean(rewards[j] for j in peers[i]) for i in range(n)]
    if scale == "none":
        return advantages
    if baseline == "group" and scale == "group":
        stds = [statistics.stdev(rewards[j] for j in peers[i]) for i in range(n)]
    else:
        stds = [statistics.stdev(rewards)] * n
    return [advantage / (std + 1e-4) for advantage, std in zip(advantages, stds, strict=True)]


@pytest.mark.parametrize("baseline", ["group", "batch", "class"])
@pytest.mark.parametrize("scale", ["group", "batch", "none"])
def test_advantages_equal_the_naive_reference(baseline, scale):
    generator = torch.Generator().manual_seed(0)
    rewards = torch.randint(-1, 2, (24,), generator=generator).float()  # (N,): six groups of four
    call_rows = torch.tensor([True, False, True, True, False, False]).repeat_interleave(4)  # (N,)
    expected = naive_advantages(rewards.tolist(), 4, baseline, scale, call_rows.tolist())
    actual = baseline_advantages(rewards, 4, baseline, scale, call_rows)
    assert actual.tolist() == pytest.approx(expected, abs=1e-5)


def test_trls_group_baseline_is_what_group_gives():
    """The group baseline is trl's own formula (mean over the group, divided by its std), kept as the default."""
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0])  # (N,)
    advantages = baseline_advantages(rewards, 4, "group", "group")
    assert advantages[:4].tolist() == pytest.approx([1.5, -0.5, -0.5, -0.5], abs=1e-3)
    assert advantages[4:].tolist() == [0.0] * 4


def test_a_no_call_group_that_all_abstains_is_taught_beyond_the_group_and_not_within_it():
    # A call row's group (the gold turn right, three abstentions) and a no-call row's group that all abstain.
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0])  # (N,)
    call_rows = torch.tensor([True] * 4 + [False] * 4)  # (N,)
    assert baseline_advantages(rewards, 4, "group", "none")[4:].tolist() == [0.0] * 4
    batch = baseline_advantages(rewards, 4, "batch", "none")[4:]
    assert batch.tolist() == pytest.approx([0.375] * 4)  # 1 against the batch's mean 0.625
    # Against its own class the all-right no-call group has nothing to beat; the call row's abstentions are measured
    # against the call rows' mean 0.25 rather than the batch's.
    by_class = baseline_advantages(rewards, 4, "class", "none", call_rows)
    assert by_class.tolist() == pytest.approx([0.75, -0.25, -0.25, -0.25, 0.0, 0.0, 0.0, 0.0])


def test_unscorable_completions_get_no_advantage_and_are_left_out_of_the_baseline():
    rewards = torch.tensor([1.0, float("nan"), 0.0, 0.0])
    advantages = baseline_advantages(rewards, 2, "batch", "none")
    assert advantages.tolist() == pytest.approx([2 / 3, 0.0, -1 / 3, -1 / 3])


def _rows(no_call, call):
    return [{"answers": "[]"}] * no_call + [{"answers": json.dumps([{"name": "f", "arguments": {}}])}] * call


@pytest.mark.parametrize(("share", "per_batch"), [(0.5, 2), (0.25, 1), (0.0, 0), (1.0, 4)])
def test_the_balanced_sampler_puts_the_share_of_no_call_prompts_in_every_batch(share, per_batch):
    rows = _rows(no_call=3, call=17)
    call_rows = [needs_call(row["answers"]) for row in rows]
    sampler = BalancedRepeatSampler(rows, call_rows, share, mini_repeat_count=4, batch_size=4, repeat_count=2, seed=1)
    indices = list(sampler)
    assert len(indices) == len(sampler) == len(RepeatSampler(rows, 4, batch_size=4, repeat_count=2))
    blocks = [indices[i : i + 32] for i in range(0, len(indices), 32)]  # a batch: 4 prompts x 4, repeated twice
    for block in blocks:
        assert block[:16] == block[16:]  # each batch repeated `repeat_count` times, as trl's sampler does
        prompts = block[:16:4]
        assert all(block[i : i + 4] == [block[i]] * 4 for i in range(0, 16, 4))  # each prompt num_generations times
        assert sum(not call_rows[index] for index in prompts) == per_batch
    if share == 0.0:  # the call rows are walked without replacement: the first 16 of 17 drawn are all different
        drawn = [index for block in blocks for index in block[:16:4]]
        assert len(set(drawn[:16])) == 16
    assert list(BalancedRepeatSampler(rows, call_rows, share, 4, 4, 2, seed=1)) == indices  # the seed fixes it


def test_the_balanced_sampler_refuses_a_share_the_data_cannot_give():
    rows = _rows(no_call=0, call=8)
    with pytest.raises(ValueError, match="asks for rows that need no call; the data has none"):
        BalancedRepeatSampler(rows, [True] * 8, 0.5, 4, batch_size=4)


def test_decision_counts_leave_gold_turns_out_and_split_by_class():
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}
    call, none = json.dumps([{"name": "f", "arguments": {}}]), "[]"
    rows = [{"tools": json.dumps([tool]), "answers": answers, "id": str(i)} for i, answers in
            enumerate([call, call, call, call, none, none, none, none])]  # fmt: skip
    completions = ["[f()]", "no", "[g()]", "[f()]", "no", "[f()]", "no", "no"]
    sampled = [True, True, True, False, True, True, True, True]  # the fourth is a gold turn
    counts = decision_counts(completions, rows, sampled)
    assert counts == DecisionCounts(call_rows=3, call_rows_called=2, call_rows_right=1, no_call_rows=4,
                                    no_call_rows_called=1)  # fmt: skip
    assert DecisionCounts.metrics(counts.as_tensor().tolist()) == pytest.approx({
        "decision/call_rows/call": 2 / 3, "decision/call_rows/right": 1 / 3,
        "decision/no_call_rows/call": 0.25, "decision/no_call_rows/right": 0.75,
    })  # fmt: skip


def _record_batches(trainer):
    """Each training batch's rows (needs a call or not), weighted rewards and advantages, as the loss gets them."""
    seen = []
    original = trainer.generate_and_score

    def recording(inputs):
        output = original(inputs)
        rewards = trainer._last_weighted_rewards.sum(dim=1)  # (B,): one process
        seen.append(([needs_call(row["answers"]) for row in inputs], rewards.tolist(), output["advantages"].tolist()))
        return output

    trainer.generate_and_score = recording
    return seen


@pytest.mark.parametrize("baseline", ["group", "batch"])
def test_in_training_an_agreeing_no_call_group_is_taught_only_beyond_the_group(
    baseline, tiny_model_dir, small_data, tmp_path
):
    trainer = make_trainer(
        tiny_model_dir, small_data["train"], tmp_path, reward_funcs=get_reward_funcs(["tool_decision"]), max_steps=2,
        advantage_baseline=baseline, no_call_share=0.5, scale_rewards="none",
    )  # fmt: skip
    seen = _record_batches(trainer)
    trainer.train()
    agreeing = []
    for call_rows, rewards, advantages in seen:
        assert sorted(call_rows) == [False] * 4 + [True] * 4  # one no-call and one call prompt a step
        for start in range(0, 8, 4):
            group = slice(start, start + 4)
            if not call_rows[start] and len(set(rewards[group])) == 1:
                agreeing.append(advantages[group])
                mean = statistics.fmean(rewards) if baseline == "batch" else rewards[start]
                assert advantages[group] == pytest.approx([rewards[start] - mean] * 4, abs=1e-6)
    assert agreeing  # the tiny model abstains: its no-call groups agree
    if baseline == "group":
        assert all(value == 0.0 for group in agreeing for value in group)
    else:
        assert any(value != 0.0 for group in agreeing for value in group)


def test_each_step_logs_the_decision_per_class_of_row(tiny_model_dir, small_data, tmp_path):
    trainer = make_trainer(
        tiny_model_dir, small_data["train"], tmp_path, reward_funcs=get_reward_funcs(["tool_format"]), max_steps=2,
        no_call_share=0.5,
    )  # fmt: skip
    trainer.train()
    steps = [entry for entry in trainer.state.log_history if "reward" in entry]
    for entry in steps:
        for key in ("call_rows/call", "call_rows/right", "no_call_rows/call", "no_call_rows/right"):
            assert 0.0 <= entry[f"decision/{key}"] <= 1.0
        assert entry["decision/no_call_rows/call"] + entry["decision/no_call_rows/right"] == pytest.approx(1.0)
        assert entry["decision/call_rows/right"] <= entry["decision/call_rows/call"]


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"advantage_baseline": "batch", "skip_zero_std_groups": True}, "skip_zero_std_groups drops the groups"),
        ({"advantage_baseline": "class", "multi_objective_aggregation": "normalize_then_sum"}, "sum_then_normalize"),
        ({"no_call_share": 1.5}, "no_call_share must lie in"),
        ({"decision_wrong": 2.0}, "right call must be paid more"),
        ({"decision_partial": -0.5}, "partial share must lie in"),
    ],
)
def test_decision_settings_that_cannot_work_are_refused(settings, message, tmp_path):
    with pytest.raises(ConfigError, match=message):
        ToolGRPOConfig(output_dir=str(tmp_path), use_cpu=True, **settings)


def test_other_rewards_that_pay_a_wrong_call_above_abstaining_are_warned_about(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="grpo_tools.training.decision_args"):
        ToolGRPOConfig(output_dir=str(tmp_path), use_cpu=True, reward_funcs=["tool_decision", "tool_format"],
                       reward_weights=[1.0, 0.5])  # fmt: skip
        assert not caplog.records
        ToolGRPOConfig(output_dir=str(tmp_path), use_cpu=True, reward_funcs=["tool_decision", "tool_partial"],
                       reward_weights=[0.5, 2.0])  # fmt: skip
    assert "can earn more than no call" in caplog.text


def test_two_one_thread_runs_of_the_tiny_model_repeat_step_for_step(tiny_model_dir, small_data, tmp_path):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        runs = []
        for run in range(2):
            trainer = make_trainer(
                tiny_model_dir, small_data["train"], tmp_path / str(run), max_steps=3,
                reward_funcs=get_reward_funcs(["tool_decision", "tool_format"]), advantage_baseline="class",
                no_call_share=0.5,
            )  # fmt: skip
            trainer.train()
            runs.append([(entry["reward"], entry["kl"]) for entry in trainer.state.log_history if "reward" in entry])
    finally:
        torch.set_num_threads(threads)
    assert len(runs[0]) == 3
    assert runs[0] == runs[1]
