"""Datasets: canonical rows (read, check, categories), converters from public formats, prompts rendered with each
row's tools, and the bundled synthetic and mapping tasks."""

from grpo_tools.data.converters import CONVERTERS, convert_rows, read_source
from grpo_tools.data.prompts import gold_message, load_rows, prompt_dataset, render_prompt
from grpo_tools.data.rows import CATEGORIES, DataError, check_rows, derive_category, read_jsonl, write_jsonl
from grpo_tools.data.synthetic import generate_rows


__all__ = [
    "CATEGORIES",
    "CONVERTERS",
    "DataError",
    "check_rows",
    "convert_rows",
    "derive_category",
    "generate_rows",
    "gold_message",
    "load_rows",
    "prompt_dataset",
    "read_jsonl",
    "read_source",
    "render_prompt",
    "write_jsonl",
]
