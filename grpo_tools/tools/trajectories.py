"""Trajectories of multi-turn tool use: their rewards, their statistics, gold trajectories and evaluation.

A trajectory is what trl hands reward functions as one conversational completion: the messages after the prompt,
`assistant` turns (with `tool_calls` when the model called tools) alternating with the `tool` messages the environment
answered. Three kinds of reward read it (all with trl's signature, pure functions of the trajectory and the row):
- `outcome_reward`: 1 when the final answer matches the row's `expected` (`answer_matches` says how), else 0;
- the call rewards of `grpo_tools.rewards`, applied to every call in the trajectory (`trajectory_reward`): the
  trajectory's calls, as one list, against the row's gold calls;
- `extra_calls_reward`: minus the number of calls beyond the row's gold calls (its weight is the cost per call).

Also here: executing a parsed call as trl's loop does (`dispatch_tool_call`, `tool_suffix_ids`), gold trajectories
for a warm start (`gold_trajectory`, `sft_example`) and the dataset trl trains on (`multi_turn_dataset`). Evaluation
rollouts live in `grpo_tools.tools.rollouts`.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from grpo_tools.tools.environments import (
    DEFAULT_TOOL_TIMEOUT,
    FAILURE_KINDS,
    ToolEnvironment,
    format_number,
    get_environment,
)


__all__ = [
    "MAX_ANSWER_NUMBERS",
    "MAX_ANSWER_WORDS",
    "RolloutStats",
    "answer_matches",
    "answer_text",
    "dataset_record",
    "dispatch_tool_call",
    "extra_calls_reward",
    "final_answer",
    "gold_trajectory",
    "multi_turn_dataset",
    "outcome_reward",
    "rollout_stats",
    "sft_example",
    "sft_examples",
    "summarize_stats",
    "tool_suffix_ids",
    "trajectory_calls_text",
    "trajectory_reward",
]

# Guards against answers that list guesses: a numeric answer may hold at most this many numbers, a text answer at most
# this many words.
MAX_ANSWER_NUMBERS = 3
MAX_ANSWER_WORDS = 30
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
_SPACES = re.compile(r"\s+")


def _load(value: Any) -> Any:
    """A JSON column as trl passes it (JSON text, which keeps Arrow from merging types) or already decoded."""
    return json.loads(value) if isinstance(value, str) else value


# ---------------------------------------------------------------------------------------------------------------
# Reading a trajectory


def final_answer(messages: Any) -> str | None:
    """The text of the trajectory's last assistant turn, or None when that turn still calls tools (the rollout ran
    out of turns or tokens before answering). A plain-text completion is its own answer."""
    if isinstance(messages, str):
        return messages
    for message in reversed(messages):
        if message.get("role") == "assistant":
            return None if message.get("tool_calls") else (message.get("content") or "")
    return None


def answer_matches(answer: str | None, expected: Any) -> bool:
    """Whether a final answer gives the expected one. The comparison:

    - a number (`expected` an int or float): some number written in the answer (thousands commas allowed) is within
      0.01 or 0.1 %, whichever is larger, of `expected` (tool results are rounded to 2 decimals), and the answer
      writes at most `MAX_ANSWER_NUMBERS` numbers;
    - a text: the expected text appears in the answer as whole words, ignoring case and runs of spaces, and the
      answer is at most `MAX_ANSWER_WORDS` words long.

    >>> answer_matches("42 km is about 26.1 miles.", 26.1), answer_matches("1, 2, 26.1 or 40?", 26.1)
    (True, False)
    >>> answer_matches("It is on a Friday.", "friday"), answer_matches("Fridays off", "Friday")
    (True, False)
    """
    if answer is None:
        return False
    if isinstance(expected, bool) or not isinstance(expected, int | float | str):
        raise ValueError(f"expected must be a number or a string, got {expected!r}")
    if isinstance(expected, str):
        text = _SPACES.sub(" ", answer).strip().lower()
        if len(text.split()) > MAX_ANSWER_WORDS:
            return False
        phrase = _SPACES.sub(" ", expected).strip().lower()
        return re.search(rf"(?<!\w){re.escape(phrase)}(?!\w)", text) is not None
    numbers = [float(number) for number in _NUMBER.findall(_THOUSANDS.sub("", answer))]
    tolerance = max(0.01, 1e-3 * abs(expected))
    return len(numbers) <= MAX_ANSWER_NUMBERS and any(abs(number - expected) <= tolerance for number in numbers)


def answer_text(expected: Any) -> str:
    """The gold final turn for an expected answer, as the warm start teaches it."""
    shown = (
        format_number(expected) if isinstance(expected, int | float) and not isinstance(expected, bool) else expected
    )
    return f"The answer is {shown}."


def trajectory_calls_text(messages: Any) -> str:
    """Every call of a trajectory as Hermes `<tool_call>` blocks, in order, so the single-call rewards and parser
    score the trajectory's calls as one list. A turn whose calls did not parse (trl then keeps the raw text as
    content) is kept as written, so it scores as the parse error it is."""
    if isinstance(messages, str):
        return messages
    blocks = []
    for message in messages:
        if message.get("role") != "assistant":
            continue
        content = message.get("content") or ""
        if "<tool_call>" in content:
            blocks.append(content)
        for call in message.get("tool_calls") or []:
            function = call.get("function", call)
            payload = {"name": function.get("name"), "arguments": function.get("arguments", {})}
            blocks.append(f"<tool_call>\n{json.dumps(payload)}\n</tool_call>")
    return "\n".join(blocks)


def _calls_written(messages: Any) -> int:
    if isinstance(messages, str):
        return 0
    return sum(len(message.get("tool_calls") or []) for message in messages if message.get("role") == "assistant")


# ---------------------------------------------------------------------------------------------------------------
# Rewards (trl's signature)


def outcome_reward(completions: Sequence[Any], expected: Sequence[Any], **kwargs: Any) -> list[float]:
    """1.0 per trajectory whose final answer matches the row's `expected` (see `answer_matches`), else 0.0.

    `expected` is the column as `multi_turn_dataset` writes it: each value as JSON text (`'"Friday"'`, `'26.1'`).

    >>> done = [{"role": "assistant", "content": "The answer is 26.1."}]
    >>> outcome_reward([done, done[:0]], ["26.1", "26.1"])
    [1.0, 0.0]
    """
    return [
        1.0 if answer_matches(final_answer(completion), _load(gold)) else 0.0
        for completion, gold in zip(completions, expected, strict=True)
    ]


def extra_calls_reward(completions: Sequence[Any], answers: Sequence[Any], **kwargs: Any) -> list[float]:
    """Minus the number of calls each trajectory writes beyond the row's gold calls; weighted, the cost per call.

    >>> call = {"type": "function", "function": {"name": "f", "arguments": {}}}
    >>> extra_calls_reward([[{"role": "assistant", "tool_calls": [call, call, call]}]], ['[{"name": "f"}]'])
    [-2.0]
    """
    return [
        -float(max(0, _calls_written(completion) - len(_load(gold))))
        for completion, gold in zip(completions, answers, strict=True)
    ]


def trajectory_reward(function: Callable[..., list[float]]) -> Callable[..., list[float]]:
    """A call reward of `grpo_tools.rewards` applied to all the calls of each trajectory, under the same name."""

    def reward(completions: Sequence[Any], **kwargs: Any) -> list[float]:
        return function([trajectory_calls_text(completion) for completion in completions], **kwargs)

    reward.__name__ = reward.__qualname__ = function.__name__
    reward.__doc__ = f"`{function.__name__}` over every call of each trajectory."
    return reward


# ---------------------------------------------------------------------------------------------------------------
# Statistics of rollouts


@dataclass(frozen=True)
class RolloutStats:
    """What one rollout did with its tools: calls (executed or refused), assistant turns, failures by kind."""

    calls: int
    turns: int
    failures: dict[str, int] = field(default_factory=dict)


def rollout_stats(environment: ToolEnvironment, messages: Any) -> RolloutStats:
    """Count a finished rollout's calls, turns and failures. The environment recorded each call it received; a tool
    message beyond those is a call trl refused itself (no such tool, arguments not an object): `unknown_tool`."""
    if isinstance(messages, str):
        messages = [{"role": "assistant", "content": messages}]
    tool_messages = sum(1 for message in messages if message.get("role") == "tool")
    turns = sum(1 for message in messages if message.get("role") == "assistant")
    failures = Counter(record.status for record in environment.records if record.status != "ok")
    unknown = max(0, tool_messages - len(environment.records))
    failures["unknown_tool"] += unknown
    return RolloutStats(
        calls=len(environment.records) + unknown,
        turns=turns,
        failures={kind: failures[kind] for kind in FAILURE_KINDS},
    )


def summarize_stats(stats: Sequence[RolloutStats]) -> dict[str, Any]:
    """Calls and turns per rollout, and failures per call, overall and by kind."""
    calls = sum(item.calls for item in stats)
    count = max(len(stats), 1)
    failures = {kind: sum(item.failures.get(kind, 0) for item in stats) for kind in FAILURE_KINDS}
    return {
        "calls_per_rollout": calls / count,
        "turns": sum(item.turns for item in stats) / count,
        "failure_rate": sum(failures.values()) / calls if calls else 0.0,
        "failures": {kind: (failures[kind] / calls if calls else 0.0) for kind in FAILURE_KINDS},
        "failure_counts": failures,
        "calls": calls,
    }


# ---------------------------------------------------------------------------------------------------------------
# Executing calls the way trl's loop does


def dispatch_tool_call(environment: ToolEnvironment, tool_call: dict[str, Any]) -> dict[str, Any]:
    """Execute one parsed call as trl's `_tool_call_loop` does and return the tool message, so evaluation and gold
    trajectories show the model exactly what training showed it (including trl's own messages for unknown tools)."""
    tools = environment._tools()
    if tool_call.get("type", "function") != "function":
        return {"role": "tool", "name": "unknown", "content": str({"error": "Unsupported tool call type"})}
    function = tool_call["function"]
    name = function["name"]
    try:
        if name not in tools:
            raise ValueError(f"Tool {name} not found.")
        result = tools[name](**function["arguments"])
    except Exception as error:  # the tool boundary: what trl does with a call it cannot make
        result = {"error": str(error)}
    return {"role": "tool", "name": name, "content": result if isinstance(result, list) else str(result)}


def tool_suffix_ids(tokenizer: Any, tool_messages: list[dict[str, Any]]) -> list[int]:
    """The token ids the chat template writes for tool messages after an assistant turn, through the next generation
    prompt: what trl appends (masked out of the loss) between two generated turns. Same construction as trl's
    `GRPOTrainer._get_tool_suffix_ids`, which needs a prefix-preserving template."""
    call = {"type": "function", "function": {"name": tool_messages[0]["name"], "arguments": {}}}
    dummy = [{"role": "user", "content": "dummy"}, {"role": "assistant", "content": "", "tool_calls": [call]}]
    prefix = tokenizer.apply_chat_template(dummy, add_generation_prompt=False, tokenize=True, return_dict=False)
    full = tokenizer.apply_chat_template(
        dummy + tool_messages, add_generation_prompt=True, tokenize=True, return_dict=False
    )
    ends = [index for index, token in enumerate(prefix) if token == tokenizer.eos_token_id]
    if ends:
        prefix = prefix[: ends[-1] + 1]
    if full[: len(prefix)] != prefix:
        raise ValueError("the chat template is not prefix-preserving: tool messages change the turns before them")
    return full[len(prefix) :]


def gold_trajectory(
    row: dict[str, Any], timeout: float = DEFAULT_TOOL_TIMEOUT, environment: ToolEnvironment | None = None
) -> list[dict[str, Any]]:
    """The trajectory that solves a multi-turn row: its gold calls, grouped into turns by `env.turns` (one turn for
    all of them when absent), each answered by really running the environment (`environment`, reset from the row,
    or a new one of the row's), then the final answer.

    Raises ValueError naming the row when a gold call fails, so a broken row cannot teach failing calls.
    """
    own = environment is None
    environment = get_environment(row)(timeout=timeout) if own else environment
    try:
        return _gold_turns(row, environment)
    finally:
        if own:
            environment._close()  # an MCP server and its working copy go at once


def _gold_turns(row: dict[str, Any], environment: ToolEnvironment) -> list[dict[str, Any]]:
    environment.reset(**dataset_record(row))  # the row as trl hands it to `reset`
    answers, state = _load(row["answers"]), _load(row["env"])
    turns = state.get("turns") or [len(answers)]
    if sum(turns) != len(answers) or min(turns) < 1:
        raise ValueError(f"row id={row.get('id')}: env.turns {turns} does not split its {len(answers)} gold calls")
    messages: list[dict[str, Any]] = []
    start = 0
    for count in turns:
        calls = [
            {"type": "function", "function": {"name": call["name"], "arguments": call.get("arguments", {})}}
            for call in answers[start : start + count]
        ]
        start += count
        messages.append({"role": "assistant", "content": "", "tool_calls": calls})
        messages += [dispatch_tool_call(environment, call) for call in calls]
    failed = [record for record in environment.records if record.status != "ok"]
    if failed:
        raise ValueError(f"row id={row.get('id')}: gold call {failed[0].name} failed: {failed[0].result}")
    messages.append({"role": "assistant", "content": answer_text(row["expected"])})
    return messages


def sft_examples(rows: Sequence[dict[str, Any]], tokenizer: Any) -> list[dict[str, list[int]]]:
    """`sft_example` of every row, one environment of each kind reused from row to row (reset for each), so a warm
    start on an MCP server's rows starts one server, not one per row."""
    environments: dict[str, ToolEnvironment] = {}
    try:
        return [sft_example(row, tokenizer, environments) for row in rows]
    finally:
        for environment in environments.values():
            environment._close()


def sft_example(
    row: dict[str, Any], tokenizer: Any, environments: dict[str, ToolEnvironment] | None = None
) -> dict[str, list[int]]:
    """A multi-turn row's gold trajectory, tokenized for a supervised warm start: `input_ids` (the whole conversation,
    rendered with the environment's tools as trl renders them) and `completion_mask`, 1 exactly on what the assistant
    writes (each turn through its end-of-turn token), 0 on the prompt and on what the environment injects, the same
    split as trl's `tool_mask` in GRPO. One example per row covers every turn, so tool results are never learned.
    `environments` (by environment name) holds environments to reuse, and gets the one this row used.
    """
    kind = get_environment(row)
    own = environments is None
    environment = kind() if own or kind.name not in environments else environments[kind.name]
    if not own:
        environments[kind.name] = environment
    try:
        tools = environment._chat_tools()
        messages = [*row["messages"], *gold_trajectory(row, environment=environment)]
    finally:
        if own:
            environment._close()

    def ids(conversation: list[dict[str, Any]], generation_prompt: bool = False) -> list[int]:
        return list(
            tokenizer.apply_chat_template(
                conversation, tools=tools, add_generation_prompt=generation_prompt, tokenize=True, return_dict=False
            )
        )

    input_ids = ids(messages)
    mask = [0] * len(input_ids)
    first = len(row["messages"])
    for index in range(first, len(messages)):
        if messages[index]["role"] != "assistant":
            continue
        start, through = len(ids(messages[:index], generation_prompt=True)), ids(messages[: index + 1])
        if input_ids[: len(through)] != through:
            raise ValueError(
                f"row id={row['id']}: the chat template does not render turn {index} as a prefix of the conversation"
            )
        # The turn runs through its end-of-turn token; what the template writes after it belongs to the next prompt.
        turn = through[start:]
        end = start + (
            len(turn) - turn[::-1].index(tokenizer.eos_token_id) if tokenizer.eos_token_id in turn else len(turn)
        )
        mask[start:end] = [1] * (end - start)
    return {"input_ids": input_ids, "completion_mask": mask}


def dataset_record(row: dict[str, Any]) -> dict[str, Any]:
    """One row as `multi_turn_dataset` holds it, as trl hands it to `reset` (evaluation too, so a state check reads
    the same row): the conversational `prompt`, and as JSON text the columns `reset` and the rewards read."""
    return {
        "prompt": row["messages"],
        "id": str(row["id"]),
        "category": row.get("category") or "multi_turn",
        "tools": json.dumps(row["tools"]),
        "answers": json.dumps(row["answers"]),
        "possible_answers": json.dumps(row["possible_answers"]) if row.get("possible_answers") else None,
        "env": json.dumps(_load(row["env"])),
        "expected": json.dumps(row["expected"]),
    }


def multi_turn_dataset(rows: Sequence[dict[str, Any]]) -> Any:
    """A `datasets.Dataset` of `dataset_record`s for `GRPOTrainer(environment_factory=...)` (trl renders `prompt`
    with the environment's tools); an `environment` column routes each row when the rows name more than one."""
    from datasets import Dataset

    routed = len({get_environment(row).name for row in rows}) > 1
    records = [dataset_record(row) | ({"environment": get_environment(row).name} if routed else {}) for row in rows]
    return Dataset.from_list(records)
