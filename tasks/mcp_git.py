"""A task over a real MCP server: requests to `mcp-server-git` (PyPI) on a small repository, judged by its state.

The server runs as a user runs it, `mcp-server-git --repository {workdir}`, on a fresh copy of the template repository
for every rollout (grpo-tools copies it: `mcp_template`), and the model passes `repo_path: "."` (the server's current
directory is the copy). Five kinds of request, each checked on the copy after the rollout by `check` (the recipe's
`mcp_state_check: tasks.mcp_git:check`), never by reading the model's text:

- `create_branch`: "Create a new branch called B." -> `git_create_branch`; B exists;
- `switch`: "Switch to the develop branch." -> `git_checkout`; HEAD is on it;
- `stage`: "Stage the file F." -> `git_add`; F is staged;
- `branch_and_switch`: "Create a branch named B and switch to it." -> `git_create_branch`, `git_checkout`;
- `commit`: "Stage F and commit it with the message M." -> `git_add`, `git_commit`; the last commit is M and holds F.

The splits share the tools and the request kinds and differ in the names: branch names and commit messages are drawn
from disjoint pools (train, dev, held-out test), so the held-out rows are new requests for the same tools, the case of
a user who trains a model on their own server. Build them (the template, the rows, the tools as the server lists
them) with `python -m tasks.mcp_git --out outputs/mcp-git`.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from grpo_tools.tools.mcp_client import MCPServer
from grpo_tools.tools.mcp_env import MCPSettings, configure_mcp


__all__ = ["COMMAND", "SPLITS", "TOOLS", "build_template", "check", "generate_rows", "main", "write_task"]

COMMAND = ("mcp-server-git", "--repository", "{workdir}")
# The server's tools the task offers (recipes set `mcp_tools` to the same list).
TOOLS = ("git_add", "git_branch", "git_checkout", "git_commit", "git_create_branch", "git_status")
SPLITS = {"train": 96, "dev": 24, "test": 48}
KINDS = ("create_branch", "switch", "stage", "branch_and_switch", "commit")
EXISTING_BRANCHES = ("develop", "release-1.0", "docs")
CHANGED_FILES = ("CHANGELOG.md", "draft.txt", "notes/ideas.md")  # modified or untracked in the template
_WORDS = (
    "login", "search", "cache", "billing", "export", "upload", "profile", "metrics", "theme", "parser", "retry",
    "invoice", "sync", "backup", "sidebar", "pricing", "locale", "webhook", "audit", "queue", "tokens", "preview",
    "archive", "filters", "sessions", "reports", "alerts", "layout", "schema", "onboarding", "checkout", "avatar",
    "timeline", "ratings", "coupons", "feeds",
)  # fmt: skip
_PREFIXES = ("feature", "fix", "chore")
_VERBS = ("Add", "Update", "Document", "Tidy", "Describe")


def _pool(split: str) -> list[str]:
    """The words a split draws names from: disjoint thirds of `_WORDS` (train gets the first half)."""
    half, three_quarters = len(_WORDS) // 2, 3 * len(_WORDS) // 4
    return {"train": list(_WORDS[:half]), "dev": list(_WORDS[half:three_quarters]),
            "test": list(_WORDS[three_quarters:])}[split]  # fmt: skip


def _git(path: Path, *arguments: str) -> str:
    result = subprocess.run(["git", "-C", str(path), *arguments], check=True, capture_output=True, text=True)
    return result.stdout


def build_template(path: str | Path) -> Path:
    """The repository every rollout starts from: three commits on `main`, the branches of `EXISTING_BRANCHES`, a
    modified CHANGELOG.md and two untracked files; its own commit identity, so the server can commit."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=False)
    _git(path, "init", "-q", "-b", "main")
    _git(path, "config", "user.name", "Task Author")
    _git(path, "config", "user.email", "task@example.com")
    (path / "README.md").write_text("# shop\n\nA small web shop.\n")
    (path / "CHANGELOG.md").write_text("# Changelog\n\n## 0.1\n- first release\n")
    _git(path, "add", "README.md", "CHANGELOG.md")
    _git(path, "commit", "-q", "-m", "Start the shop")
    (path / "app.py").write_text("def main():\n    print('shop')\n")
    _git(path, "add", "app.py")
    _git(path, "commit", "-q", "-m", "Add the entry point")
    for branch in EXISTING_BRANCHES:
        _git(path, "branch", branch)
    (path / "CHANGELOG.md").write_text("# Changelog\n\n## 0.2\n- search\n\n## 0.1\n- first release\n")
    (path / "draft.txt").write_text("ideas for the next release\n")
    (path / "notes").mkdir()
    (path / "notes" / "ideas.md").write_text("- dark mode\n")
    return path


