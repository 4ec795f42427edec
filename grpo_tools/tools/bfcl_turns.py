"""BFCL's multi-turn rows cut into per-turn rows a trainer can use (`grpo-tools convert --from bfcl ... --per-turn`).

trl finds an environment's tools among its methods, and BFCL offers different functions per row and per turn, so a
whole BFCL conversation does not fit `environment_factory`. A per-turn row does fit trl: it is a single-turn row
(`messages`, `tools`, `answers`) whose prompt is the conversation up to one user turn, with the earlier turns taken
from the ground truth (its calls as assistant `tool_calls`, their results, run by `BFCLSession`'s safe executor, as
`tool` messages), and whose `env` tells the outcome reward (`grpo_tools.tools.bfcl_turn_reward`) how to rebuild the
APIs in the state the ground truth leaves before that turn. The model writes all of the turn's calls at once and sees
no result within the turn; the reward runs them in order and applies BFCL's checks for that turn.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from grpo_tools.data.converters import main as convert_rows_main
from grpo_tools.data.converters.base import ConversionError
from grpo_tools.tools.bfcl import BFCLSession


__all__ = ["ADDITIONAL_FUNCTION_MESSAGE", "convert_main", "per_turn_rows", "turn_tools"]


# What BFCL's inference says at a turn that only brings held-out functions (`DEFAULT_USER_PROMPT_FOR_ADDITIONAL_
# FUNCTION_FC` in bfcl_eval.constants.default_prompts); the function docs themselves come with the row's `tools`.
ADDITIONAL_FUNCTION_MESSAGE = "I have updated some more functions you can choose from. What about now?"


def turn_tools(row: Mapping[str, Any], turn: int, answers: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The tools a BFCL multi-turn row offers at `turn` (from 0): all of them but those held out until a later turn,
    except a function the turn's ground truth (`answers`) calls: BFCL's ground truth once calls a held-out function
    before its turn (`multi_turn_miss_func_49`, turn 1, `tail`), which no model offered only the others could match."""
    later = {
        name for held, names in row["env"].get("missed_function", {}).items() if int(held) > turn for name in names
    }
    later -= {call["name"] for call in answers}
    return [tool for tool in row["tools"] if tool["function"]["name"] not in later]


def _turn_messages(row: Mapping[str, Any], turn: int) -> list[dict[str, Any]]:
    messages = row["env"]["turns"][turn]
    return list(messages) or [{"role": "user", "content": ADDITIONAL_FUNCTION_MESSAGE}]


def per_turn_rows(row: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One single-turn row per user turn of a canonical BFCL multi-turn row (`env.name == "bfcl"`, `expected`).

    Row `<id>-turn<t>`: `messages` the user turns 0..t, each earlier one followed by the ground truth's calls of that
    turn as one assistant message with `tool_calls` and one `tool` message per call with its result (a turn whose
    ground truth is empty adds no assistant message); `tools` those offered at turn t (`turn_tools`); `answers` the
    ground truth's calls of turn t, arguments by name (`[]` where BFCL expects no call); `category` `multi_turn`;
    `env` the multi-turn row's `env` without `turns`, plus `turn` (t) and `ground_truth` (BFCL's calls of turns
    0..t, as `expected` writes them), which is all the reward needs to rebuild the state before turn t.
    `ConversionError` when the row is not a BFCL multi-turn row.
    """
    env, expected = row.get("env"), row.get("expected")
    if not isinstance(env, Mapping) or env.get("name") != "bfcl" or not isinstance(expected, list):
        raise ConversionError("--per-turn: not a BFCL multi-turn row (env.name 'bfcl' and expected)")
    session = BFCLSession.from_env(env, as_checker=True)  # the ground truth runs as BFCL's checker runs it
    history: list[dict[str, Any]] = []
    rows, start = [], 0
    base_env = {key: value for key, value in env.items() if key != "turns"}
    for turn, gold_texts in enumerate(expected):
        answers = row["answers"][start : start + len(gold_texts)]
        start += len(gold_texts)
        history += _turn_messages(row, turn)
        tools = turn_tools(row, turn, answers)
        out = {"id": f"{row['id']}-turn{turn}", "messages": list(history), "tools": tools, "answers": answers}
        if row.get("possible_answers"):
            out["possible_answers"] = row["possible_answers"][start - len(gold_texts) : start]
        out["category"] = "multi_turn"
        out["env"] = {**base_env, "turn": turn, "ground_truth": [list(calls) for calls in expected[: turn + 1]]}
        rows.append(out)
        session.start_turn(turn)
        results = [session.call_text(text) for text in gold_texts]
        if gold_texts:
            calls = [{"type": "function", "function": dict(call)} for call in answers]
            history.append({"role": "assistant", "content": "", "tool_calls": calls})
            history += [{"role": "tool", "name": result.name, "content": result.result} for result in results]
    return rows


def convert_main(argv: list[str]) -> int:
    """`grpo-tools convert`: the converters' command line (`grpo_tools.data.converters.main`), given `per_turn_rows`
    for `--per-turn`, which runs BFCL's APIs and so lives in this layer rather than with the converters."""
    return convert_rows_main(argv, per_turn=per_turn_rows)
