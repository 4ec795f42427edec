"""Tests for `grpo-tools train` as a user runs it: a run killed with SIGKILL resumes from its last checkpoint with the
same step count and KL coefficient and leaves an adapter plain peft can load; bad recipes or data get one clear
message and exit 2; and `run_info.json` records the `provenance.json` of a locally converted base."""

import json
import logging
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import ClassVar

import pytest
import torch
import yaml

from grpo_tools.cli import main as cli
from grpo_tools.training.trainer import KL_STATE_FILE


def write_recipe(path, model_dir, train_path, output_dir, **overrides):
    recipe = {
        "model_name_or_path": model_dir,
        "dataset_name": train_path,
        "use_peft": True,
        "lora_r": 8,
        "lora_alpha": 16,
        "lora_target_modules": "all-linear",
        "reward_funcs": ["tool_format", "tool_partial"],
        "num_generations": 4,
        "per_device_train_batch_size": 8,
        "max_completion_length": 12,
        "learning_rate": 1e-2,
        "lr_scheduler_type": "constant",
        "beta": 0.01,
        "kl_target": 0.001,  # far below what the run reaches, so the coefficient moves every step
        "use_cpu": True,
        "gradient_checkpointing": False,
        "output_dir": str(output_dir),
        "logging_steps": 1,
        "report_to": "none",
        "disable_tqdm": True,
        "seed": 0,
        **overrides,
    }
    Path(path).write_text(yaml.safe_dump(recipe))
    return str(path)


def command(*args):
    return [sys.executable, "-m", "grpo_tools.cli", *args]


def test_killed_run_resumes_with_the_same_steps_and_kl_coefficient(tiny_model_dir, small_data, tmp_path):
    output_dir = tmp_path / "run"
    recipe = write_recipe(
        tmp_path / "recipe.yaml", tiny_model_dir, small_data["train"], output_dir, max_steps=6, save_steps=2
    )
    # The run holds still once checkpoint-2 is saved, so that it is killed at step 2 however fast it trains.
    saved_marker, log = tmp_path / "saved", tmp_path / "train.log"
    holding = [sys.executable, str(Path(__file__).parents[1] / "scripts" / "train_until_saved.py"), "2", saved_marker]
    with log.open("w") as stderr:
        process = subprocess.Popen([*holding, "train", "--config", recipe], stdout=subprocess.DEVNULL, stderr=stderr)
        deadline = time.monotonic() + 300
        while not saved_marker.exists() and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        process.send_signal(signal.SIGKILL)  # no chance to clean up, as when a machine is lost
        process.wait()
    assert saved_marker.exists(), f"the run saved no checkpoint at step 2:\n{log.read_text()[-3000:]}"
    assert sorted(path.name for path in output_dir.glob("checkpoint-*")) == ["checkpoint-2"]
    last = output_dir / "checkpoint-2"
    saved = json.loads((last / KL_STATE_FILE).read_text())
    step = json.loads((last / "trainer_state.json").read_text())["global_step"]
    assert step == 2

    result = subprocess.run(
        command("train", "--config", recipe, "--resume_from_checkpoint", "true"), capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr[-3000:]
    history = json.loads((output_dir / "checkpoint-6" / "trainer_state.json").read_text())["log_history"]
    assert max(entry["step"] for entry in history) == 6
    # The first step after the resume ran with the coefficient the checkpoint held, not the recipe's beta.
    resumed = next(entry for entry in history if entry["step"] == step + 1 and "kl_coef" in entry)
    assert resumed["kl_coef"] == pytest.approx(saved["coef"])
    assert saved["coef"] != 0.01

    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_model_dir), str(output_dir))
    assert any("lora_" in name for name, _ in model.named_parameters())


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"beta": 0.0}, "adaptive_kl needs a starting beta > 0"),
        ({"kl_controller": "pid"}, "kl_controller must be one of band, proportional, got 'pid'"),
        ({"dataset_name": "missing.jsonl"}, "missing.jsonl: no such file"),
        ({"model_name_or_path": "not-converted/yet"}, "not-converted/yet: no such folder, and the Hugging Face Hub"),
        ({"reward_funcs": ["tool_magic"]}, "unknown reward_funcs"),
        ({"push_to_hub": True}, "push_to_hub needs hub_model_id"),
        ({"push_to_hub": True, "hub_model_id": "no-owner"}, "hub_model_id: repo id 'no-owner': expected owner/name"),
        ({"push_to_hub": True, "hub_model_id": "me/run"}, "push_to_hub: no Hugging Face token"),
        (
            {"use_peft": False, "warmup_sft_peft": True, "warmup_sft_epochs": 1},
            "warmup_sft_peft needs the LoRA settings of the recipe",
        ),
    ],
)
def test_bad_recipes_get_one_clear_message(
    tiny_model_dir, small_data, tmp_path, overrides, message, monkeypatch, capsys
):
    from huggingface_hub import constants

    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_OIDC_RESOURCE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(tmp_path / "hf-home" / "token"))  # no saved login either
    recipe = write_recipe(tmp_path / "r.yaml", tiny_model_dir, small_data["train"], tmp_path / "out", **overrides)
    assert cli(["train", "--config", recipe]) == 2
    assert message in capsys.readouterr().err


