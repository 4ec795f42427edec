"""Tests for `grpo_tools.training.warm_start`: the supervised examples of the warm start are the gold turn as the
model's chat template writes it, and the reward model gives them full marks. (Multi-turn examples: tests/tools/.)"""

from grpo_tools.data.prompts import NO_CALL_REPLY, render_prompt
from grpo_tools.rewards import tool_exact_reward
from grpo_tools.training.warm_start import sft_dataset


def test_sft_completions_are_what_the_template_adds_and_score_full_marks(tokenizer, call_and_no_call_rows):
    dataset = sft_dataset(call_and_no_call_rows, tokenizer)
    assert dataset[0]["prompt"] == render_prompt(tokenizer, call_and_no_call_rows[0])
    assert dataset[0]["completion"] == (
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Lyon", "unit": "celsius"}}\n</tool_call><|im_end|>\n'
    )
    assert dataset[1]["completion"] == NO_CALL_REPLY + "<|im_end|>\n"
    # The gold completion, as the reward model reads it, is exactly right.
    rewards = tool_exact_reward(
        dataset["completion"],
        [r["tools"] for r in call_and_no_call_rows],
        [r["answers"] for r in call_and_no_call_rows],
    )
    assert rewards == [1.0, 1.0]
