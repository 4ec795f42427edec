"""BFCL's per-turn rows and their outcome reward (`bfcl_turn`): `grpo-tools convert --from bfcl multi_turn_* --per-turn`
writes one row per user turn that `check-data` accepts, its history the ground truth's calls and their real results,
its tools those offered at that turn; the reward pays the ground truth's calls of the turn 1, a dropped state-changing
call or a wrong argument 0 (the partial-credit options in between), gives BFCL's verdict on the turn, keeps the
completions of a group apart, and runs nothing of hostile text; training refuses whole BFCL conversations, pointing at
the per-turn rows."""

from __future__ import annotations

import builtins
import copy
import json
import os

import pytest


pytest.importorskip("bfcl_eval", reason="bfcl-eval is not installed (`make install` installs it)")

from grpo_tools.cli import main
from grpo_tools.data.rows import DataError, check_rows, read_jsonl
from grpo_tools.tools import is_multi_turn
from grpo_tools.tools.bfcl import BFCLSession
from grpo_tools.tools.bfcl_turn_reward import get_bfcl_turn_reward, score_turn, turn_start
from grpo_tools.tools.bfcl_turns import ADDITIONAL_FUNCTION_MESSAGE
from grpo_tools.tools.bfcl_verdict import bfcl_verdict


def _convert(tmp_path, category: str, per_turn: bool = True) -> list[dict]:
    path = tmp_path / f"{category}.jsonl"
    assert (
        main(["convert", "--from", "bfcl", category, "--output", str(path), *(["--per-turn"] if per_turn else [])])
        == 0
    )
    return [row for _, row in read_jsonl(path)]


@pytest.fixture(scope="module")
def whole(tmp_path_factory) -> dict[str, list[dict]]:
    out = tmp_path_factory.mktemp("bfcl-whole")
    return {
        category: _convert(out, category, per_turn=False) for category in ("multi_turn_base", "multi_turn_miss_func")
    }


@pytest.fixture(scope="module")
def per_turn(tmp_path_factory) -> dict[str, list[dict]]:
    out = tmp_path_factory.mktemp("bfcl-per-turn")
    return {category: _convert(out, category) for category in ("multi_turn_base", "multi_turn_miss_func")}


def hermes(calls: list[dict]) -> str:
    return "".join(
        f"<tool_call>{json.dumps({'name': c['name'], 'arguments': c['arguments']})}</tool_call>" for c in calls
    )


def _state_changing(row: dict) -> list[int]:
    """The indices of the turn's ground-truth calls that change the APIs' state, run in order from the state before
    the turn (a naive replay, independent of the reward's own bookkeeping)."""
    session = BFCLSession.from_env(row["env"], as_checker=True)
    for turn, calls in enumerate(row["env"]["ground_truth"][:-1]):
        session.start_turn(turn)
        for text in calls:
            session.call_text(text)
    session.start_turn(row["env"]["turn"])
    changing = []
    for i, call in enumerate(row["answers"]):
        before = copy.deepcopy(session.state())
        session.call(call["name"], dict(call["arguments"]))
        if session.state() != before:
            changing.append(i)
    return changing


def _mutated(calls: list[dict], index: int) -> list[dict] | None:
    """The calls with one argument of call `index` changed (a string suffixed, a number plus one), or None."""
    calls = copy.deepcopy(calls)
    arguments = calls[index]["arguments"]
    for key, value in arguments.items():
        if isinstance(value, str):
            arguments[key] = value + "_x"
            return calls
        if isinstance(value, int | float) and not isinstance(value, bool):
            arguments[key] = value + 1
            return calls
    return None


