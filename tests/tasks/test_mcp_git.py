"""tasks/mcp_git.py: the task over mcp-server-git. Its rows are canonical and offer the server's own tools, the splits
draw names from disjoint pools, and the state check accepts exactly what the gold calls do, run by the real server on
a copy of the template (and rejects the untouched template)."""

import re
import subprocess

import pytest

from grpo_tools.data.rows import check_rows
from grpo_tools.tools.environments import ENVIRONMENTS
from grpo_tools.tools.mcp_client import MCPServer
from grpo_tools.tools.mcp_config import check_mcp_rows
from grpo_tools.tools.mcp_env import MCPSettings, configure_mcp
from grpo_tools.tools.trajectories import gold_trajectory
from tasks.mcp_git import _WORDS, COMMAND, KINDS, SPLITS, TOOLS, _pool, build_template, check, generate_rows


@pytest.fixture
def environment_class(tmp_path):
    template = build_template(tmp_path / "template")
    yield configure_mcp(MCPSettings(MCPServer(command=COMMAND), template=str(template), tools=TOOLS)), template
    ENVIRONMENTS.pop("mcp", None)


def test_gold_calls_run_by_the_real_server_pass_the_state_check_and_nothing_else_does(environment_class):
    cls, template = environment_class
    tools = cls.tool_schemas()
    assert [tool["function"]["name"] for tool in tools] == list(TOOLS)
    rows = generate_rows("test", len(KINDS), tools)
    assert not check_rows(rows) and not check_mcp_rows(rows, tools)
    environment = cls()
    try:
        for row in rows:
            trajectory = gold_trajectory(row, environment=environment)
            assert all("error" not in message["content"] for message in trajectory if message["role"] == "tool")
            assert check(environment.workdir, row) == 1.0, row["env"]["task"]
            environment.reset(env=row["env"])  # the template again: no goal is met by doing nothing
            assert check(environment.workdir, row) == 0.0, row["env"]["task"]
    finally:
        environment._close()
    status = subprocess.run(["git", "-C", str(template), "status", "--short"], capture_output=True, text=True)
    assert status.stdout.splitlines() == [" M CHANGELOG.md", "?? draft.txt", "?? notes/"]


def test_splits_share_the_tools_and_kinds_and_differ_in_names():
    for split, count in SPLITS.items():
        split_rows = generate_rows(split, count, [])
        assert {row["env"]["task"] for row in split_rows} == set(KINDS)
        for row in split_rows:
            request = row["messages"][0]["content"]
            used = {word for word in _WORDS if re.search(rf"\b{word}\b", request)}
            assert used <= set(_pool(split)), (split, request)
    assert not set(_pool("train")) & set(_pool("test")) and not set(_pool("train")) & set(_pool("dev"))
    assert not set(_pool("dev")) & set(_pool("test"))