def test_a_bad_recipe_ends_the_process_with_exit_2_and_no_traceback(tiny_model_dir, small_data, tmp_path):
    """The cases above run in this process, as `main` does; this one runs `grpo-tools train` as a user starts it."""
    recipe = write_recipe(tmp_path / "r.yaml", tiny_model_dir, small_data["train"], tmp_path / "out", beta=0.0)
    result = subprocess.run(command("train", "--config", recipe), capture_output=True, text=True)
    assert result.returncode == 2
    assert "adaptive_kl needs a starting beta > 0" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_removed_setting_in_a_recipe_or_on_the_command_line_is_refused_by_name(
    tiny_model_dir, small_data, tmp_path, capsys
):
    """`kl_only_tokens`, `negative_advantage_scale` and `gold_baseline` were experiment knobs and are gone: a recipe
    or a command line that still sets one stops before anything loads, naming it, rather than training without it."""
    removed = {"kl_only_tokens": -1, "negative_advantage_scale": 2.0, "gold_baseline": "samples"}
    recipe = write_recipe(tmp_path / "r.yaml", tiny_model_dir, small_data["train"], tmp_path / "out", **removed)
    assert cli(["train", "--config", recipe]) == 2
    err = capsys.readouterr().err
    assert "Unknown arguments from config file" in err
    assert all(f"'--{key}'" in err for key in removed)
    plain = write_recipe(tmp_path / "plain.yaml", tiny_model_dir, small_data["train"], tmp_path / "out")
    assert cli(["train", "--config", plain, "--kl_only_tokens", "-1"]) == 2
    assert "not used by the HfArgumentParser: ['--kl_only_tokens', '-1']" in capsys.readouterr().err


def test_too_few_rows_for_one_optimizer_step_are_refused_before_the_model_loads(
    tiny_model_dir, small_data, tmp_path, capsys
):
    """trl samples whole generation batches of per_device_train_batch_size x processes x steps_per_generation
    completions (steps_per_generation defaults to gradient_accumulation_steps), num_generations per prompt, and drops
    an incomplete one: with fewer rows than one batch's prompts the run trained 0 steps and exited 0."""
    data = tmp_path / "two.jsonl"
    data.write_text("".join(Path(small_data["train"]).read_text().splitlines(keepends=True)[:2]))
    recipe = write_recipe(
        tmp_path / "r.yaml", tiny_model_dir, str(data), tmp_path / "out", gradient_accumulation_steps=4
    )
    assert cli(["train", "--config", recipe, "--max_steps", "1"]) == 2
    err = capsys.readouterr().err
    assert f"{data} holds 2 rows" in err
    assert "one optimizer step needs 8 prompts" in err
    assert "per_device_train_batch_size 8 x 1 processes x steps_per_generation 4 / num_generations 4" in err
    assert not (tmp_path / "out" / "adapter_model.safetensors").exists()


