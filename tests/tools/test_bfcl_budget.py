"""One hostile completion on BFCL's multi-turn APIs never crashes, hangs or skews a run (issue 72): a huge integer
literal scores as wrong instead of raising out of the session, the per-turn reward or the verdict; calls past the
budget's caps are refused and make the completion wrong; a number written as text too long to compute is refused
before it runs; process-wide numeric contexts are as they were after every call; what BFCL's classes take from module
globals belongs to each session alone."""

from __future__ import annotations

import decimal
import json

import mpmath
import pytest

from grpo_tools.tools.bfcl import BFCLSession
from grpo_tools.tools.bfcl_turn_reward import bfcl_turn_reward
from grpo_tools.tools.bfcl_verdict import bfcl_verdict


pytest.importorskip("bfcl_eval", reason="bfcl-eval is not installed (`make install` installs it)")

HUGE_HEX = "0x" + "f" * 3572  # 4,301 decimal digits: Python refuses to write it in decimal
MATH_ENV = {"involved_classes": ["MathAPI"], "turn": 0, "ground_truth": [["add(a=1, b=2)"]]}


def test_a_huge_integer_literal_scores_as_wrong_everywhere():
    completion = f"[add(a={HUGE_HEX}, b=1)]"
    assert bfcl_turn_reward([completion, "[add(a=1, b=2)]"], env=[MATH_ENV] * 2) == [0.0, 1.0]
    verdict = bfcl_verdict(MATH_ENV, [["add(a=1, b=2)"]], [[completion]])
    assert not verdict.valid
    # A right call after the huge one does not make the completion right: the budget was broken.
    assert not bfcl_verdict(MATH_ENV, [["add(a=1, b=2)"]], [[[f"add(a={HUGE_HEX}, b=1)", "add(a=1, b=2)"]]]).valid
    session = BFCLSession(["MathAPI"])
    for outcome in (session.call_text(f"add(a={HUGE_HEX}, b=1)"), session.call("add", {"a": 16**3572, "b": 1})):
        assert outcome.status != "ok" and outcome.result.startswith("Error during execution")
        json.dumps([outcome.name, outcome.arguments, outcome.result])  # a refused call is plain data


def test_a_number_written_as_text_too_long_to_compute_is_refused_before_it_runs():
    # BFCL's checker does not check types, so the verdict and the per-turn reward run what the schema would refuse.
    session = BFCLSession.from_env({"involved_classes": ["MathAPI"]}, as_checker=True)
    outcome = session.call_text("logarithm(value='1e" + "9" * 4300 + "', base=2, precision=1000)")
    assert outcome.status not in ("ok", "exception")  # refused before it ran, not computed for seconds
    assert session.call_text("logarithm(value=8, base=2, precision=3)").status != "ok"  # the completion is spent


@pytest.mark.parametrize(
    "call", ["square_root(number=2, precision=1)", "logarithm(value=8, base=2, precision=3)", "mean(numbers=[1, 2])"]
)
def test_numeric_contexts_are_as_they_were_after_a_call(call):
    before = decimal.getcontext().prec, mpmath.mp.prec
    session = BFCLSession(["MathAPI"])
    assert session.call_text(call).status == "ok"
    assert (decimal.getcontext().prec, mpmath.mp.prec) == before
    assert str(decimal.Decimal("66.95").quantize(decimal.Decimal("0.1"))) == "67.0"  # evaluation/usable.py's pattern


def test_what_a_session_shows_is_what_bfcl_shows_at_the_precision_asked():
    # BFCL writes the result while its precision is still set: the session computes and writes it the same way.
    assert BFCLSession(["MathAPI"]).call_text("square_root(number=2, precision=3)").result == (
        "{'result': Decimal('1.41')}"
    )