@pytest.mark.parametrize("category", ["multi_turn_base", "multi_turn_miss_func"])
def test_one_row_per_user_turn_with_the_ground_truth_as_history_and_check_data_accepts_them(category, whole, per_turn):
    rows, sources = per_turn[category], whole[category]
    assert check_rows(rows) == []
    assert len(rows) == sum(len(source["expected"]) for source in sources)
    by_id = {row["id"]: row for row in rows}
    for source in sources[:40]:
        offset = 0
        for turn, gold in enumerate(source["expected"]):
            row = by_id[f"{source['id']}-turn{turn}"]
            assert row["answers"] == source["answers"][offset : offset + len(gold)]
            offset += len(gold)
            assert row["env"]["turn"] == turn and row["env"]["ground_truth"] == source["expected"][: turn + 1]
            assert row["env"]["scenario"] == source["env"]["scenario"]
            # the history: every earlier call as an assistant tool call, each followed by its result
            calls = [c["function"] for m in row["messages"] if m["role"] == "assistant" for c in m["tool_calls"]]
            assert calls == source["answers"][: offset - len(gold)]
            assert len([m for m in row["messages"] if m["role"] == "tool"]) == len(calls)
            assert row["messages"][-1]["role"] == "user"


def test_history_results_are_what_the_ground_truth_calls_return(per_turn):
    row = next(r for r in per_turn["multi_turn_base"] if r["id"] == "multi_turn_base_0-turn3")
    session = BFCLSession.from_env(row["env"], as_checker=True)
    expected = []
    for turn, calls in enumerate(row["env"]["ground_truth"][:3]):
        session.start_turn(turn)
        expected += [session.call_text(text).result for text in calls]
    shown = [m["content"] for m in row["messages"] if m["role"] == "tool"]
    assert shown == expected and any(result.startswith("{") for result in shown)
    assert not any(result.startswith("Error during execution") for result in shown)


def test_held_out_functions_are_offered_from_their_turn_with_bfcls_message(per_turn):
    rows = [r for r in per_turn["multi_turn_miss_func"] if r["env"]["missed_function"]]
    checked = 0
    for row in rows:
        offered = {tool["function"]["name"] for tool in row["tools"]}
        for held, names in row["env"]["missed_function"].items():
            called_now = {call["name"] for call in row["answers"]}
            if int(held) > row["env"]["turn"]:
                assert not (set(names) - called_now) & offered
                checked += 1
            else:
                assert set(names) <= offered
            if int(held) == row["env"]["turn"]:
                assert row["messages"][-1] == {"role": "user", "content": ADDITIONAL_FUNCTION_MESSAGE}
    assert checked > 100


def test_the_ground_truths_calls_score_1_on_every_turn(per_turn):
    for row in per_turn["multi_turn_base"]:
        assert score_turn(hermes(row["answers"]), row["env"]) == 1.0, row["id"]


def _turns_with(per_turn, predicate):
    return [r for r in per_turn["multi_turn_base"] if predicate(r)][:25]


def test_a_dropped_state_changing_call_or_a_wrong_argument_scores_0_and_bfcls_verdict_agrees(per_turn):
    rows = [r for r in per_turn["multi_turn_base"] if len(r["answers"]) >= 2][:40]
    checked = 0
    for row in rows:
        changing = _state_changing(row)
        wrong = _mutated(row["answers"], changing[-1]) if changing else None
        if wrong is None:
            continue
        dropped = [call for i, call in enumerate(row["answers"]) if i != changing[-1]]
        for calls in (dropped, wrong, row["answers"]):
            score = score_turn(hermes(calls), row["env"])
            earlier = [[list(turn)] for turn in row["env"]["ground_truth"][:-1]]
            trajectory = [*earlier, [[{"name": c["name"], "arguments": c["arguments"]} for c in calls]]]
            verdict = bfcl_verdict(row["env"], row["env"]["ground_truth"], trajectory)
            assert score == float(verdict.valid) == float(calls is row["answers"]), (row["id"], calls)
        checked += 1
    assert checked >= 10


