"""`MCPEnvironment`: a user's MCP server as a multi-turn environment, a peer of the workbench and BFCL's APIs.

The server is named once (a recipe's `mcp_*` keys, `MCPSettings` here); rows name the environment `mcp`
(`{"env": {"name": "mcp"}}`). `configure_mcp` starts the server once, lists its tools and registers an environment
class under that name whose public methods are the server's tools, so trl's `environment_factory` finds them. The
prompt offers the tools with the server's own input schemas (`MCPEnvironment._chat_tools`, which
`training.trl_compat.offer_environment_tools` hands trl's prompt rendering), never re-derived from a signature.

Each environment instance (trl keeps one per concurrent rollout) owns its server process (or, for a URL, its session)
and its working copy: a fresh copy of `MCPSettings.template` made at every `reset`, in the same folder, so a server
started on it keeps working; `restart_each_rollout` also restarts the server at every reset, for servers that keep
state in memory. A call is validated against the tool's input schema before it is sent, counted against the
rollout's budget (`MCPLimits`), and whatever happens (the server's error, a timeout, a crash) comes back as the tool
message and a counted failure kind. `state_check` (a user's function `check(workdir, row) -> float`, named
`module:function`) scores the working copy after the rollout; trl adds it as a reward column (`get_reward`).
"""

from __future__ import annotations

import atexit
import importlib
import json
import os
import shutil
import sys
import tempfile
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from grpo_tools.rewards.budget import DEFAULT_BUDGET, Budget, record_hit
from grpo_tools.rewards.schemas import normalize_tool, validate_arguments
from grpo_tools.tools.base import ToolEnvironment
from grpo_tools.tools.mcp_client import MCPConnection, MCPLimits, MCPServer, MCPStartError, tool_schema


__all__ = ["MCP_ENVIRONMENT", "MCPEnvironment", "MCPSettings", "MCPStartError", "configure_mcp", "load_state_check"]

MCP_ENVIRONMENT = "mcp"  # the `env.name` rows give
_JSON_COLUMNS = ("env", "tools", "answers", "possible_answers", "expected")
_LIVE: weakref.WeakSet[MCPEnvironment] = weakref.WeakSet()


@dataclass(frozen=True)
class MCPSettings:
    """Everything about the server a run trains or evaluates against (from the recipe's `mcp_*` keys).

    `template`: a folder copied into every rollout's working copy (`{workdir}` in the command and env); `state_check`:
    `module:function`, the user's `check(workdir: Path, row: dict) -> float` run on the working copy after a rollout;
    `tools`: the only tools of the server offered and callable (all of them when empty); `budget`: the limits on one
    call's arguments (a training run's `budget_*` keys), checked before the schema so nothing formats what breaks them.
    """

    server: MCPServer
    limits: MCPLimits = field(default_factory=MCPLimits)
    template: str | None = None
    restart_each_rollout: bool = False
    state_check: str | None = None
    tools: tuple[str, ...] = ()
    budget: Budget = DEFAULT_BUDGET

    def __post_init__(self) -> None:
        if self.template is not None and not Path(self.template).is_dir():
            raise ValueError(f"mcp_template: {self.template} is not a folder")
        if self.template is not None and self.server.url:
            raise ValueError("mcp_template needs a server started by a command (mcp_command), not a url")


def load_state_check(reference: str) -> Callable[[Path, dict[str, Any]], float]:
    """The user's state-check function from `module:function`, imported (from the current directory too), never
    evaluated as text."""
    module_name, _, function_name = reference.partition(":")
    if not module_name or not function_name:
        raise ValueError(f"mcp_state_check must be module:function, got {reference!r}")
    if os.getcwd() not in sys.path:  # the user's module, from where they run (a console script's path lacks it)
        sys.path.append(os.getcwd())
    try:
        function = getattr(importlib.import_module(module_name), function_name)
    except (ImportError, AttributeError) as error:
        raise ValueError(f"mcp_state_check {reference!r}: {error}") from None
    if not callable(function):
        raise ValueError(f"mcp_state_check {reference!r} is not a function")
    return function


def _tool_method(name: str, description: str) -> Callable[..., str]:
    def tool(self: MCPEnvironment, **arguments: Any) -> str:
        return self._mcp_call(name, arguments)

    tool.__name__ = tool.__qualname__ = name
    tool.__doc__ = description
    return tool


