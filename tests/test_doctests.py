"""The runnable examples in the public docstrings (parser, rewards, KL controller) run and give what they show."""

import doctest

import pytest

import grpo_tools.rewards.parsing.parser
import grpo_tools.rewards.rewards
import grpo_tools.rewards.schemas
import grpo_tools.training.kl


@pytest.mark.parametrize(
    "module",
    [
        grpo_tools.rewards.parsing.parser,
        grpo_tools.rewards.rewards,
        grpo_tools.training.kl,
        grpo_tools.rewards.schemas,
    ],
)
def test_docstring_examples(module):
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0
    assert result.attempted > 0
