"""Multi-turn tool use: environments whose tools really run (`ToolEnvironment` and the registry), rollouts for
evaluation, trajectories and their rewards, and BFCL's multi-turn APIs (`BFCLSession`; BFCL's verdict is
`grpo_tools.tools.bfcl_verdict.bfcl_verdict`)."""

from grpo_tools.tools.bfcl import BFCLEnvironment, BFCLSession
from grpo_tools.tools.environments import (
    ENVIRONMENTS,
    ToolEnvironment,
    get_environment,
    is_multi_turn,
    make_environment_factory,
)
from grpo_tools.tools.rollouts import evaluate_multi_turn
from grpo_tools.tools.trajectories import gold_trajectory, multi_turn_dataset, outcome_reward, trajectory_reward


__all__ = [
    "ENVIRONMENTS",
    "BFCLEnvironment",
    "BFCLSession",
    "ToolEnvironment",
    "evaluate_multi_turn",
    "get_environment",
    "gold_trajectory",
    "is_multi_turn",
    "make_environment_factory",
    "multi_turn_dataset",
    "outcome_reward",
    "trajectory_reward",
]
