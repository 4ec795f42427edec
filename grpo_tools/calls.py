"""Tool-call records and the parser that reads them out of model completions (WORK IN PROGRESS)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One call a model made: the tool's name and its arguments as a JSON-like dict."""

    name: str
    arguments: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ParseResult:
    """What `parse_tool_calls` found: the calls that parsed, in order, and one message per attempted call that did not."""

    calls: tuple[ToolCall, ...] = ()
    errors: tuple[str, ...] = ()
    format: str | None = None

    @property
    def attempted(self) -> bool:
        """Whether the text tried to call any tool at all (successfully or not)."""
        return bool(self.calls or self.errors)


def parse_tool_calls(text: Any, format: str = "auto", tools: Any = None) -> ParseResult:
    """Placeholder while the parser is being written."""
    raise NotImplementedError
