"""`parse_jsonl_line` reads a line as `json` does: the same object, or the same kind of message, for the lines orjson
reads (its fast path) and for every line it refuses (byte-order marks, text that is not UTF-8, NaN, lone surrogates,
integers beyond 64 bits, blank lines, values that are not objects, lines cut short)."""

import json
import random

import pytest

from grpo_tools.data.jsonl import DataError, parse_jsonl_line


def reference(raw: bytes, number: int):
    """What the line is by `json.loads` on its UTF-8 text: the object, a DataError or None (blank)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return DataError
    if number == 1:
        text = text.removeprefix("\ufeff")
    if not text.strip():
        return None
    try:
        value = json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        return DataError
    return value if isinstance(value, dict) else DataError


SEEDS = [
    b'{"id": "r-1", "completion": "<tool_call>\\n{\\"name\\": \\"f\\", \\"arguments\\": {\\"x\\": 1.5}}\\n</tool_call>"}\n',
    b'{"id": 7, "tools": [{"type": "function"}], "answers": [], "big": 12345678901234567890123}',
    b'{"id": "\xc3\xa9t\xc3\xa9", "v": [1, 2.0, -0.0, 1e400, true, null, {"k": "\\u00e9"}]}\r\n',
]
SPECIAL = [
    b"\xef\xbb\xbf" + SEEDS[0],  # a byte-order mark: read on line 1 only
    b'{"x": NaN}',
    b'{"x": Infinity}',
    b'{"x": "\\ud800"}',  # a lone surrogate, escaped
    b'{"x": "\xed\xa0\x80"}',  # an encoded surrogate: not UTF-8
    b'{"x": "\xff"}',
    b'{"x": 1, "x": 2}',  # the last one counts
    b'{"x": 1234567890123456789}',
    b'{"x": 123456789012345678}',
    b"[1, 2]",
    b'"text"',
    b"  \t \n",
    b"",
    b'{"x": 1',
    b'{"x": 1} {"y": 2}',
    b"\x0b{}",
    b"[" * 2000 + b"]" * 2000,
    b'{"a":' * 1100 + b"1" + b"}" * 1100,
]


def mutations(seed: int, count: int):
    """Lines made from the seeds by deleting, doubling or replacing a byte, or inserting a troublesome one."""
    rng = random.Random(seed)
    troublesome = [b"\\", b'"', b"\xff", b"\xef\xbb\xbf", b"9" * 19, b"NaN", b"\\ud83d", b"\x00", b"}", b"]", b","]
    for _ in range(count):
        line = bytearray(rng.choice(SEEDS))
        at = rng.randrange(len(line))
        match rng.randrange(4):
            case 0:
                del line[at]
            case 1:
                line[at:at] = line[at : at + 1]
            case 2:
                line[at] = rng.randrange(256)
            case 3:
                line[at:at] = rng.choice(troublesome)
        yield bytes(line)


def same(raw: bytes, number: int) -> None:
    got, expected = parse_jsonl_line(raw, number), reference(raw, number)
    if expected is DataError:
        assert isinstance(got, DataError), (raw, got)
    else:
        assert got == expected and type(got) is type(expected), raw
        if isinstance(expected, dict):  # the same values, of the same types (an int stays an int, a float a float)
            assert json.dumps(got) == json.dumps(expected)


@pytest.mark.parametrize("raw", SEEDS + SPECIAL)
@pytest.mark.parametrize("number", [1, 2])
def test_a_line_reads_as_json_reads_it(raw, number):
    same(raw, number)


def test_mutated_lines_read_as_json_reads_them():
    for index, raw in enumerate(mutations(seed=0, count=5000)):
        same(raw, 1 + index % 2)
