"""Converters from public tool-calling datasets to canonical rows (`grpo-tools convert`).

`CONVERTERS` is the one registry of source formats. Each converter turns one source row into a list of canonical
rows (see `grpo_tools.data.rows`) or raises `ConversionError` saying why it cannot:

- Single-turn sources (xLAM, BFCL) give one row and keep the source id.
- Conversations (Glaive, Hermes, ToolACE, OpenAI chat) give one row per assistant turn that calls tools, and one per
  assistant turn that answers without calling while tools are offered (`answers: []`). The row's `messages` are the
  conversation before that turn, in OpenAI layout (assistant turns with `tool_calls`, `{"role": "tool"}` turns); its
  id is `<source id, or the 0-based row index>-<index of that assistant turn among the assistant turns>`.
  A conversation that offers no tool and makes no call gives no row: there is nothing to learn about tool calling.
- The system prompts of Glaive, Hermes and ToolACE are dropped: they only list the tools and teach that dataset's
  call syntax, which the model's own chat template supplies when it renders `tools`.

`category` is derived from answers and tools (`derive_category`), except for BFCL, whose file name gives it.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from grpo_tools.data.converters.base import ConversionError, ConversionResult, Converter, RowFailure, SourceContext
from grpo_tools.data.converters.bfcl import bfcl_category, bfcl_files, convert_bfcl, load_ground_truth
from grpo_tools.data.converters.glaive import convert_glaive
from grpo_tools.data.converters.hermes import convert_hermes
from grpo_tools.data.converters.openai import convert_openai
from grpo_tools.data.converters.sources import read_source
from grpo_tools.data.converters.toolace import convert_toolace
from grpo_tools.data.converters.xlam import convert_xlam
from grpo_tools.data.rows import DataError, JsonlWriter, number_rows


__all__ = [
    "CONVERTERS",
    "ConversionError",
    "ConversionResult",
    "Converter",
    "RowFailure",
    "SourceContext",
    "bfcl_category",
    "bfcl_files",
    "convert_rows",
    "load_ground_truth",
    "main",
    "read_source",
]


CONVERTERS: dict[str, Converter] = {
    "xlam": Converter(convert_xlam, "Salesforce xLAM function-calling-60k (query, tools, answers as JSON strings)"),
    "glaive": Converter(convert_glaive, "Glaive function-calling v2 (system, chat with <functioncall>)"),
    "hermes": Converter(convert_hermes, "NousResearch Hermes function-calling v1 (ShareGPT, <tools>, <tool_call>)"),
    "toolace": Converter(convert_toolace, "Team-ACE ToolACE (system with a JSON tool list, pythonic [f(a=1)] calls)"),
    "bfcl": Converter(convert_bfcl, "BFCL question file + --answers possible-answer file, joined by id"),
    "openai": Converter(convert_openai, "OpenAI-style chat rows (messages with tool_calls, tools)"),
}


def convert_rows(
    source: str,
    rows: Iterable[Any],
    *,
    ground_truth: Mapping[str, Mapping[str, Any]] | None = None,
    category: str | None = None,
    sink: Callable[[dict[str, Any]], None] | None = None,
    expand: Callable[[dict[str, Any]], list[dict[str, Any]]] | None = None,
) -> ConversionResult:
    """Convert source rows of one format (a name in `CONVERTERS`) to canonical rows.

    `rows` holds row dicts or `(row number, row)` pairs as `read_source` yields them. A row that cannot be converted
    is recorded in `result.failures` with its number and reason, never dropped silently. BFCL needs `ground_truth`
    (possible-answer rows by id, see `load_ground_truth`) except for irrelevance, and takes `category` from its
    file name (`bfcl_category`). `sink`, when given, receives each canonical row instead of `result.rows`, so big
    datasets stream to a file. `expand`, when given, turns each canonical row into the rows written in its place
    (`--per-turn`); a `ConversionError` it raises is recorded as the source row's failure.

    >>> row = {"id": 1, "query": "Hi?", "tools": '[{"name": "f", "parameters": {}}]', "answers": "[]"}
    >>> convert_rows("xlam", [row]).rows[0]["category"]
    'irrelevance'
    """
    if source not in CONVERTERS:
        raise ValueError(f"unknown source format {source!r}; choose one of {', '.join(CONVERTERS)}")
    function = CONVERTERS[source].function
    context = SourceContext(ground_truth=ground_truth or {}, category=category)
    result = ConversionResult()
    for number, row in number_rows(rows):
        result.source_rows += 1
        if isinstance(row, DataError):
            result.failures.append(RowFailure(number, str(row)))
            continue
        if not isinstance(row, Mapping):
            result.failures.append(RowFailure(number, f"expected an object, got {type(row).__name__}"))
            continue
        try:
            converted = function(row, number - 1, context)
            if expand is not None:
                converted = [expanded for canonical in converted for expanded in expand(canonical)]
        # ConversionError and SchemaError are ValueErrors; the others come from rows shaped unlike the format.
        except ValueError as error:
            result.failures.append(RowFailure(number, str(error)))
            continue
        except (TypeError, KeyError, AttributeError) as error:
            reason = f"the row is not laid out as {source} rows are ({type(error).__name__}: {error})"
            result.failures.append(RowFailure(number, reason))
            continue
        if not converted:
            result.no_tool_rows += 1
        result.converted += len(converted)
        for canonical in converted:
            (sink or result.rows.append)(canonical)
    return result


def main(argv: list[str], per_turn: Callable[[dict[str, Any]], list[dict[str, Any]]] | None = None) -> int:
    """`grpo-tools convert --from FORMAT INPUT --output OUT.jsonl`: convert a public dataset to canonical rows.

    `per_turn` cuts a BFCL multi-turn row into per-turn rows for `--per-turn`; it runs BFCL's APIs, which this layer
    cannot import, so `grpo-tools convert` passes `grpo_tools.tools.bfcl_turns.per_turn_rows`."""
    parser = argparse.ArgumentParser(
        prog="grpo-tools convert",
        description="Convert a public tool-calling dataset to canonical rows (JSONL). Rows that cannot be "
        "converted are reported on stderr with their row number and counted in the summary.",
        epilog="formats:\n" + "\n".join(f"  {name:<8}  {c.description}" for name, c in CONVERTERS.items()),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--from", dest="source", required=True, choices=list(CONVERTERS), help="source format")
    parser.add_argument(
        "input",
        help="a .json, .jsonl or .parquet file, or else a Hugging Face dataset name; for --from bfcl also a category "
        "name (simple_python, live_multiple, ...) read from the installed bfcl-eval",
    )
    parser.add_argument(
        "--answers",
        help="BFCL possible-answer file (JSONL) to join by id; for --from bfcl (default: possible_answer/<same name> "
        "beside the input, BFCL's layout)",
    )
    parser.add_argument("--split", default="train", help="split of a Hugging Face dataset (default: train)")
    parser.add_argument("--output", "-o", required=True, help="canonical JSONL file to write")
    parser.add_argument("--strict", action="store_true", help="exit 1 when any source row cannot be converted")
    parser.add_argument(
        "--per-turn",
        action="store_true",
        help="for --from bfcl multi_turn_*: one row per user turn, the earlier turns taken from the ground truth and "
        "run (docs/multi-turn.md, 'Training on BFCL's multi-turn rows'); these rows train with the bfcl_turn reward",
    )
    args = parser.parse_args(argv)
    if args.answers and args.source != "bfcl":
        parser.error("--answers only applies to --from bfcl")
    if args.per_turn and (args.source != "bfcl" or per_turn is None):
        parser.error("--per-turn only applies to --from bfcl with a multi-turn category (multi_turn_base, ...)")

    try:
        category, ground_truth = None, None
        source = args.input
        if args.source == "bfcl":
            source, answers = bfcl_files(args.input, args.answers)
            category = bfcl_category(source)
            ground_truth = load_ground_truth(answers) if answers else None
            if args.per_turn and category != "multi_turn":
                parser.error(f"--per-turn only applies to BFCL's multi-turn categories, not {args.input!r}")
        rows = read_source(source, split=args.split)
        with JsonlWriter(args.output) as writer:
            result = convert_rows(
                args.source,
                rows,
                ground_truth=ground_truth,
                category=category,
                sink=writer.write,
                expand=per_turn if args.per_turn else None,
            )
    except DataError as error:
        print(f"grpo-tools convert: {error}", file=sys.stderr)
        return 2

    for failure in result.failures:
        print(f"{args.input}: row {failure.row}: {failure.reason}", file=sys.stderr)
    print(f"{result.summary()}; wrote {args.output}")
    nothing_converted = result.source_rows > 0 and result.converted == 0 and bool(result.failures)
    return 1 if nothing_converted or (args.strict and result.failures) else 0
