"""Tests for the decision to call in training (`grpo_tools.training.decision`): advantages against the group, the
batch or the class of row, checked against a naive reference; a no-call group whose samples all agree taught under
the batch baseline and not under trl's; the balanced sampler's shares; the per-class shares logged each step; the
settings refused; and two one-thread runs of the tiny model that repeat step for step."""

import json
import logging
import math
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


@pytest.mark.parametrize(("share", "batch_size"), [(0.5, 1), (0.5, 3), (0.5, 5), (0.3, 4)])
def test_the_balanced_samplers_share_is_exact_over_a_run_when_a_batch_cannot_hold_it(share, batch_size):
    """Half of 1, 3 or 5 prompts is no whole number of prompts: each batch holds the share rounded down or up, and
    the no-call prompts drawn so far stay within one prompt of the share of all prompts drawn, at every batch."""
    rows = _rows(no_call=20, call=40)
    call_rows = [needs_call(row["answers"]) for row in rows]
    sampler = BalancedRepeatSampler(rows, call_rows, share, mini_repeat_count=2, batch_size=batch_size, seed=3)
    prompts = list(sampler)[::2]  # each prompt once
    batches = [prompts[i : i + batch_size] for i in range(0, len(prompts), batch_size)]
    assert len(batches) == len(rows) // batch_size
    drawn = 0
    for count, batch in enumerate(batches, start=1):
        no_call = sum(not call_rows[index] for index in batch)
        assert math.floor(share * batch_size) <= no_call <= math.ceil(share * batch_size)
        drawn += no_call
        assert abs(drawn - share * batch_size * count) < 1
    assert list(BalancedRepeatSampler(rows, call_rows, share, 2, batch_size, seed=3))[::2] == prompts


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
    if baseline == "batch":  # under the group baseline the loop above found them all 0; past it, some teach
        assert any(value != 0.0 for group in agreeing for value in group)


@pytest.fixture(scope="module", params=["group", "batch", "class"])
def four_prompt_step(request, tiny_model_dir, small_data, tmp_path_factory):
    """One step of each baseline on four prompts (two no-call rows, two call rows) whose samples' rewards differ (the
    letter reward), with trl's completion table on: the batch as the loss got it, and the table trl wrote."""
    import pandas

    output_dir = tmp_path_factory.mktemp(f"baseline-{request.param}")
    trainer = make_trainer(
        tiny_model_dir, small_data["train"], output_dir, max_steps=1, per_device_train_batch_size=16,
        advantage_baseline=request.param, no_call_share=0.5, scale_rewards="none", log_completions=True,
    )  # fmt: skip
    seen = _record_batches(trainer)
    trainer.train()
    ((call_rows, rewards, advantages),) = seen
    table = pandas.read_parquet(output_dir / "completions" / "completions_00001.parquet")
    return request.param, call_rows, rewards, advantages, table


def test_in_training_the_advantages_are_measured_against_the_baseline_set(four_prompt_step):
    """Under `class` a completion's baseline is the mean of its class of row over the batch, which with two groups of
    each class is neither its group's mean (trl's) nor the batch's."""
    baseline, call_rows, rewards, advantages, _ = four_prompt_step
    assert sorted(call_rows) == [False] * 8 + [True] * 8
    expected = naive_advantages(rewards, 4, baseline, "none", call_rows)
    assert advantages == pytest.approx(expected, abs=1e-5)
    for other in {"group", "batch", "class"} - {baseline}:  # the rewards of this step tell the baselines apart
        assert advantages != pytest.approx(naive_advantages(rewards, 4, other, "none", call_rows), abs=1e-5)


def test_the_completion_table_shows_the_advantages_the_loss_used(four_prompt_step):
    """With `log_completions`, trl's table (printed, saved under completions/, sent to the trackers) shows each
    completion's advantage as the loss used it, not trl's group advantage computed before the baseline replaced it."""
    _, _, rewards, advantages, table = four_prompt_step
    assert table["advantage"].tolist() == pytest.approx(advantages, abs=1e-6)
    assert table["letter_reward"].tolist() == pytest.approx(rewards)  # the same completions, in the same order


