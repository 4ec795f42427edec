"""Tests for the training benchmarks under `benchmarks/`, at sizes that take seconds: the trainer comparison times
interleaved steps of equal work and adapts only on our side, the memory configurations hold what they claim (one copy
of the weights, or a second one as the reference), the GPU script's CPU smoke path writes its table's JSON, the
learning plot draws every arm, the statistics they share are right, the evaluation-generation benchmark times both
sides on the same prompts, and every benchmark `make bench` runs still runs, in its smallest configuration, to its
result file."""

import importlib
import json
import math
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest


ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def bench():
    """The benchmark scripts as modules."""
    return {
        name: importlib.import_module(f"benchmarks.{name}")
        for name in ("common", "bench_trainer", "bench_memory", "bench_precision", "gpu")
    }


def test_percentile_and_bootstrap_interval(bench):
    common = bench["common"]
    assert common.percentile([5, 1, 3, 2, 4], 0.5) == 3
    assert common.percentile([1, 2, 3, 4, 5], 0.25) == 2
    assert common.percentile([1, 2], 0.5) == 1.5
    assert common.bootstrap_ratio([2.0] * 9, [1.0] * 9) == (2.0, 2.0)
    slow, fast = [1.1, 1.0, 1.2, 1.05, 1.15, 1.1, 1.3], [1.0, 0.9, 1.1, 0.95, 1.0, 1.05, 1.1]
    low, high = common.bootstrap_ratio(slow, fast)
    assert low <= (1.1 / 1.0) <= high and high - low < 0.4


