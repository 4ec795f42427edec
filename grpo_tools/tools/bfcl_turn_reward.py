"""The outcome reward of BFCL's per-turn rows (`bfcl_turn`): BFCL's verdict on one turn, computed without `eval`.

For a completion of a per-turn row (`grpo_tools.tools.bfcl_turns`), the row's APIs are rebuilt in the state the
ground truth leaves before the turn (its earlier turns replayed by `BFCLSession`, once per row, then deep-copied for
each completion of the group), the completion's calls are read by our parser and run in order as one step, and the
turn is judged by BFCL's rules (`grpo_tools.tools.bfcl_verdict`): no call where the ground truth has some fails; the
APIs' public state must equal the ground truth's after the turn (state check); the results of the calls so far (the
ground truth's in earlier turns, the completion's in this one) must contain the results of the turn's ground-truth
calls (response check). A turn whose ground truth is empty is one where BFCL expects no call (a function is missing,
a parameter is missing): it pays 1 when the completion calls nothing, 0 otherwise, as every grpo-tools reward does for
`answers: []` (BFCL's checker does not check such a turn).

Options (`get_bfcl_turn_reward`), each documented in docs/multi-turn.md with how it can be gamed: `partial_credit`
`state` (0.5 when the state check passes but the response check fails), `calls` (0.5 x the share of the turn's
state-changing ground-truth calls the completion made exactly), and `extra_call_cost` (subtracted per call beyond the
ground truth's count; the calls counted are at most the budget's `calls_per_step`). A completion whose calls break the
budget (`grpo_tools.rewards.budget`) scores as wrong: no credit, less the extra-call cost, as in the verdict. Text is
only ever parsed: a call runs only as a method of the row's API classes, with literal
arguments.
"""

from __future__ import annotations

import copy
import functools
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from grpo_tools.rewards.budget import DEFAULT_BUDGET, Budget, Meter
from grpo_tools.tools.bfcl import BFCLSession, CallOutcome
from grpo_tools.tools.bfcl_verdict import decode_step, missing_results, run_call, state_difference


__all__ = ["PARTIAL_CREDIT", "TurnStart", "bfcl_turn_reward", "get_bfcl_turn_reward", "score_turn", "turn_start"]


PARTIAL_CREDIT = ("none", "state", "calls")
PartialCredit = Literal["none", "state", "calls"]
_CACHED_ROWS = 64  # a batch holds a few prompts; their groups come together


@dataclass(frozen=True)
class TurnStart:
    """A per-turn row's turn, prepared once: the APIs before the turn (`before`, copied for each completion, never run
    on), after the ground truth's calls of the turn (`after`), the results of the ground truth's earlier calls, the
    turn's ground-truth results, and its state-changing calls (name and arguments as the executor bound them)."""

    turn: int
    before: BFCLSession
    after: BFCLSession
    earlier_results: tuple[str, ...]
    gold_results: tuple[str, ...]
    state_changing: tuple[tuple[str, str], ...]


def _call_key(outcome: CallOutcome) -> tuple[str, str]:
    return outcome.name, json.dumps(outcome.arguments, sort_keys=True, default=repr)


@functools.lru_cache(maxsize=_CACHED_ROWS)
def turn_start(env_text: str) -> TurnStart:
    """The prepared turn of a per-turn row's `env` (as JSON text: the column trl passes; the cache key)."""
    env = json.loads(env_text)
    ground_truth, turn = env["ground_truth"], int(env["turn"])
    session = BFCLSession.from_env(env, as_checker=True)  # BFCL's checker runs the ground truth this way
    earlier: list[str] = []
    for index in range(turn):
        session.start_turn(index)
        earlier += [session.call_text(text).result for text in ground_truth[index]]
    session.start_turn(turn)
    after = copy.deepcopy(session)
    gold_results, changing = [], []
    for text in ground_truth[turn]:
        state = copy.deepcopy(after.state())
        outcome = after.call_text(text)
        gold_results.append(outcome.result)
        if after.state() != state:
            changing.append(_call_key(outcome))
    return TurnStart(turn, session, after, tuple(earlier), tuple(gold_results), tuple(changing))


