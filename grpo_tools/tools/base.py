"""`ToolEnvironment`: the base class of environments whose tools really run during multi-turn rollouts.

Arguments are validated against the tool's schema before the tool runs, each call runs under a time limit, and a
validation error, an exception or a timeout becomes a tool message the model reads (never a crash), recorded in
`ToolEnvironment.records` so the trainer can log failure rates by kind. `grpo_tools.tools.environments` has the
whole story and the registry of environments.
"""

from __future__ import annotations

import functools
import inspect
import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from grpo_tools.rewards.schemas import Tool, normalize_tool, validate_arguments


__all__ = ["DEFAULT_TOOL_TIMEOUT", "FAILURE_KINDS", "ToolEnvironment", "ToolRecord"]

logger = logging.getLogger(__name__)


DEFAULT_TOOL_TIMEOUT = 2.0
# How a tool call can fail, each counted apart: arguments that do not fit the schema, an exception raised by the tool,
# a tool running past its time limit, (counted by the trainer, since trl answers these itself) a call naming no
# offered tool or carrying arguments that are not an object, and, for an MCP server (`grpo_tools.tools.mcp_env`), an
# error the server reported, a server that died or stopped answering, and a call past a limit of `MCPLimits`.
FAILURE_KINDS: tuple[str, ...] = (
    "validation", "exception", "timeout", "unknown_tool", "server_error", "server_down", "limit"
)  # fmt: skip
# Members of an environment class that trl does not offer as tools.
_NOT_TOOLS = frozenset({"reset", "get_reward"})


@dataclass(frozen=True)
class ToolRecord:
    """One tool call an environment received: the tool, its arguments, how it ended (`"ok"` or one of
    `FAILURE_KINDS`) and what the model was shown."""

    name: str
    arguments: dict[str, Any]
    status: str
    result: str
    seconds: float


def _error(message: str) -> str:
    """A failed call's tool message: JSON, the same shape trl gives its own failures."""
    return json.dumps({"error": message})


