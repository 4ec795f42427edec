"""Evaluation of multi-turn tool use: greedy rollouts through the same environments as training.

`run_rollouts` builds token ids exactly as trl's `_tool_call_loop` does (the prompt, then each turn's generated ids,
then the template's rendering of the tool messages, with trl's token budget and turn limit), parses each turn with
trl's `parse_response` and executes calls with `dispatch_tool_call`, so a model is evaluated on what it was trained
on. `evaluate_multi_turn` scores the rollouts by their outcome and reports them in the scoring report's layout.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grpo_tools.tools.environments import DEFAULT_TOOL_TIMEOUT, ToolEnvironment, get_environment
from grpo_tools.tools.trajectories import (
    answer_matches,
    dataset_record,
    dispatch_tool_call,
    final_answer,
    rollout_stats,
    summarize_stats,
    tool_suffix_ids,
    trajectory_calls_text,
)


__all__ = ["ResponseParsingError", "Rollout", "evaluate_multi_turn", "run_rollouts"]


class ResponseParsingError(ValueError):
    """The tokenizer has no response template and trl knows none for its chat template: calls cannot be parsed."""


def use_response_parser(tokenizer: Any) -> None:
    """Give a tokenizer without a response template (or legacy schema) trl's for its chat template, as trl's
    `GRPOTrainer` does before its tool loop: a Hub tokenizer (Qwen2.5, Llama 3.x) ships none, and without one
    `parse_response` cannot read a single call."""
    if getattr(tokenizer, "response_template", None) is not None or getattr(tokenizer, "response_schema", None):
        return
    from trl import add_response_schema

    try:
        add_response_schema(tokenizer)
    except ValueError as error:
        raise ResponseParsingError(
            f"{tokenizer.name_or_path}: no response template to parse tool calls with, and trl knows none for this "
            f"chat template; set one on the tokenizer (`response_template`) ({error})"
        ) from None


@dataclass
class Rollout:
    """One row's rollout in progress: its environment, tools, token ids so far and the messages after the prompt."""

    row: dict[str, Any]
    environment: ToolEnvironment
    tools: list[Callable[..., Any]]
    prompt_ids: list[int]
    completion_ids: list[int] = field(default_factory=list)
    tool_mask: list[int] = field(default_factory=list)  # 1 for generated tokens, 0 for tool results (as trl's)
    messages: list[dict[str, Any]] = field(default_factory=list)
    done: bool = False


def _generate(model: Any, tokenizer: Any, sequences: list[list[int]], max_new_tokens: int) -> list[list[int]]:
    """Greedy continuations of token-id sequences (left-padded), each cut after its first end-of-turn token."""
    import torch

    pad = tokenizer.pad_token_id
    width = max(len(ids) for ids in sequences)
    input_ids = torch.tensor([[pad] * (width - len(ids)) + ids for ids in sequences])  # (B, T)
    attention_mask = torch.tensor([[0] * (width - len(ids)) + [1] * len(ids) for ids in sequences])  # (B, T)
    output = model.generate(
        input_ids=input_ids.to(model.device),
        attention_mask=attention_mask.to(model.device),
        max_new_tokens=max_new_tokens,
        do_sample=False,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=pad,
    )  # (B, T + new)
    continuations = []
    for ids in output[:, width:].tolist():
        end = ids.index(tokenizer.eos_token_id) + 1 if tokenizer.eos_token_id in ids else len(ids)
        continuations.append(ids[:end])
    return continuations


