"""`grpo-tools train`: GRPO training from a recipe. Not built yet (issue: GRPO training for tool calling)."""

from __future__ import annotations

import sys


def main(argv: list[str]) -> int:
    """Say plainly that training is not there yet, and fail."""
    print(
        "grpo-tools train: GRPO training is not implemented yet. The reward model and the dataset commands "
        "(`score`, `check-data`, `convert`) work today; see README.md.",
        file=sys.stderr,
    )
    return 1
