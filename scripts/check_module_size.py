"""Fail, naming each file, when a Python module under the given folders (default: grpo_tools) passes 400 lines.

docs/architecture.md ("Layers"): a module stays a size one reader holds in mind. Run by `make quality`:

    .venv/bin/python scripts/check_module_size.py [FOLDER ...]
"""

from __future__ import annotations

import sys
from pathlib import Path


MAX_LINES = 400


def oversized(folders: list[str]) -> list[tuple[Path, int]]:
    """(file, lines) of every `.py` file under `folders` longer than `MAX_LINES`, sorted by path."""
    found = []
    for folder in folders:
        for path in sorted(Path(folder).rglob("*.py")):
            lines = len(path.read_text(encoding="utf-8").splitlines())
            if lines > MAX_LINES:
                found.append((path, lines))
    return found


def main(argv: list[str]) -> int:
    found = oversized(argv or ["grpo_tools"])
    for path, lines in found:
        print(f"{path}: {lines} lines, more than {MAX_LINES}; split it by what each part is for", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
