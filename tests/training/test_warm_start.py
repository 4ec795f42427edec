"""Tests for `grpo_tools.training.warm_start`: the supervised examples of the warm start are the gold turn as the
model's chat template writes it, and the reward model gives them full marks. (Multi-turn examples: tests/tools/.)"""

import pytest
from transformers import AutoTokenizer

from grpo_tools.data.prompts import NO_CALL_REPLY, render_prompt
from grpo_tools.rewards import tool_exact_reward
from grpo_tools.training.warm_start import sft_dataset


ROWS = [
    {
        "id": "w-1",
        "messages": [{"role": "user", "content": "Weather in Lyon, celsius?"}],
        "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather.", "parameters": {
            "type": "object", "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["city"]}}}],
        "answers": [{"name": "get_weather", "arguments": {"city": "Lyon", "unit": "celsius"}}],
        "category": "simple",
    },
    {
        "id": "t-1",
        "messages": [{"role": "user", "content": "Tell me a joke."}],
        "tools": [{"type": "function", "function": {"name": "set_timer", "description": "Timer.", "parameters": {
            "type": "object", "properties": {"minutes": {"type": "integer"}}, "required": ["minutes"]}}}],
        "answers": [],
        "possible_answers": [],
        "category": "irrelevance",
    },
]  # fmt: skip


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    return AutoTokenizer.from_pretrained(tiny_model_dir)


def test_sft_completions_are_what_the_template_adds_and_score_full_marks(tokenizer):
    dataset = sft_dataset(ROWS, tokenizer)
    assert dataset[0]["prompt"] == render_prompt(tokenizer, ROWS[0])
    assert dataset[0]["completion"] == (
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Lyon", "unit": "celsius"}}\n</tool_call><|im_end|>\n'
    )
    assert dataset[1]["completion"] == NO_CALL_REPLY + "<|im_end|>\n"
    # The gold completion, as the reward model reads it, is exactly right.
    rewards = tool_exact_reward(dataset["completion"], [r["tools"] for r in ROWS], [r["answers"] for r in ROWS])
    assert rewards == [1.0, 1.0]
