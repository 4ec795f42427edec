"""Shared fixtures: the tiny offline model (built once per test session) and small canonical datasets."""

import json
import os

import pytest


os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing in the tests may reach the Hub
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """The tiny Qwen2-style model and tokenizer with the tool-calling chat template, saved to a folder."""
    from grpo_tools.tiny import build_tiny_model

    return str(build_tiny_model(tmp_path_factory.mktemp("tiny") / "model", seed=0))


@pytest.fixture(scope="session")
def small_data(tmp_path_factory):
    """The first rows of the bundled train and eval splits, as canonical JSONL files."""
    folder = tmp_path_factory.mktemp("data")
    paths = {}
    for split, count in (("train", 64), ("eval", 16)):
        with open(f"data/tool_calls_{split}.jsonl") as source:
            lines = [next(source) for _ in range(count)]
        paths[split] = folder / f"{split}.jsonl"
        paths[split].write_text("".join(lines))
    return {split: str(path) for split, path in paths.items()}


def read_json_lines(path):
    with open(path) as handle:
        return [json.loads(line) for line in handle if line.strip()]
