"""The recipe keys that name an MCP server (`MCPArguments`, part of `ToolGRPOConfig`), and `grpo-tools mcp-tools`.

`grpo-tools mcp-tools --config RECIPE.yaml` (or `--command "..."` / `--url ...`) starts the server, lists its tools
in the OpenAI function format a row's `tools` carries (the server's own input schemas), and with `--check ROWS.jsonl`
checks rows against them: every row names the `mcp` environment, offers exactly the server's tools, and each gold
call names one of them with arguments its input schema accepts. docs/mcp.md has the whole path.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from grpo_tools.rewards.budget import DEFAULT_BUDGET
from grpo_tools.tools.mcp_client import MCPLimits, MCPServer, MCPStartError
from grpo_tools.tools.mcp_env import MCP_ENVIRONMENT, MCPSettings, configure_mcp


__all__ = ["MCPArguments", "check_data_main", "check_mcp_rows", "mcp_tools_main", "prepare_mcp", "read_mcp_arguments"]


@dataclass
class MCPArguments:
    """Where the MCP server is and the limits on what a rollout may ask of it; rows name it with `env.name: mcp`."""

    mcp_command: str | None = field(
        default=None,
        metadata={
            "help": "MCP server started per environment over stdio: a command line, split like a shell's but never run "
            "by one; `{workdir}` stands for the rollout's working copy (also the server's current directory)."
        },
    )
    mcp_url: str | None = field(
        default=None, metadata={"help": "MCP server over Streamable HTTP (instead of mcp_command): its endpoint URL."}
    )
    mcp_env: list[str] = field(
        default_factory=list,
        metadata={"help": "Environment variables for the stdio server, as KEY=VALUE; `{workdir}` is substituted."},
    )
    mcp_template: str | None = field(
        default=None,
        metadata={
            "help": "Folder copied afresh into every rollout's working copy before it starts (a stateful server's "
            "repository, database, files); needs mcp_command."
        },
    )
    mcp_tools: list[str] = field(
        default_factory=list,
        metadata={"help": "Only these tools of the server are offered and callable (all of them when empty)."},
    )
    mcp_restart_each_rollout: bool = field(
        default=False,
        metadata={
            "help": "Restart the server at every rollout, for servers that keep state in memory; otherwise each "
            "environment keeps its server and only the working copy is made afresh."
        },
    )
    mcp_state_check: str | None = field(
        default=None,
        metadata={
            "help": "module:function, the user's check(workdir, row) -> float of the working copy after a rollout; "
            "trl adds it as a reward (logged as `mcp_state`)."
        },
    )
    mcp_call_timeout: float = field(
        default=10.0, metadata={"help": "Seconds an MCP call may take before the model is told it timed out."}
    )
    mcp_start_timeout: float = field(
        default=60.0, metadata={"help": "Seconds an MCP server may take to start and list its tools."}
    )
    mcp_max_calls: int = field(
        default=32,
        metadata={"help": "MCP calls one rollout may send; later calls are refused (failure kind `limit`)."},
    )
    mcp_max_result_chars: int = field(
        default=4000, metadata={"help": "An MCP result longer than this is cut to it (failure kind `limit`)."}
    )

    def check_mcp_arguments(self) -> None:
        """ValueError naming the key for settings that cannot be right."""
        if self.mcp_command and self.mcp_url:
            raise ValueError("set one of mcp_command and mcp_url, not both")
        for item in self.mcp_env:
            if "=" not in item:
                raise ValueError(f"mcp_env entries are KEY=VALUE, got {item!r}")
        MCPLimits(self.mcp_call_timeout, self.mcp_start_timeout, self.mcp_max_calls, self.mcp_max_result_chars)
        if self.mcp_template and self.mcp_url:
            raise ValueError("mcp_template needs a server started by a command (mcp_command), not a url")

    def mcp_settings(self) -> MCPSettings | None:
        """The server these keys name, or None when they name none."""
        if not (self.mcp_command or self.mcp_url):
            return None
        env = dict(item.split("=", 1) for item in self.mcp_env)
        server = (
            MCPServer.from_command_line(self.mcp_command, env) if self.mcp_command else MCPServer(url=self.mcp_url)
        )
        limits = MCPLimits(
            self.mcp_call_timeout, self.mcp_start_timeout, self.mcp_max_calls, self.mcp_max_result_chars
        )
        # A training config also holds the completion budget (`BudgetArguments`, whose keys it inherits too)
        budget = self.completion_budget() if hasattr(self, "completion_budget") else DEFAULT_BUDGET
        return MCPSettings(
            server,
            limits,
            self.mcp_template,
            self.mcp_restart_each_rollout,
            self.mcp_state_check,
            tuple(self.mcp_tools),
            budget,
        )


def read_mcp_arguments(recipe: str | Path) -> MCPArguments:
    """The `mcp_*` keys of a recipe YAML (the others are ignored)."""
    import yaml

    config = yaml.safe_load(Path(recipe).read_text(encoding="utf-8")) or {}
    if not isinstance(config, dict):
        raise ValueError(f"{recipe}: expected a mapping of recipe keys")
    names = {item.name for item in fields(MCPArguments)}
    arguments = MCPArguments(**{key: value for key, value in config.items() if key in names})
    arguments.check_mcp_arguments()
    return arguments


def prepare_mcp(arguments: MCPArguments | str | Path | None, rows: list[dict[str, Any]]) -> bool:
    """Before rows naming the `mcp` environment are trained on or evaluated: start their server once, list its tools
    and register the environment (`configure_mcp`); False when no row names it. `arguments` is the parsed keys or a
    recipe YAML holding them. ValueError, with the server's command and stderr, when it cannot start."""
    names = set()
    for row in rows:
        env = json.loads(row["env"]) if isinstance(row.get("env"), str) else row.get("env")
        names.add(env.get("name") if isinstance(env, dict) else None)
    if MCP_ENVIRONMENT not in names:
        return False
    if arguments is not None and not isinstance(arguments, MCPArguments):
        arguments = read_mcp_arguments(arguments)
    settings = arguments.mcp_settings() if arguments is not None else None  # the template folder is checked here
    if settings is None:
        raise ValueError("rows name the `mcp` environment but no MCP server is set: give mcp_command or mcp_url")
    try:
        configure_mcp(settings)
    except MCPStartError as error:
        raise ValueError(str(error)) from None
    return True


