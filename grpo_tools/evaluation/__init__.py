"""Evaluation: scoring a predictions file (`score`), generating with a model and scoring (`eval`), the before/after
comparison, plots of a run, and BFCL's leaderboard table."""

from grpo_tools.evaluation.compare import print_comparison
from grpo_tools.evaluation.evaluate import evaluate_model
from grpo_tools.evaluation.plot import plot_accuracy_by_category, plot_run
from grpo_tools.evaluation.scoring import SCORERS, score_files


__all__ = ["SCORERS", "evaluate_model", "plot_accuracy_by_category", "plot_run", "print_comparison", "score_files"]
