"""The decision to call: a reward that ranks what a completion did with a row, not only whether its calls are right.

A row that needs a call has three outcomes (the right call, no call, a wrong call) and a row that needs none has two
(no call, a call). A model is usable when it is right where it calls and quiet where nothing fits, so the reward pays
abstaining more than a wrong call: TruthRL (Wei et al., 2025, arXiv 2509.25760) scores right +1, abstain 0, wrong -1,
and found 0 for abstaining better than -0.5 or +0.5; a binary reward (abstaining paid like a wrong answer) drove
abstention to about zero. Those are the defaults of `DecisionValues`; docs/rewards.md says more.

What counts as right is decided by a judge reward of the registry (BFCL's verdict by default). A completion that
tries to call and does not parse is a call, and a wrong one: the model learns that a broken call costs more than
none. Partial credit may lift a wrong call towards abstaining (`partial`, a share of the gap between the two), never
above it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from grpo_tools.rewards.gold import Gold, Verdict
from grpo_tools.rewards.parsing import ParseResult
from grpo_tools.rewards.scorers import score_bfcl, score_exact, score_partial


__all__ = ["DECISION_JUDGES", "OUTCOMES", "DecisionValues", "Outcome", "decision_outcome", "score_decision"]

Outcome = Literal["right", "abstain", "wrong", "quiet", "unexpected"]
# The outcomes of a call row, then of a no-call row.
OUTCOMES: tuple[Outcome, ...] = ("right", "abstain", "wrong", "quiet", "unexpected")


@dataclass(frozen=True)
class DecisionValues:
    """What each outcome of the decision to call is paid.

    `right`, `abstain` and `wrong` are a call row's outcomes, `quiet` and `unexpected` a no-call row's. `partial` in
    [0, 1] is the share of the gap from `wrong` to `abstain` that a wrong call's partial credit (`tool_partial`) may
    fill: 0 pays every wrong call alike, 1 pays a wrong call with every name and value right like an abstention.
    `judge` names the reward that decides whether a call is right: `bfcl` (BFCL's verdict) or `exact`."""

    right: float = 1.0
    abstain: float = 0.0
    wrong: float = -1.0
    quiet: float = 1.0
    unexpected: float = -1.0
    partial: float = 0.0
    judge: str = "bfcl"

    def __post_init__(self) -> None:
        if self.judge not in DECISION_JUDGES:
            raise ValueError(
                f"the decision reward's judge must be one of {', '.join(DECISION_JUDGES)}, got {self.judge!r}"
            )
        if not 0.0 <= self.partial <= 1.0:
            raise ValueError(f"the decision reward's partial share must lie in [0, 1], got {self.partial}")
        if not self.right > self.wrong:
            raise ValueError(
                f"a right call must be paid more than a wrong one, got right {self.right}, wrong {self.wrong}"
            )
        if not self.quiet > self.unexpected:
            raise ValueError(
                f"abstaining on a row that needs no call must be paid more than calling there, got quiet {self.quiet}, "
                f"unexpected {self.unexpected}"
            )

    def value(self, outcome: Outcome) -> float:
        """The payment of one outcome (a wrong call before partial credit)."""
        return float(getattr(self, outcome))


_JUDGES: dict[str, Callable[[ParseResult, Gold], Verdict]] = {"bfcl": score_bfcl, "exact": score_exact}
DECISION_JUDGES = tuple(_JUDGES)


def decision_outcome(parsed: ParseResult, gold: Gold, judge: str = "bfcl") -> tuple[Outcome, Verdict]:
    """Which outcome a parsed completion is on its row, and the judge's verdict behind it (a no-call row's verdict is
    1 when the completion attempted no call). A call that does not parse is a call."""
    if not gold.calls:
        if parsed.attempted:
            return "unexpected", Verdict(0.0, ("unexpected_call",) + ("parse_error",) * len(parsed.errors))
        return "quiet", Verdict(1.0)
    if not parsed.attempted:
        return "abstain", Verdict(0.0, ("missed_call",))
    verdict = _JUDGES[judge](parsed, gold)
    return ("right" if verdict.correct else "wrong"), verdict


def score_decision(parsed: ParseResult, gold: Gold, values: DecisionValues | None = None) -> Verdict:
    """The decision reward of one completion: `values`' payment for its outcome, a wrong call lifted towards
    abstaining by `values.partial` of its partial credit. Errors are the judge's."""
    values = values or DecisionValues()
    outcome, verdict = decision_outcome(parsed, gold, values.judge)
    score = values.value(outcome)
    if outcome == "wrong" and values.partial > 0.0 and values.abstain > values.wrong:
        credit = score_partial(parsed, gold).score  # in [0, 1]
        score += values.partial * credit * (values.abstain - values.wrong)
    return Verdict(score, verdict.errors)
