"""Training: the config (`ToolGRPOConfig`), the adaptive KL controller, the trainer (`ToolGRPOTrainer`), the warm
start (`training.warm_start`), a recipe's run (`training.run`, `grpo-tools train`) and `build_trainer`, which builds
the trainer from parsed arguments for `grpo-tools train` and for every benchmark; `REWARD_FUNCS`, every reward
`reward_funcs` can name.

The KL controller is pure Python and imported here at once; the rest imports torch and trl, so it is imported when
first used (`from grpo_tools.training import ToolGRPOTrainer` works, `import grpo_tools` stays light).
"""

import importlib
from typing import Any

from grpo_tools.training.kl import KL_CONTROLLERS, AdaptiveKLController


__all__ = [
    "KL_CONTROLLERS",
    "REWARD_FUNCS",
    "AdaptiveKLController",
    "ToolGRPOConfig",
    "ToolGRPOTrainer",
    "ToolScriptArguments",
    "build_trainer",
]

_LAZY = {
    "ToolGRPOConfig": "grpo_tools.training.configs",
    "ToolScriptArguments": "grpo_tools.training.configs",
    "ToolGRPOTrainer": "grpo_tools.training.trainer",
    "REWARD_FUNCS": "grpo_tools.training.reward_funcs",
    "build_trainer": "grpo_tools.training.run",
}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_LAZY[name]), name)
