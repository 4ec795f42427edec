"""BFCL's multi-turn verdict, computed with the safe executor (`grpo_tools.tools.bfcl`) instead of `eval`.

The rules are those of bfcl-eval's `multi_turn_checker` and of the runner around it (`_evaluate_single_multi_turn_entry`):

- a trajectory is a list of user turns, each a list of steps (one model response each), each a list of calls; a
  step that decodes to no call is dropped, as BFCL drops it;
- fewer (or more) turns than the ground truth fails the row (`multi_turn:force_terminated`);
- the model's calls and the ground truth's run on two fresh sets of the row's API instances, turn after turn, any
  method of the row's classes at any turn and with arguments of any type, as in BFCL's checker (a `miss_func`
  function called before its turn runs, `tail(lines=20.0)` runs; the environment a model acts in refuses both);
- after a turn whose ground truth has calls: the model must have made some (`multi_turn:empty_turn_model_response`),
  every instance's public attributes must equal the ground truth's (`multi_turn:instance_state_mismatch`), and the
  results of the model's calls so far, all turns together, must contain the results of this turn's ground-truth calls
  as a multiset (`multi_turn:execution_response_mismatch`);
- a turn whose ground truth is empty is not checked (the model's calls there still run, so that later turns see their
  effect), as in BFCL's checker;
- ours only: a call past the model session's budget (`grpo_tools.rewards.budget`: calls per step, turn and row,
  argument size, integer digits, results, time) fails the row at once (`multi_turn:budget_exceeded`), as the per-turn
  reward scores such a completion 0; BFCL's checker would run the call, and fails the row too wherever it changes the
  state (the parity test holds such trajectories).

`tests/tools/test_bfcl_verdict_parity.py` holds this equal to BFCL's own checker on all 800 rows of the four categories,
on the ground truth and on perturbations of it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from grpo_tools.data.converters.bfcl_multi_turn import ParsedCall
from grpo_tools.rewards.budget import Budget
from grpo_tools.rewards.parsing import load_json_or_literal, parse_tool_calls
from grpo_tools.tools.bfcl import BFCLSession, CallOutcome


__all__ = ["Verdict", "bfcl_verdict", "decode_step", "missing_results", "run_call", "state_difference"]


@dataclass(frozen=True)
class Verdict:
    """A row's verdict: whether BFCL would count it correct, and if not, BFCL's error type, the turn and why."""

    valid: bool
    error_type: str | None = None
    turn: int | None = None
    message: str = ""


def decode_step(step: Any) -> list[Any]:
    """The calls of one step of a BFCL result, `[]` when it holds none (BFCL drops such a step).

    A step is what BFCL's result files hold per model response: a list of call strings as its `decode_execute` writes
    them (`["cd(folder='temp')"]`), a list of `{name: arguments}` objects (function-calling models; arguments an object
    or its JSON text), a list of `{"name", "arguments"}` calls, or the model's raw text, read by our parser (Hermes,
    JSON, pythonic `[f(a=1)]`, ...; a pythonic call with a positional argument does not parse, where BFCL's prompting
    decoder drops the argument: the call fails either way). A call string stays text here: `BFCLSession.call_text`
    parses it, never evaluates.

    >>> decode_step([{"cd": '{"folder": "temp"}'}])
    [ParsedCall(name='cd', args=(), kwargs={'folder': 'temp'})]
    >>> decode_step("```[cd(folder='temp')]```")
    [ParsedCall(name='cd', args=(), kwargs={'folder': 'temp'})]
    """
    if isinstance(step, str):
        # BFCL's prompting decoder first strips backticks, newlines and spaces around the text.
        return [ParsedCall(call.name, (), dict(call.arguments)) for call in parse_tool_calls(step.strip("`\n ")).calls]
    if not isinstance(step, list):
        return []
    calls: list[Any] = []
    for item in step:
        if isinstance(item, str):
            calls.append(item)
        elif isinstance(item, dict) and set(item) == {"name", "arguments"} and isinstance(item["name"], str):
            calls.append(ParsedCall(item["name"], (), _arguments(item["arguments"])))
        elif isinstance(item, dict) and len(item) == 1:
            ((name, arguments),) = item.items()
            calls.append(ParsedCall(str(name), (), _arguments(arguments)))
    # BFCL's `is_empty_execute_response`: no call, or one empty call string.
    return [] if not calls or calls == [""] else calls


def _arguments(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return load_json_or_literal(value)
        except ValueError:
            return value  # not an object: the session refuses the call, as BFCL's decoding fails it
    return value


def run_call(session: BFCLSession, call: Any) -> CallOutcome:
    """Run one decoded call in `session`: a call string (parsed, never evaluated) or a `ParsedCall`."""
    if isinstance(call, ParsedCall):
        if call.args:
            return session._execute(call.name, call.args, call.kwargs)
        return session.call(call.name, call.kwargs)
    return session.call_text(call)


def state_difference(model: BFCLSession, truth: BFCLSession) -> str | None:
    """The first class whose public attributes differ, as BFCL's `_compare_instances` compares them, or None."""
    for class_name, gold in truth.instances.items():
        ours = model.instances[class_name]
        for attribute, value in vars(gold).items():
            if not attribute.startswith("_") and getattr(ours, attribute) != value:
                return f"{class_name}.{attribute} differs from the ground truth's"
    return None