def test_bad_training_rows_are_listed_with_their_row_and_field(tiny_model_dir, tmp_path, capsys):
    data = tmp_path / "bad.jsonl"
    row = {"id": "a", "messages": [{"role": "user", "content": "hi"}], "tools": [], "answers": [{"name": "ghost"}]}
    data.write_text(json.dumps(row) + "\n{oops\n")
    recipe = write_recipe(tmp_path / "r.yaml", tiny_model_dir, str(data), tmp_path / "out")
    assert cli(["train", "--config", recipe]) == 2
    err = capsys.readouterr().err
    assert "bad.jsonl: row 2: not valid JSON" in err
    assert "row 1 (id=a): answers[0]" in err


class RecordingHfApi:
    """Stands in for huggingface_hub.HfApi: records the calls a push makes and the files of its one commit."""

    calls: ClassVar[list] = []

    def __init__(self, token=None):
        self.calls.append(("init", token))

    def create_repo(self, repo_id, **kwargs):
        self.calls.append(("create_repo", {"repo_id": repo_id, **kwargs}))

    def list_repo_files(self, repo_id, **kwargs):
        return []

    def create_commit(self, repo_id, operations, **kwargs):
        files = sorted(op.path_in_repo for op in operations if hasattr(op, "path_or_fileobj"))
        self.calls.append(("create_commit", {"repo_id": repo_id, "files": files}))
        return type("CommitInfo", (), {"commit_url": f"https://huggingface.co/{repo_id}/commit/1"})()


def test_a_recipe_that_pushes_publishes_the_run_with_its_card_once(tiny_model_dir, small_data, tmp_path, monkeypatch):
    from grpo_tools.hub import push as hub

    monkeypatch.setenv("HF_TOKEN", "hf_not_a_real_token_0123456789")
    monkeypatch.setattr(RecordingHfApi, "calls", [])
    monkeypatch.setattr(hub, "HfApi", RecordingHfApi)
    output_dir = tmp_path / "run"
    recipe = write_recipe(
        tmp_path / "r.yaml", tiny_model_dir, small_data["train"], output_dir, max_steps=2, save_steps=100,
        eval_data=small_data["eval"], max_eval_rows=4, push_to_hub=True, hub_model_id="me/tiny-run",
        hub_private_repo=True,
    )  # fmt: skip
    assert cli(["train", "--config", recipe]) == 0
    names = [name for name, _ in RecordingHfApi.calls]
    assert names == ["init", "create_repo", "create_commit"]  # trl pushed nothing of its own
    assert RecordingHfApi.calls[1][1]["private"] is True
    files = RecordingHfApi.calls[2][1]["files"]
    for expected in ("README.md", "adapter_config.json", "adapter_model.safetensors", "training/run_info.json",
                     "training/recipe.yaml", "training/training_curves.png", "eval/before_report.json",
                     "eval/after_report.json"):  # fmt: skip
        assert expected in files
    assert not any(name.startswith("checkpoint-") for name in files)
    info = json.loads((output_dir / "run_info.json").read_text())
    assert info["command"] == f"grpo-tools train --config {recipe}"
    assert info["base_model"] == tiny_model_dir and info["reward_funcs"] == ["tool_format", "tool_partial"]


