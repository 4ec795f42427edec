"""Salesforce xLAM function-calling-60k (`--from xlam`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from grpo_tools.data.converters.base import (
    ConversionError,
    SourceContext,
    canonical_row,
    canonical_tools,
    gold_call,
    load_json,
    require,
    source_id,
)


def convert_xlam(row: Mapping[str, Any], index: int, context: SourceContext) -> list[dict[str, Any]]:
    """Salesforce xLAM function-calling-60k: `query`, and `tools` and `answers` as JSON strings."""
    query = require(row, "query", str)
    tools = canonical_tools(require(row, "tools", (str, list)), "tools")
    answers = require(row, "answers", (str, list))
    answers = load_json(answers, "answers") if isinstance(answers, str) else answers
    if not isinstance(answers, list):
        raise ConversionError(f"answers: expected a list of calls, got {type(answers).__name__}")
    calls = [gold_call(answer, f"answers[{i}]") for i, answer in enumerate(answers)]
    return [canonical_row(source_id(row, index), [{"role": "user", "content": query}], tools, calls)]