def test_a_sessions_state_is_its_own_even_what_bfcl_takes_from_module_globals():
    config = {"TravelAPI": {"access_token": "t", "token_expires_in": 10, "budget_limit": None}}
    card = "2345678923456789"  # one of BFCL's long-context cards, kept in a module-level dict

    def balance() -> float:
        session = BFCLSession(["TravelAPI"], config, long_context=True)
        return json.loads(session.call_text(f"get_credit_card_balance(access_token='t', card_id='{card}')").result)[
            "card_balance"
        ]

    first = balance()
    spender = BFCLSession(["TravelAPI"], config, long_context=True)
    booking = next(iter(spender.state()["TravelAPI"]["booking_record"]))
    outcome = spender.call(
        "purchase_insurance",
        {
            "access_token": "t",
            "insurance_type": "comprehensive",
            "booking_id": booking,
            "insurance_cost": 1000.0,
            "card_id": card,
        },
    )
    assert outcome.status == "ok" and "insurance_id" in outcome.result
    assert balance() == first


def test_the_per_turn_reward_is_immune_to_other_sessions():
    config = {"TravelAPI": {"access_token": "t", "token_expires_in": 10, "budget_limit": None}}
    card = "2345678923456789"
    gold = f"get_credit_card_balance(access_token='t', card_id='{card}')"
    env = {
        "involved_classes": ["TravelAPI"],
        "initial_config": config,
        "long_context": True,
        "turn": 0,
        "ground_truth": [[gold]],
    }
    assert bfcl_turn_reward([f"[{gold}]"], env=[env]) == [1.0]
    spender = BFCLSession(["TravelAPI"], config, long_context=True)
    booking = next(iter(spender.state()["TravelAPI"]["booking_record"]))
    spender.call(
        "purchase_insurance",
        {
            "access_token": "t",
            "insurance_type": "comprehensive",
            "booking_id": booking,
            "insurance_cost": 1000.0,
            "card_id": card,
        },
    )
    assert bfcl_turn_reward([f"[{gold}]"], env=[env]) == [1.0]


def test_calls_past_the_cap_make_a_completion_wrong_and_end_quickly():
    env = {
        "involved_classes": ["MessageAPI"],
        "initial_config": {},
        "turn": 0,
        "ground_truth": [["message_login(user_id='USR001')"]],
    }
    right = "[message_login(user_id='USR001')]"
    flood = "[message_login(user_id='USR001'), " + ", ".join(["list_users()"] * 1000) + "]"
    assert bfcl_turn_reward([right, flood], env=[env] * 2) == [1.0, 0.0]


def test_a_conversation_that_would_exhaust_an_apis_ids_is_refused_before_it_hangs():
    # BFCL's MessageAPI draws message ids from 90,000 values and loops forever once they are used up.
    session = BFCLSession(["MessageAPI"], {})
    session.call_text("message_login(user_id='USR001')")
    statuses = {session.call_text("send_message(receiver_id='USR002', message='hi')").status for _ in range(90_001)}
    assert "ok" in statuses and len(statuses) == 2


def test_the_training_configuration_sets_the_per_turn_rewards_budget(tmp_path):
    from grpo_tools.training.configs import ToolGRPOConfig
    from grpo_tools.training.errors import ConfigError
    from grpo_tools.training.reward_funcs import training_rewards

    three = "[" + ", ".join(["add(a=1, b=2)"] * 3) + "]"
    config = ToolGRPOConfig(output_dir=str(tmp_path), use_cpu=True, reward_funcs=["bfcl_turn"])
    ((reward,), _) = training_rewards(config, multi_turn=False)
    assert reward([three], env=[MATH_ENV]) == [1.0]  # extra read-only calls pass BFCL's checks
    config = ToolGRPOConfig(
        output_dir=str(tmp_path), use_cpu=True, reward_funcs=["bfcl_turn"], budget_calls_per_step=2
    )
    ((reward,), _) = training_rewards(config, multi_turn=False)
    assert reward([three, "[add(a=1, b=2)]"], env=[MATH_ENV] * 2) == [0.0, 1.0]
    with pytest.raises(ConfigError, match="budget_integer_digits"):
        ToolGRPOConfig(output_dir=str(tmp_path), use_cpu=True, budget_integer_digits=0)