@pytest.mark.parametrize("converted", [True, False])
def test_run_info_records_the_provenance_of_a_converted_base(tiny_model_dir, small_data, tmp_path, converted):
    from trl import TrlParser

    from grpo_tools.models.provenance import Provenance, write_provenance
    from grpo_tools.training.configs import ModelConfig, ToolGRPOConfig, ToolScriptArguments
    from grpo_tools.training.run import write_run_info

    base = shutil.copytree(tiny_model_dir, tmp_path / "base")
    provenance = Provenance("HuggingFaceTB/SmolLM2-135M-Instruct", "dequantized", "apache-2.0", "python -m x")
    if converted:
        write_provenance(base, provenance)
    recipe = write_recipe(tmp_path / "r.yaml", str(base), small_data["train"], tmp_path / "run")
    parser = TrlParser((ToolScriptArguments, ToolGRPOConfig, ModelConfig))
    script_args, training_args, model_args = parser.parse_args_and_config(args=["--config", recipe])

    write_run_info(training_args.output_dir, script_args, training_args, model_args, ["--config", recipe])

    info = json.loads((tmp_path / "run" / "run_info.json").read_text())
    assert info["base_model"] == str(base)
    assert info["base_provenance"] == (asdict(provenance) if converted else None)


def test_a_lora_warm_start_on_its_own_rows_leaves_a_plain_merged_model(tiny_model_dir, small_data, tmp_path):
    """`warmup_sft_data` and `warmup_sft_peft`: the warm start trains a LoRA adapter on its own rows and merges it, so
    GRPO starts from a plain model folder whose weights moved, and run_info says what the warm start saw; the run
    also writes `base_adapter`, both adapters as one on the base model."""
    from safetensors.torch import load_file

    warm_rows = tmp_path / "warm.jsonl"
    warm_rows.write_text("".join(Path(small_data["train"]).read_text().splitlines(keepends=True)[:8]))
    recipe = write_recipe(
        tmp_path / "r.yaml",
        tiny_model_dir,
        small_data["train"],
        tmp_path / "out",
        warmup_sft_epochs=1,
        warmup_sft_peft=True,
        warmup_sft_data=str(warm_rows),
        warmup_sft_learning_rate=1e-2,
        warmup_sft_batch_size=4,
        max_steps=1,
    )
    assert cli(["train", "--config", recipe]) == 0
    warm = tmp_path / "out" / "warmup"
    assert (warm / "model.safetensors").is_file() and not (warm / "adapter_config.json").exists()
    base = load_file(Path(tiny_model_dir, "model.safetensors"))
    merged = load_file(warm / "model.safetensors")
    assert set(merged) == set(base)  # no LoRA tensors left behind
    assert any(not torch.equal(merged[name], base[name]) for name in base if name.endswith("q_proj.weight"))
    info = json.loads((tmp_path / "out" / "run_info.json").read_text())
    assert info["warm_start_data"] == str(warm_rows) and info["warm_start_lora"] is True
    adapter = json.loads((tmp_path / "out" / "adapter_config.json").read_text())
    assert adapter["base_model_name_or_path"] == str(warm)
    # The warm start's adapter is kept, and stacked with GRPO's into one that plain peft loads on the base model
    assert (warm / "lora" / "adapter_model.safetensors").is_file()
    stacked = json.loads((tmp_path / "out" / "base_adapter" / "adapter_config.json").read_text())
    assert stacked["base_model_name_or_path"] == tiny_model_dir and stacked["r"] == 2 * adapter["r"]
    # A later run in the same folder without a warm start leaves no stale stacked adapter for `push` to publish
    rerun = write_recipe(tmp_path / "r2.yaml", tiny_model_dir, small_data["train"], tmp_path / "out", max_steps=1)
    assert cli(["train", "--config", rerun]) == 0
    assert not (tmp_path / "out" / "base_adapter").exists()


# Llama 3.2's template raises on an assistant turn with several calls: hermes-b-1 and hermes-b-2 have one in their
# history (their prompts cannot be rendered), hermes-b-0 in its gold answer (its gold turn cannot be rendered).
LLAMA_REASON = "This model only supports single tool-calls at once!"