def run_rollouts(
    model: Any,
    tokenizer: Any,
    rows: Sequence[dict[str, Any]],
    *,
    batch_size: int = 32,
    max_new_tokens: int = 128,
    max_turns: int = 4,
    timeout: float = DEFAULT_TOOL_TIMEOUT,
    progress: bool = False,
    bar: Any = None,
) -> list[Rollout]:
    """Roll every row out greedily, as trl's tool loop does: generate a turn, execute its calls, append the tool
    results, generate again, until the model answers without a call or `max_turns` assistant turns are written.

    `max_new_tokens` bounds the whole trajectory after the prompt, generated and tool tokens together (trl's
    `max_completion_length`): a turn is cut where the budget ends, and tool results that would not fit are dropped,
    leaving the rollout without an answer, as trl does. Each finished rollout counts on `bar` (a tqdm bar the caller
    keeps over more rows than these), else on a bar of its own when `progress`.
    """
    import torch
    from tqdm import tqdm
    from trl.chat_template_utils import parse_response

    use_response_parser(tokenizer)
    rollouts = []
    for row in rows:
        environment = get_environment(row)(timeout=timeout)
        # The row as trl hands it to `reset` in training: a state check may read any column
        environment.reset(**dataset_record(row))
        tools = environment._chat_tools()
        prompt_ids = tokenizer.apply_chat_template(
            row["messages"], tools=tools, add_generation_prompt=True, tokenize=True, return_dict=False
        )
        rollouts.append(Rollout(row, environment, tools, list(prompt_ids)))
    context = getattr(model.config, "max_position_embeddings", None) or 2**31
    was_training = model.training
    model.eval()
    try:
        own_bar = None
        if bar is None:
            bar = own_bar = tqdm(total=len(rollouts), desc="rollouts", disable=not progress or None)
        with torch.no_grad(), own_bar if own_bar is not None else nullcontext():
            for turn in range(max_turns):
                active = [rollout for rollout in rollouts if not rollout.done]
                for start in range(0, len(active), batch_size):
                    batch = active[start : start + batch_size]
                    sequences = [rollout.prompt_ids + rollout.completion_ids for rollout in batch]
                    budgets = [max_new_tokens - len(rollout.completion_ids) for rollout in batch]
                    generated = _generate(model, tokenizer, sequences, max(budgets))
                    for rollout, sequence, ids, budget in zip(batch, sequences, generated, budgets, strict=True):
                        ids = ids[:budget]
                        message = parse_response(tokenizer, ids, prefix=sequence, tools=rollout.tools)
                        rollout.completion_ids += ids
                        rollout.tool_mask += [1] * len(ids)
                        rollout.messages.append(message)
                        calls = message.get("tool_calls")
                        cut = not ids or ids[-1] != tokenizer.eos_token_id
                        if calls and not cut and turn < max_turns - 1:
                            tool_messages = [dispatch_tool_call(rollout.environment, call) for call in calls]
                            suffix = tool_suffix_ids(tokenizer, tool_messages)
                            length = len(rollout.completion_ids) + len(suffix)
                            if length <= max_new_tokens and len(rollout.prompt_ids) + length < context:
                                rollout.messages += tool_messages
                                rollout.completion_ids += suffix
                                rollout.tool_mask += [0] * len(suffix)
                                continue
                        rollout.done = True
                        bar.update(1)
    finally:
        model.train(was_training)
    return rollouts