def check_mcp_rows(rows: list[dict[str, Any]], tools: list[dict[str, Any]]) -> list[str]:
    """Problems of rows meant for an MCP server, each naming the row and field; [] when every row fits."""
    from grpo_tools.rewards.schemas import normalize_tool, validate_arguments

    specs = {
        tool["function"]["name"]: normalize_tool(tool, where=f"tool {tool['function']['name']}") for tool in tools
    }
    problems = []
    for number, row in enumerate(rows, start=1):
        where = f"row {number} (id={row.get('id')})"
        env = json.loads(row["env"]) if isinstance(row.get("env"), str) else row.get("env")
        if not isinstance(env, dict) or env.get("name") != MCP_ENVIRONMENT:
            problems.append(f"{where}: env.name: expected {MCP_ENVIRONMENT!r}, got {env!r}")
        if row.get("tools") != tools:
            offered = sorted(tool.get("function", {}).get("name", "?") for tool in row.get("tools") or [])
            problems.append(f"{where}: tools: differ from the server's tools {sorted(specs)} (row offers {offered})")
        for index, call in enumerate(row.get("answers") or []):
            name = call.get("name")
            if name not in specs:
                problems.append(f"{where}: answers[{index}].name: {name!r} is not a tool of the server")
                continue
            for item in validate_arguments(specs[name], call.get("arguments") or {}):
                path = f".{item.path}" if item.path else ""
                problems.append(f"{where}: answers[{index}].arguments{path}: {item.message}")
    return problems


def mcp_tools_main(argv: list[str]) -> int:
    """`grpo-tools mcp-tools`: list a server's tools as a row's `tools`, or check rows against them."""
    parser = argparse.ArgumentParser(prog="grpo-tools mcp-tools", description=mcp_tools_main.__doc__)
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--config", help="a recipe YAML whose mcp_* keys name the server")
    where.add_argument("--command", help="the server's command line (stdio)")
    where.add_argument("--url", help="the server's Streamable-HTTP endpoint")
    parser.add_argument("--check", metavar="ROWS", help="check these canonical rows (JSONL) against the server")
    args = parser.parse_args(argv)
    try:
        if args.config:
            settings = read_mcp_arguments(args.config).mcp_settings()
            if settings is None:
                raise ValueError(f"{args.config}: no mcp_command or mcp_url")
        else:
            server = MCPServer.from_command_line(args.command) if args.command else MCPServer(url=args.url)
            settings = MCPSettings(server)
        if args.check:
            return _check(args.check, settings)
        tools = _tools(settings)
    except (ValueError, OSError, MCPStartError) as error:
        print(f"grpo-tools mcp-tools: {error}", file=sys.stderr)
        return 2
    print(json.dumps(tools, indent=2, ensure_ascii=False))
    return 0


def _tools(settings: MCPSettings) -> list[dict[str, Any]]:
    """The tools rows offer: the server's (on a copy of the template), those of `mcp_tools` only, sorted by name."""
    return configure_mcp(settings).tool_schemas()


def _check(path: str, settings: MCPSettings) -> int:
    from grpo_tools.data.rows import DataError, read_jsonl

    try:
        lines = list(read_jsonl(path))
    except DataError as error:
        print(f"grpo-tools mcp-tools: {error}", file=sys.stderr)
        return 2
    unreadable = [f"row {number}: {row}" for number, row in lines if isinstance(row, DataError)]
    rows = [row for _, row in lines if not isinstance(row, DataError)]
    problems = unreadable + check_mcp_rows(rows, configure_mcp(settings).tool_schemas())
    for problem in problems:
        print(f"{path}: {problem}", file=sys.stderr)
    print(f"{path}: {len(rows)} rows, {len(problems)} problems")
    return 1 if problems else 0


def check_data_main(argv: list[str]) -> int:
    """`grpo-tools check-data DATA.jsonl [--mcp-config RECIPE.yaml]`: `data.check_data.check_data_main`'s checks, and with
    `--mcp-config` the rows checked against the MCP server that recipe names too (`check_mcp_rows`)."""
    from grpo_tools.data.check_data import check_data_main as check_rows_main

    parser = argparse.ArgumentParser(
        prog="grpo-tools check-data",
        description="Lint a canonical tool-calling dataset (JSONL): ids, messages, tools, gold answers against "
        "their tool schemas, possible_answers and categories; with --mcp-config, also against an MCP server's tools. "
        "Exits 1 when it finds a problem.",
    )
    parser.add_argument("data", help="canonical dataset, one JSON object per line")
    parser.add_argument("--mcp-config", help="a recipe YAML whose mcp_* keys name the server the rows are for")
    args = parser.parse_args(argv)
    status = check_rows_main([args.data])
    if args.mcp_config is None or status == 2:
        return status
    return max(status, mcp_tools_main(["--config", args.mcp_config, "--check", args.data]))