def hermes_recipe(tmp_path, model_dir, data, **overrides):
    settings = {"num_generations": 2, "per_device_train_batch_size": 4, "max_completion_length": 8, "max_steps": 1}
    return write_recipe(tmp_path / "r.yaml", model_dir, data, tmp_path / "out", **{**settings, **overrides})


def test_rows_the_chat_template_cannot_render_stop_the_run_naming_them(
    llama_template_model_dir, hermes_data, tmp_path, capsys
):
    recipe = hermes_recipe(tmp_path, llama_template_model_dir, hermes_data)
    assert cli(["train", "--config", recipe]) == 2
    err = capsys.readouterr().err
    assert f"grpo-tools train: {hermes_data}: 2 of 4 rows cannot be rendered by the chat template" in err
    assert f"{hermes_data}: row id=hermes-b-1: prompt: {LLAMA_REASON}" in err
    assert f"{hermes_data}: row id=hermes-b-2: prompt: {LLAMA_REASON}" in err
    assert "hermes-b-0" not in err  # its prompt renders; only gold_in_group or a warm start needs its gold turn
    assert "unrenderable_rows: skip" in err
    assert "Traceback" not in err and not (tmp_path / "out" / "adapter_config.json").exists()


def test_skip_trains_without_the_rows_the_chat_template_cannot_render(
    llama_template_model_dir, hermes_data, tmp_path, caplog
):
    """With a warm start too: GRPO leaves out the two rows whose prompts cannot be rendered, the warm start also the
    row whose gold turn cannot, and each says so in one warning line; held-out rows are scored as failures."""
    recipe = hermes_recipe(
        tmp_path,
        llama_template_model_dir,
        hermes_data,
        warmup_sft_epochs=1,
        warmup_sft_batch_size=2,
        eval_data=hermes_data,
    )
    with caplog.at_level(logging.WARNING):
        assert cli(["train", "--config", recipe, "--unrenderable_rows", "skip"]) == 0
    warnings = [record.getMessage() for record in caplog.records if "left out" in record.getMessage()]
    assert len(warnings) == 2, warnings
    assert warnings[0].startswith(f"{hermes_data}: left out 2 of 4 rows the chat template")
    assert f"row id=hermes-b-1: prompt: {LLAMA_REASON}" in warnings[0]
    assert warnings[1].startswith(f"{hermes_data}: left out 1 of 2 rows the chat template")
    assert f"row id=hermes-b-0: gold turn: {LLAMA_REASON}" in warnings[1]
    state = json.loads((tmp_path / "out" / "trainer_state.json").read_text())
    assert state["global_step"] == 1
    assert (tmp_path / "out" / "warmup" / "model.safetensors").is_file()
    for label in ("before", "after"):
        report = json.loads((tmp_path / "out" / f"{label}_report.json").read_text())
        assert report["rows"]["data"] == 4 and report["rows"]["unrenderable"] == 2
        assert [row["id"] for row in report["unrenderable"]] == ["hermes-b-1", "hermes-b-2"]


def test_resuming_a_run_already_at_max_steps_is_refused_instead_of_training_nothing(
    tiny_model_dir, small_data, tmp_path, capsys
):
    recipe = write_recipe(
        tmp_path / "r.yaml", tiny_model_dir, small_data["train"], tmp_path / "out", max_steps=1, save_steps=1
    )
    assert cli(["train", "--config", recipe]) == 0
    assert (tmp_path / "out" / "checkpoint-1" / "trainer_state.json").is_file()
    capsys.readouterr()
    assert cli(["train", "--config", recipe, "--resume_from_checkpoint", "true"]) == 2
    message = capsys.readouterr().err
    assert "checkpoint-1 is at step 1 and max_steps is 1, so nothing would train" in message
    assert "--max_steps 2" in message
    # With more steps to go, the same resume trains on from the checkpoint
    assert cli(["train", "--config", recipe, "--resume_from_checkpoint", "true", "--max_steps", "2"]) == 0
    assert json.loads((tmp_path / "out" / "trainer_state.json").read_text())["global_step"] == 2