def test_the_batch_baseline_needs_no_answers_column_and_the_class_baseline_says_it_does(tiny_model_dir, tmp_path):
    """`batch` reads nothing of a row; `class` must tell the rows that need a call, and says so before training."""
    from datasets import Dataset
    from peft import LoraConfig
    from trainer_builders import letter_reward
    from transformers import AutoTokenizer

    from grpo_tools.training.trainer import ToolGRPOTrainer

    def trainer(baseline):
        args = ToolGRPOConfig(
            output_dir=str(tmp_path / baseline), use_cpu=True, per_device_train_batch_size=8, num_generations=4,
            max_completion_length=8, max_steps=1, report_to=[], save_strategy="no", disable_tqdm=True,
            advantage_baseline=baseline, scale_rewards="none",
        )  # fmt: skip
        return ToolGRPOTrainer(
            model=tiny_model_dir, reward_funcs=[letter_reward], args=args,
            train_dataset=Dataset.from_dict({"prompt": ["Weather in Lyon?", "Convert 50 EUR to JPY."] * 4}),
            processing_class=AutoTokenizer.from_pretrained(tiny_model_dir),
            peft_config=LoraConfig(r=4, target_modules="all-linear", task_type="CAUSAL_LM"),
        )  # fmt: skip

    batch = trainer("batch")
    seen = []
    original = batch.generate_and_score

    def recording(inputs):
        output = original(inputs)
        seen.append((batch._last_weighted_rewards.sum(dim=1).tolist(), output["advantages"].tolist()))
        return output

    batch.generate_and_score = recording
    batch.train()
    ((rewards, advantages),) = seen
    assert advantages == pytest.approx([reward - statistics.fmean(rewards) for reward in rewards], abs=1e-5)
    with pytest.raises(ConfigError, match="advantage_baseline class needs rows with `answers`"):
        trainer("class")


def test_each_step_logs_the_decision_per_class_of_row(tiny_model_dir, small_data, tmp_path):
    """The logged shares are a recount of the step's sampled completions by the rewards: per class of row, those that
    call (tool_decision pays neither an abstention's nor a quiet answer's value) and those BFCL's verdict passes. The
    gold turns (the last of each group) are left out, though each is a right call."""
    from grpo_tools.rewards import tool_bfcl_reward, tool_decision_reward

    trainer = make_trainer(
        tiny_model_dir, small_data["train"], tmp_path, reward_funcs=get_reward_funcs(["tool_format"]), max_steps=1,
        no_call_share=0.5, gold_in_group=True, max_completion_length=160,
    )  # fmt: skip
    batches = []
    score_completions = trainer.score_completions

    def recording(inputs, prompts, completions, completion_ids_list):
        batches.append((inputs, completions))
        return score_completions(inputs, prompts, completions, completion_ids_list)

    trainer.score_completions = recording
    trainer.train()
    steps = [entry for entry in trainer.state.log_history if "reward" in entry]
    assert len(steps) == len(batches) == 1
    for entry, (inputs, completions) in zip(steps, batches, strict=True):
        sampled = [(row, text) for index, (row, text) in enumerate(zip(inputs, completions, strict=True))
                   if not is_gold_slot(index, row)]  # fmt: skip
        columns = {key: [row[key] for row, _ in sampled] for key in ("tools", "answers", "possible_answers")}
        texts = [text for _, text in sampled]
        decision = tool_decision_reward(texts, **columns)  # call row: right 1, abstain 0, wrong -1; no-call: 1 or -1
        verdict = tool_bfcl_reward(texts, **columns)
        expected = {}
        for name, calls in (("call_rows", True), ("no_call_rows", False)):
            members = [i for i, (row, _) in enumerate(sampled) if needs_call(row["answers"]) == calls]
            assert members  # one prompt of each class a step
            called = [decision[i] != (0.0 if calls else 1.0) for i in members]
            expected[f"decision/{name}/call"] = statistics.fmean(called)
            # right: BFCL's verdict on a call row; on a no-call row, no call (BFCL passes a call that does not parse)
            right = [verdict[i] == 1.0 if calls else decision[i] == 1.0 for i in members]
            expected[f"decision/{name}/right"] = statistics.fmean(right)
        assert {key: entry[key] for key in expected} == pytest.approx(expected)
    assert gold_turns_right(batches) == 1.0  # counted, the gold turns would lift call_rows/right by a third


def is_gold_slot(index, row):
    """Whether a completion of a one-process batch of groups of four is its row's gold turn."""
    return index % 4 == 3 and row.get("gold_completion") is not None


def gold_turns_right(batches):
    """The share of the gold turns of call rows that BFCL's verdict passes."""
    from grpo_tools.rewards import tool_bfcl_reward

    gold = [(row, text) for inputs, completions in batches for index, (row, text) in
            enumerate(zip(inputs, completions, strict=True)) if is_gold_slot(index, row) and needs_call(row["answers"])]  # fmt: skip
    columns = {key: [row[key] for row, _ in gold] for key in ("tools", "answers", "possible_answers")}
    return statistics.fmean(tool_bfcl_reward([text for _, text in gold], **columns))


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
