"""A small MCP server (the SDK's `MCPServer`) for tests/tools/test_mcp.py: tools that misbehave on request.

Run over stdio (`python fake_server.py`), over Streamable HTTP on loopback (`--http PORT`), or `--fail-start` to
write to stderr and exit before serving. Every call it receives is appended to the file `$FAKE_MCP_LOG` names, so a
test can see what reached the server.
"""

import argparse
import json
import os
import sys
import time
from pathlib import Path

from mcp.server import MCPServer


server = MCPServer("fake")
_counter = {"value": 0}


def _log(name: str, arguments: dict) -> None:
    if os.environ.get("FAKE_MCP_LOG"):
        with open(os.environ["FAKE_MCP_LOG"], "a", encoding="utf-8") as handle:
            handle.write(json.dumps({"name": name, "arguments": arguments}) + "\n")


@server.tool()
def write_note(name: str, text: str) -> str:
    """Write a note into the working folder."""
    _log("write_note", {"name": name, "text": text})
    Path(name).write_text(text, encoding="utf-8")
    return f"wrote {name}"


@server.tool()
def read_note(name: str) -> str:
    """Read a note from the working folder."""
    _log("read_note", {"name": name})
    return Path(name).read_text(encoding="utf-8")


@server.tool()
def count(amount: int) -> int:
    """Add to a counter kept in memory and return it."""
    _log("count", {"amount": amount})
    _counter["value"] += amount
    return _counter["value"]


@server.tool()
def sleep(seconds: float) -> str:
    """Sleep, then answer."""
    _log("sleep", {"seconds": seconds})
    time.sleep(seconds)
    return "awake"


@server.tool()
def crash() -> str:
    """Exit the server process at once."""
    _log("crash", {})
    os._exit(1)


@server.tool()
def garbage() -> str:
    """Write a line that is not JSON-RPC to stdout, then exit."""
    _log("garbage", {})
    sys.stdout.write("this is not MCP\n")
    sys.stdout.flush()
    os._exit(0)


@server.tool()
def fail(reason: str) -> str:
    """Raise an error the server reports."""
    _log("fail", {"reason": reason})
    raise ValueError(f"refused: {reason}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--http", type=int, help="serve Streamable HTTP on 127.0.0.1 at this port")
    parser.add_argument("--fail-start", action="store_true")
    args = parser.parse_args()
    if args.fail_start:
        print("fake server: cannot open its database", file=sys.stderr)
        sys.exit(3)
    if args.http:
        server.run(transport="streamable-http", host="127.0.0.1", port=args.http)
    else:
        server.run()


if __name__ == "__main__":
    main()
