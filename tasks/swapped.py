"""No-call rows made from a split's own call rows: a question offered the tools of another API, which cannot answer it.

BFCL builds its non-live irrelevance rows this way: a question beside a function that does something else (the area
of a triangle beside `determine_body_mass_index`). BFCL's live_irrelevance rows are mostly of another kind: a request
near the offered API that it cannot serve, or no request at all. A model that sees a question with its own tools
(call) and the same question with another API's tools (abstain) can only tell them apart by reading the tools, which
is the decision the held-out irrelevance rows test.

`swapped_rows(rows, count, seed, api, fits)` pairs each of up to `count` call rows of a split with the tools of
another call row of the same split, so a split's swapped rows hold only its own questions and APIs (dev's measure
APIs that training never saw). A donor is skipped when it belongs to the same API, when a word of its function names
(generic verbs such as `get` aside) is also a word of the question's own function names or of the question itself,
when one of its tools may serve almost any request (`requests.get`), or when the prompt would be too long; a question
with no fitting donor gives no row.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from typing import Any


__all__ = ["GENERIC_WORDS", "OPEN_ENDED_WORDS", "name_words", "swapped_rows"]

# Words of function names too common to say what a function does (`get_weather` and `get_stock_price` share `get`).
# fmt: off
GENERIC_WORDS = frozenset((
    "get", "set", "list", "find", "search", "create", "update", "delete", "add", "remove", "info", "information",
    "data", "details", "detail", "retrieve", "fetch", "query", "check", "calculate", "compute", "make", "new", "all",
    "user", "item", "items", "the", "for", "and", "api", "service", "services", "by", "with", "from", "request",
    "send", "post", "put", "call", "run", "start", "stop",
))
# A tool whose name holds one of these words may serve almost any request (`requests.get`, `cmd_controller.execute`,
# `default_function`) and is never a donor; the rule is broad on purpose (`search_hotels` is left out too), since a
# donor that could answer the question would teach the model to abstain where a call is right.
OPEN_ENDED_WORDS = frozenset((
    "requests", "request", "http", "url", "execute", "exec", "cmd", "command", "shell", "run", "default", "search",
    "query",
))
# fmt: on
_WORD = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|[0-9]+")


def name_words(name: str) -> set[str]:
    """The telling words of a function name, split at punctuation and case changes, folded, and without generic
    ones or ones under three letters.

    >>> sorted(name_words("Services_4_BookAppointment"))
    ['appointment', 'book']
    >>> sorted(name_words("weather.get_current"))
    ['current', 'weather']
    """
    words = {word.casefold() for word in _WORD.findall(name)}
    return {word for word in words if len(word) > 2 and not word.isdigit() and word not in GENERIC_WORDS}


def _tool_words(row: dict[str, Any]) -> set[str]:
    return set().union(*(name_words(tool["function"]["name"]) for tool in row["tools"]))


def _open_ended(row: dict[str, Any]) -> bool:
    return any(
        word.casefold() in OPEN_ENDED_WORDS
        for tool in row["tools"]
        for word in _WORD.findall(tool["function"]["name"])
    )


def _question_words(row: dict[str, Any]) -> set[str]:
    text = " ".join(str(message.get("content", "")) for message in row["messages"] if message.get("role") == "user")
    return {word.casefold() for word in re.findall(r"[A-Za-z]+", text)}


def swapped_rows(
    rows: list[dict[str, Any]],
    count: int,
    seed: int,
    api: Callable[[str], str],
    fits: Callable[[dict[str, Any]], bool] = lambda row: True,
) -> tuple[list[dict[str, Any]], dict[str, list[str]]]:
    """Up to `count` no-call rows (`answers: []`, category irrelevance) made from the call rows of `rows`, each a
    question with another API's tools (`api(row_id)` names a row's API; `fits(row)` says whether a made row may be
    kept, e.g. its prompt length), and for each made row the ids of the question's row and the tools' row.

    Deterministic for a given `seed`. Each question is used once, so `count` above the number of call rows gives
    one row per call row that has a fitting donor.
    """
    calls = [row for row in rows if row["answers"]]
    rng = random.Random(f"{seed}-swapped")
    questions = list(calls)
    rng.shuffle(questions)
    made: list[dict[str, Any]] = []
    pairs: dict[str, list[str]] = {}
    for question in questions:
        if len(made) >= count:
            break
        own = _tool_words(question)
        asked = _question_words(question)
        donors = list(calls)
        rng.shuffle(donors)
        for donor in donors:
            words = _tool_words(donor)
            if api(str(donor["id"])) == api(str(question["id"])) or words & own or words & asked or _open_ended(donor):
                continue
            row = {
                "id": f"swapped_irrelevance_{len(made)}",
                "messages": question["messages"],
                "tools": donor["tools"],
                "answers": [],
                "category": "irrelevance",
            }
            if fits(row):
                pairs[row["id"]] = [str(question["id"]), str(donor["id"])]
                made.append(row)
                break
    return made, pairs
