"""Tests for tasks.tiny_model: the offline tiny model builds, reloads from disk, and its chat template is trl-ready."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file
from tokenizers import Tokenizer
from transformers import AutoModelForCausalLM, AutoTokenizer

from grpo_tools.data.prompts import gold_message
from tasks.synthetic import BUNDLED_FILES, TOOLS
from tasks.tiny_model import SPECIAL_TOKENS, TOOL_TOKENS, build_tiny_model, main


DATA_DIR = Path(__file__).resolve().parents[2] / "data"
WEATHER = TOOLS["get_weather"]
USER = {"role": "user", "content": "Is it warm in Lyon today? Use celsius."}
CALL = {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Lyon", "unit": "celsius"}}}
CALL_TEXT = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Lyon", "unit": "celsius"}}\n</tool_call>'
# A multi-turn tool conversation: call, result, two parallel calls (one with JSON-string arguments), results, answer.
CONVERSATION = [
    {"role": "system", "content": "You are a weather bot."},
    USER,
    {"role": "assistant", "content": "", "tool_calls": [CALL]},
    {"role": "tool", "name": "get_weather", "content": '{"temperature": 21}'},
    {
        "role": "assistant",
        "content": "Let me compare.",
        "tool_calls": [
            {"type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Rome"}'}},
            {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}},
        ],
    },
    {"role": "tool", "name": "get_weather", "content": '{"temperature": 25}'},
    {"role": "tool", "name": "get_weather", "content": '{"temperature": 9}'},
    {"role": "assistant", "content": "Yes, 21 degrees."},
]


@pytest.fixture(scope="session")
def offline() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HF_HUB_OFFLINE", "1")
        yield


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory, offline: None) -> Path:
    """The tiny model built once per session (`benchmarks/bench_tiny.py` times the build)."""
    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "model", seed=0)


@pytest.fixture(scope="session")
def tokenizer(tiny_dir: Path) -> Any:
    return AutoTokenizer.from_pretrained(tiny_dir, local_files_only=True)


@pytest.fixture(scope="session")
def model(tiny_dir: Path) -> Any:
    return AutoModelForCausalLM.from_pretrained(tiny_dir, local_files_only=True)


def _render(tokenizer: Any, messages: list[dict], **kwargs: Any) -> str:
    return tokenizer.apply_chat_template(messages, tools=[WEATHER], tokenize=False, **kwargs)


def test_build_saves_safetensors_and_the_tokenizer(tiny_dir: Path) -> None:
    assert (tiny_dir / "model.safetensors").is_file()
    assert (tiny_dir / "tokenizer.json").is_file()


def test_config_is_a_tiny_qwen2_with_tied_embeddings(model: Any, tokenizer: Any) -> None:
    config = model.config
    assert config.model_type == "qwen2"
    assert config.tie_word_embeddings
    assert model.get_input_embeddings().weight.data_ptr() == model.get_output_embeddings().weight.data_ptr()
    assert config.vocab_size == len(tokenizer) <= 1024
    assert model.num_parameters() < 2_000_000
    assert config.eos_token_id == tokenizer.eos_token_id == tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert config.pad_token_id == tokenizer.pad_token_id == tokenizer.convert_tokens_to_ids("<|endoftext|>")


def test_generate_produces_new_tokens(model: Any, tokenizer: Any) -> None:
    prompt = tokenizer.apply_chat_template(
        [USER], tools=[WEATHER], add_generation_prompt=True, return_tensors="pt", return_dict=True
    )
    output = model.generate(**prompt, max_new_tokens=6, min_new_tokens=6, do_sample=False)
    new_tokens = output[0, prompt["input_ids"].shape[1] :]
    assert new_tokens.shape == (6,)
    assert int(new_tokens.max()) < len(tokenizer)


def test_prompt_renders_tools_and_hermes_markup(tokenizer: Any) -> None:
    text = _render(tokenizer, [USER], add_generation_prompt=True)
    assert text.startswith("<|im_start|>system\n# Tools\n<tools>\n")
    # one signature a line: names, parameter names, types, enum values
    assert "<tools>\nget_weather(city: string, unit: celsius|fahrenheit)\n</tools><|im_end|>\n" in text
    assert "<|im_start|>user\nIs it warm in Lyon today? Use celsius.<|im_end|>\n" in text
    assert text.endswith("<|im_end|>\n<|im_start|>assistant\n")
    assert not _render(tokenizer, [USER]).endswith("<|im_start|>assistant\n")


def test_no_tools_block_without_tools(tokenizer: Any) -> None:
    text = tokenizer.apply_chat_template([USER], tokenize=False)
    assert text == (
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
        "<|im_start|>user\nIs it warm in Lyon today? Use celsius.<|im_end|>\n"
    )


def test_tool_calls_and_tool_messages_are_rendered(tokenizer: Any) -> None:
    text = _render(tokenizer, CONVERSATION)
    assert text.startswith("<|im_start|>system\nYou are a weather bot.\n\n# Tools\n")
    assert f"<|im_start|>assistant\n{CALL_TEXT}<|im_end|>\n" in text
    assert '<|im_start|>user\n<tool_response>\n{"temperature": 21}\n</tool_response><|im_end|>\n' in text
    assert (
        "<|im_start|>assistant\nLet me compare.\n"
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call><|im_end|>\n'
    ) in text
    assert text.endswith("<|im_start|>assistant\nYes, 21 degrees.<|im_end|>\n")


@pytest.mark.parametrize("k", range(1, len(CONVERSATION)))
def test_template_is_prefix_preserving(tokenizer: Any, k: int) -> None:
    """Rendering messages[:k] is a prefix of rendering messages[:k+1], as text and as tokens."""
    shorter, longer = _render(tokenizer, CONVERSATION[:k]), _render(tokenizer, CONVERSATION[: k + 1])
    assert longer.startswith(shorter)
    assert tokenizer(longer)["input_ids"][: len(tokenizer(shorter)["input_ids"])] == tokenizer(shorter)["input_ids"]
    if CONVERSATION[k]["role"] == "assistant":
        # The generation prompt is exactly how the assistant turn starts: prompt + completion == full conversation.
        assert longer.startswith(_render(tokenizer, CONVERSATION[:k], add_generation_prompt=True))


def test_trl_accepts_the_template_as_is(tokenizer: Any) -> None:
    from trl.chat_template_utils import (
        get_training_chat_template,
        is_chat_template_prefix_preserving,
        is_chat_template_stop_token_trained,
        supports_tool_calling,
    )

    assert supports_tool_calling(tokenizer)
    assert is_chat_template_prefix_preserving(tokenizer)
    assert is_chat_template_stop_token_trained(tokenizer)
    assert get_training_chat_template(tokenizer) is None  # no patching needed for GRPO tools or SFT


def test_assistant_mask_covers_exactly_the_assistant_output(tokenizer: Any) -> None:
    messages = [USER, {"role": "assistant", "content": "", "tool_calls": [CALL]}]
    output = tokenizer.apply_chat_template(
        messages, tools=[WEATHER], return_dict=True, return_assistant_tokens_mask=True
    )
    masked = [token for token, keep in zip(output["input_ids"], output["assistant_masks"], strict=True) if keep]
    assert tokenizer.decode(masked) == CALL_TEXT + "<|im_end|>"


def test_loaded_tokenizer_encodes_like_the_saved_tokenizer_json(tokenizer: Any, tiny_dir: Path) -> None:
    """AutoTokenizer rebuilds a qwen2 tokenizer's pipeline from vocab and merges; it must not change a single id."""
    saved = Tokenizer.from_file(str(tiny_dir / "tokenizer.json"))
    texts = [
        _render(tokenizer, CONVERSATION),
        "Ünïcödé, e.g. (Zanzibar) it's 3.5°C\t\n\n  x",
        DATA_DIR.joinpath("README.md").read_text(),
    ]
    for text in texts:
        assert tokenizer(text)["input_ids"] == saved.encode(text).ids