def test_baton_lets_trainers_run_one_step_each_in_turn(bench):
    baton = bench["bench_trainer"].Baton(["a", "b"])
    order = []

    def worker(name, steps):
        baton.wait_turn(name)
        for step in range(steps):
            order.append(name)
            if step < steps - 1:
                baton.pass_on(name)
                baton.wait_turn(name)
        baton.leave(name)

    threads = [threading.Thread(target=worker, args=("a", 4)), threading.Thread(target=worker, args=("b", 2))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    assert order == ["a", "b", "a", "b", "a", "a"]  # strict alternation; the one left alone runs on


def test_trainer_benchmark_times_equal_work_on_both_sides(bench, tiny_model_dir):
    result = bench["bench_trainer"].run(
        steps=4, warmup=1, batch_size=4, num_generations=2, max_completion_length=6, model_dir=tiny_model_dir
    )
    ours, trl = result["sides"]["tool_grpo"], result["sides"]["trl"]
    for side in (ours, trl):
        assert len(side["wall_seconds"]) == len(side["cpu_seconds"]) == 4 and side["measured_steps"] == 3
        assert all(seconds > 0 for seconds in side["wall_seconds"])
        assert side["wall"]["p25"] <= side["wall"]["median"] <= side["wall"]["p75"]
        assert side["mean_completion_length"] == 6  # every completion forced to full length, on both sides
    wall = result["ratios"]["wall"]
    assert wall["ratio"] == pytest.approx(ours["wall"]["median"] / trl["wall"]["median"])
    assert wall["ci95"][0] <= wall["ratio"] <= wall["ci95"][1]
    # Only our side adapts its coefficient: the KL starts at 0, below the band, so it falls by 1.5 a step.
    assert ours["final_beta"] == pytest.approx(0.02 / 1.5**4) and trl["final_beta"] == 0.02
    assert result["met"] == (wall["ratio"] <= 1.03)


def test_memory_configurations_hold_one_or_two_copies_of_the_weights(bench, tiny_model_dir, tmp_path):
    memory = bench["bench_memory"]
    batch = {"per_device_train_batch_size": 4, "num_generations": 2, "max_completion_length": 4}
    reports = {
        config: memory.train_config(config, tiny_model_dir, "tiny", 1, str(tmp_path / config), batch)
        for config in ("lora_kl", "lora_no_kl", "trl_separate_ref")
    }
    base = reports["lora_kl"]["parameters"] - reports["lora_kl"]["trainable_parameters"]
    assert reports["lora_kl"]["beta"] > 0 and reports["lora_kl"]["reference_parameters"] == 0
    assert reports["lora_no_kl"]["beta"] == 0 and reports["lora_no_kl"]["reference_parameters"] == 0
    assert reports["trl_separate_ref"]["reference_parameters"] == base  # a whole second copy of the base model
    assert all(report["steps"] == 1 for report in reports.values())

    measured = memory.measure("loaded", tiny_model_dir, "tiny", 0, str(tmp_path))  # its own process
    assert measured["steps"] == 0 and 100 < measured["peak_mb"] < 8000


def test_gpu_script_smoke_path_writes_its_figures(tmp_path):
    output = tmp_path / "gpu.json"
    subprocess.run(
        [sys.executable, "-m", "benchmarks.gpu", "--smoke", "--output", str(output)],
        cwd=ROOT,
        check=True,
        capture_output=True,
        timeout=300,
    )
    result = json.loads(output.read_text())
    assert result["smoke"] and result["steps"] == 2 and result["warmup"] == 1
    (row,) = result["results"]
    assert row["backend"] == "transformers" and row["device"] == "cpu" and row["measured_steps"] == 1
    assert row["mean_completion_length"] == row["max_completion_length"] == 8
    assert row["generated_tokens_per_second"] > 0 and 0 < row["generation_share_of_step"] <= 1
    assert row["optimizer_steps_per_second"] == pytest.approx(1 / row["seconds_per_step_median"])
    assert "peak_gpu_memory_gb" not in row  # no GPU figure is claimed from a CPU run


def fake_learning_result():
    """What `bench_learning.run` returns, for two arms and two seeds, with made-up numbers."""
    runs = []
    for arm, gain in (("adaptive", 0.1), ("fixed-0", 0.05)):
        for seed in (0, 1):
            held_out = [
                {"step": step, "train_seconds": 2.0 * step, "accuracy": 0.2 + gain * step / 10 + 0.01 * seed,
                 "mean_reward": 0.5 + gain * step / 10}
                for step in (0, 5, 10)
            ]  # fmt: skip
            per_step = {
                "step": list(range(1, 11)),
                "train_seconds": [2.0 * step for step in range(1, 11)],
                "reward": [0.5] * 10,
                "kl": [0.01] * 10 if arm == "adaptive" else [None] * 10,
                "kl_coef": [0.02] * 10 if arm == "adaptive" else [0.0] * 10,
            }
            runs.append({"arm": arm, "seed": seed, "train_seconds": 20.0, "held_out": held_out, "per_step": per_step})
    return {"arms": ["adaptive", "fixed-0"], "seeds": [0, 1], "runs": runs, "initial_beta": 0.02, "eval_rows": 200,
            "cores_on_machine": 2, "recipe": "recipes/SmolLM2-135M-Instruct/grpo/cpu.yaml"}  # fmt: skip


def test_learning_summary_and_plot(tmp_path):
    learning = learning_module()
    result = fake_learning_result()
    summary = {row["arm"]: row for row in learning.summary_table(result)}
    assert summary["adaptive"]["accuracy"] == pytest.approx([0.305, 0.3, 0.31])  # mean, min, max of the seeds
    assert summary["fixed-0"]["gain"] == pytest.approx([0.05, 0.05, 0.05])  # each seed's final minus its step 0
    assert learning.recipe_label(result["recipe"]) == "SmolLM2-135M-Instruct recipe"
    assert summary["fixed-0"]["final_kl"] is None and math.isclose(summary["adaptive"]["final_kl"], 0.01)
    path = learning.plot(result, tmp_path / "learning.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 20_000


def test_learning_plot_titles_say_each_arm_is_in_its_own_reward_units(tmp_path, monkeypatch):
    """The arms train with different rewards, so the reward panels plot each arm in its own units, and say so."""
    from matplotlib.figure import Figure

    learning = learning_module()
    figures = []
    save = Figure.savefig
    monkeypatch.setattr(
        Figure, "savefig", lambda self, *args, **kwargs: figures.append(self) or save(self, *args, **kwargs)
    )
    learning.plot(fake_learning_result(), tmp_path / "learning.png")
    titles = [ax.get_title() for ax in figures[0].axes]
    assert not [title for title in titles if "recipe weights" in title]
    assert "held-out mean reward (each arm's own rewards)" in titles
    assert "training reward per step (each arm's own rewards)" in titles


def scripted_held_out(monkeypatch, tokenizer, rows):
    """Held-out generation replaced by a fixed answer per row of `rows`: a call to a tool no row offers where a call is
    needed (a wrong call), a sentence where none is (a quiet answer)."""
    from grpo_tools.data.prompts import render_prompt
    from grpo_tools.evaluation import generation

    answers = {
        render_prompt(tokenizer, row): "[not_a_tool(x=1)]" if row["answers"] else "Nothing to call." for row in rows
    }
    monkeypatch.setattr(
        generation, "generate_completions", lambda model, tokenizer, prompts, **kwargs: [answers[p] for p in prompts]
    )


def test_learning_held_out_reward_is_the_reward_the_run_trains_with(tiny_model_dir, monkeypatch):
    """A recipe that pays a wrong call 0 (`decision_wrong`, as the BFCL recipe does) has its held-out wrong calls
    scored 0, not tool_decision's default -1, with its own weights."""
    from transformers import AutoTokenizer

    from grpo_tools.data.prompts import load_rows

    learning = learning_module()
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    rows = load_rows("data/tool_calls_eval.jsonl")
    rows = [next(row for row in rows if row["answers"]), next(row for row in rows if not row["answers"])]
    scripted_held_out(monkeypatch, tokenizer, rows)
    overrides = ["--reward_funcs", "tool_decision", "tool_format", "--reward_weights", "2.0", "0.5"]
    script_args, training_args, _ = learning.parse_recipe(learning.RECIPE, [*overrides, "--decision_wrong", "0"])
    scores = learning.held_out_scores(None, tokenizer, rows, script_args, training_args)
    # The wrong call: decision 0, format 0 (no offered tool named); the quiet answer: decision 1, format 1.
    assert scores["mean_reward"] == pytest.approx((2.0 * 0 + 0.5 * 0 + 2.0 * 1 + 0.5 * 1) / 2)


def test_learning_curves_each_hold_one_reward_unit_from_step_0(tiny_model_dir, monkeypatch, tmp_path):
    """A model whose held-out answers never change has a flat held-out reward curve in every arm, step 0 included:
    each arm's step 0 is scored with that arm's rewards, and the arms' rewards differ."""
    from transformers import AutoTokenizer

    from grpo_tools.data.prompts import load_rows

    learning = learning_module()
    rows = load_rows("data/tool_calls_eval.jsonl", 6)  # the held-out rows of the run below
    assert {bool(row["answers"]) for row in rows} == {True, False}
    scripted_held_out(monkeypatch, AutoTokenizer.from_pretrained(tiny_model_dir), rows)
    overrides = ["--model_name_or_path", tiny_model_dir, "--warmup_sft_epochs", "0", "--reward_funcs", "tool_decision",
                 "--reward_weights", "2.0", "--decision_wrong", "0", "--max_train_rows", "8", "--max_eval_rows", "6",
                 "--per_device_train_batch_size", "4", "--num_generations", "2", "--max_completion_length", "8"]  # fmt: skip
    result = learning.run(
        learning.RECIPE, seeds=(0,), arms=("adaptive", "old-rewards"), max_steps=1, eval_every=1, work_dir=tmp_path,
        overrides=tuple(overrides), threads=None, progress=False,
    )  # fmt: skip
    start = {}
    for run_ in result["runs"]:
        assert [point["step"] for point in run_["held_out"]] == [0, 1]
        step_zero, step_one = (point["mean_reward"] for point in run_["held_out"])
        assert step_zero == pytest.approx(step_one), run_["arm"]
        start[run_["arm"]] = step_zero
    assert start["adaptive"] == pytest.approx(result["warm_start"]["mean_reward"])  # the recipe's own arm
    assert start["old-rewards"] != pytest.approx(start["adaptive"])


def test_learning_legend_names_the_adaptive_arms_controller():
    learning = learning_module()
    result = fake_learning_result()
    assert learning.arm_labels(result)["adaptive"] == "adaptive (from 0.02)"  # a result that predates the record
    result["kl_controller"] = {"rule": "proportional", "target": 0.02, "horizon": 64}
    labels = learning.arm_labels(result)
    assert labels["adaptive"] == "adaptive, proportional, target 0.02 (from 0.02)"
    assert labels["fixed-init"] == "fixed 0.02" and labels["fixed-10x"] == "fixed 0.2"
    result["gold_anchor"] = 3.0  # the BFCL recipe's: its adaptive arm is not GRPO alone
    assert learning.arm_labels(result)["adaptive"].endswith("(from 0.02) + anchor 3")
    assert learning.arm_labels(result)["old-rewards"] == "adaptive, the earlier rewards"


def test_learning_plot_gives_the_warm_start_a_colour_no_arm_has():
    learning = learning_module()
    assert learning.WARM_COLOR not in learning.ARM_COLORS.values()
    assert set(learning.ARM_COLORS) == set(learning.ARMS)
    assert len(set(learning.ARM_COLORS.values())) == len(learning.ARMS)


def learning_module():
    return importlib.import_module("benchmarks.bench_learning")


def test_learning_runs_report_progress_each_quarter(capsys):
    """A worker prints its run's step, training seconds and that step's reward at each quarter, and nothing between."""
    from types import SimpleNamespace

    learning = learning_module()
    callback = learning._eval_callback(None, [], None, None, every=32, label="adaptive    seed 3")
    quiet = learning._eval_callback(None, [], None, None, every=32)
    for step in (7, 8, 9, 16):
        state = SimpleNamespace(global_step=step, max_steps=32)
        for each in (callback, quiet):
            each.on_step_end(None, state, None)
            each.on_log(None, state, None, logs={"loss": 0.1, "reward": step / 10})
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(", ")[0] for line in lines] == [
        "  adaptive    seed 3: step 8/32",
        "  adaptive    seed 3: step 16/32",
    ]
    assert [line.split(", ")[-1] for line in lines] == ["training reward 0.800", "training reward 1.600"]
    assert len(callback.step_seconds) == 4 and not callback.points  # no held-out evaluation before step 32


def test_learning_results_of_separate_invocations_merge_into_one(tmp_path):
    learning = learning_module()
    whole = fake_learning_result()
    parts = []
    for seed in (1, 0):  # seed 1 ran first, in its own invocation
        part = {**whole, "seeds": [seed], "runs": [run for run in whole["runs"] if run["seed"] == seed]}
        warm_start = {"folder": "work/warmup", "seconds": None, "accuracy": 0.2, "mean_reward": 0.5}
        part.update(overrides=[], max_steps=10, eval_every=5, warm_start=warm_start, total_seconds=60.0)
        parts.append(part)
    merged = learning.merge_results(parts, ["seed1.json", "seed0.json"])
    assert merged["seeds"] == [0, 1] and merged["arms"] == ["adaptive", "fixed-0"]
    assert [(run["arm"], run["seed"]) for run in merged["runs"]] == [
        ("adaptive", 0), ("fixed-0", 0), ("adaptive", 1), ("fixed-0", 1)
    ]  # fmt: skip
    assert merged["total_seconds"] == 120.0 and merged["merged_from"] == ["seed1.json", "seed0.json"]
    summary = {row["arm"]: row for row in learning.summary_table(merged)}
    assert summary == {row["arm"]: row for row in learning.summary_table(whole)}
    with pytest.raises(ValueError, match=re.escape("seed0.json: max_steps is 20, but seed1.json has 10")):
        learning.merge_results([parts[0], {**parts[1], "max_steps": 20}], ["seed1.json", "seed0.json"])
    with pytest.raises(ValueError, match=re.escape("b.json: the warm start's held-out accuracy is 0.3")):
        learning.merge_results(
            [parts[0], {**parts[1], "warm_start": {**warm_start, "accuracy": 0.3}}], ["a.json", "b.json"]
        )
    band = {"rule": "band", "target": 0.02, "horizon": 10_000}
    with pytest.raises(ValueError, match=re.escape("b.json: kl_controller is {'rule': 'band'")):
        learning.merge_results([parts[0], {**parts[1], "kl_controller": band}], ["a.json", "b.json"])
    # The fixed arms do not read the controller: a part without adaptive runs merges whatever it recorded, and the
    # merged result names the adaptive runs' controller.
    fixed_only = {**parts[1], "runs": [run for run in parts[1]["runs"] if run["arm"] != "adaptive"]}
    proportional = {"rule": "proportional", "target": 0.05, "horizon": 64}
    adaptive_only = {**parts[0], "runs": [run for run in parts[0]["runs"] if run["arm"] == "adaptive"]}
    adaptive_only["kl_controller"] = proportional
    mixed = learning.merge_results([{**fixed_only, "kl_controller": band}, adaptive_only], ["f.json", "a.json"])
    assert mixed["kl_controller"] == proportional and len(mixed["runs"]) == 2
    with pytest.raises(ValueError, match=re.escape("b.json: adaptive seed 1 is also in a.json")):
        learning.merge_results([parts[0], parts[0]], ["a.json", "b.json"])
    with pytest.raises(ValueError, match=re.escape("b.json: not a result of this benchmark (no runs)")):
        learning.merge_results([parts[0], {key: value for key, value in parts[1].items() if key != "runs"}],
                               ["a.json", "b.json"])  # fmt: skip

    # on the command line: the merged JSON and plot, or one line naming the file
    (tmp_path / "seed1.json").write_text(json.dumps(parts[0]))
    (tmp_path / "seed0.json").write_text(json.dumps(parts[1]))
    script = [sys.executable, "-m", "benchmarks.bench_learning", "--merge"]
    done = subprocess.run(
        [*script, str(tmp_path / "seed1.json"), str(tmp_path / "seed0.json"), "--output", str(tmp_path / "all.json")],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads((tmp_path / "all.json").read_text())["seeds"] == [0, 1]
    assert (tmp_path / "all.png").stat().st_size > 20_000
    (tmp_path / "broken.json").write_text('{"runs": [')
    done = subprocess.run(
        [*script, str(tmp_path / "seed1.json"), str(tmp_path / "broken.json"), "--output", str(tmp_path / "x.json")],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.startswith(f"bench_learning.py --merge: {tmp_path / 'broken.json'}: ")
    assert not (tmp_path / "x.json").exists()


def test_learning_warm_start_runs_as_train_does_and_is_reused(tiny_model_dir, call_and_no_call_rows, tmp_path):
    """The benchmark's warm start trains on the recipe's `warmup_sft_data` with its LoRA settings, as `grpo-tools
    train` does, and a later invocation reuses it unless a setting it reads or the warm-start rows changed; a GRPO-only
    override (a KL target, a learning rate) reuses it."""
    learning = learning_module()
    warm_rows = tmp_path / "warm.jsonl"
    warm_rows.write_text("".join(json.dumps(row) + "\n" for row in call_and_no_call_rows))
    recipe = tmp_path / "recipe.yaml"
    settings = [
        f"model_name_or_path: {tiny_model_dir}", "use_peft: true", "lora_r: 4", "lora_target_modules: all-linear",
        "dataset_name: data/tool_calls_train.jsonl", f"warmup_sft_data: {warm_rows}", "warmup_sft_peft: true",
        "warmup_sft_epochs: 1", "warmup_sft_batch_size: 2", "use_cpu: true", "report_to: none",
    ]  # fmt: skip
    recipe.write_text("\n".join(settings) + "\n")
    work = tmp_path / "work"
    folder, seconds = learning.warm_start_once(str(recipe), [], work, [], fresh=False)
    assert folder == str(work / "warmup") and seconds > 0
    assert (work / "warmup" / "model.safetensors").exists()  # the adapter is merged: a plain model
    assert not (work / "warmup" / "adapter_config.json").exists()
    recipe.write_text("# a comment changes nothing\n" + recipe.read_text())
    assert learning.warm_start_once(str(recipe), [], work, [], fresh=False) == (folder, None)
    grpo_only = ["--kl_target", "0.5", "--learning_rate", "0.1", "--lr_scheduler_type", "cosine"]
    assert learning.warm_start_once(str(recipe), grpo_only, work, [], fresh=False) == (folder, None)
    assert learning.warm_start_once(str(recipe), ["--warmup_sft_learning_rate", "0.1"], work, [], fresh=False)[1] > 0
    warm_rows.write_text(warm_rows.read_text().splitlines(keepends=True)[0])  # one row fewer
    assert learning.warm_start_once(str(recipe), [], work, [], fresh=False)[1] > 0


def test_learning_warm_start_gets_every_workers_threads(tiny_model_dir, monkeypatch, tmp_path):
    """The warm start and the step-0 evaluation run before the workers start, on the threads of all of them; the
    runs then get `threads` each."""
    import torch

    learning = learning_module()
    seen = {}

    def warm_start_once(*args):
        seen["warm start"] = torch.get_num_threads()
        return tiny_model_dir, 1.0

    def held_out_completions(*args):
        seen["step 0"] = torch.get_num_threads()
        return []

    def map_runs(arguments, jobs, threads):
        seen["runs"] = torch.get_num_threads()
        return iter([])

    monkeypatch.setattr(learning, "warm_start_once", warm_start_once)
    monkeypatch.setattr(learning, "held_out_completions", held_out_completions)
    monkeypatch.setattr(learning, "score_held_out", lambda *args: {"accuracy": 0.0, "mean_reward": 0.0})
    monkeypatch.setattr(learning, "_map_runs", map_runs)
    before = torch.get_num_threads()
    try:
        result = learning.run(seeds=(0,), arms=("adaptive",), work_dir=tmp_path, threads=1, jobs=2, progress=False)
    finally:
        torch.set_num_threads(before)
    assert seen == {"warm start": 2, "step 0": 2, "runs": 1}
    assert result["torch_threads"] == 1
    # the tiny recipe's controller, recorded for the legend and for merging
    assert result["kl_controller"] == {"rule": "band", "target": 0.02, "horizon": 10_000}


def test_learning_workers_end_when_the_benchmark_is_killed(tmp_path):
    """A benchmark killed outright leaves no worker training on: each one exits once its parent is gone."""
    script = f"""
import multiprocessing, os, sys, time
from concurrent.futures import ProcessPoolExecutor
sys.path.insert(0, {str(ROOT)!r})
from benchmarks.bench_learning import _worker_setup
if __name__ == "__main__":
    pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"), initializer=_worker_setup,
                               initargs=(None, os.getpid()))
    print(pool.submit(os.getpid).result(), flush=True)
    pool.submit(time.sleep, 120)  # a run in progress
    time.sleep(1)
    os._exit(0)  # killed: the pool is never shut down
"""
    finished = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True)
    worker = Path(f"/proc/{int(finished.stdout)}/status")
    deadline = time.monotonic() + 30
    while worker.exists() and "\tZ" not in worker.read_text() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not worker.exists() or "\tZ" in worker.read_text()  # gone, or a zombie waiting to be reaped


@pytest.mark.parametrize("gold", [True, False])
def test_learning_runs_put_the_gold_turn_in_each_group_when_the_recipe_asks(
    gold, tiny_model_dir, monkeypatch, tmp_path
):
    """A bench run is the recipe's GRPO: with `gold_in_group` the last completion of each group is the row's gold
    turn, as in `grpo-tools train`."""
    from grpo_tools.data.prompts import load_rows
    from grpo_tools.training.trainer import ToolGRPOTrainer

    learning = learning_module()
    golds = []
    with_gold = ToolGRPOTrainer._with_gold

    def recording(self, completion_ids, logprobs, gold, groups):
        golds.extend(gold)
        return with_gold(self, completion_ids, logprobs, gold, groups)

    monkeypatch.setattr(ToolGRPOTrainer, "_with_gold", recording)
    rows = {"train": load_rows("data/tool_calls_train.jsonl", 8), "eval": load_rows("data/tool_calls_eval.jsonl", 4)}
    overrides = ["--max_steps", "1", "--per_device_train_batch_size", "8", "--num_generations", "4"]
    overrides += ["--gold_in_group", str(gold).lower(), "--max_completion_length", "8"]
    run = learning.run_arm(str(learning.RECIPE), overrides, tiny_model_dir, "adaptive", 0, 1, tmp_path, rows)
    assert run["steps"] == 1
    assert (len(golds) == 8 and all(golds)) if gold else golds == []


@pytest.mark.slow
def test_learning_benchmark_end_to_end(tmp_path):
    """A miniature of `make bench-learning`: warm start once, two arms in two worker processes, evaluations along the
    way, results in the planned order."""
    output = tmp_path / "learning.json"
    command = [
        sys.executable,
        "-m",
        "benchmarks.bench_learning",
        "--max-steps",
        "2",
        "--seeds",
        "0",
        "--jobs",
        "2",
    ]
    command += ["--arms", "adaptive", "fixed-0", "--eval-every", "1", "--work-dir", str(tmp_path / "work")]
    command += ["--output", str(output), "--warmup_sft_epochs", "0.05", "--max_eval_rows", "16"]
    command += ["--per_device_train_batch_size", "8", "--num_generations", "4"]
    subprocess.run(command, cwd=ROOT, check=True, capture_output=True, timeout=600)
    result = json.loads(output.read_text())
    assert [(run["arm"], run["steps"]) for run in result["runs"]] == [("adaptive", 2), ("fixed-0", 2)]
    assert [point["step"] for point in result["runs"][0]["held_out"]] == [0, 1, 2]
    assert result["runs"][1]["beta"] == 0 and not result["runs"][1]["adaptive_kl"]
    calls = result["runs"][0]["per_step"]["decision"]["call_rows/call"]  # the share of samples that call, per step
    assert len(calls) == 2 and all(0 <= share <= 1 for share in calls)
    assert output.with_suffix(".png").stat().st_size > 20_000


@pytest.mark.slow
def test_memory_benchmark_end_to_end(bench):
    result = bench["bench_memory"].run(sizes=("tiny",), steps=1)
    (tiny,) = result["results"]
    assert set(tiny["configs"]) == set(bench["bench_memory"].CONFIGS)
    assert all(ratio > 0 for ratio in tiny["ratios"].values())
    assert tiny["configs"]["trl_separate_ref"]["reference_parameters"] == tiny["parameters"]


def test_padded_tokenizer_decodes_every_id_of_a_full_size_vocabulary(bench, tiny_model_dir, tmp_path):
    import shutil

    from transformers import AutoTokenizer

    shutil.copytree(tiny_model_dir, tmp_path / "model")
    before = AutoTokenizer.from_pretrained(tmp_path / "model")
    bench["gpu"].pad_tokenizer(tmp_path / "model", 151_936)
    after = AutoTokenizer.from_pretrained(tmp_path / "model")
    assert len(after) == 151_936
    text = '<|im_start|>user\nWeather in Lyon?<|im_end|>\n<tool_call>{"name": "get_weather"}</tool_call>'
    ids = after(text).input_ids
    assert len(ids) == len(before(text).input_ids) and after.decode(ids) == text  # no text encodes to the new tokens
    assert after.convert_tokens_to_ids(["<|endoftext|>", "<|im_end|>"]) == [0, 2]  # the model config's pad and EOS
    assert after.convert_tokens_to_ids("</tool_response>") == 151_935  # the tags moved to the top ids
    assert after.decode([len(before)]) == f"<|pad_{len(before)}|>"  # an id the old one lacked decodes


def test_precision_benchmark_times_float32_bf16_autocast_and_bf16_weights_and_refuses_a_missing_model(
    bench, tiny_model_dir, tmp_path
):
    precision = bench["bench_precision"]
    output = tmp_path / "precision.json"
    args = ["--batch", "2", "--prompt-tokens", "8", "--new-tokens", "4", "--repeats", "1", "--output", str(output)]
    assert precision.main(["--model", tiny_model_dir, *args]) == 0
    result = json.loads(output.read_text())
    assert set(result["results"]) == {"float32", "bf16 autocast", "bf16 weights"}
    assert all(row["train_pass_s"] > 0 and row["generation_s"] > 0 for row in result["results"].values())
    assert precision.main(["--model", str(tmp_path / "absent"), *args]) == 2


def categories_result():
    """A result with held-out accuracy per category, as `make bench-learning` writes on BFCL rows, for the recipe,
    the no-gold arm and the sft arm (which logs no reward or KL), two seeds each."""
    result = fake_learning_result()

    def point(step, simple, multiple, irrelevance):
        return {"step": step, "train_seconds": 2.0 * step, "accuracy": (simple + multiple + irrelevance) / 3,
                "mean_reward": 0.5, "by_category": {"simple_python": simple, "multiple": multiple,
                                                    "irrelevance": irrelevance}, "calls": (simple + multiple) / 2,
                "usable": ((simple + multiple) / 2 + irrelevance) / 2}  # fmt: skip

    warm = point(0, 0.2, 0.1, 0.5)
    finals = {("adaptive", 0): (0.4, 0.3, 0.5), ("adaptive", 1): (0.3, 0.2, 0.6), ("sft", 0): (0.3, 0.1, 0.4),
              ("sft", 1): (0.2, 0.2, 0.5)}  # fmt: skip
    runs = []
    for (arm, seed), scores in finals.items():
        per_step = {"step": [1], "train_seconds": [2.0], "reward": [0.5] if arm != "sft" else [],
                    "kl": [0.01] if arm != "sft" else [], "kl_coef": [0.02] if arm != "sft" else []}  # fmt: skip
        runs.append({"arm": arm, "seed": seed, "train_seconds": 20.0, "per_step": per_step,
                     "held_out": [warm, point(10, *scores)]})  # fmt: skip
    return {**result, "arms": ["adaptive", "sft"], "runs": runs, "warm_start": {"seconds": 1.0, **warm}}


def test_learning_summary_per_category_and_the_call_categories_gain(tmp_path, capsys):
    learning = learning_module()
    result = categories_result()
    summary = {row["arm"]: row for row in learning.summary_table(result)}
    assert summary["adaptive"]["by_category"]["simple_python"] == pytest.approx([0.35, 0.3, 0.4])
    assert summary["adaptive"]["calls"] == pytest.approx([0.3, 0.25, 0.35])
    assert summary["adaptive"]["calls_gain"] == pytest.approx([0.15, 0.1, 0.2])  # from the warm start's 0.15
    assert summary["sft"]["calls_gain"] == pytest.approx([0.05, 0.05, 0.05])
    # usable: the mean of calls and irrelevance (never calling scores 0.5); the warm start's is 0.325
    assert summary["adaptive"]["usable"] == pytest.approx([0.425, 0.425, 0.425])
    assert summary["sft"]["usable"] == pytest.approx([0.325, 0.3, 0.35])
    assert summary["sft"]["usable_gain"] == pytest.approx([0.0, -0.025, 0.025])
    assert summary["sft"]["final_kl"] is None and summary["sft"]["final_kl_coef"] is None
    result["summary"] = list(summary.values())
    learning.print_summary(result)
    lines = capsys.readouterr().out.splitlines()
    start = next(index for index, line in enumerate(lines) if line.startswith("held-out accuracy (%)"))
    table = {line.split()[0]: line for line in lines[start + 1 : start + 4]}  # the table per category
    assert table["warm"].split()[2:] == ["20.0", "10.0", "50.0", "15.0", "32.5"]
    assert table["adaptive"].split()[1:3] == ["35.0", "(30.0-40.0)"]
    path = learning.plot(result, tmp_path / "learning.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_sft_arm_runs_after_the_grpo_arms_for_the_seconds_of_its_seeds_adaptive_run(
    tiny_model_dir, monkeypatch, tmp_path
):
    learning = learning_module()
    phases = []

    def map_runs(arguments, jobs, threads):
        phases.append([(args[3], args[4], args[8]) for args in arguments])  # arm, seed, seconds
        for args in arguments:
            yield {"arm": args[3], "seed": args[4], "steps": 1, "train_seconds": 10.0 + args[4], "held_out": [
                {"step": 1, "train_seconds": 1.0, "accuracy": 0.0, "mean_reward": 0.0}]}  # fmt: skip

    monkeypatch.setattr(learning, "warm_start_once", lambda *args: (tiny_model_dir, 1.0))
    monkeypatch.setattr(learning, "held_out_completions", lambda *args: [])
    monkeypatch.setattr(learning, "score_held_out", lambda *args: {"accuracy": 0.0, "mean_reward": 0.0})
    monkeypatch.setattr(learning, "_map_runs", map_runs)
    learning.run(seeds=(0, 1), arms=("sft", "adaptive", "no-gold"), work_dir=tmp_path, threads=None, progress=False)
    assert phases == [
        [("adaptive", 0, None), ("no-gold", 0, None), ("adaptive", 1, None), ("no-gold", 1, None)],
        [("sft", 0, 10.0), ("sft", 1, 11.0)],
    ]
    phases.clear()  # without an adaptive arm, the first GRPO arm named sets the seconds
    learning.run(seeds=(0,), arms=("sft", "anchored"), work_dir=tmp_path, threads=None, progress=False)
    assert phases == [[("anchored", 0, None)], [("sft", 0, 10.0)]]
    with pytest.raises(ValueError, match="the sft arm trains for as long as a GRPO arm of its seed"):
        learning.run(seeds=(0,), arms=("sft",), work_dir=tmp_path, threads=None, progress=False)


def test_the_old_rewards_arm_is_the_bfcl_recipe_with_its_earlier_rewards():
    """Whatever the recipe's rewards, sampling, baseline and anchor, the old-rewards arm trains with the earlier ones
    and the recipe's other settings."""
    learning = learning_module()
    recipe = "recipes/SmolLM2-135M-Instruct/grpo/bfcl.yaml"
    decision = ["--reward_funcs", "tool_decision", "--reward_weights", "1.0", "--no_call_share", "0.5",
                "--advantage_baseline", "class", "--gold_anchor", "3.0"]  # fmt: skip
    _, new, _ = learning.parse_arm(recipe, [*decision, *learning.ARMS["adaptive"](0.02)], "adaptive")
    _, old, _ = learning.parse_arm(recipe, [*decision, *learning.ARMS["old-rewards"](0.02)], "old-rewards")
    assert (new.reward_funcs, new.no_call_share, new.advantage_baseline) == (["tool_decision"], 0.5, "class")
    assert (old.reward_funcs, old.reward_weights) == (["tool_format", "tool_bfcl", "tool_partial"], [0.2, 1.0, 0.5])
    assert (old.advantage_baseline, old.no_call_share, old.gold_anchor) == ("group", None, 0.0)
    assert new.gold_anchor == 3.0
    assert (old.learning_rate, old.max_steps, old.gold_in_group) == (new.learning_rate, new.max_steps, True)


def test_the_no_gold_arm_drops_an_anchor_it_cannot_have():
    """The anchor trains on the gold turn in each group: without the gold turn, the no-gold arm of a recipe with an
    anchor trains as GRPO alone instead of refusing to start."""
    learning = learning_module()
    recipe = "recipes/SmolLM2-135M-Instruct/grpo/bfcl.yaml"
    _, no_gold, _ = learning.parse_arm(recipe, ["--gold_anchor", "3.0", *learning.ARMS["no-gold"](0.02)], "no-gold")
    assert (no_gold.gold_in_group, no_gold.gold_anchor) == (False, 0.0)


def test_the_sft_arm_stops_at_the_first_step_past_its_seconds(tiny_model_dir, call_and_no_call_rows, tmp_path):
    """Supervised fine-tuning from the warm start on the GRPO rows' gold turns, stopped by its time budget: with no
    seconds to spend it takes exactly one step, and it is evaluated on the held-out rows."""
    learning = learning_module()
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(
        "\n".join(
            [
                f"model_name_or_path: {tiny_model_dir}",
                "use_peft: true",
                "lora_r: 4",
                "lora_target_modules: all-linear",
                "dataset_name: unused.jsonl",
                "eval_scorer: exact",
                "warmup_sft_batch_size: 1",
                "use_cpu: true",
                "report_to: none",
                "max_completion_length: 8",
            ]
        )
        + "\n"
    )
    rows = {"train": call_and_no_call_rows * 2, "eval": call_and_no_call_rows}
    result = learning.run_sft(str(recipe), [], tiny_model_dir, 0, 0.0, tmp_path, rows)
    assert result["arm"] == "sft" and result["steps"] == 1 and result["epochs"] == pytest.approx(0.25)
    (point,) = result["held_out"]
    assert set(point["by_category"]) == {"simple", "irrelevance"} and point["calls"] is not None
    assert point["usable"] == pytest.approx((point["calls"] + point["by_category"]["irrelevance"]) / 2)


def test_learning_runs_train_the_trainer_grpo_tools_train_builds(tiny_model_dir, monkeypatch, tmp_path):
    """A bench run trains what `grpo_tools.training.build_trainer` builds from the parsed recipe, as `grpo-tools
    train` does (the multi-turn branch included), not a copy of its set-up: the rows, the warm start and the
    held-out callback reach it."""
    import grpo_tools.training.run as run_module
    from grpo_tools.data.prompts import load_rows

    class Built(Exception):
        """Stops the run once the trainer would be built."""

    calls = []

    def recording(model_path, tokenizer, train_rows, training_args, model_args, callbacks=None):
        calls.append({"model": model_path, "rows": train_rows, "seed": training_args.seed, "callbacks": callbacks})
        raise Built

    monkeypatch.setattr(run_module, "build_trainer", recording)
    learning = learning_module()
    rows = {"train": load_rows("data/tool_calls_train.jsonl", 8), "eval": load_rows("data/tool_calls_eval.jsonl", 4)}
    with pytest.raises(Built):
        learning.run_arm(str(learning.RECIPE), ["--max_steps", "1"], tiny_model_dir, "adaptive", 3, 1, tmp_path, rows)
    [call] = calls
    assert call["model"] == tiny_model_dir and call["rows"] is rows["train"] and call["seed"] == 3
    assert len(call["callbacks"]) == 1  # the held-out evaluation


def test_bfcl_multi_turn_bench_writes_its_ratio_and_no_disagreement(tmp_path, monkeypatch):
    pytest.importorskip("bfcl_eval", reason="bfcl-eval is not installed")
    from benchmarks import bench_bfcl_multi_turn

    output = tmp_path / "bfcl_multi_turn.json"
    argv = ["bench", "--every", "50", "--repeats", "1", "--output", str(output)]
    monkeypatch.setattr(sys, "argv", argv)
    bench_bfcl_multi_turn.main()
    result = json.loads(output.read_text())
    assert result["rows"] == 16 and result["trajectories"] > 100
    assert result["disagreements"] == 0
    assert result["ratio"] == pytest.approx(
        result["verdicts_per_second"]["ours"] / result["verdicts_per_second"]["bfcl"]
    )


def test_eval_generation_bench_times_both_sides_on_the_same_prompts(tiny_model_dir, adapter_dir):
    from benchmarks.bench_eval_generation import run
    from benchmarks.common import EVAL_DATA

    result = run(tiny_model_dir, str(EVAL_DATA), adapter=adapter_dir, rows=5, batch_size=2, max_new_tokens=4)
    assert result["rows"] == 5
    assert set(result["seconds"]) == {"auto", "off"} and all(value > 0 for value in result["seconds"].values())
    assert result["ratio"] == result["seconds"]["auto"] / result["seconds"]["off"]
    assert result["same_completions"] == 5  # the fast path writes generate's tokens
    assert result["mean_completion_tokens"] > 0 and 0 <= result["completions_at_the_limit"] <= 5


# Every benchmark `make bench` runs, in its smallest configuration: seconds each, figures that mean nothing, but the
# whole script run as `make bench` runs it, down to its result file. A refactor that breaks one fails here, not in the
# next `make bench`. {tiny} is the tiny model's folder.
SMOKE_ARGS = {
    "bench_rewards": ["--completions", "100", "--repeats", "1"],
    "bench_trainer": ["--smoke"],
    "bench_fastpath": ["--smoke", "{tiny}"],
    "bench_allocator": [],
    "bench_mcp": ["--calls", "5", "--steps", "1", "--model", "{tiny}"],
    "bench_hostile": ["--repeats", "1", "--size", "20000"],
    "bench_memory": ["--sizes", "tiny", "--steps", "1"],
    "bench_score": ["--rows", "3000", "--repeats", "1"],
    "bench_bfcl": ["--groups", "1", "--repeats", "1", "--every", "40"],
    "bench_bfcl_multi_turn": ["--every", "50", "--repeats", "1"],
    "bench_tiny": ["--repeats", "1"],
    "bench_eval_generation": ["--model", "{tiny}", "--data", "data/tool_calls_eval.jsonl", "--rows", "4",
                              "--batch-size", "2", "--max-new-tokens", "4"],
}  # fmt: skip
NEEDS_BFCL = {"bench_bfcl", "bench_bfcl_multi_turn"}


def make_bench_modules():
    """The benchmark modules the Makefile's `bench` target runs, in its order."""
    lines = (ROOT / "Makefile").read_text().split("\nbench: $(STAMP)\n", 1)[1].split("\n\n", 1)[0].splitlines()
    return [re.search(r"-m benchmarks\.(\w+)", line).group(1) for line in lines]


def test_every_benchmark_of_make_bench_has_a_smoke_run():
    assert make_bench_modules()[:2] == ["bench_rewards", "bench_trainer"]  # the target was found and read
    assert sorted(make_bench_modules()) == sorted(SMOKE_ARGS)


# Run by .ci/run, `slow` here: bench_memory's smallest run still starts four processes (about a minute and a half on 2
# cores), bench_mcp's starts MCP servers (17 s, the default suite's longest test on 2026-12-07).
SLOW_SMOKES = {"bench_memory", "bench_mcp"}


@pytest.mark.parametrize(
    "module", [pytest.param(name, marks=pytest.mark.slow) if name in SLOW_SMOKES else name for name in SMOKE_ARGS]
)
def test_benchmark_of_make_bench_runs_in_its_smallest_configuration(module, tiny_model_dir, tmp_path):
    if module in NEEDS_BFCL:
        pytest.importorskip("bfcl_eval", reason="bfcl-eval is not installed")
    output = tmp_path / f"{module}.json"
    args = [arg.replace("{tiny}", tiny_model_dir) for arg in SMOKE_ARGS[module]]
    run = subprocess.run(
        [sys.executable, "-m", f"benchmarks.{module}", *args, "--output", str(output)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(output.read_text())
    assert isinstance(result, dict) and result
    if module == "bench_score":  # both worker counts scored every row and wrote the same report
        assert {row["rows"] for row in result["results"]} == {3000}
        assert all(row["rows_per_second"] > 0 and row["peak_mb"] > 0 for row in result["results"])
        assert list(result["identical_reports"].values()) == [True]
    if module == "bench_bfcl":
        assert result["cases"] > 0 and all(group["disagreements"] == 0 for group in result["groups"])
    if module in ("bench_trainer", "bench_fastpath"):
        assert set(result["sides"]) == {"tool_grpo", "trl"}
