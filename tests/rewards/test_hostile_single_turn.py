"""Every registered call reward on a huge integer literal where the schema refuses the value (issue 72): the
validator's message would write the integer in decimal, which Python refuses past 4,300 digits; the reward must score
the call, never raise."""

from __future__ import annotations

import pytest

from grpo_tools.rewards import REWARDS, validate_arguments


HUGE = "0x" + "f" * 3572
TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {
    "s": {"type": "string"}, "e": {"type": "string", "enum": ["a", "b"]}, "n": {"type": "integer", "maximum": 5},
    "items": {"type": "array", "items": {"type": "string"}}}, "required": ["s"]}}}]  # fmt: skip
ANSWERS = [{"name": "f", "arguments": {"s": "x"}}]


@pytest.mark.parametrize(
    "completion",
    [
        f"[f(s={HUGE})]",
        f"[f(s='x', e={HUGE})]",
        f"[f(s='x', n={HUGE})]",
        f"[f(s='x', items=[{HUGE}])]",
        f"[f(s={{'k': {HUGE}}})]",
    ],
)
@pytest.mark.parametrize("name", list(REWARDS))
def test_a_huge_integer_the_schema_refuses_only_scores_lower(name, completion):
    (score,) = REWARDS[name].function([completion], [TOOLS], [ANSWERS])
    assert isinstance(score, float)
    if name in ("tool_schema", "tool_exact", "tool_bfcl"):
        assert score == 0.0  # the value does not fit the schema, nor equal the gold one


def test_validation_names_the_problem_without_writing_the_integer():
    from grpo_tools.rewards.schemas import normalize_tool

    problems = validate_arguments(normalize_tool(TOOLS[0]), {"s": 16**3572})
    assert problems and all(len(problem.message) < 200 for problem in problems)
