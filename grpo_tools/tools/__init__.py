"""Multi-turn tool use: environments whose tools really run (`ToolEnvironment` and the registry), rollouts for
evaluation, trajectories and their rewards, and BFCL's multi-turn APIs (`BFCLSession`; BFCL's verdict is
`grpo_tools.tools.bfcl_verdict.bfcl_verdict`), and a user's MCP server as an environment (`configure_mcp`,
docs/mcp.md)."""

from grpo_tools.tools.bfcl import BFCLEnvironment, BFCLSession
from grpo_tools.tools.environments import (
    ENVIRONMENTS,
    ToolEnvironment,
    get_environment,
    is_multi_turn,
    make_environment_factory,
)
from grpo_tools.tools.mcp_client import MCPLimits, MCPServer, MCPStartError
from grpo_tools.tools.mcp_env import MCPEnvironment, MCPSettings, configure_mcp
from grpo_tools.tools.rollouts import evaluate_multi_turn
from grpo_tools.tools.trajectories import gold_trajectory, multi_turn_dataset, outcome_reward, trajectory_reward


__all__ = [
    "ENVIRONMENTS",
    "BFCLEnvironment",
    "BFCLSession",
    "MCPEnvironment",
    "MCPLimits",
    "MCPServer",
    "MCPSettings",
    "MCPStartError",
    "ToolEnvironment",
    "configure_mcp",
    "evaluate_multi_turn",
    "get_environment",
    "gold_trajectory",
    "is_multi_turn",
    "make_environment_factory",
    "multi_turn_dataset",
    "outcome_reward",
    "trajectory_reward",
]
