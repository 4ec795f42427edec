"""Multi-turn tool use: environments whose tools really run during rollouts.

trl's `GRPOTrainer(environment_factory=...)` runs the loop: one environment per rollout, `reset` from the dataset
row, the environment's public methods offered as tools (schemas from `transformers.utils.get_json_schema`), every
call the model writes executed and its result appended as a tool message, then the model generates again; the tokens
of tool results are masked out of the loss (`tool_mask`). What trl lacks, `ToolEnvironment` adds at the tool
boundary: arguments are validated against the tool's schema before the tool runs, each call runs under a time limit,
and a validation error, an exception or a timeout becomes a tool message the model reads (never a crash), recorded in
`ToolEnvironment.records` so the trainer can log failure rates by kind.

What a model writes only ever reaches the Python tool functions, after validation: never `eval`, `exec`, a shell or
the filesystem. The calculator parses arithmetic with `ast` and walks a whitelist of node types (`calculate`).

This module is the registry of environments (`ENVIRONMENTS`, `get_environment`, `make_environment_factory`) and
exports them all: `ToolEnvironment` is defined in `grpo_tools.tools.base`, the bundled `WorkbenchEnvironment` in
`grpo_tools.tools.workbench`, BFCL's multi-turn APIs (`BFCLEnvironment`, run by a safe executor) in
`grpo_tools.tools.bfcl`. The trajectory rewards live in `grpo_tools.tools.trajectories`, evaluation rollouts in
`grpo_tools.tools.rollouts`; the bundled task's data comes from the repository's `tasks/multiturn.py`.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Sequence
from typing import Any

from grpo_tools.tools.base import DEFAULT_TOOL_TIMEOUT, FAILURE_KINDS, ToolEnvironment, ToolRecord
from grpo_tools.tools.bfcl import BFCLEnvironment
from grpo_tools.tools.workbench import (
    UNITS,
    WEEKDAYS,
    ExpressionError,
    WorkbenchEnvironment,
    convert_quantity,
    evaluate_expression,
    format_number,
)


__all__ = [
    "DEFAULT_TOOL_TIMEOUT",
    "ENVIRONMENTS",
    "FAILURE_KINDS",
    "UNITS",
    "WEEKDAYS",
    "BFCLEnvironment",
    "ExpressionError",
    "ToolEnvironment",
    "ToolRecord",
    "WorkbenchEnvironment",
    "convert_quantity",
    "evaluate_expression",
    "format_number",
    "get_environment",
    "is_multi_turn",
    "make_environment_factory",
]


# Environments by the name a row's `env` gives; the single source of environment names.
ENVIRONMENTS: dict[str, type[ToolEnvironment]] = {
    WorkbenchEnvironment.name: WorkbenchEnvironment,
    BFCLEnvironment.name: BFCLEnvironment,
}


# Environments whose whole conversations can be converted, checked, scored and evaluated (`grpo-tools eval` runs
# BFCL's, `grpo_tools.evaluation.bfcl_conversations`), but not trained on as such: trl finds an environment's tools
# among its methods, and BFCL's functions differ by row and turn. Training takes per-turn rows instead
# (`grpo_tools.tools.bfcl_turns`).
_NOT_FOR_ROLLOUTS: dict[str, str] = {
    BFCLEnvironment.name: "BFCL's whole multi-turn conversations are evaluated with `grpo-tools eval` and scored "
    "with `grpo-tools score`; to train on them, cut them into per-turn rows "
    "(`grpo-tools convert --from bfcl multi_turn_base --per-turn`, reward `bfcl_turn`)",
}


def _env_state(row: dict[str, Any]) -> dict[str, Any]:
    env = row.get("env")
    return json.loads(env) if isinstance(env, str) else env


def get_environment(row: dict[str, Any]) -> type[ToolEnvironment]:
    """The environment class a multi-turn row names in `env.name`; ValueError naming the row otherwise."""
    state = _env_state(row)
    name = state.get("name") if isinstance(state, dict) else None
    if name not in ENVIRONMENTS:
        raise ValueError(f"row id={row.get('id')}: env.name must be one of {', '.join(ENVIRONMENTS)}, got {name!r}")
    return ENVIRONMENTS[name]


def is_multi_turn(rows: Sequence[dict[str, Any]], evaluating: bool = False) -> bool:
    """True when every row is multi-turn (has `env` and `expected`), False when none is; a mix is an error, since
    one training run either executes tools or scores single calls. Rows of an environment that cannot be trained on
    as whole conversations (BFCL's) are an error naming the row, unless `evaluating` (`grpo-tools eval` runs them);
    BFCL's per-turn rows (`env` without `expected`) are single-turn rows."""
    from grpo_tools.data.rows import DataError

    flags = {"env" in row and "expected" in row for row in rows}
    for row in rows:
        state = _env_state(row) if "env" in row else None
        name = state.get("name") if isinstance(state, dict) else None
        # A per-turn row (`grpo_tools.tools.bfcl_turns`: `env` without `expected`) is a single-turn row
        if name in _NOT_FOR_ROLLOUTS and "expected" in row and not evaluating:
            raise DataError(f"row id={row.get('id')}: env.name {name!r}: {_NOT_FOR_ROLLOUTS[name]}")
    if len(flags) > 1:
        first = next(row for row in rows if ("env" in row) != ("env" in rows[0]))
        raise DataError(
            f"rows mix multi-turn rows (with env and expected) and single-turn rows, e.g. id={rows[0].get('id')} "
            f"and id={first.get('id')}; train on one kind at a time"
        )
    return flags == {True}


def make_environment_factory(
    rows: Sequence[dict[str, Any]], timeout: float = DEFAULT_TOOL_TIMEOUT
) -> Callable[[], ToolEnvironment] | dict[str, Callable[[], ToolEnvironment]]:
    """What `GRPOTrainer(environment_factory=...)` takes for these rows: one factory when every row names the same
    environment, else a dict by name (trl then routes each row by its `environment` column)."""
    classes = {get_environment(row) for row in rows}
    factories = {cls.name: functools.partial(cls, timeout=timeout) for cls in classes}
    return next(iter(factories.values())) if len(factories) == 1 else factories
