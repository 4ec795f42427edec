"""Rewrite every function name of a canonical JSONL file in another naming style, to test whether a model learns to
copy the names it is offered rather than the style of the names it was trained on.

Each name is split into lower-case words (at dots, underscores, hyphens and camelCase humps) and rejoined in one of
five styles, drawn per name and row by `--seed`: snake_case, camelCase, PascalCase, a dotted namespace
(`weather.get_current`) or Capital_Snake. The new name replaces the old one in the row's tools, its gold answers and
its BFCL possible answers alike, so every row scores as it did. A name whose restyled form another name of the same
row already took keeps its own form. What docs/findings.md ran on the BFCL task's GRPO split:

    .venv/bin/python benchmarks/restyle_names.py outputs/bfcl-task/train.jsonl outputs/train_restyled.jsonl --seed 0
"""

from __future__ import annotations

import argparse
import json
import random
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any


STYLES: dict[str, Callable[[list[str]], str]] = {
    "snake": lambda words: "_".join(words),
    "camel": lambda words: words[0] + "".join(word.capitalize() for word in words[1:]),
    "pascal": lambda words: "".join(word.capitalize() for word in words),
    "dotted": lambda words: f"{words[0]}.{'_'.join(words[1:])}" if len(words) > 1 else words[0],
    "capital_snake": lambda words: "_".join(word.capitalize() for word in words),
}
_WORD = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")


def words_of(name: str) -> list[str]:
    """The lower-case words of a function name: `project_api.ProjectApi.get_project` -> project, api, project, api,
    get, project."""
    found = [word.lower() for part in re.split(r"[._\-]+", name) for word in _WORD.findall(part)]
    return found or [name]


def restyle_row(row: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    """`row` with each offered function's name restyled, in its tools, answers and possible answers."""
    mapping: dict[str, str] = {}
    for name in sorted({tool["function"]["name"] for tool in row["tools"]}):
        style = STYLES[rng.choice(list(STYLES))]
        new = style(words_of(name))
        mapping[name] = name if new in mapping.values() else new
    restyled = json.loads(json.dumps(row))  # a deep copy of plain JSON
    for tool in restyled["tools"]:
        tool["function"]["name"] = mapping[tool["function"]["name"]]
    for answer in restyled["answers"]:
        answer["name"] = mapping.get(answer["name"], answer["name"])
    if "possible_answers" in restyled:
        restyled["possible_answers"] = [
            {mapping.get(name, name): arguments for name, arguments in call.items()}
            for call in restyled["possible_answers"]
        ]
    return restyled


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("source", type=Path, help="canonical JSONL rows whose tools are OpenAI-style functions")
    parser.add_argument("target", type=Path, help="where the restyled rows go")
    parser.add_argument("--seed", type=int, default=0, help="which style each name gets")
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    lines = [line for line in args.source.read_text(encoding="utf-8").splitlines() if line.strip()]
    with args.target.open("w", encoding="utf-8") as target:
        for line in lines:
            target.write(json.dumps(restyle_row(json.loads(line), rng)) + "\n")
    print(f"{args.target}: {len(lines)} rows, names restyled")


if __name__ == "__main__":
    main()
