"""Rewrite every function name of a canonical JSONL file in another naming style, to test whether a model learns to
copy the names it is offered rather than the style of the names it was trained on.

Each name is split into lower-case words (at dots, underscores, hyphens and camelCase humps) and rejoined in one of
five styles, drawn per name and row by `--seed`: snake_case, camelCase, PascalCase, a dotted namespace
(`weather.get_current`) or Capital_Snake. The new name replaces the old one in the row's tools, its gold answers and
its BFCL possible answers alike, so every row scores as it did. A name whose restyled form is already another of the
row's names, old or new, keeps its own, so a row never offers two functions of one name. A row without a list of
tools, each with a function name, is refused with its file, row and field.

`--namespace` keeps each name and puts a made-up namespace of two or three syllables before it (`version_api.get` ->
`vobipo.version_api.get`): a name the request's words cannot suggest, which a model can only get right by copying it.
What docs/findings.md ran on the BFCL task's GRPO split:

    .venv/bin/python -m experiments.restyle_names outputs/bfcl-task/train.jsonl outputs/train_restyled.jsonl --seed 0
    .venv/bin/python -m experiments.restyle_names outputs/bfcl-task/train.jsonl outputs/train_prefixed.jsonl --seed 0 \\
        --namespace
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
_CONSONANTS, _VOWELS = "bdfgklmnprstvz", "aeiou"
_WORD = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")


def words_of(name: str) -> list[str]:
    """The lower-case words of a function name: `project_api.ProjectApi.get_project` -> project, api, project, api,
    get, project."""
    found = [word.lower() for part in re.split(r"[._\-]+", name) for word in _WORD.findall(part)]
    return found or [name]


def offered_names(row: Any) -> list[str]:
    """The function names `row` offers, sorted; ValueError naming the field where the row has none to offer."""
    if not isinstance(row, dict):
        raise ValueError("not a JSON object")
    tools = row.get("tools")
    if not isinstance(tools, list):
        raise ValueError("field 'tools': not a list")
    names = []
    for index, tool in enumerate(tools):
        function = tool.get("function") if isinstance(tool, dict) else None
        name = function.get("name") if isinstance(function, dict) else None
        if not isinstance(name, str) or not name:
            raise ValueError(f"field 'tools[{index}].function.name': missing or not a string")
        names.append(name)
    for index, answer in enumerate(row.get("answers") or []):
        if not isinstance(answer, dict) or not isinstance(answer.get("name"), str):
            raise ValueError(f"field 'answers[{index}].name': missing or not a string")
    return sorted(set(names))


def made_up_word(rng: random.Random) -> str:
    """Two or three consonant-vowel syllables (`vobipo`): a namespace no request suggests."""
    return "".join(rng.choice(_CONSONANTS) + rng.choice(_VOWELS) for _ in range(rng.choice([2, 3])))


def restyle_row(row: dict[str, Any], rng: random.Random, namespace: bool = False) -> dict[str, Any]:
    """`row` with each offered function's name restyled (or, with `namespace`, behind a made-up namespace), in its
    tools, answers and possible answers; ValueError naming the field where the row offers no function names."""
    names = offered_names(row)
    mapping: dict[str, str] = {}
    for name in names:
        if namespace:  # every name gets a prefix, so no new name can be an old one or another new one
            mapping[name] = f"{made_up_word(rng)}.{name}"
            continue
        new = STYLES[rng.choice(list(STYLES))](words_of(name))
        taken = new in mapping.values() or (new != name and new in names)
        mapping[name] = name if taken else new
    restyled = json.loads(json.dumps(row))  # a deep copy of plain JSON
    for tool in restyled["tools"]:
        tool["function"]["name"] = mapping[tool["function"]["name"]]
    for answer in restyled.get("answers") or []:
        answer["name"] = mapping.get(answer["name"], answer["name"])
    if "possible_answers" in restyled:
        restyled["possible_answers"] = [
            {mapping.get(name, name): arguments for name, arguments in call.items()}
            for call in restyled["possible_answers"]
        ]
    return restyled


def read_rows(source: Path) -> list[tuple[int, Any]]:
    """The JSON rows of `source` with their line numbers, blank lines skipped; SystemExit naming the file and row
    where one is not JSON."""
    try:
        lines = source.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as error:
        raise SystemExit(f"{source}: cannot be read ({error})") from None
    rows = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            rows.append((number, json.loads(line)))
        except json.JSONDecodeError as error:
            raise SystemExit(f"{source}: row {number}: not JSON ({error})") from None
    return rows


def rewrite_rows(source: Path, target: Path, rewrite: Callable[[Any], dict[str, Any]]) -> int:
    """Write `rewrite(row)` for each row of `source` to `target`, in order; SystemExit naming the file, row and field
    where a row cannot be rewritten. Returns the number of rows written."""
    rewritten = []
    for number, row in read_rows(source):
        try:
            rewritten.append(json.dumps(rewrite(row)))
        except ValueError as error:
            raise SystemExit(f"{source}: row {number}: {error}") from None
    try:
        target.write_text("".join(row + "\n" for row in rewritten), encoding="utf-8")
    except OSError as error:
        raise SystemExit(f"{target}: cannot be written ({error})") from None
    return len(rewritten)


def probe_parser(doc: str, seed_help: str) -> argparse.ArgumentParser:
    """The arguments every row probe takes: the source file, the target and the seed of its random draws."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("source", type=Path, help="canonical JSONL rows whose tools are OpenAI-style functions")
    parser.add_argument("target", type=Path, help="where the rewritten rows go")
    parser.add_argument("--seed", type=int, default=0, help=seed_help)
    return parser


def main(argv: list[str] | None = None) -> None:
    parser = probe_parser(__doc__, "which style each name gets")
    parser.add_argument(
        "--namespace", action="store_true", help="keep each name, behind a made-up namespace (vobipo.get_version)"
    )
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    count = rewrite_rows(args.source, args.target, lambda row: restyle_row(row, rng, args.namespace))
    print(f"{args.target}: {count} rows, names {'behind made-up namespaces' if args.namespace else 'restyled'}")


if __name__ == "__main__":
    main()
