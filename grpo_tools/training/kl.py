"""The small piece of GRPO maths trl lacks: a KL coefficient that adapts to hold the measured KL near a target.

Two rules, chosen by `kl_controller` (docs/architecture.md, "Adaptive KL"):
- `band`: KL above 1.5 x target multiplies the coefficient by 1.5; KL below 0.5 x target divides it by 1.5;
- `proportional` (Ziegler et al., 2019, "Fine-Tuning Language Models from Human Preferences", section 2.2):
  `e = clip(KL / target - 1, -0.2, 0.2)`, coefficient x (1 + e x n / horizon), n the completions in the step.
Both clamp the coefficient to [kl_min, kl_max].
"""

from __future__ import annotations

import logging
import math
from dataclasses import asdict, dataclass
from typing import Any, Literal


__all__ = ["KL_CONTROLLERS", "AdaptiveKLController"]

KL_CONTROLLERS: tuple[str, ...] = ("band", "proportional")
_BAND_HIGH, _BAND_LOW, _BAND_FACTOR = 1.5, 0.5, 1.5
_PROPORTIONAL_CLIP = 0.2
# The controller's settings under the names a recipe gives them.
_SETTING_NAMES = {
    "target": "kl_target",
    "rule": "kl_controller",
    "min_coef": "kl_min",
    "max_coef": "kl_max",
    "horizon": "kl_horizon",
}

logger = logging.getLogger(__name__)


@dataclass
class AdaptiveKLController:
    """Holds the KL coefficient in force and updates it from each optimizer step's measured KL.

    >>> controller = AdaptiveKLController(coef=0.1, target=0.05)
    >>> controller.update(kl=0.2, num_completions=16)  # far above the target: x 1.5
    0.15000000000000002
    >>> controller.update(kl=0.05, num_completions=16)  # inside the band: unchanged
    0.15000000000000002
    """

    coef: float
    target: float
    rule: Literal["band", "proportional"] = "band"
    min_coef: float = 1e-4
    max_coef: float = 10.0
    horizon: int = 10_000

    def __post_init__(self) -> None:
        if self.rule not in KL_CONTROLLERS:
            raise ValueError(f"kl_controller must be one of {', '.join(KL_CONTROLLERS)}, got {self.rule!r}")
        if not self.target > 0:
            raise ValueError(f"kl_target must be positive, got {self.target}")
        if not 0 < self.min_coef <= self.max_coef:
            raise ValueError(f"need 0 < kl_min <= kl_max, got kl_min={self.min_coef}, kl_max={self.max_coef}")
        if not self.min_coef <= self.coef <= self.max_coef:
            raise ValueError(f"the initial coefficient {self.coef} lies outside [kl_min, kl_max]")
        if self.horizon < 1:
            raise ValueError(f"kl_horizon must be at least 1, got {self.horizon}")

    def update(self, kl: float, num_completions: int) -> float:
        """Take one step's measured KL (mean per-token k3 over completion tokens) and return the next coefficient."""
        if not math.isfinite(kl):
            raise ValueError(f"the measured KL is not finite ({kl}); the run has diverged")
        if self.rule == "band":
            if kl > _BAND_HIGH * self.target:
                self.coef *= _BAND_FACTOR
            elif kl < _BAND_LOW * self.target:
                self.coef /= _BAND_FACTOR
        else:
            error = min(max(kl / self.target - 1.0, -_PROPORTIONAL_CLIP), _PROPORTIONAL_CLIP)
            self.coef *= 1.0 + error * num_completions / self.horizon
        self.coef = min(max(self.coef, self.min_coef), self.max_coef)
        return self.coef

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume: saved with each checkpoint."""
        return asdict(self)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume from a saved state: the coefficient in force at the checkpoint, clamped into the bounds given now.
        The target, rule, bounds and horizon stay the ones given now (the command that resumes is the user's latest
        word), and a log line names each that differs from the checkpoint's."""
        unknown = [key for key in state if not hasattr(self, key)]
        if unknown:
            raise ValueError(f"unknown KL controller field {unknown[0]!r} in saved state")
        changed = [
            f"{name} {getattr(self, key)} (the checkpoint's {state[key]})"
            for key, name in _SETTING_NAMES.items()
            if key in state and state[key] != getattr(self, key)
        ]
        coef = min(max(float(state["coef"]), self.min_coef), self.max_coef)
        if changed:
            clamp = f"; its coefficient {state['coef']} clamped to {coef}" if coef != state["coef"] else ""
            logger.info("resuming with the KL settings given now: %s%s", ", ".join(changed), clamp)
        self.coef = coef
