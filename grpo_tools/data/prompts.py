"""Canonical rows -> what trl trains on: prompts rendered with each row's own tools, and the gold assistant turn.

trl renders conversational prompts with one `tools=` list for the whole run, but every row here offers its own tools.
So each prompt is rendered here, with the row's tools, by the model's own chat template, and handed to trl as text;
the row's `tools`, `answers` and `possible_answers` travel as JSON strings (Arrow would otherwise merge the differing
schemas of different rows into one struct, filling absent keys with nulls), which the rewards read as they are.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from typing import Any

from grpo_tools.data.rows import DataError, check_rows, read_jsonl


__all__ = [
    "NO_CALL_REPLY",
    "UNRENDERABLE_ROWS",
    "RenderFailure",
    "UnrenderableRowsError",
    "gold_message",
    "load_rows",
    "prompt_dataset",
    "render_messages",
    "render_prompt",
    "render_row",
    "rendered_rows",
]

logger = logging.getLogger(__name__)

# What the warm start teaches a model to say when no offered tool fits the request.
NO_CALL_REPLY = "Sorry, none of the available tools can help with that."


def load_rows(source: str | os.PathLike[str], limit: int | None = None) -> list[dict[str, Any]]:
    """Read canonical rows from a JSONL file (or a Hugging Face dataset name), checked as `check-data` checks them;
    raise `DataError` listing every problem with its row and field."""
    path = os.fspath(source)
    if path.endswith(".parquet"):
        # Arrow merges the differing tool schemas of different rows into one struct, filling absent keys with nulls.
        raise DataError(f"{path}: training reads canonical rows from JSONL files (or a Hugging Face dataset name)")
    if os.path.exists(path) or path.endswith((".jsonl", ".json")):
        numbered = list(read_jsonl(path))
    else:
        from datasets import load_dataset

        numbered = list(enumerate(load_dataset(path, split="train"), start=1))
    if limit is not None:
        numbered = numbered[:limit]
    problems = [f"{path}: row {number}: {row}" for number, row in numbered if isinstance(row, DataError)]
    rows = [(number, row) for number, row in numbered if not isinstance(row, DataError)]
    problems += [f"{path}: {problem}" for problem in check_rows(rows)]
    if problems:
        more = f"\n... and {len(problems) - 20} more" if len(problems) > 20 else ""
        raise DataError("\n".join(problems[:20]) + more + f"\n`grpo-tools check-data {path}` lists every problem")
    if not rows:
        raise DataError(f"{path}: no rows")
    return [row for _, row in rows]


def render_messages(
    tokenizer: Any, messages: list[dict[str, Any]], tools: list[dict[str, Any]], generation_prompt: bool
) -> str:
    """Messages and tools rendered by the model's chat template as text, as trl tokenizes prompts (one BOS)."""
    text = tokenizer.apply_chat_template(
        messages, tools=tools or None, add_generation_prompt=generation_prompt, tokenize=False
    )
    # trl tokenizes text prompts with special tokens added; a template that writes BOS itself would get two.
    bos = getattr(tokenizer, "bos_token", None)
    if bos and text.startswith(bos) and tokenizer("x").input_ids[:1] == [tokenizer.bos_token_id]:
        text = text[len(bos) :]
    return text


def render_prompt(tokenizer: Any, row: dict[str, Any]) -> str:
    """The row's conversation and tools rendered by the model's chat template, ready for the assistant's turn."""
    return render_messages(tokenizer, row["messages"], row["tools"], generation_prompt=True)


def gold_message(row: dict[str, Any]) -> dict[str, Any]:
    """The assistant turn that answers a row correctly, in the OpenAI / transformers message layout."""
    if not row["answers"]:
        return {"role": "assistant", "content": NO_CALL_REPLY}
    tool_calls = [
        {"type": "function", "function": {"name": call["name"], "arguments": call.get("arguments", {})}}
        for call in row["answers"]
    ]
    return {"role": "assistant", "content": "", "tool_calls": tool_calls}


def _reward_columns(row: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": str(row["id"]),
        "category": row.get("category") or "",
        "tools": json.dumps(row["tools"]),
        "answers": json.dumps(row["answers"]),
        "possible_answers": json.dumps(row["possible_answers"]) if row.get("possible_answers") else None,
    }


def gold_completion(tokenizer: Any, row: dict[str, Any], prompt: str | None = None) -> str:
    """The gold turn as the model's chat template writes it after `render_prompt`'s text (`prompt`, when already
    rendered), end-of-turn included."""
    prompt = render_prompt(tokenizer, row) if prompt is None else prompt
    full = render_messages(tokenizer, [*row["messages"], gold_message(row)], row["tools"], generation_prompt=False)
    if not full.startswith(prompt):
        raise _NotAContinuation(
            f"row id={row['id']}: the chat template does not render the assistant's answer as a continuation of "
            "the prompt, so its gold completion cannot be separated from the prompt"
        )
    return full[len(prompt) :]


