"""Tests for the decision reward (`grpo_tools.rewards.decision`, `tool_decision`): each outcome of the decision to call
on real parsed outputs, on a row that needs a call and on one that needs none, the values a user sets, partial credit
that never lifts a wrong call above abstaining, the judge, and the values refused."""

import json

import pytest

from grpo_tools.rewards import (
    REWARDS,
    DecisionValues,
    decision_outcome,
    get_tool_decision_reward,
    make_gold,
    parse_tool_calls,
    score_completion,
    tool_decision_reward,
)
from grpo_tools.rewards.decision import score_decision


WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["city"],
        },
    },
}
TIME = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}}
TOOLS = [WEATHER, TIME]
LYON = {"name": "get_weather", "arguments": {"city": "Lyon", "unit": "celsius"}}


def hermes(*calls):
    return "".join(f"<tool_call>{json.dumps(call)}</tool_call>" for call in calls)


RIGHT = hermes(LYON)
WRONG_NAME = hermes({"name": "get_time", "arguments": {}})
WRONG_VALUE = hermes({"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}})
NO_CALL = "I can tell you that without a tool: it is usually mild in Lyon."
UNPARSEABLE = '<tool_call>{"name": "get_weather", "arguments": {"city": </tool_call>'

# Values other than the defaults, so that each outcome's value is told apart from the others.
VALUES = DecisionValues(right=2.0, abstain=0.25, wrong=-3.0, quiet=0.75, unexpected=-1.5)


def decide(completion, answers, values=VALUES):
    gold = make_gold(TOOLS, answers)
    return score_decision(parse_tool_calls(completion), gold, values)


@pytest.mark.parametrize(
    ("completion", "outcome", "value"),
    [
        (RIGHT, "right", 2.0),
        (WRONG_NAME, "wrong", -3.0),
        (WRONG_VALUE, "wrong", -3.0),
        (NO_CALL, "abstain", 0.25),
        (UNPARSEABLE, "wrong", -3.0),  # a call that does not parse is a call, and a wrong one
    ],
)
def test_each_outcome_on_a_row_that_needs_a_call_is_paid_its_value(completion, outcome, value):
    gold = make_gold(TOOLS, [LYON])
    assert decision_outcome(parse_tool_calls(completion), gold)[0] == outcome
    assert decide(completion, [LYON]).score == value


@pytest.mark.parametrize(
    ("completion", "outcome", "value"),
    [
        (NO_CALL, "quiet", 0.75),
        (RIGHT, "unexpected", -1.5),
        (WRONG_NAME, "unexpected", -1.5),
        (UNPARSEABLE, "unexpected", -1.5),
    ],
)
def test_each_outcome_on_a_row_that_needs_no_call_is_paid_its_value(completion, outcome, value):
    gold = make_gold(TOOLS, [])
    assert decision_outcome(parse_tool_calls(completion), gold)[0] == outcome
    assert decide(completion, []).score == value


def test_truthrls_values_are_the_default_and_abstaining_earns_more_than_a_wrong_call():
    scores = {name: decide(text, [LYON], DecisionValues()).score for name, text in
              [("right", RIGHT), ("abstain", NO_CALL), ("wrong", WRONG_VALUE)]}  # fmt: skip
    assert scores == {"right": 1.0, "abstain": 0.0, "wrong": -1.0}
    assert decide(NO_CALL, [], DecisionValues()).score == 1.0
    assert decide(RIGHT, [], DecisionValues()).score == -1.0


def test_errors_say_why_a_call_lost_credit():
    assert "wrong_value" in decide(WRONG_VALUE, [LYON]).errors
    assert decide(NO_CALL, [LYON]).errors == ("missed_call",)
    assert "unexpected_call" in decide(RIGHT, []).errors
    assert decide(RIGHT, [LYON]).errors == ()


def test_partial_credit_lifts_a_wrong_call_towards_abstaining_and_never_above():
    values = DecisionValues(abstain=0.0, wrong=-1.0, partial=1.0)
    nearly = decide(WRONG_VALUE, [LYON], values).score  # the right function, one of two values wrong
    far = decide(WRONG_NAME, [LYON], values).score  # another function: no partial credit
    assert far == -1.0
    assert -1.0 < nearly < 0.0
    half = decide(WRONG_VALUE, [LYON], DecisionValues(partial=0.5)).score
    assert half == pytest.approx((nearly - 1.0) / 2)  # half the share, half the lift


def test_the_exact_judge_is_stricter_than_bfcls_where_bfcl_accepts_another_value():
    possible = [{"get_weather": {"city": ["Lyon"], "unit": ["celsius", ""]}}]
    gold_bfcl = make_gold(TOOLS, [LYON], possible)
    only_city = parse_tool_calls(hermes({"name": "get_weather", "arguments": {"city": "Lyon"}}))
    assert decision_outcome(only_city, gold_bfcl, "bfcl")[0] == "right"
    assert decision_outcome(only_city, gold_bfcl, "exact")[0] == "wrong"


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"partial": 1.5}, "partial share must lie in"),
        ({"right": -1.0, "wrong": -1.0}, "right call must be paid more"),
        ({"quiet": -1.0}, "must be paid more than calling there"),
        ({"judge": "partial"}, "judge must be one of bfcl, exact"),
    ],
)
def test_values_that_cannot_teach_the_decision_are_refused(settings, message):
    with pytest.raises(ValueError, match=message):
        DecisionValues(**settings)


def test_the_registry_scorer_and_the_trl_function_agree_and_log_error_kinds_under_its_name():
    completions = [RIGHT, NO_CALL, WRONG_VALUE, RIGHT]
    answers = [[LYON], [LYON], [LYON], []]
    logged = {}
    scores = tool_decision_reward(
        completions, [TOOLS] * 4, answers, log_metric=lambda key, value: logged.__setitem__(key, value)
    )
    assert scores == [1.0, 0.0, -1.0, -1.0]
    assert [score_completion("tool_decision", text, make_gold(TOOLS, gold)).score
            for text, gold in zip(completions, answers, strict=True)] == scores  # fmt: skip
    assert logged["tool_decision/missed_call"] == 0.25 and logged["tool_decision/unexpected_call"] == 0.25
    assert REWARDS["tool_decision"].function is tool_decision_reward
    custom = get_tool_decision_reward(VALUES)
    assert custom(completions, [TOOLS] * 4, answers) == [2.0, 0.25, -3.0, -1.5]
    assert custom.__name__ == "tool_decision_reward"  # trl logs it as rewards/tool_decision_reward/mean