@pytest.mark.parametrize("value", ["Lyon", "celsius", "USD", "tea", "AAPL"])
def test_argument_values_are_the_same_tokens_in_prompt_and_call(tokenizer: Any, value: str) -> None:
    """Filling an argument is a plain copy: a word is tokenized alike after a space and inside a JSON string."""
    in_prompt = tokenizer.encode(f"Use {value} please", add_special_tokens=False)
    in_call = tokenizer.encode(f'{{"x": "{value}"}}', add_special_tokens=False)
    value_ids = tokenizer.encode(value, add_special_tokens=False)
    assert _contains(in_prompt, value_ids) and _contains(in_call, value_ids)


def _contains(ids: list[int], part: list[int]) -> bool:
    return any(ids[start : start + len(part)] == part for start in range(len(ids) - len(part) + 1))


@pytest.mark.parametrize("token", [*SPECIAL_TOKENS, *TOOL_TOKENS])
def test_special_and_tool_tokens_round_trip(tokenizer: Any, token: str) -> None:
    ids = tokenizer.encode(f"a{token}b", add_special_tokens=False)
    token_id = tokenizer.convert_tokens_to_ids(token)
    assert token_id in ids
    assert tokenizer.decode(ids) == f"a{token}b"
    kept = tokenizer.decode(ids, skip_special_tokens=True)
    assert kept == ("ab" if token in SPECIAL_TOKENS else f"a{token}b")


