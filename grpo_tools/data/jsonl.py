"""One line of a JSONL file read as a row: what `read_jsonl` and `grpo-tools score`'s workers read each line with."""

from __future__ import annotations

import json
from typing import Any

import orjson

from grpo_tools.rewards.parsing import fastjson


__all__ = ["DataError", "json_type", "parse_jsonl_line"]


class DataError(ValueError):
    """Input that cannot be read as rows: a missing or unreadable file (the message names it), or one bad line."""


def json_type(value: Any) -> str:
    """The JSON type of a parsed value, in words, for messages ("an object", "a list", "a number", ...)."""
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}
    return names.get(type(value), "a number" if isinstance(value, int | float) else type(value).__name__)


def parse_jsonl_line(raw: bytes, number: int) -> dict[str, Any] | DataError | None:
    """One line of a JSONL file as `read_jsonl` reads it: the object, a `DataError` saying why it is not one, or None
    for a blank line; `number` is its 1-based line number (line 1 may start with a byte-order mark).

    >>> parse_jsonl_line(b'{"id": 1}\\n', 1), parse_jsonl_line(b"[1]", 2), parse_jsonl_line(b"  ", 3)
    ({'id': 1}, DataError('expected a JSON object, got a list'), None)
    """
    # The common case, read by orjson from the bytes: it reads only UTF-8 without a byte-order mark, and rejects NaN and
    # lone surrogates, so where it gives an object that is the object `json` gives (see `fastjson`), and the checks
    # below are for the lines it refuses.
    if fastjson.no_nineteen_digits(raw):
        try:
            value = orjson.loads(raw)
        except orjson.JSONDecodeError:
            pass
        else:
            if type(value) is dict:
                return value
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        return DataError(f"not UTF-8 text (byte {error.start})")
    if number == 1:
        line = line.removeprefix("\ufeff")  # a byte-order mark some editors write
    if not line.strip():
        return None
    try:
        value = fastjson.loads(line)  # json.loads's value or error, faster
    except json.JSONDecodeError as error:
        return DataError(f"not valid JSON ({error.msg} at column {error.colno})")
    except RecursionError:
        return DataError("not valid JSON (nested too deeply)")
    if not isinstance(value, dict):
        return DataError(f"expected a JSON object, got {json_type(value)}")
    return value
