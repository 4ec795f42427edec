"""Datasets: canonical rows (read, check, categories), converters from public formats, prompts rendered with each
row's tools."""

from grpo_tools.data.converters import CONVERTERS, convert_rows, read_source
from grpo_tools.data.prompts import gold_message, load_rows, prompt_dataset, render_prompt
from grpo_tools.data.rows import CATEGORIES, DataError, check_rows, derive_category, read_jsonl, write_jsonl


__all__ = [
    "CATEGORIES",
    "CONVERTERS",
    "DataError",
    "check_rows",
    "convert_rows",
    "derive_category",
    "gold_message",
    "load_rows",
    "prompt_dataset",
    "read_jsonl",
    "read_source",
    "render_prompt",
    "write_jsonl",
]
