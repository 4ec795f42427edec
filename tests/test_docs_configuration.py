"""docs/configuration.md names every field that grpo-tools' configuration classes declare (`ToolGRPOConfig`, the
`DecisionArguments`, `BudgetArguments` and `MCPArguments` it inherits, and `ToolScriptArguments`, beyond what they
take from trl), so a new setting cannot ship undocumented."""

import inspect
from pathlib import Path

import pytest

from grpo_tools.tools.mcp_config import MCPArguments
from grpo_tools.training.budget_args import BudgetArguments
from grpo_tools.training.configs import ToolGRPOConfig, ToolScriptArguments
from grpo_tools.training.decision_args import DecisionArguments


PAGE = Path(__file__).resolve().parent.parent / "docs" / "configuration.md"


@pytest.mark.parametrize(
    "config",
    [ToolGRPOConfig, DecisionArguments, BudgetArguments, MCPArguments, ToolScriptArguments],
    ids=lambda config: config.__name__,
)
def test_every_field_grpo_tools_declares_is_documented(config):
    text = PAGE.read_text(encoding="utf-8")
    declared = list(inspect.get_annotations(config))  # the fields written in the class itself, not inherited ones
    assert declared, f"{config.__name__} declares no field"
    missing = [name for name in declared if f"`{name}`" not in text]
    assert not missing, f"docs/configuration.md does not document {missing}"
