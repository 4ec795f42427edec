"""The runnable examples in the public docstrings (parser, rewards, KL controller) run and give what they show."""

import doctest

import pytest

import grpo_tools.calls
import grpo_tools.rewards
import grpo_tools.schemas
import grpo_tools.training.kl


@pytest.mark.parametrize("module", [grpo_tools.calls, grpo_tools.rewards, grpo_tools.training.kl, grpo_tools.schemas])
def test_docstring_examples(module):
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0
    assert result.attempted > 0