def _call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": {"repo_path": ".", **arguments}}


def _request(rng: random.Random, kind: str, words: list[str]) -> tuple[str, list[dict[str, Any]], dict, str]:
    """(request, gold calls, goal the state check reads, expected word of the final answer)."""
    branch = f"{rng.choice(_PREFIXES)}/{rng.choice(words)}"
    changed = rng.choice(CHANGED_FILES)
    if kind == "create_branch":
        return f"Create a new branch called {branch}.", [_call("git_create_branch", branch_name=branch)], \
            {"branches": [branch]}, branch  # fmt: skip
    if kind == "switch":
        target = rng.choice(EXISTING_BRANCHES)
        return f"Switch to the {target} branch.", [_call("git_checkout", branch_name=target)], {"head": target}, target
    if kind == "stage":
        return f"Stage the file {changed} so it is ready to commit.", [_call("git_add", files=[changed])], \
            {"staged": [changed]}, changed  # fmt: skip
    if kind == "branch_and_switch":
        calls = [_call("git_create_branch", branch_name=branch), _call("git_checkout", branch_name=branch)]
        return f"Create a branch named {branch} and switch to it.", calls, {"head": branch}, branch
    message = f"{rng.choice(_VERBS)} {rng.choice(words)} notes"
    calls = [_call("git_add", files=[changed]), _call("git_commit", message=message)]
    request = f'Stage {changed} and commit it with the message "{message}".'
    return request, calls, {"last_message": message, "committed": [changed]}, message


def generate_rows(split: str, num_rows: int, tools: list[dict[str, Any]], seed: int = 0) -> list[dict[str, Any]]:
    """`num_rows` canonical multi-turn rows of one split, the kinds in turn, offering `tools` (the server's)."""
    rng = random.Random(f"{seed}-{split}")
    words = _pool(split)
    rows = []
    for index in range(num_rows):
        kind = KINDS[index % len(KINDS)]
        request, calls, goal, expected = _request(rng, kind, words)
        rows.append({
            "id": f"mcp-git-{split}-{index:04d}",
            "messages": [{"role": "user", "content": f"In the git repository at `.`: {request}"}],
            "tools": tools,
            "answers": calls,
            "category": "multi_turn",
            "env": {"name": "mcp", "task": kind, "goal": goal},
            "expected": expected,
        })  # fmt: skip
    return rows


def _lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip()]


def check(workdir: Path, row: dict[str, Any]) -> float:
    """1.0 when the working copy meets every part of the row's goal (`env.goal`), else 0.0: the task's state check."""
    goal = row["env"]["goal"]
    if "branches" in goal and not set(goal["branches"]) <= set(
        _lines(_git(workdir, "branch", "--format=%(refname:short)"))
    ):
        return 0.0
    if "head" in goal and _git(workdir, "rev-parse", "--abbrev-ref", "HEAD").strip() != goal["head"]:
        return 0.0
    if "staged" in goal and not set(goal["staged"]) <= set(_lines(_git(workdir, "diff", "--cached", "--name-only"))):
        return 0.0
    if "last_message" in goal:
        if _git(workdir, "log", "-1", "--format=%s").strip() != goal["last_message"]:
            return 0.0
        if not set(goal["committed"]) <= set(_lines(_git(workdir, "show", "--name-only", "--format=", "HEAD"))):
            return 0.0
    return 1.0


def write_task(out: str | Path, seed: int = 0) -> dict[str, Path]:
    """The template repository, the tools as the server lists them, and one JSONL file per split, under `out`."""
    out = Path(out)
    template = build_template(out / "template")
    settings = MCPSettings(MCPServer(command=COMMAND), template=str(template), tools=TOOLS)
    tools = configure_mcp(settings).tool_schemas()
    (out / "tools.json").write_text(json.dumps(tools, indent=2) + "\n")
    written = {}
    for split, count in SPLITS.items():
        path = out / f"{split}.jsonl"
        with path.open("w", encoding="utf-8") as handle:
            for row in generate_rows(split, count, tools, seed):
                handle.write(json.dumps(row) + "\n")
        written[split] = path
    return written


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tasks.mcp_git", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="outputs/mcp-git", help="folder for template/, tools.json and the splits")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    for split, path in write_task(args.out, args.seed).items():
        print(f"{split}: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
