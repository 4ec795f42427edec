"""The `grpo-tools` command line.

Each subcommand lives in the module that owns its work and exposes `main(argv) -> int`; this file only names
them. Nothing heavy is imported until a subcommand runs, so `grpo-tools --help` answers at once.
"""

from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass


@dataclass(frozen=True)
class Command:
    """A subcommand: its one-line help and where its `main(argv) -> int` lives."""

    help: str
    target: str  # "module:function"


COMMANDS: dict[str, Command] = {
    "train": Command("Fine-tune tool calling with GRPO from a recipe YAML.", "grpo_tools.training.run:main"),
    "score": Command(
        "Score a file of model outputs against a canonical dataset.", "grpo_tools.evaluation.score_cli:main"
    ),
    "check-data": Command("Lint a canonical tool-calling dataset.", "grpo_tools.cli:check_data_main"),
    "convert": Command(
        "Convert a public tool-calling dataset to canonical rows.", "grpo_tools.tools.bfcl_turns:convert_main"
    ),
    "mcp-tools": Command(
        "List an MCP server's tools as a row's `tools`, or check rows against them.",
        "grpo_tools.tools.mcp_config:mcp_tools_main",
    ),
    "eval": Command(
        "Generate with a model (and adapter) on canonical rows and score its calls.",
        "grpo_tools.evaluation.evaluate:main",
    ),
    "plot": Command(
        "Draw a training run's reward, KL and error curves into one PNG.", "grpo_tools.evaluation.plot:main"
    ),
    "push": Command(
        "Push a trained adapter (or the merged model) to the Hugging Face Hub.", "grpo_tools.hub.push:main"
    ),
}


def check_data_main(argv: list[str]) -> int:
    """`grpo-tools check-data`: the rows' own checks (`grpo_tools.data.check_data`, quick to import), and with
    `--mcp-config RECIPE.yaml` the MCP server's too (`grpo_tools.tools.mcp_config`, imported only then)."""
    if any(arg == "--mcp-config" or arg.startswith("--mcp-config=") for arg in argv):
        from grpo_tools.tools.mcp_config import check_data_main as check_with_server

        return check_with_server(argv)
    from grpo_tools.data.check_data import check_data_main as check_rows

    return check_rows(argv)


def _usage() -> str:
    width = max(len(name) for name in COMMANDS)
    lines = ["usage: grpo-tools <command> [options]", "", "GRPO fine-tuning for LLM tool calling.", "", "commands:"]
    lines += [f"  {name.ljust(width)}  {command.help}" for name, command in COMMANDS.items()]
    lines += ["", "Run `grpo-tools <command> --help` for a command's options."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Dispatch `grpo-tools <command> ...` to the command's own `main`."""
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(_usage())
        return 0
    name, rest = argv[0], argv[1:]
    command = COMMANDS.get(name)
    if command is None:
        print(f"grpo-tools: unknown command {name!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    module_name, function_name = command.target.split(":")
    function = getattr(importlib.import_module(module_name), function_name)
    return function(rest)


if __name__ == "__main__":
    sys.exit(main())