def _env_text(env: Any) -> str:
    if isinstance(env, str):
        return env
    if isinstance(env, Mapping):
        return json.dumps(env, sort_keys=True)
    raise ValueError(f"bfcl_turn needs the `env` of a per-turn BFCL row, got {type(env).__name__}")


def _completion_text(completion: Any) -> str:
    if isinstance(completion, str):
        return completion
    # trl's conversational completions: the assistant messages' text, in order
    return "\n".join(str(m.get("content") or "") for m in completion if isinstance(m, dict))


def score_turn(
    completion: Any,
    env: Any,
    partial_credit: PartialCredit = "none",
    extra_call_cost: float = 0.0,
    budget: Budget | None = None,
) -> float:
    """One completion's reward on one per-turn row (see the module's docstring)."""
    budget = budget or DEFAULT_BUDGET
    start = turn_start(_env_text(env))
    calls = decode_step(_completion_text(completion))
    extra = extra_call_cost * max(0, min(len(calls), budget.calls_per_step) - len(start.gold_results))
    if not start.gold_results:
        return (0.0 if calls else 1.0) - extra
    if not calls:
        return 0.0
    session = copy.deepcopy(start.before)
    session.meter = Meter(budget)  # the completion's own budget, not what the ground truth's earlier turns spent
    outcomes = []
    for call in calls:
        outcomes.append(run_call(session, call))
        if session.exceeded is not None:
            return 0.0 - extra
    state_ok = state_difference(session, start.after) is None
    results = [*start.earlier_results, *(outcome.result for outcome in outcomes)]
    if state_ok and not missing_results(start.gold_results, results):
        return 1.0 - extra
    credit = 0.0
    if partial_credit == "state" and state_ok:
        credit = 0.5
    elif partial_credit == "calls" and start.state_changing:
        made = [_call_key(outcome) for outcome in outcomes]
        credit = 0.5 * len(_found(start.state_changing, made)) / len(start.state_changing)
    return credit - extra


def _found(expected: Sequence[tuple[str, str]], made: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
    """The expected calls `made` contains, counted as a multiset."""
    left, found = list(made), []
    for call in expected:
        if call in left:
            left.remove(call)
            found.append(call)
    return found


def get_bfcl_turn_reward(
    partial_credit: PartialCredit = "none", extra_call_cost: float = 0.0, budget: Budget | None = None
) -> Callable[..., list[float]]:
    """`bfcl_turn` as a trl reward function with its options; trl passes the row's `env` column as `env`. `budget`
    bounds what one completion's calls may cost (`Budget()`'s defaults when None).

    >>> reward = get_bfcl_turn_reward()
    >>> env = {"involved_classes": ["MathAPI"], "turn": 0, "ground_truth": [["add(a=1, b=2)"]]}
    >>> reward(["[add(a=1, b=2)]", "[add(a=1, b=3)]", "__import__('os').getcwd()"], env=[env] * 3)
    [1.0, 0.0, 0.0]
    """
    if partial_credit not in PARTIAL_CREDIT:
        raise ValueError(f"partial_credit must be one of {', '.join(PARTIAL_CREDIT)}, got {partial_credit!r}")

    def bfcl_turn_reward(completions: Sequence[Any], env: Sequence[Any] | None = None, **kwargs: Any) -> list[float]:
        if env is None:
            raise ValueError("bfcl_turn scores per-turn BFCL rows (`grpo-tools convert --from bfcl ... --per-turn`)")
        return [
            score_turn(completion, row_env, partial_credit, extra_call_cost, budget)
            for completion, row_env in zip(completions, env, strict=True)
        ]

    return bfcl_turn_reward


bfcl_turn_reward = get_bfcl_turn_reward()