def test_partial_credit_pays_the_share_of_state_changing_calls_made_and_the_state_check(per_turn):
    none, state, calls = (get_bfcl_turn_reward(option) for option in ("none", "state", "calls"))
    checked = 0
    for row in [r for r in per_turn["multi_turn_base"] if len(r["answers"]) >= 2][:60]:
        changing = _state_changing(row)
        read_only = [i for i in range(len(row["answers"])) if i not in changing]
        if len(changing) < 2 or not read_only:
            continue
        env = [row["env"]]
        # one of n state-changing calls dropped: the state check fails; `calls` pays 0.5 x (n - 1) / n
        one_dropped = hermes([c for i, c in enumerate(row["answers"]) if i != changing[-1]])
        assert none([one_dropped], env=env) == state([one_dropped], env=env) == [0.0]
        assert calls([one_dropped], env=env) == [pytest.approx(0.5 * (len(changing) - 1) / len(changing))]
        # the turn's last call, a read-only one, dropped: the state check passes (no later call depended on it);
        # where the response check then fails, `state` pays 0.5 and `calls` (every state-changing call made) 0.5
        no_read = hermes(row["answers"][:-1])
        if read_only[-1] == len(row["answers"]) - 1 and none([no_read], env=env) == [0.0]:
            assert state([no_read], env=env) == [0.5] and calls([no_read], env=env) == [0.5]
            checked += 1
        # an extra read-only call beyond the ground truth's count costs what the option says on a right turn
        extra = hermes([*row["answers"], row["answers"][read_only[0]]])
        assert get_bfcl_turn_reward("none", extra_call_cost=0.25)([extra], env=env) == [0.75]
    assert checked >= 3


def test_a_group_is_scored_from_one_replay_and_its_completions_stay_apart(per_turn):
    row = next(r for r in per_turn["multi_turn_base"] if r["env"]["turn"] == 2 and r["answers"])
    env_text = json.dumps(row["env"], sort_keys=True)
    turn_start.cache_clear()
    wrong = hermes([{"name": row["answers"][0]["name"], "arguments": {}}, *row["answers"][1:]])
    group = [wrong, hermes(row["answers"]), "no call", hermes(row["answers"])]
    assert get_bfcl_turn_reward()(group, env=[env_text] * 4) == [0.0, 1.0, 0.0, 1.0]
    assert turn_start.cache_info().misses == 1


def test_hostile_text_scores_0_and_runs_nothing(per_turn, monkeypatch, tmp_path):
    marker = tmp_path / "pwned"
    row = next(r for r in per_turn["multi_turn_base"] if r["answers"])
    calls = []
    for name in ("eval", "exec"):
        monkeypatch.setattr(builtins, name, lambda *a, _n=name, **k: calls.append(_n))
    monkeypatch.setattr(os, "system", lambda *a, **k: calls.append("system"))
    before = turn_start(json.dumps(row["env"], sort_keys=True)).before.state()
    snapshot = copy.deepcopy(before)
    hostile = [
        f"[__import__('os').system('touch {marker}')]",
        f"<tool_call>{json.dumps({'name': '__import__', 'arguments': {'name': 'os'}})}</tool_call>",
        f"<tool_call>{json.dumps({'name': '_load_scenario', 'arguments': {'scenario': {}}})}</tool_call>",
        f"<tool_call>{json.dumps({'name': 'eval', 'arguments': {'source': 'open(1)'}})}</tool_call>",
        "[cd.__globals__['__builtins__']['eval']('1')]",
        f"<tool_call>{json.dumps({'name': row['answers'][0]['name'], 'arguments': {'x': 'y' * 30_000}})}</tool_call>",
    ]
    assert get_bfcl_turn_reward()(hostile, env=[row["env"]] * len(hostile)) == [0.0] * len(hostile)
    assert calls == [] and not marker.exists()
    assert turn_start(json.dumps(row["env"], sort_keys=True)).before.state() == snapshot


def test_training_refuses_whole_bfcl_conversations_and_takes_per_turn_rows(whole, per_turn):
    with pytest.raises(DataError, match=r"row id=multi_turn_base_0: .*--per-turn"):
        is_multi_turn(whole["multi_turn_base"][:1])
    assert is_multi_turn(per_turn["multi_turn_base"][:5]) is False


def test_per_turn_applies_only_to_bfcls_multi_turn_sets(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["convert", "--from", "bfcl", "simple_python", "--per-turn", "--output", str(tmp_path / "x.jsonl")])
    assert "--per-turn only applies to BFCL's multi-turn categories" in capsys.readouterr().err