def _run_with_timeout(function: Callable[[], Any], timeout: float) -> tuple[str, Any]:
    """Run `function()` in a daemon thread; `("ok", value)`, `("exception", error)` or `("timeout", None)`.

    A Python thread cannot be killed: a tool that overruns keeps running in the background until it returns (the
    daemon flag only keeps it from blocking interpreter exit), and its result is dropped. Tools must therefore be
    cooperative: pure functions of their arguments and the environment's state, without side effects that matter
    after the deadline.
    """
    outcome: list[tuple[str, Any]] = []

    def target() -> None:
        try:
            outcome.append(("ok", function()))
        except Exception as error:  # the tool boundary: any failure of the tool becomes a message
            outcome.append(("exception", error))
        except BaseException as error:  # SystemExit raised by a tool ends the tool, never the training run
            outcome.append(("exception", RuntimeError(f"the tool tried to stop the program ({type(error).__name__})")))

    thread = threading.Thread(target=target, name="grpo-tools-tool", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        return "timeout", None
    if not outcome:
        return "exception", RuntimeError("the tool stopped without a result")
    return outcome[0]


def _guarded(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap a tool method so that a call validates, runs under the time limit and records its outcome.

    `functools.wraps` keeps the name, docstring, annotations and signature (through `__wrapped__`), which is all
    `get_json_schema` and trl read.
    """

    @functools.wraps(function)
    def tool(self: ToolEnvironment, **arguments: Any) -> str:
        return self._call(name, function, arguments)

    return tool


class ToolEnvironment:
    """Base class of multi-turn environments: subclass it and write each tool as a public method.

    A tool is a plain method with typed parameters and a Google-style docstring (an `Args:` entry per parameter;
    `Literal[...]` or `(choices: [...])` for enumerations), returning a string or a JSON-serialisable value. Its
    schema comes from `transformers.utils.get_json_schema`, computed when the class is defined, so a tool the
    schema reader cannot read fails at import time, not in the middle of training. Every public method except `reset`
    is a tool (that is how trl finds them); helpers must start with an underscore.

    Each rollout starts fresh: trl keeps a pool of instances, one per concurrent rollout, and calls `reset` before
    every rollout. `reset` reads the row's `env` (a JSON object, or its JSON text) and hands it to `_setup`. Each call is validated against the tool's
    schema, run with `timeout` seconds to finish, and recorded in `records`; any failure becomes an
    `{"error": "..."}` tool message.

    >>> class Echo(ToolEnvironment):
    ...     name = "echo"
    ...     def shout(self, text: str) -> str:
    ...         '''Shout a text.
    ...
    ...         Args:
    ...             text: What to shout.
    ...         '''
    ...         return text.upper()
    >>> env = Echo()
    >>> env.reset(env={"name": "echo"})
    >>> env.shout(text="hi"), env.shout(text=3)
    ('HI', '{"error": "invalid arguments for shout: text: 3 is not of type \\'string\\'"}')
    >>> [record.status for record in env.records]
    ['ok', 'validation']
    """

    name: ClassVar[str] = ""
    _tool_specs: ClassVar[dict[str, Tool]] = {}
    _tool_schemas: ClassVar[dict[str, dict[str, Any]]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        from transformers.utils import get_json_schema

        specs, schemas = dict(cls._tool_specs), dict(cls._tool_schemas)
        for member, value in list(vars(cls).items()):
            if member.startswith("_") or member in _NOT_TOOLS or not inspect.isfunction(value):
                continue
            schema = get_json_schema(value)
            # The method's own `self` is not an argument the model gives.
            schema["function"]["parameters"]["properties"].pop("self", None)
            required = schema["function"]["parameters"].get("required", [])
            schema["function"]["parameters"]["required"] = [name for name in required if name != "self"]
            schemas[member] = schema
            specs[member] = normalize_tool(schema, where=f"{cls.__name__}.{member}")
            setattr(cls, member, _guarded(member, value))
        cls._tool_specs, cls._tool_schemas = specs, schemas

    def __init__(self, timeout: float = DEFAULT_TOOL_TIMEOUT) -> None:
        if not timeout > 0:
            raise ValueError(f"timeout must be > 0 seconds, got {timeout}")
        self.timeout = timeout
        self.records: list[ToolRecord] = []

    @classmethod
    def tool_schemas(cls) -> list[dict[str, Any]]:
        """The tools in the OpenAI function format, as `get_json_schema` writes them and chat templates render them;
        a row's `tools` for this environment. Sorted by name, the order in which trl offers an environment's methods."""
        return [json.loads(json.dumps(cls._tool_schemas[name])) for name in sorted(cls._tool_schemas)]

    def reset(self, env: Any = None, **row: Any) -> None:
        """Start a rollout from a dataset row: forget earlier calls and set the state from the row's `env`.

        trl passes every column of the row as a keyword argument; only `env` is read. Returns None: the prompt is the
        row's messages as they are.
        """
        if isinstance(env, str):
            env = json.loads(env)
        if not isinstance(env, dict):
            raise ValueError(f"{type(self).__name__}.reset needs the row's `env` object, got {env!r}")
        self.records = []
        self._setup(env)

    def _setup(self, state: dict[str, Any]) -> None:
        """Read the row's `env` into the environment's state; subclasses with state override it."""

    def _tools(self) -> dict[str, Callable[..., Any]]:
        """The bound tool methods by name, sorted, as trl offers them (`inspect.getmembers` order)."""
        return {name: getattr(self, name) for name in sorted(self._tool_specs)}

    def _chat_tools(self) -> list[Any]:
        """What a chat template is given as this environment's tools: the bound methods (their schemas are read
        from the signatures), or, for an environment whose schemas come from elsewhere (an MCP server), the schemas."""
        return list(self._tools().values())

    def _close(self) -> None:
        """Release what the environment holds outside Python (an MCP server, its working copy); nothing here."""

    def _call(self, name: str, function: Callable[..., Any], arguments: dict[str, Any]) -> str:
        start = time.perf_counter()
        problems = validate_arguments(self._tool_specs[name], arguments)
        if problems:
            details = "; ".join(f"{item.path}: {item.message}" if item.path else item.message for item in problems)
            message = f"invalid arguments for {name}: {details}"
            return self._record(name, arguments, "validation", _error(message), start)
        status, value = _run_with_timeout(functools.partial(function, self, **arguments), self.timeout)
        if status == "timeout":
            return self._record(name, arguments, status, _error(f"{name} timed out after {self.timeout:g} s"), start)
        if status == "exception":
            message = str(value) or type(value).__name__
            return self._record(name, arguments, status, _error(f"{name} failed: {message}"), start)
        try:
            text = value if isinstance(value, str) else json.dumps(value)
        except TypeError:
            return self._record(
                name, arguments, "exception", _error(f"{name} returned {type(value).__name__}, not JSON"), start
            )
        return self._record(name, arguments, "ok", text, start)

    def _record(self, name: str, arguments: dict[str, Any], status: str, result: str, start: float) -> str:
        seconds = time.perf_counter() - start
        self.records.append(ToolRecord(name, dict(arguments), status, result, seconds))
        if status != "ok":
            logger.debug("tool %s(%s): %s: %s", name, arguments, status, result)
        return result