class MCPEnvironment(ToolEnvironment):
    """An MCP server's tools as an environment; use `configure_mcp`, which builds the class for one server."""

    name: ClassVar[str] = MCP_ENVIRONMENT
    settings: ClassVar[MCPSettings | None] = None
    _state_check: ClassVar[Callable[[Path, dict[str, Any]], float] | None] = None

    def __init__(self, timeout: float | None = None) -> None:
        settings = type(self).settings
        if settings is None:
            raise ValueError(
                "rows name the `mcp` environment but no MCP server is configured: set mcp_command or mcp_url"
            )
        super().__init__(timeout or settings.limits.call_timeout)
        self.workdir = Path(tempfile.mkdtemp(prefix="grpo-tools-mcp-")) if settings.template else None
        if self.workdir is not None:
            _copy_template(Path(settings.template), self.workdir)
            weakref.finalize(self, shutil.rmtree, self.workdir, ignore_errors=True)
        self.connection = MCPConnection(settings.server, settings.limits, self.workdir)
        self.connection.start()  # a server that cannot start stops the run here, at start-up
        self._row: dict[str, Any] = {}
        _LIVE.add(self)

    def reset(self, env: Any = None, **row: Any) -> None:
        """Start a rollout: a fresh working copy in the same folder (and, if asked, a fresh server)."""
        super().reset(env=env, **row)
        # The row as the state check reads it: trl passes the JSON columns as text (`multi_turn_dataset`)
        self._row = {key: json.loads(value) if key in _JSON_COLUMNS and isinstance(value, str) else value
                     for key, value in {"env": env, **row}.items()}  # fmt: skip
        settings = type(self).settings
        if self.workdir is not None:
            _copy_template(Path(settings.template), self.workdir)
        if settings.restart_each_rollout or not self.connection.alive:
            self.connection.start()

    def _state_reward(self) -> float:
        """The user's state check of the working copy after the rollout: the class's `get_reward` (trl's environment
        reward, logged as `mcp_state`) when a state check is configured."""
        check = type(self)._state_check
        return float(check(self.workdir, self._row)) if check is not None else 0.0

    def _chat_tools(self) -> list[Any]:
        return self.tool_schemas()

    def _mcp_call(self, name: str, arguments: dict[str, Any]) -> str:
        import time

        start = time.perf_counter()
        settings = type(self).settings
        limits = settings.limits
        hit = settings.budget.argument_hit(arguments)
        if hit is not None:  # not kept in the record: the arguments are what broke the limit
            record_hit(hit.kind)
            return self._record(name, {}, "limit", _error(f"over the budget: {hit.message}"), start)
        problems = validate_arguments(self._tool_specs[name], arguments)
        if problems:
            details = "; ".join(f"{item.path}: {item.message}" if item.path else item.message for item in problems)
            return self._record(
                name, arguments, "validation", _error(f"invalid arguments for {name}: {details}"), start
            )
        if len(self.records) >= limits.max_calls:
            message = _error(f"call limit reached: at most {limits.max_calls} calls per conversation")
            return self._record(name, arguments, "limit", message, start)
        status, text = self.connection.call(name, arguments)
        if status != "ok":
            return self._record(name, arguments, status, _error(text), start)
        if len(text) > limits.max_result_chars:
            text = text[: limits.max_result_chars] + f"\n[cut at {limits.max_result_chars} characters]"
            return self._record(name, arguments, "limit", text, start)
        return self._record(name, arguments, "ok", text, start)

    def _close(self) -> None:
        self.connection.close()
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)


def _error(message: str) -> str:
    return json.dumps({"error": message})


def _copy_template(template: Path, workdir: Path) -> None:
    """Make `workdir` an exact copy of `template`, keeping the folder itself (a running server holds its path)."""
    for entry in workdir.iterdir():
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()
    shutil.copytree(template, workdir, symlinks=True, dirs_exist_ok=True)


def configure_mcp(settings: MCPSettings) -> type[MCPEnvironment]:
    """Start the server once, list its tools, and register (under `mcp` in `environments.ENVIRONMENTS`) the class
    whose instances trl creates, one per concurrent rollout. MCPStartError (its command and stderr) when the server
    cannot start; ValueError for a tool the schema checks refuse or a state check that does not import."""
    from grpo_tools.tools.environments import ENVIRONMENTS

    workdir = Path(tempfile.mkdtemp(prefix="grpo-tools-mcp-")) if settings.template else None
    try:
        if workdir is not None:
            _copy_template(Path(settings.template), workdir)
        probe = MCPConnection(settings.server, settings.limits, workdir)
        try:
            tools = probe.start()
        finally:
            probe.close()
    finally:
        if workdir is not None:
            shutil.rmtree(workdir, ignore_errors=True)
    schemas = {tool.name: tool_schema(tool) for tool in tools}
    unknown = sorted(set(settings.tools) - set(schemas))
    if unknown:
        raise ValueError(f"mcp_tools: the server {settings.server.describe()} has no tools {unknown}; it has "
                         f"{sorted(schemas)}")  # fmt: skip
    if settings.tools:
        schemas = {name: schema for name, schema in schemas.items() if name in settings.tools}
    refused = [name for name in schemas if name in ("reset", "get_reward") or name.startswith("_")]
    if refused:
        raise ValueError(f"MCP server {settings.server.describe()}: tools {refused} cannot be offered through trl's "
                         "environment_factory (reserved names, or a leading '_')")  # fmt: skip
    members: dict[str, Any] = {"settings": settings, "_state_check": None}
    if settings.state_check:
        members["_state_check"] = staticmethod(load_state_check(settings.state_check))
        members["get_reward"] = MCPEnvironment._state_reward
    # trl names an environment's reward column after its class
    cls = type("mcp_state", (MCPEnvironment,), members)
    for name, schema in schemas.items():
        setattr(cls, name, _tool_method(name, schema["function"]["description"]))
    cls._tool_schemas = schemas
    cls._tool_specs = {
        name: normalize_tool(schema, where=f"MCP server {settings.server.describe()}: tool {name}")
        for name, schema in schemas.items()
    }
    ENVIRONMENTS[MCP_ENVIRONMENT] = cls
    return cls


@atexit.register
def _close_all() -> None:
    for environment in list(_LIVE):
        environment._close()