def missing_results(expected: Sequence[str], obtained: Sequence[str]) -> list[str]:
    """The expected results that `obtained` lacks, counted as a multiset (BFCL's `_is_subsequence_unordered`)."""
    left = list(obtained)
    missing = []
    for item in expected:
        if item in left:
            left.remove(item)
        else:
            missing.append(item)
    return missing


def bfcl_verdict(
    env: Mapping[str, Any], ground_truth: Sequence[Sequence[str]], trajectory: Any, budget: Budget | None = None
) -> Verdict:
    """BFCL's verdict on a trajectory for one multi-turn row, computed without `eval`.

    `env` is the row's `env` (`involved_classes`, `initial_config`, `long_context`, `missed_function`),
    `ground_truth` its `expected` (per turn, BFCL's call strings), `trajectory` per turn the steps, each as
    `decode_step` reads it; `budget` bounds what the model's calls may cost (`Budget()`'s defaults when None).

    >>> env = {"involved_classes": ["MathAPI"]}
    >>> bfcl_verdict(env, [["add(a=1, b=2)"]], [[["add(b=2, a=1)"]]]).valid
    True
    >>> bfcl_verdict(env, [["add(a=1, b=2)"]], [[["add(a=1, b=3)"]]]).error_type
    'multi_turn:execution_response_mismatch'
    """
    if not isinstance(trajectory, list):
        return Verdict(False, "multi_turn:inference_error", None, "the result is not a list of turns")
    if len(trajectory) != len(ground_truth):
        message = f"{len(trajectory)} turns where the ground truth has {len(ground_truth)}"
        return Verdict(False, "multi_turn:force_terminated", None, message)
    # As BFCL's checker: a held-out function runs whenever it is called, arguments of any type reach the method.
    model = BFCLSession.from_env(env, as_checker=True, budget=budget)
    truth = BFCLSession.from_env(env, as_checker=True)
    results_so_far: list[str] = []
    for turn, (steps, gold_calls) in enumerate(zip(trajectory, ground_truth, strict=True)):
        model.start_turn(turn)
        truth.start_turn(turn)
        decoded = [calls for calls in map(decode_step, steps if isinstance(steps, list) else []) if calls]
        for calls in decoded:
            model.start_step()
            for call in calls:
                results_so_far.append(run_call(model, call).result)
                if model.exceeded is not None:
                    message = f"{model.exceeded.kind}: {model.exceeded.message}"
                    return Verdict(False, "multi_turn:budget_exceeded", turn, message)
        gold_results = [truth.call_text(call).result for call in gold_calls]
        if not gold_calls:
            continue
        if not decoded:
            return Verdict(False, "multi_turn:empty_turn_model_response", turn, f"no call in turn {turn}")
        difference = state_difference(model, truth)
        if difference is not None:
            return Verdict(False, "multi_turn:instance_state_mismatch", turn, difference)
        missing = missing_results(gold_results, results_so_far)
        if missing:
            message = f"{len(missing)} ground-truth result(s) of turn {turn} not obtained, e.g. {missing[0][:200]!r}"
            return Verdict(False, "multi_turn:execution_response_mismatch", turn, message)
    return Verdict(True)
