"""A synchronous client for one MCP server, run for real: started, called under limits, stopped without orphans.

`MCPConnection` wraps the official `mcp` SDK (major version 2: `mcp.Client` over stdio or Streamable HTTP). trl's tool
loop is synchronous, so every connection lives as one task on a single background event loop (`_event_loop`), and a
call is a request put on that task's queue: the SDK's transports hold anyio task groups that must be entered and left
by the same task. What a call can end as (`status`):

- `ok`: the server answered; its text and structured content become the tool message;
- `server_error`: the server reported an error (`isError`, or a JSON-RPC error): its message is the tool message;
- `timeout`: no answer within `MCPLimits.call_timeout`; the server is stopped (it may be stuck) and started again at the
  next call, on the same working copy;
- `server_down`: the server exited, crashed or wrote what is not MCP; it is started again at the next call.

A stdio server runs in a process group of its own (the SDK's `start_new_session`); stopping it closes its stdin, then
signals the group. Every live connection is also stopped at interpreter exit (`atexit`), and as a last resort its
process group is killed, so no server outlives the run. A server that cannot start raises `MCPStartError` with its
command and what it wrote to stderr.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import json
import logging
import os
import shlex
import shutil
import signal
import sys
import tempfile
import threading
import uuid
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


__all__ = ["MCPConnection", "MCPLimits", "MCPServer", "MCPStartError", "list_server_tools"]

logger = logging.getLogger(__name__)

# Set in a stdio server's environment so that its process can be found among ours (`MCPConnection.pid`).
_MARK = "GRPO_TOOLS_MCP_CONNECTION"
_STDERR_SHOWN = 4000  # characters of a failed server's stderr in MCPStartError


class MCPStartError(RuntimeError):
    """An MCP server that cannot start or list its tools; the message names its command and its stderr."""


@dataclass(frozen=True)
class MCPServer:
    """Where an MCP server is: a command started over stdio (`command`, its `env`), or a Streamable-HTTP `url`.

    `{workdir}` in the command's arguments and in `env` values stands for the rollout's working copy (`MCPConnection`
    runs a stdio server with the working copy as its current directory too).
    """

    command: tuple[str, ...] = ()
    url: str | None = None
    env: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if bool(self.command) == bool(self.url):
            raise ValueError("an MCP server needs exactly one of a command (stdio) or a url (Streamable HTTP)")

    @classmethod
    def from_command_line(cls, command: str, env: dict[str, str] | None = None) -> MCPServer:
        """A stdio server from a shell-like command line (split with `shlex`, never run by a shell)."""
        return cls(command=tuple(shlex.split(command)), env=dict(env or {}))

    def describe(self) -> str:
        """The command line or URL, as messages name the server."""
        return self.url if self.url else shlex.join(self.command)


@dataclass(frozen=True)
class MCPLimits:
    """Bounds on what a rollout may ask of its server (the MCP executor's own; see docs/mcp.md).

    `call_timeout`: seconds one call may take; `start_timeout`: seconds to start a server and list its tools;
    `max_calls`: calls one rollout may send (beyond it each call is answered with an error, kind `limit`, and never
    sent); `max_result_chars`: a result longer than this is cut to it (kind `limit`).
    """

    call_timeout: float = 10.0
    start_timeout: float = 60.0
    max_calls: int = 32
    max_result_chars: int = 4000

    def __post_init__(self) -> None:
        if not (self.call_timeout > 0 and self.start_timeout > 0 and self.max_calls > 0 and self.max_result_chars > 0):
            raise ValueError(f"MCP limits must all be > 0, got {self}")


_LOOP: asyncio.AbstractEventLoop | None = None
_LOOP_LOCK = threading.Lock()
_LIVE: weakref.WeakSet[MCPConnection] = weakref.WeakSet()


def _event_loop() -> asyncio.AbstractEventLoop:
    """The one background event loop every connection runs on, started on first use in a daemon thread."""
    global _LOOP
    with _LOOP_LOCK:
        if _LOOP is None:
            _LOOP = asyncio.new_event_loop()
            threading.Thread(target=_LOOP.run_forever, name="grpo-tools-mcp", daemon=True).start()
        return _LOOP


def _result_text(result: Any) -> str:
    """A `CallToolResult` as the tool message: its text blocks, then its structured content as JSON when no text
    block carries it; other blocks (images, resources) are named, not inlined."""
    parts = []
    for block in result.content or []:
        if getattr(block, "type", None) == "text":
            parts.append(block.text)
        else:
            parts.append(f"[{getattr(block, 'type', 'content')} content]")
    if result.structured_content is not None and not parts:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False, default=str))
    return "\n".join(parts)


def _is_connection_loss(error: BaseException) -> bool:
    import anyio
    from mcp.shared.exceptions import MCPError

    if isinstance(error, MCPError):
        return "closed" in str(error).lower()
    return isinstance(error, anyio.ClosedResourceError | anyio.BrokenResourceError | anyio.EndOfStream | OSError)


class MCPConnection:
    """One MCP server for one environment: started by `start`, called by `call`, stopped by `close`.

    `workdir` (the rollout's working copy) replaces `{workdir}` in the server's arguments and environment and is a
    stdio server's current directory. Thread-safe enough for trl's loop: calls are serialised per connection.
    """

    def __init__(self, server: MCPServer, limits: MCPLimits | None = None, workdir: str | Path | None = None) -> None:
        self.server = server
        self.limits = limits or MCPLimits()
        self.workdir = Path(workdir) if workdir is not None else None
        self.pid: int | None = None
        self._mark = uuid.uuid4().hex
        self._queue: asyncio.Queue[Any] | None = None
        self._task: concurrent.futures.Future[None] | None = None
        self._stderr: Any = None
        self._lock = threading.Lock()
        _LIVE.add(self)

    # -- the server's side, on the event loop ---------------------------------------------------------------------

    def _substitute(self, text: str) -> str:
        return text.replace("{workdir}", str(self.workdir)) if self.workdir is not None else text

    def _client(self) -> Any:
        from mcp import Client
        from mcp.client.stdio import StdioServerParameters, stdio_client

        if self.server.url:
            return Client(self._substitute(self.server.url))
        env = {key: self._substitute(value) for key, value in self.server.env.items()}
        env[_MARK] = self._mark
        # The server's own environment starts from ours (PATH, a virtual environment), then the recipe's.
        # Found where we run, not in the working copy it runs in: on PATH, else beside our own interpreter (a console
        # script installed in the same virtual environment, run without activating it)
        program = self.server.command[0]
        found = shutil.which(program) or shutil.which(program, path=str(Path(sys.executable).parent))
        parameters = StdioServerParameters(
            command=os.path.abspath(found) if found else self.server.command[0],
            args=[self._substitute(argument) for argument in self.server.command[1:]],
            env={**os.environ, **env},
            cwd=str(self.workdir) if self.workdir is not None else None,
        )
        return Client(stdio_client(parameters, errlog=self._stderr))

    async def _serve(self, ready: concurrent.futures.Future[list[Any]]) -> None:
        queue: asyncio.Queue[Any] = asyncio.Queue()
        self._queue = queue
        try:
            async with self._client() as client:
                tools, cursor = [], None
                while True:
                    listing = await client.list_tools(cursor=cursor)
                    tools += listing.tools
                    cursor = listing.next_cursor
                    if not cursor:
                        break
                ready.set_result(tools)
                while (request := await queue.get()) is not None:
                    name, arguments, answer = request
                    status = await self._answer(client, name, arguments, answer)
                    if status in ("timeout", "server_down"):
                        return  # leaving the client stops the server; the next call starts it again
        except Exception as error:  # a server that fails to start, dies or breaks the protocol
            if not ready.done():
                ready.set_exception(error)
            logger.debug("MCP server %s stopped: %r", self.server.describe(), error)
        finally:
            self._queue = None
            while not queue.empty():
                request = queue.get_nowait()
                if request is not None and not request[2].done():
                    request[2].set_result(("server_down", "the server stopped"))

    async def _answer(self, client: Any, name: str, arguments: dict[str, Any], answer: Any) -> str:
        import anyio

        try:
            with anyio.fail_after(self.limits.call_timeout):
                result = await client.call_tool(name, arguments)
        except TimeoutError:
            outcome = ("timeout", f"{name} did not answer within {self.limits.call_timeout:g} s")
        except Exception as error:  # the tool boundary: whatever the server does becomes the model's tool message
            kind = "server_down" if _is_connection_loss(error) else "server_error"
            outcome = (kind, f"{name} failed: {error}" if kind == "server_error" else "the server stopped answering")
        else:
            text = _result_text(result)
            outcome = ("server_error", text or f"{name} failed") if result.is_error else ("ok", text)
        if not answer.done():
            answer.set_result(outcome)
        return outcome[0]

    # -- the caller's side -------------------------------------------------------------------------------------------

    @property
    def alive(self) -> bool:
        """Whether the server is started and answering (its task still runs)."""
        return self._task is not None and not self._task.done()

    def start(self) -> list[Any]:
        """Start the server and list its tools (the SDK's `Tool` objects); MCPStartError when it cannot."""
        import importlib.util

        if importlib.util.find_spec("mcp") is None:
            raise MCPStartError("MCP servers need the official MCP SDK: pip install 'grpo-tools[mcp]'")
        self.close()
        if self._stderr is not None:
            self._stderr.close()
        # Kept open for the life of the server, which writes to it; closed at the next start
        self._stderr = tempfile.TemporaryFile(mode="w+", encoding="utf-8", errors="replace")  # noqa: SIM115
        ready: concurrent.futures.Future[list[Any]] = concurrent.futures.Future()
        self._task = asyncio.run_coroutine_threadsafe(self._serve(ready), _event_loop())
        try:
            tools = ready.result(timeout=self.limits.start_timeout)
        except concurrent.futures.TimeoutError:
            self.close()
            raise MCPStartError(self._start_failure(f"no tool list within {self.limits.start_timeout:g} s")) from None
        except Exception as error:  # the SDK's own errors for a server that exits or writes no MCP
            self.close()
            while getattr(error, "exceptions", None):  # anyio's task groups wrap the cause in an exception group
                error = error.exceptions[0]
            raise MCPStartError(self._start_failure(f"{type(error).__name__}: {error}")) from None
        self.pid = self._find_pid()
        return tools

    def _start_failure(self, reason: str) -> str:
        stderr = ""
        if self._stderr is not None:
            self._stderr.flush()
            self._stderr.seek(0)
            stderr = self._stderr.read()[-_STDERR_SHOWN:].strip()
        where = f" (working copy {self.workdir})" if self.workdir is not None else ""
        shown = f"\nits stderr:\n{stderr}" if stderr else "\nit wrote nothing to stderr"
        return f"the MCP server `{self.server.describe()}`{where} did not start: {reason}{shown}"

    def _find_pid(self) -> int | None:
        if self.server.url:
            return None
        import psutil

        for child in psutil.Process().children(recursive=True):
            with contextlib.suppress(psutil.Error):
                if child.environ().get(_MARK) == self._mark:
                    return child.pid
        return None

    def call(self, name: str, arguments: dict[str, Any]) -> tuple[str, str]:
        """Send one call; `(status, text)` as the module says. A stopped server is started again first."""
        with self._lock:
            if not self.alive:
                try:
                    self.start()
                except MCPStartError as error:
                    return "server_down", str(error).splitlines()[0]
            queue, loop = self._queue, _event_loop()
            answer: concurrent.futures.Future[tuple[str, str]] = concurrent.futures.Future()
            if queue is None:
                return "server_down", "the server stopped"
            loop.call_soon_threadsafe(queue.put_nowait, (name, arguments, answer))
            try:
                # The server's task answers within call_timeout; the margin covers a wedged event loop.
                status, text = answer.result(timeout=self.limits.call_timeout + 30)
            except concurrent.futures.TimeoutError:
                status, text = "timeout", f"{name} did not answer within {self.limits.call_timeout:g} s"
            if status in ("timeout", "server_down"):
                # A stuck server is killed at once (no grace for a clean exit), a dead one reaped; the next call
                # starts a fresh one on the same working copy
                if self.pid is not None:
                    _kill_group(self.pid)
                self.close()
            return status, text

    def close(self) -> None:
        """Stop the server (its process group too); safe to call twice."""
        task, queue, pid = self._task, self._queue, self.pid
        self._task, self.pid = None, None
        if task is not None and not task.done():
            if queue is not None:
                _event_loop().call_soon_threadsafe(queue.put_nowait, None)
            with contextlib.suppress(concurrent.futures.TimeoutError, concurrent.futures.CancelledError):
                task.result(timeout=15)
            if not task.done():
                task.cancel()
        if pid is not None:
            _kill_group(pid)

    def __del__(self) -> None:
        if self.pid is not None:
            _kill_group(self.pid)


def _kill_group(pid: int) -> None:
    """SIGKILL a server's process group if anything of it is left (it leads its own group)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


@atexit.register
def _close_all() -> None:
    for connection in list(_LIVE):
        connection.close()


def list_server_tools(
    server: MCPServer, limits: MCPLimits | None = None, workdir: str | Path | None = None
) -> list[dict[str, Any]]:
    """The tools a server lists, in the OpenAI function format a row's `tools` carries, with the server's own input
    schemas; MCPStartError when it cannot start."""
    connection = MCPConnection(server, limits, workdir)
    try:
        return [tool_schema(tool) for tool in connection.start()]
    finally:
        connection.close()


def tool_schema(tool: Any) -> dict[str, Any]:
    """One SDK `Tool` as `{"type": "function", "function": {name, description, parameters}}`, the input schema as
    the server wrote it."""
    parameters = dict(tool.input_schema or {"type": "object", "properties": {}})
    return {
        "type": "function",
        "function": {"name": tool.name, "description": tool.description or "", "parameters": parameters},
    }