def test_completion_text_survives_skip_special_tokens(tokenizer: Any) -> None:
    ids = tokenizer.encode(CALL_TEXT + "<|im_end|>", add_special_tokens=False)
    assert tokenizer.decode(ids, skip_special_tokens=True) == CALL_TEXT
    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.pad_token == "<|endoftext|>"


def test_parse_response_returns_content_and_tool_calls(tokenizer: Any) -> None:
    prompt = _render(tokenizer, [USER], add_generation_prompt=True)
    completion = f"Checking.\n{CALL_TEXT}\n{CALL_TEXT}<|im_end|>"
    parsed = tokenizer.parse_response(completion, prefix=prompt)
    assert parsed == {"role": "assistant", "content": "Checking.", "tool_calls": [CALL, CALL]}
    assert tokenizer.parse_response("It is warm.<|im_end|>", prefix=prompt) == {
        "role": "assistant",
        "content": "It is warm.",
    }


def test_trl_parses_generated_token_ids(tokenizer: Any) -> None:
    from trl.chat_template_utils import parse_response

    prompt_ids = tokenizer.apply_chat_template([USER], tools=[WEATHER], add_generation_prompt=True, return_dict=False)
    completion_ids = tokenizer.encode(CALL_TEXT + "<|im_end|>", add_special_tokens=False)
    parsed = parse_response(tokenizer, completion_ids, prefix=prompt_ids, tools=[WEATHER])
    assert parsed["tool_calls"] == [CALL]


def test_bundled_prompts_fit_the_short_context(tokenizer: Any) -> None:
    prompt_lengths, full_lengths = [], []
    for filename in BUNDLED_FILES.values():
        for line in (DATA_DIR / filename).read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            prompt = tokenizer.apply_chat_template(
                row["messages"], tools=row["tools"], add_generation_prompt=True, tokenize=False
            )
            full = tokenizer.apply_chat_template(
                [*row["messages"], gold_message(row)], tools=row["tools"], tokenize=False
            )
            prompt_lengths.append(len(tokenizer(prompt)["input_ids"]))
            full_lengths.append(len(tokenizer(full)["input_ids"]))
    assert max(prompt_lengths) <= 160  # short prompts are what make CPU training take minutes
    assert max(full_lengths) < 260 < tokenizer.model_max_length


def test_same_seed_gives_identical_weights(tiny_dir: Path, tmp_path: Path) -> None:
    assert main(["--out", str(tmp_path / "again")]) == 0
    first, again = load_file(tiny_dir / "model.safetensors"), load_file(tmp_path / "again" / "model.safetensors")
    assert first.keys() == again.keys()
    assert all(torch.equal(first[name], again[name]) for name in first)
    assert (tiny_dir / "tokenizer.json").read_bytes() == (tmp_path / "again" / "tokenizer.json").read_bytes()
    other = load_file(build_tiny_model(tmp_path / "other", seed=1) / "model.safetensors")
    assert not torch.equal(first["model.embed_tokens.weight"], other["model.embed_tokens.weight"])


def test_build_does_not_touch_the_global_torch_seed(tmp_path: Path, offline: None) -> None:
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    build_tiny_model(tmp_path / "model", seed=7, corpus=['{"name": "x"} hello world'] * 50, vocab_size=300)
    assert torch.equal(torch.rand(3), expected)


# ---------------------------------------------------------------------------------------------------------------
# Multi-turn: tool turns rendered, prefix-preserving across a whole trajectory, parsed after tool results


def _workbench_row(task: str) -> dict[str, Any]:
    from tasks.multiturn import BUNDLED_FILES as MULTI_TURN_FILES

    with (DATA_DIR / MULTI_TURN_FILES["train"]).open(encoding="utf-8") as handle:
        return next(row for row in map(json.loads, handle) if row["env"]["task"] == task)


def _workbench_tools() -> list[Any]:
    from grpo_tools.tools.environments import WorkbenchEnvironment

    return list(WorkbenchEnvironment()._tools().values())  # bound methods, as trl passes an environment's tools


def test_multi_turn_trajectory_is_prefix_preserving_message_by_message(tokenizer: Any) -> None:
    from grpo_tools.tools.trajectories import gold_trajectory

    row = _workbench_row("days_between")
    messages = [*row["messages"], *gold_trajectory(row)]
    assert [message["role"] for message in messages] == ["user", "assistant", "tool", "tool", "assistant", "tool",
                                                         "assistant"]  # fmt: skip
    tools = _workbench_tools()

    def ids(conversation: list[dict], **kwargs: Any) -> list[int]:
        return tokenizer.apply_chat_template(conversation, tools=tools, return_dict=False, **kwargs)

    for k in range(1, len(messages)):
        assert ids(messages[: k + 1])[: len(ids(messages[:k]))] == ids(messages[:k])
        if messages[k]["role"] == "assistant":
            assert ids(messages[: k + 1])[: len(ids(messages[:k], add_generation_prompt=True))] == ids(
                messages[:k], add_generation_prompt=True
            )
    text = tokenizer.apply_chat_template(messages, tools=tools, tokenize=False)
    assert "find_event(name: string)\n" in text  # the environment's tools, one signature a line
    for message in messages:
        if message["role"] == "tool":
            assert f"<|im_start|>user\n<tool_response>\n{message['content']}\n</tool_response><|im_end|>\n" in text


