"""The five tools of the bundled synthetic task and the entity pools its requests draw from.

`TOOLS` are OpenAI-format function tools with typed and enum arguments; the pools (cities, currencies, amounts,
...) are what `tasks.synthetic` fills its phrasings with, and `UNRELATED_REQUESTS` are requests no tool
serves (irrelevance rows).
"""

from __future__ import annotations

from typing import Any


__all__ = [
    "AMOUNTS",
    "CITIES",
    "CURRENCIES",
    "DATES",
    "LABELS",
    "MINUTES",
    "PERIODS",
    "SYMBOLS",
    "TOOLS",
    "UNITS",
    "UNRELATED_REQUESTS",
]


CITIES = (
    "Paris", "Rome", "Berlin", "Madrid", "Lisbon", "Vienna", "Prague", "Dublin", "Oslo", "Athens", "Tokyo", "Seoul",
    "Sydney", "Toronto", "Chicago", "Boston", "Denver", "Lima", "Cairo", "Nairobi", "Mumbai", "Lyon", "Zurich", "Warsaw",
)  # fmt: skip
UNITS = ("celsius", "fahrenheit")
CURRENCIES = ("USD", "EUR", "GBP", "JPY", "CHF", "CAD", "AUD", "INR")
AMOUNTS = (5, 10, 20, 25, 40, 50, 75, 100, 120, 150, 200, 250, 300, 500, 750, 1000, 2500, 12.5, 19.99, 49.5, 99.95)
MINUTES = (1, 2, 3, 5, 8, 10, 12, 15, 20, 25, 30, 40, 45, 60, 90)
LABELS = ("tea", "pasta", "eggs", "laundry", "workout", "nap", "rice", "pizza", "meeting", "study", "bread", "plank")
SYMBOLS = ("AAPL", "MSFT", "GOOG", "AMZN", "TSLA", "NVDA", "META", "NFLX", "IBM", "INTC", "ORCL", "AMD")
# How a user names each period; the enum value is what the call must carry.
PERIODS = {
    "day": ("today", "for the day"),
    "week": ("this week", "over the last week"),
    "month": ("this month", "over the last month"),
    "year": ("this year", "over the last year"),
}
DATES = tuple(f"2025-{month:02d}-{day:02d}" for month in (3, 6, 9, 12) for day in (4, 11, 18, 25))
UNRELATED_REQUESTS = (
    "Tell me a joke about penguins.",
    "What is the capital of Peru?",
    "Translate 'good morning' into Italian.",
    "Write a haiku about the sea.",
    "Who wrote Hamlet?",
    "How many legs does a spider have?",
    "Recommend a good book about history.",
    "What is 17 times 23?",
    "Book a table for two at an Italian restaurant tonight.",
    "Send an email to my boss saying I will be late.",
    "Play some relaxing music.",
    "Turn off the lights in the kitchen.",
)


def _tool(name: str, description: str, properties: dict[str, dict], required: list[str]) -> dict[str, Any]:
    """An OpenAI-format function tool."""
    parameters = {"type": "object", "properties": properties, "required": required}
    return {"type": "function", "function": {"name": name, "description": description, "parameters": parameters}}


TOOLS: dict[str, dict[str, Any]] = {
    "get_weather": _tool(
        "get_weather",
        "Get the current weather in a city.",
        {"city": {"type": "string"}, "unit": {"type": "string", "enum": list(UNITS)}},
        ["city"],
    ),
    "convert_currency": _tool(
        "convert_currency",
        "Convert money to another currency.",
        {
            "amount": {"type": "number"},
            "from_currency": {"type": "string", "enum": list(CURRENCIES)},
            "to_currency": {"type": "string", "enum": list(CURRENCIES)},
        },
        ["amount", "from_currency", "to_currency"],
    ),
    "set_timer": _tool(
        "set_timer",
        "Start a countdown timer.",
        {"minutes": {"type": "integer"}, "label": {"type": "string"}},
        ["minutes"],
    ),
    "search_flights": _tool(
        "search_flights",
        "Search flights on a date.",
        {
            "origin": {"type": "string"},
            "destination": {"type": "string"},
            "date": {"type": "string", "description": "YYYY-MM-DD"},
        },
        ["origin", "destination", "date"],
    ),
    "get_stock_price": _tool(
        "get_stock_price",
        "Get a stock price over a period.",
        {"symbol": {"type": "string"}, "period": {"type": "string", "enum": list(PERIODS)}},
        ["symbol", "period"],
    ),
}