def prompt_dataset(
    rows: list[dict[str, Any]],
    tokenizer: Any,
    with_gold: bool = False,
    unrenderable_rows: str = "error",
    source: str | None = None,
) -> Any:
    """A `datasets.Dataset` for `GRPOTrainer`: `prompt` (text) plus the columns the tool rewards read, and with
    `with_gold` the gold turn as `gold_completion`. Rows the chat template cannot render are handled as
    `unrenderable_rows` says (see `rendered_rows`; `source` names the rows in its messages)."""
    from datasets import Dataset

    records = []
    # BFCL's per-turn rows carry `env`, which their reward (`bfcl_turn`) reads to rebuild the APIs: as JSON text
    with_env = any("env" in row for row in rows)
    for row, rendered in rendered_rows(rows, tokenizer, with_gold, unrenderable_rows, source):
        record = {"prompt": rendered["prompt"], **_reward_columns(row)}
        if with_env:
            record["env"] = json.dumps(row["env"], sort_keys=True) if "env" in row else None
        if with_gold:
            record["gold_completion"] = rendered["gold_completion"]
        records.append(record)
    return Dataset.from_list(records)


# ------------------------------------------------------------------------------ rows a chat template cannot render

UNRENDERABLE_ROWS = ("error", "skip")  # what training does with them: stop with one message, or leave them out
TRAIN_SWITCH = "set `unrenderable_rows: skip` (--unrenderable_rows skip) to go on without them"


class _NotAContinuation(DataError):
    """The template writes the prompt differently once the gold turn follows it (one row's rendering, not its data)."""


class UnrenderableRowsError(DataError):
    """Rows the model's chat template cannot render; the message names each row and the template's own reason, and
    `failures` holds them."""

    def __init__(self, message: str, failures: list[RenderFailure]) -> None:
        super().__init__(message)
        self.failures = failures


@dataclass(frozen=True)
class RenderFailure:
    """A row the chat template cannot render: its id, the part that failed (`prompt` or `gold turn`), and why, in the
    template's own words (e.g. Llama 3.2's "This model only supports single tool-calls at once!")."""

    row_id: str
    part: str
    reason: str

    def __str__(self) -> str:
        return f"row id={self.row_id}: {self.part}: {self.reason}"


def render_row(tokenizer: Any, row: dict[str, Any], with_gold: bool = False) -> dict[str, str] | RenderFailure:
    """The row's `prompt` (and with `with_gold` its `gold_completion`) as the chat template writes them, or the
    `RenderFailure` saying why the template cannot (a template may refuse a conversation it cannot express, such as
    an assistant turn with several calls, with jinja's `raise_exception`)."""
    from jinja2 import TemplateError

    row_id = str(row.get("id"))
    try:
        prompt = render_prompt(tokenizer, row)
    except TemplateError as error:
        return RenderFailure(row_id, "prompt", str(error) or type(error).__name__)
    if not with_gold:
        return {"prompt": prompt}
    try:
        return {"prompt": prompt, "gold_completion": gold_completion(tokenizer, row, prompt)}
    except TemplateError as error:
        return RenderFailure(row_id, "gold turn", str(error) or type(error).__name__)
    except _NotAContinuation as error:
        return RenderFailure(row_id, "gold turn", str(error).split(": ", 1)[1])


def rendered_rows(
    rows: list[dict[str, Any]],
    tokenizer: Any,
    with_gold: bool = False,
    unrenderable_rows: str = "error",
    source: str | None = None,
    switch: str = TRAIN_SWITCH,
) -> list[tuple[dict[str, Any], dict[str, str]]]:
    """Each row the chat template renders, with `render_row`'s texts. The others are never dropped silently: with
    `unrenderable_rows="error"`, one `UnrenderableRowsError` counts and names them (each with the template's reason)
    and ends with `switch`, the option that goes on without them; with `"skip"`, one warning line counts them and
    names the first few, and they are left out."""
    if unrenderable_rows not in UNRENDERABLE_ROWS:
        raise ValueError(f"unrenderable_rows must be one of {', '.join(UNRENDERABLE_ROWS)}, got {unrenderable_rows!r}")
    kept, failures = [], []
    for row in rows:
        rendered = render_row(tokenizer, row, with_gold)
        if isinstance(rendered, RenderFailure):
            failures.append(rendered)
        else:
            kept.append((row, rendered))
    if not failures:
        return kept
    where = f"{source}: " if source else ""
    template = (
        f"the chat template of {tokenizer.name_or_path}"
        if getattr(tokenizer, "name_or_path", "")
        else "the chat template"
    )
    if unrenderable_rows == "error" or not kept:  # skipping every row would leave nothing to train on
        lines = [f"{where}{failure}" for failure in failures[:20]]
        more = [f"... and {len(failures) - 20} more"] if len(failures) > 20 else []
        header = f"{where}{len(failures)} of {len(rows)} rows cannot be rendered by {template}:"
        last = switch if unrenderable_rows == "error" else "no row is left to train on"
        raise UnrenderableRowsError("\n".join([header, *lines, *more, last]), failures)
    named = "; ".join(str(failure) for failure in failures[:3])
    more = f"; and {len(failures) - 3} more" if len(failures) > 3 else ""
    logger.warning(
        "%sleft out %d of %d rows %s cannot render: %s%s", where, len(failures), len(rows), template, named, more
    )
    return kept