def test_parse_response_reads_calls_and_answers_after_tool_results(tokenizer: Any) -> None:
    from trl.chat_template_utils import parse_response

    from grpo_tools.tools.trajectories import gold_trajectory

    row = _workbench_row("convert_sum")
    trajectory = gold_trajectory(row)
    tools = _workbench_tools()
    for index in (2, 4):  # the second call, made after reading the first result; then the final answer
        prefix = tokenizer.apply_chat_template(
            [*row["messages"], *trajectory[:index]], tools=tools, add_generation_prompt=True, return_dict=False
        )
        full = tokenizer.apply_chat_template(
            [*row["messages"], *trajectory[: index + 1]], tools=tools, return_dict=False
        )
        completion = full[len(prefix) : full.index(tokenizer.eos_token_id, len(prefix)) + 1]
        assert parse_response(tokenizer, completion, prefix=prefix, tools=tools) == trajectory[index]


def test_trl_builds_the_tool_suffix_from_the_template(tokenizer: Any) -> None:
    """trl's own `_get_tool_suffix_ids` accepts the template, and the evaluation loop injects the same ids."""
    from types import SimpleNamespace

    from trl import GRPOTrainer

    from grpo_tools.tools.trajectories import tool_suffix_ids

    trainer = SimpleNamespace(
        processing_class=tokenizer, _tokenizer=tokenizer, _is_vlm=False, chat_template=None, chat_template_kwargs={}
    )
    messages = [
        {"role": "tool", "name": "find_event", "content": "concert: 2025-03-14 (Friday)"},
        {"role": "tool", "name": "find_event", "content": '{"error": "find_event failed: no event named \'gym\'"}'},
    ]
    suffix = GRPOTrainer._get_tool_suffix_ids(trainer, messages)
    assert suffix == tool_suffix_ids(tokenizer, messages)
    assert tokenizer.decode(suffix) == (
        "\n<|im_start|>user\n<tool_response>\nconcert: 2025-03-14 (Friday)\n</tool_response><|im_end|>\n"
        "<|im_start|>user\n<tool_response>\n"
        '{"error": "find_event failed: no event named \'gym\'"}\n</tool_response><|im_end|>\n<|im_start|>assistant\n'
    )


def test_multi_turn_corpus_leaves_single_turn_segmentation_unchanged(tokenizer: Any) -> None:
    """The tokenizer also learns from multi-turn trajectories; every single-turn text still splits as it did."""
    from transformers.utils.chat_template_utils import render_jinja_template

    from tasks.synthetic import BUNDLED_ROWS, BUNDLED_SEED, generate_rows
    from tasks.tiny_model import CHAT_TEMPLATE, build_tiny_tokenizer

    single = generate_rows("train", BUNDLED_ROWS["train"], BUNDLED_SEED)
    texts = [
        render_jinja_template(conversations=[[*row["messages"], gold_message(row)]], tools=row["tools"],
                              chat_template=CHAT_TEMPLATE)[0][0]
        for row in single
    ]  # fmt: skip
    single_turn_only = build_tiny_tokenizer(texts)
    assert all(tokenizer.tokenize(text) == single_turn_only.tokenize(text) for text in texts[::5])


@pytest.mark.parametrize("word", ["calculate", "convert", "units", "between", "event", "Friday", "celsius", "answer"])
def test_multi_turn_words_are_single_tokens(tokenizer: Any, word: str) -> None:
    assert len(tokenizer.tokenize(word)) == 1


def test_bundled_multi_turn_trajectories_fit_the_short_context(tokenizer: Any) -> None:
    from grpo_tools.tools.trajectories import gold_trajectory
    from tasks.multiturn import BUNDLED_FILES as MULTI_TURN_FILES

    tools = _workbench_tools()
    lengths = []
    for filename in MULTI_TURN_FILES.values():
        for line in (DATA_DIR / filename).read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            messages = [*row["messages"], *gold_trajectory(row)]
            lengths.append(len(tokenizer.apply_chat_template(messages, tools=tools, return_dict=False)))
    assert max(lengths) < 400 < tokenizer.model_max_length
