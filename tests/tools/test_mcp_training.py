"""recipes/tiny/grpo/mcp-cpu.yaml trains for two steps against the real mcp-server-git, as `grpo-tools train` runs it:
the run ends cleanly, its terminal log shows the tool calls per rollout and the failures, every failure kind is logged
per step, and no server process or working copy is left behind. Minutes on a shared machine: marked slow."""

import json
import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from tasks.mcp_git import write_task


ROOT = Path(__file__).resolve().parents[2]
RECIPE = ROOT / "recipes" / "tiny" / "grpo" / "mcp-cpu.yaml"


@pytest.mark.slow
def test_the_tiny_mcp_recipe_trains_two_steps_against_the_real_server(tiny_model_dir, tmp_path):
    from grpo_tools.tools.environments import ENVIRONMENTS

    task = tmp_path / "task"
    write_task(task)
    ENVIRONMENTS.pop("mcp", None)
    scratch = tmp_path / "scratch"  # the run's temporary folder: its working copies go there
    scratch.mkdir()
    command = [sys.executable, "-m", "grpo_tools.cli", "train", "--config", str(RECIPE), "--max_steps", "2",
               "--model_name_or_path", tiny_model_dir, "--dataset_name", str(task / "train.jsonl"),
               "--max_train_rows", "16", "--warmup_sft_epochs", "2", "--mcp_template", str(task / "template"),
               "--output_dir", str(tmp_path / "run")]  # fmt: skip
    env = {**os.environ, "TMPDIR": str(scratch), "OMP_NUM_THREADS": "1"}
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200)
    assert result.returncode == 0, result.stderr[-3000:]
    steps = [line for line in (result.stdout + result.stderr).splitlines() if "step 2/2 |" in line]
    assert steps and "mcp_state" in steps[-1] and "/rollout failed" in steps[-1]
    history = json.loads((tmp_path / "run" / "trainer_state.json").read_text())["log_history"]
    for kind in ("validation", "timeout", "server_error", "server_down", "limit", "unknown_tool"):
        assert f"tools/failures/{kind}" in history[0], kind
    assert "rewards/mcp_state/mean" in history[0]
    # Nothing of the run is left: no working copy, no process working in one
    assert not list(scratch.glob("grpo-tools-mcp-*"))
    for process in psutil.process_iter(["cwd"]):
        assert not str(process.info.get("cwd") or "").startswith(str(scratch)), process


@pytest.mark.slow
def test_the_learning_experiment_runs_its_smallest_configuration(tiny_model_dir, tmp_path):
    """experiments/mcp_learning.py --smoke: warm start, GRPO (one learning rate, so none chosen on dev) and supervised
    training for GRPO's CPU seconds, each scored on held-out requests by rollouts against the real server."""
    from experiments.mcp_learning import main
    from grpo_tools.tools.environments import ENVIRONMENTS

    ENVIRONMENTS.pop("mcp", None)
    result = main(["--smoke", "--task", str(tmp_path / "task"), "--out", str(tmp_path / "out"),
                   "--model", tiny_model_dir])  # fmt: skip
    assert json.loads((tmp_path / "out" / "result.json").read_text()) == json.loads(json.dumps(result))
    assert [line["arm"] for line in result["table"]] == ["warm", "grpo", "sft"]
    tested = {run["arm"]: run for run in result["runs"] if run["split"] == "test"}
    assert tested["sft"]["train_seconds"] >= tested["grpo"]["train_seconds"] > 0  # supervised for GRPO's seconds
    assert all(0.0 <= run["state_check"] <= 1.0 for run in result["runs"])
    # One learning rate leaves nothing to choose on dev: no GRPO run is spent there.
    assert [run["split"] for run in result["runs"] if run["arm"] == "grpo"] == ["test"]
    ENVIRONMENTS.pop("mcp", None)
