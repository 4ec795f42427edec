"""`json.loads` through orjson, which is faster, wherever orjson reads a text exactly as `json` does.

The rewards read JSON on every completion (each Hermes call) and on every distinct row (its tools, answers and
possible answers), and at BFCL's row sizes that reading is most of a reward's time. orjson and `json` agree on every
text both accept, with three differences, all handled here by letting `json` read the text:
- orjson rejects `NaN`, `Infinity` and numbers that overflow to infinity, which `json` reads as floats;
- orjson rejects lone surrogates (`"\\ud800"`), which `json` reads into the string;
- orjson reads integers beyond 64 bits as floats, where `json` keeps them exact: any text holding 19 digits in a row
  (a float with many digits, a long string of digits, as well as such an integer) goes to `json`.
"""

from __future__ import annotations

import json
from typing import Any

import orjson


__all__ = ["DIGITS_AS_ZERO", "NINETEEN_DIGITS", "loads", "no_nineteen_digits", "orjson_reads_as_json"]

# Every digit read as "0", to look for a run of 19 (faster than a regular expression, which tries every position).
# Searched with `bytes.find`, not `in`: on Python 3.11 `in` first tries its operand as an integer (a byte value) and
# builds a TypeError's message before it searches, which took as long as the search.
DIGITS_AS_ZERO = bytes.maketrans(b"123456789", b"000000000")
NINETEEN_DIGITS = b"0" * 19


def orjson_reads_as_json(text: str) -> bool:
    """Whether `orjson.loads(text)`, when it succeeds, gives what `json.loads(text)` gives: no run of 19 digits (an
    integer beyond 64 bits) and no lone surrogate. Where orjson fails, `json` may still read the text."""
    # A long ASCII text (a row's tools) first: a run of 19 digits covers two neighbouring characters of every ninth.
    if len(text) > 512 and text.isascii() and text[::9].encode().translate(DIGITS_AS_ZERO).find(b"00") < 0:
        return True
    try:
        return text.encode().translate(DIGITS_AS_ZERO).find(NINETEEN_DIGITS) < 0
    except UnicodeEncodeError:  # a lone surrogate
        return False


def no_nineteen_digits(data: bytes) -> bool:
    """Whether `data` (UTF-8, as a JSONL line is read) has no run of 19 digits, the test `orjson_reads_as_json` makes
    of a text's digits."""
    # A long line first: a run of 19 digits covers two neighbouring bytes of every ninth.
    if len(data) > 512 and data[::9].translate(DIGITS_AS_ZERO).find(b"00") < 0:
        return True
    return data.translate(DIGITS_AS_ZERO).find(NINETEEN_DIGITS) < 0


def loads(text: str) -> Any:
    """`json.loads(text)`: the same value, or the same error.

    >>> loads('{"city": "Lyon", "days": [1, 2], "big": 123456789012345678901234567890}')
    {'city': 'Lyon', 'days': [1, 2], 'big': 123456789012345678901234567890}
    """
    if orjson_reads_as_json(text):
        try:
            return orjson.loads(text)
        except orjson.JSONDecodeError:
            pass  # NaN, an infinity, or not JSON at all: `json` reads it or raises its own error
    return json.loads(text)