def _report(rollouts: Sequence[Rollout], label: str, predictions: Path) -> dict[str, Any]:
    from grpo_tools.rewards import make_gold, score_completion

    by_category: dict[str, dict[str, Any]] = {}
    by_task: dict[str, dict[str, Any]] = {}
    errors: Counter[str] = Counter()
    correct_total = calls_exact = 0
    for rollout in rollouts:
        row = rollout.row
        answer = final_answer(rollout.messages)
        correct = answer_matches(answer, row["expected"])
        if not correct:
            errors["no_answer" if answer is None else "wrong_answer"] += 1
        gold = make_gold(row["tools"], row["answers"], row.get("possible_answers"), f"row id={row['id']}")
        verdict = score_completion("tool_exact", trajectory_calls_text(rollout.messages), gold)
        errors.update(set(verdict.errors))
        calls_exact += verdict.correct
        correct_total += correct
        state = json.loads(row["env"]) if isinstance(row["env"], str) else row["env"]
        task = state.get("task", "")
        for table, key in ((by_category, row.get("category") or "multi_turn"), (by_task, task)):
            entry = table.setdefault(key, {"rows": 0, "correct": 0})
            entry["rows"] += 1
            entry["correct"] += correct
    for table in (by_category, by_task):
        for entry in table.values():
            entry["accuracy"] = entry["correct"] / entry["rows"]
    count = len(rollouts)
    accuracy = correct_total / count if count else 0.0
    tools = summarize_stats([rollout_stats(rollout.environment, rollout.messages) for rollout in rollouts])
    return {
        "scorer": "outcome",
        "data": label,
        "predictions": str(predictions),
        "rows": {"data": count, "predictions": count, "scored": count, "missing_prediction": 0,
                 "unmatched_prediction": 0, "unreadable": 0},
        "accuracy": accuracy,
        "mean_reward": accuracy,  # the outcome reward is 0 or 1, so its mean is the accuracy
        "by_category": by_category,
        "by_task": dict(sorted(by_task.items())),
        "errors": dict(sorted(errors.items())),
        "call_accuracy": calls_exact / count if count else 0.0,
        "tools": tools,
    }  # fmt: skip


def evaluate_multi_turn(
    model: Any,
    tokenizer: Any,
    rows: list[dict[str, Any]],
    output_dir: Any,
    *,
    label: str = "eval",
    batch_size: int = 32,
    max_new_tokens: int = 128,
    max_turns: int = 4,
    timeout: float = DEFAULT_TOOL_TIMEOUT,
    progress: bool = True,
) -> dict[str, Any]:
    """Greedy rollouts of every row through its environment; writes `<label>_predictions.jsonl` (`{"id",
    "completion", "messages"}`, the completion being the decoded text after the prompt, tool results included) and
    `<label>_report.json`, and returns the report.

    The report has the scoring report's layout, scored by the outcome (`accuracy`, `mean_reward`, `by_category`,
    `rows`, `errors`: `no_answer`, `wrong_answer` and the call error kinds of the trajectory's calls under
    `tool_exact`), plus `by_task`, `call_accuracy` (the trajectory's calls equal the gold calls) and `tools`: calls
    and turns per rollout and failures per call, overall (`failure_rate`) and by kind (`failures`).
    """
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    from tqdm import tqdm

    # `batch_size` rows at a time, each with its environment: an MCP server's process and working copy live only
    # until their rows' state is checked, so at most `batch_size` servers run at once, however many rows there are.
    rollouts: list[Rollout] = []
    checks: list[float] = []
    with tqdm(total=len(rows), desc="rollouts", disable=not progress or None) as bar:  # one bar over every chunk
        for start in range(0, len(rows), max(1, batch_size)):
            chunk = run_rollouts(
                model,
                tokenizer,
                rows[start : start + max(1, batch_size)],
                batch_size=batch_size,
                max_new_tokens=max_new_tokens,
                max_turns=max_turns,
                timeout=timeout,
                bar=bar,
            )
            for rollout in chunk:
                if hasattr(rollout.environment, "get_reward"):  # an MCP server's state check of the working copy
                    checks.append(rollout.environment.get_reward())
                rollout.environment._close()  # an MCP environment's server and working copy go now, not at exit
            rollouts += chunk
    predictions = output_dir / f"{label}_predictions.jsonl"
    with predictions.open("w", encoding="utf-8") as handle:
        for rollout in rollouts:
            completion = tokenizer.decode(rollout.completion_ids, skip_special_tokens=True)
            line = {"id": rollout.row["id"], "completion": completion, "messages": rollout.messages}
            handle.write(json.dumps(line, ensure_ascii=False, default=str) + "\n")
    report = _report(rollouts, label, predictions)
    if checks:  # the state checks of the rollouts' working copies (`grpo_tools.tools.mcp_env`)
        report["state_check"] = sum(checks) / len(checks)
    (output_dir / f"{label}_report.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return report
