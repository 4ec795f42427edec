"""Canonical rows -> what trl trains on: prompts rendered with each row's own tools, and the gold assistant turn.

trl renders conversational prompts with one `tools=` list for the whole run, but every row here offers its own tools.
So each prompt is rendered here, with the row's tools, by the model's own chat template, and handed to trl as text;
the row's `tools`, `answers` and `possible_answers` travel as JSON strings (Arrow would otherwise merge the differing
schemas of different rows into one struct, filling absent keys with nulls), which the rewards read as they are.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from grpo_tools.data.rows import DataError, check_rows, read_jsonl


__all__ = ["NO_CALL_REPLY", "gold_message", "load_rows", "prompt_dataset", "render_messages", "render_prompt"]

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


def gold_completion(tokenizer: Any, row: dict[str, Any]) -> str:
    """The gold turn as the model's chat template writes it after `render_prompt`'s text (end-of-turn included)."""
    prompt = render_prompt(tokenizer, row)
    full = render_messages(tokenizer, [*row["messages"], gold_message(row)], row["tools"], generation_prompt=False)
    if not full.startswith(prompt):
        raise DataError(
            f"row id={row['id']}: the chat template does not render the assistant's answer as a continuation of "
            "the prompt, so its gold completion cannot be separated from the prompt"
        )
    return full[len(prompt) :]


def prompt_dataset(rows: list[dict[str, Any]], tokenizer: Any, with_gold: bool = False) -> Any:
    """A `datasets.Dataset` for `GRPOTrainer`: `prompt` (text) plus the columns the tool rewards read, and with
    `with_gold` the gold turn as `gold_completion`."""
    from datasets import Dataset

    records = []
    for row in rows:
        record = {"prompt": render_prompt(tokenizer, row), **_reward_columns(row)}
        if with_gold:
            record["gold_completion"] = gold_completion(tokenizer, row)
        records.append(record)
    return Dataset.from_list(records)


TOKENIZER_FILES = ("tokenizer_config.json", "tokenizer.json")  # a folder with neither holds no tokenizer to load


def check_model_folder(name: str) -> None:
    """Raise one `OSError` naming NAME when it is a file, or a folder here without the `config.json` every transformers
    model folder has (transformers raises a `ValueError` about `model_type` for it, after the tokenizer loaded). A
    name that is no folder here is left to `load_tokenizer`, since it may be a Hub id."""
    path = Path(name).expanduser()
    if path.is_file():
        raise OSError(f"{name}: a file, not a model folder")
    if path.is_dir() and not (path / "config.json").is_file():
        raise OSError(f"{name}: not a model folder (no config.json in it)")


def load_tokenizer(name: str, **kwargs: Any) -> Any:
    """`AutoTokenizer.from_pretrained(name, **kwargs)`, with one `OSError` naming NAME when it holds no tokenizer.

    For a missing folder, transformers tells the user to check the internet connection. Here the message says "no such
    folder", with the Hub's reason when NAME could be a Hub id (`owner/model`) and alone when it could not (`/...`,
    `./...`, `~/...`, two slashes or more). A file, or a folder without a tokenizer file (where transformers raises a
    `ValueError` about converting slow tokenizers), is "not a model folder".
    """
    from transformers import AutoTokenizer

    path = Path(name).expanduser()
    if path.is_file():
        raise OSError(f"{name}: a file, not a model folder")
    if path.is_dir() and not any((path / file).is_file() for file in TOKENIZER_FILES):
        raise OSError(f"{name}: not a model folder (no {' or '.join(TOKENIZER_FILES)} in it)")
    try:
        return AutoTokenizer.from_pretrained(name, **kwargs)
    except OSError as error:
        if path.exists():
            raise
        if name.startswith(("/", ".", "~")) or name.count("/") > 1:  # a path: no Hub id looks like it
            raise OSError(f"{name}: no such folder") from error
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise OSError(f"{name}: no such folder, and the Hugging Face Hub could not give it ({reason})") from error
