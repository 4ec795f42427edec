"""`grpo-tools eval` on BFCL's multi-turn rows: whole conversations, judged by BFCL's verdict.

Each row is run as bfcl-eval runs a conversation for a model (`BaseHandler.inference_multi_turn_prompting`): the user
turns in order; within a turn, the model writes a step, our parser reads its calls from the text
(`grpo_tools.tools.bfcl_verdict.decode_step`, as `grpo-tools score` reads a raw step), the row's `BFCLSession` runs
them through its safe executor (never `eval`) and their results come back as tool messages, until a step holds no call
(the next turn starts) or the turn has run BFCL's step limit (`MAXIMUM_STEP_LIMIT`, 20: the conversation is forced to
quit, as BFCL quits it, and the row fails with `multi_turn:force_terminated`). A `miss_func` row's held-out functions
are offered from their turn on, announced by BFCL's own user message for that turn; the chat template puts tools in
the system prompt, so every step is rendered anew with the tools offered at its turn.

Every active conversation steps in lockstep: one batched, greedy generation per step for all of them. A conversation
also stops (forced to quit) when it has generated `max_conversation_tokens` tokens or its prompt no longer fits the
model's context, so a runaway model cannot hold an evaluation.

The predictions are BFCL's result layout (`{"id", "result"}`, per turn, per step, the model's raw text), so
`grpo-tools score` re-scores them and gets the same report; the report is `score`'s for BFCL (accuracy per category
and `overall`, their unweighted mean, as BFCL's leaderboard reports multi-turn accuracy) plus `conversations`.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grpo_tools.data.rows import DataError
from grpo_tools.tools.bfcl import BFCLSession
from grpo_tools.tools.bfcl_verdict import decode_step


__all__ = [
    "DEFAULT_MAX_CONVERSATION_TOKENS",
    "Conversation",
    "check_bfcl_rows",
    "evaluate_bfcl_multi_turn",
    "evaluate_bfcl_rows",
    "is_bfcl_rows",
    "model_generator",
    "run_conversations",
]

logger = logging.getLogger(__name__)

# Tokens a conversation may generate in all its steps together before it is stopped; BFCL's longest ground truth
# has 24 calls over 8 turns, which a model writes in well under 4,000 tokens.
DEFAULT_MAX_CONVERSATION_TOKENS = 8192

# A generator: prompts and a token limit per prompt in, one text per prompt out (greedy).
Generate = Callable[[list[str], int], list[str]]


def _env(row: dict[str, Any]) -> Any:
    env = row.get("env")
    if isinstance(env, str):
        try:
            return json.loads(env)
        except ValueError:
            return None
    return env


def is_bfcl_rows(rows: Sequence[dict[str, Any]]) -> bool:
    """True when every row is a BFCL multi-turn row (`env.name` is `bfcl`), False when none is; `DataError` naming
    one of each when they are mixed (BFCL's conversations and other rollouts are evaluated apart)."""
    flags = [isinstance(_env(row), dict) and _env(row).get("name") == "bfcl" for row in rows]
    if any(flags) and not all(flags):
        bfcl, other = rows[flags.index(True)], rows[flags.index(False)]
        raise DataError(
            f"rows mix BFCL multi-turn rows and other rows, e.g. id={bfcl.get('id')} and id={other.get('id')}; "
            "evaluate one kind at a time"
        )
    return bool(flags) and all(flags)


def check_bfcl_rows(rows: Sequence[dict[str, Any]], source: str) -> None:
    """`DataError` naming the file, row and field of every BFCL row a conversation cannot be run from (at most 20)."""
    from grpo_tools.data.bfcl_backends import check_bfcl_env
    from grpo_tools.data.converters.bfcl_multi_turn import ground_truth_problems

    problems = []
    for number, row in enumerate(rows, start=1):
        where = f"{source}: row {number} (id={row.get('id')})"
        env, turns = _env(row), None
        if not isinstance(env, dict) or not isinstance(env.get("involved_classes"), list):
            problems.append(f"{where}: env.involved_classes: missing; convert with `convert --from bfcl multi_turn_*`")
            continue
        turns = env.get("turns")
        if not isinstance(turns, list) or not all(
            isinstance(turn, list) and all(isinstance(m, dict) and isinstance(m.get("content"), str) for m in turn)
            for turn in turns
        ):
            problems.append(f"{where}: env.turns: expected per turn a list of messages {{role, content}}")
        elif not isinstance(row.get("expected"), list) or len(row["expected"]) != len(turns):
            problems.append(f"{where}: expected: BFCL's ground truth must have one list of calls per turn")
        elif not isinstance(row.get("tools"), list):
            problems.append(f"{where}: tools: missing")
        else:
            found = check_bfcl_env(env) + ground_truth_problems(row["expected"])
            problems += [f"{where}: {field}: {message}" for field, message in found]
    if problems:
        raise DataError("\n".join(problems[:20]) + f"\n{len(problems)} BFCL row(s) cannot be evaluated")


def _extra_turn_message() -> str:
    """BFCL's user message for a turn that only brings held-out functions (its function-calling wording: our chat
    template already lists the functions in the system prompt, where BFCL's prompting wording repeats them)."""
    from grpo_tools.data.converters.bfcl_multi_turn import bfcl_module

    return bfcl_module("bfcl_eval.constants.default_prompts").DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_FC


def _step_limit() -> int:
    from grpo_tools.data.converters.bfcl_multi_turn import bfcl_module

    return int(bfcl_module("bfcl_eval.constants.default_prompts").MAXIMUM_STEP_LIMIT)


@dataclass
class Conversation:
    """One row's conversation in progress: its session, the messages so far, and per turn the model's raw steps
    (`result`, BFCL's result layout). `stopped` says why it ended early (`step_limit`, `token_budget`, `context`,
    `unrenderable`, `budget:<kind>` when the model's calls broke the session's budget), None when it ran every
    turn."""

    row: dict[str, Any]
    session: BFCLSession
    messages: list[dict[str, Any]] = field(default_factory=list)
    result: list[list[str]] = field(default_factory=list)
    turn: int = -1
    steps_in_turn: int = 0
    generated_tokens: int = 0
    calls: int = 0
    stopped: str | None = None
    done: bool = False

    def tools(self) -> list[dict[str, Any]]:
        """The row's tools offered at the current turn (a held-out function from its turn on)."""
        offered = self.session.offered()
        return [tool for tool in self.row["tools"] if tool.get("function", tool).get("name") in offered]

    def next_turn(self, extra_turn_message: str) -> None:
        """Move to the next user turn, adding its messages; done after the last."""
        env = _env(self.row)
        self.turn += 1
        self.steps_in_turn = 0
        if self.turn >= len(env["turns"]):
            self.done = True
            return
        self.session.start_turn(self.turn)
        self.result.append([])
        messages = env["turns"][self.turn]
        if not messages and str(self.turn) in env.get("missed_function", {}):
            messages = [{"role": "user", "content": extra_turn_message}]
        self.messages += [{"role": m.get("role", "user"), "content": m["content"]} for m in messages]

    def stop(self, reason: str) -> None:
        self.stopped, self.done = reason, True


def run_conversations(
    rows: Sequence[dict[str, Any]],
    tokenizer: Any,
    generate: Generate,
    *,
    max_new_tokens: int = 256,
    max_conversation_tokens: int = DEFAULT_MAX_CONVERSATION_TOKENS,
    context_length: int | None = None,
    progress: bool = False,
) -> list[Conversation]:
    """Run every row's conversation, all in lockstep: each round renders the prompt of every active conversation
    with the tools of its turn, `generate` writes one step for all of them (at most `max_new_tokens` tokens each, less
    where a conversation's budget is nearly spent), and each step's calls run in that row's session."""
    from jinja2 import TemplateError
    from tqdm import tqdm

    from grpo_tools.data.prompts import render_messages

    extra, step_limit = _extra_turn_message(), _step_limit()
    conversations = [Conversation(dict(row), BFCLSession.from_env(_env(row))) for row in rows]
    for conversation in conversations:
        conversation.next_turn(extra)
    with tqdm(total=len(conversations), desc="BFCL conversations", disable=not progress or None) as bar:
        while active := [c for c in conversations if not c.done]:
            prompts, limits, stepping = [], [], []
            for conversation in active:
                try:
                    prompt = render_messages(tokenizer, conversation.messages, conversation.tools(), True)
                except TemplateError as error:  # a template may refuse a conversation (`raise_exception`)
                    logger.warning("row id=%s: the chat template cannot render it: %s", conversation.row["id"], error)
                    conversation.stop("unrenderable")
                    continue
                budget = max_conversation_tokens - conversation.generated_tokens
                length = len(tokenizer(prompt).input_ids)
                if context_length is not None and length + min(budget, max_new_tokens) > context_length:
                    conversation.stop("context")
                    continue
                prompts.append(prompt)
                limits.append(min(budget, max_new_tokens))
                stepping.append(conversation)
            texts = generate(prompts, max(limits)) if prompts else []
            for conversation, text, limit in zip(stepping, texts, limits, strict=True):
                # A batch generates up to its longest limit: a conversation keeps only what its own budget allows.
                ids = tokenizer(text, add_special_tokens=False).input_ids
                if len(ids) > limit:
                    text = tokenizer.decode(ids[:limit], skip_special_tokens=True)
                conversation.generated_tokens += min(len(ids), limit)
                spent = conversation.generated_tokens >= max_conversation_tokens
                _take_step(conversation, text, extra, step_limit, last=spent)
            bar.update(sum(c.done for c in conversations) - bar.n)
    return conversations


def _take_step(conversation: Conversation, text: str, extra: str, step_limit: int, last: bool) -> None:
    """Record one step's text, run its calls and show their results, or end the turn when it holds no call; `last`
    (the token budget is spent) stops the conversation after the step's calls, whatever turn it is in."""
    conversation.result[-1].append(text)
    conversation.messages.append({"role": "assistant", "content": text})
    calls = decode_step(text)
    if not calls and not last:  # BFCL: an empty response ends the turn
        conversation.next_turn(extra)
        return
    conversation.session.start_step()
    for call in calls:
        outcome = conversation.session.call(call.name, call.kwargs)
        conversation.calls += 1
        conversation.messages.append({"role": "tool", "name": outcome.name, "content": outcome.result})
        if conversation.session.exceeded is not None:  # the verdict fails the row at this call: nothing more to run
            conversation.stop(f"budget:{conversation.session.exceeded.kind}")
            return
    conversation.steps_in_turn += 1
    if last:
        conversation.stop("token_budget")
    elif conversation.steps_in_turn > step_limit:  # BFCL's `count > MAXIMUM_STEP_LIMIT`: the whole entry fails
        conversation.stop("step_limit")


def model_generator(model: Any, tokenizer: Any, batch_size: int) -> Generate:
    """Greedy batched generation with `model` (grpo-tools' evaluation generator), as `run_conversations` takes it."""
    from grpo_tools.evaluation.generation import generate_completions

    def generate(prompts: list[str], max_new_tokens: int) -> list[str]:
        return generate_completions(model, tokenizer, prompts, batch_size, max_new_tokens, progress=False)

    return generate


def evaluate_bfcl_multi_turn(
    rows: list[dict[str, Any]],
    tokenizer: Any,
    generate: Generate,
    output_dir: str | Path,
    *,
    label: str = "eval",
    max_new_tokens: int = 256,
    max_conversation_tokens: int = DEFAULT_MAX_CONVERSATION_TOKENS,
    context_length: int | None = None,
    progress: bool = True,
) -> dict[str, Any]:
    """Run the conversations and judge them with BFCL's verdict; write `<label>_data.jsonl` (the rows),
    `<label>_predictions.jsonl` (BFCL's result layout, plus each conversation's `messages` and `stopped`),
    `<label>_rows.jsonl` (the verdict per row) and `<label>_report.json`, and return the report: `score`'s report for
    BFCL's results plus `conversations` (steps, calls and generated tokens per conversation, and why any stopped)."""
    from grpo_tools.evaluation.bfcl_multi_turn import score_bfcl_multi_turn

    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    conversations = run_conversations(
        rows,
        tokenizer,
        generate,
        max_new_tokens=max_new_tokens,
        max_conversation_tokens=max_conversation_tokens,
        context_length=context_length,
        progress=progress,
    )
    data_path = output_dir / f"{label}_data.jsonl"
    predictions = output_dir / f"{label}_predictions.jsonl"
    data_path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    with predictions.open("w", encoding="utf-8") as handle:
        for c in conversations:
            line = {"id": c.row["id"], "result": c.result, "stopped": c.stopped, "messages": c.messages}
            handle.write(json.dumps(line, ensure_ascii=False) + "\n")
    report, _ = score_bfcl_multi_turn(data_path, predictions, per_row=output_dir / f"{label}_rows.jsonl")
    count = len(conversations)
    report["conversations"] = {
        "steps_per_conversation": sum(len(step) for c in conversations for step in c.result) / count,
        "calls_per_conversation": sum(c.calls for c in conversations) / count,
        "generated_tokens_per_conversation": sum(c.generated_tokens for c in conversations) / count,
        "stopped": dict(Counter(c.stopped for c in conversations if c.stopped).most_common()),
        "max_new_tokens": max_new_tokens,
        "max_conversation_tokens": max_conversation_tokens,
    }
    (output_dir / f"{label}_report.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return report


def evaluate_bfcl_rows(
    args: Any, model: Any, tokenizer: Any, rows: list[dict[str, Any]], label: str
) -> dict[str, Any]:
    """`evaluate_bfcl_multi_turn` as `grpo-tools eval` calls it, from its options (`--batch-size`, `--max-new-tokens`
    per step, `--max-conversation-tokens`, `--output-dir`, `--quiet`), bounded by the model's context."""
    return evaluate_bfcl_multi_turn(
        rows,
        tokenizer,
        model_generator(model, tokenizer, args.batch_size),
        args.output_dir,
        label=label,
        max_new_tokens=args.max_new_tokens,
        max_conversation_tokens=args.max_conversation_tokens,
        context_length=getattr(model.config, "max_position_embeddings", None),
        progress=not args.quiet,
    )
