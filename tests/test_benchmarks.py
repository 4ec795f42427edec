"""Tests for the training benchmarks under `benchmarks/`, at sizes that take seconds: the trainer comparison times
interleaved steps of equal work and adapts only on our side, the memory configurations hold what they claim (one copy
of the weights, or a second one as the reference), the GPU script's CPU smoke path writes its table's JSON, the
learning plot draws every arm, and the statistics they share are right."""

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


BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


@pytest.fixture(scope="module")
def bench():
    """The benchmark scripts as modules (they import their shared helpers from their own folder)."""
    sys.path.insert(0, str(BENCHMARKS))
    try:
        yield {
            name: importlib.import_module(name)
            for name in ("common", "bench_trainer", "bench_memory", "bench_precision", "gpu")
        }
    finally:
        sys.path.remove(str(BENCHMARKS))


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
        [sys.executable, str(BENCHMARKS / "gpu.py"), "--smoke", "--output", str(output)],
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


def test_learning_legend_names_the_adaptive_arms_controller():
    learning = learning_module()
    result = fake_learning_result()
    assert learning.arm_labels(result)["adaptive"] == "adaptive (from 0.02)"  # a result that predates the record
    result["kl_controller"] = {"rule": "proportional", "target": 0.02, "horizon": 64}
    labels = learning.arm_labels(result)
    assert labels["adaptive"] == "adaptive, proportional, target 0.02 (from 0.02)"
    assert labels["fixed-init"] == "fixed 0.02" and labels["fixed-10x"] == "fixed 0.2"


def learning_module():
    sys.path.insert(0, str(BENCHMARKS))
    try:
        return importlib.import_module("bench_learning")
    finally:
        sys.path.remove(str(BENCHMARKS))


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
    script = [sys.executable, str(BENCHMARKS / "bench_learning.py"), "--merge"]
    done = subprocess.run(
        [*script, str(tmp_path / "seed1.json"), str(tmp_path / "seed0.json"), "--output", str(tmp_path / "all.json")],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads((tmp_path / "all.json").read_text())["seeds"] == [0, 1]
    assert (tmp_path / "all.png").stat().st_size > 20_000
    (tmp_path / "broken.json").write_text('{"runs": [')
    done = subprocess.run(
        [*script, str(tmp_path / "seed1.json"), str(tmp_path / "broken.json"), "--output", str(tmp_path / "x.json")],
        capture_output=True, text=True, timeout=300,
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

    def held_out_scores(*args):
        seen["step 0"] = torch.get_num_threads()
        return {"accuracy": 0.0, "mean_reward": 0.0}

    def map_runs(arguments, jobs, threads):
        seen["runs"] = torch.get_num_threads()
        return iter([])

    monkeypatch.setattr(learning, "warm_start_once", warm_start_once)
    monkeypatch.setattr(learning, "held_out_scores", held_out_scores)
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
sys.path.insert(0, {str(BENCHMARKS)!r})
from bench_learning import _worker_setup
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
        str(BENCHMARKS / "bench_learning.py"),
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
    subprocess.run(command, check=True, capture_output=True, timeout=600)
    result = json.loads(output.read_text())
    assert [(run["arm"], run["steps"]) for run in result["runs"]] == [("adaptive", 2), ("fixed-0", 2)]
    assert [point["step"] for point in result["runs"][0]["held_out"]] == [0, 1, 2]
    assert result["runs"][1]["beta"] == 0 and not result["runs"][1]["adaptive_kl"]
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


def test_gold_kl_probe_measures_samples_and_gold_turns_against_the_warm_start(tiny_model_dir, tmp_path):
    """With the adapter as peft initialises it (B = 0) the policy is the reference and every k3 is 0; once the
    adapter moves the model, both the samples and the gold turns measure a positive KL."""
    import shutil

    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from grpo_tools.data.prompts import load_rows

    sys.path.insert(0, str(BENCHMARKS))
    try:
        probe = importlib.import_module("probe_gold_kl")
    finally:
        sys.path.remove(str(BENCHMARKS))
    run = tmp_path / "run"
    shutil.copytree(tiny_model_dir, run / "warmup")
    model = get_peft_model(
        AutoModelForCausalLM.from_pretrained(run / "warmup"), LoraConfig(r=4, target_modules="all-linear")
    )
    model.save_pretrained(run)
    rows = load_rows("data/mapping_train.jsonl", 2)

    unchanged = probe.kl_by_source(run, rows, samples=2, max_new_tokens=12)
    assert len(unchanged["gold"]) == 2 and len(unchanged["sampled"]) == 4
    assert all(abs(value) < 1e-5 for kl in unchanged["gold"] + unchanged["sampled"] for value in kl)

    torch.manual_seed(1)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "lora_B" in name:
                parameter.normal_(std=0.5)
    model.save_pretrained(run)
    figures = probe.summary(probe.kl_by_source(run, rows, samples=2, max_new_tokens=12))
    assert figures["gold"]["completions"] == 2 and figures["sampled"]["completions"] == 4
    assert figures["gold"]["mean"] > 1e-3 and figures["sampled"]["mean"] > 1e-3
    assert figures["gold"]["largest_token"] >= figures["gold"]["mean"]


def categories_result():
    """A result with held-out accuracy per category, as `make bench-learning` writes on BFCL rows, for the recipe,
    the no-gold arm and the sft arm (which logs no reward or KL), two seeds each."""
    result = fake_learning_result()

    def point(step, simple, multiple, irrelevance):
        return {"step": step, "train_seconds": 2.0 * step, "accuracy": (simple + multiple + irrelevance) / 3,
                "mean_reward": 0.5, "by_category": {"simple_python": simple, "multiple": multiple,
                                                    "irrelevance": irrelevance}, "calls": (simple + multiple) / 2}  # fmt: skip

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
    assert summary["sft"]["final_kl"] is None and summary["sft"]["final_kl_coef"] is None
    result["summary"] = list(summary.values())
    learning.print_summary(result)
    lines = capsys.readouterr().out.splitlines()
    start = next(index for index, line in enumerate(lines) if line.startswith("held-out accuracy (%)"))
    table = {line.split()[0]: line for line in lines[start + 1 : start + 4]}  # the table per category
    assert table["warm"].split()[2:] == ["20.0", "10.0", "50.0", "15.0"]
    assert table["adaptive"].split()[1:3] == ["35.0", "(30.0-40.0)"]
    path = learning.plot(result, tmp_path / "learning.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_sft_arm_runs_after_the_grpo_arms_for_the_seconds_of_its_seeds_adaptive_run(
    tiny_model_dir, monkeypatch, tmp_path
):
    learning = learning_module()
    phases = []

    def map_runs(arguments, jobs, threads):
        phases.append([(args[3], args[4], args[-1]) for args in arguments])
        for args in arguments:
            yield {"arm": args[3], "seed": args[4], "steps": 1, "train_seconds": 10.0 + args[4], "held_out": [
                {"step": 1, "train_seconds": 1.0, "accuracy": 0.0, "mean_reward": 0.0}]}  # fmt: skip

    monkeypatch.setattr(learning, "warm_start_once", lambda *args: (tiny_model_dir, 1.0))
    monkeypatch.setattr(learning, "held_out_scores", lambda *args: {"accuracy": 0.0, "mean_reward": 0.0})
    monkeypatch.setattr(learning, "_map_runs", map_runs)
    learning.run(seeds=(0, 1), arms=("sft", "adaptive", "no-gold"), work_dir=tmp_path, threads=None, progress=False)
    assert phases == [
        [("adaptive", 0, None), ("no-gold", 0, None), ("adaptive", 1, None), ("no-gold", 1, None)],
        [("sft", 0, 10.0), ("sft", 1, 11.0)],
    ]
    with pytest.raises(ValueError, match="the sft arm trains for as long as the adaptive arm"):
        learning.run(seeds=(0,), arms=("sft",), work_dir=tmp_path, threads=None, progress=False)


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


def test_restyled_names_change_in_tools_answers_and_possible_answers_together(tmp_path):
    """The restyling probe renames each function alike wherever the row names it, keeps its words, and draws the
    same styles for the same seed."""
    row = {
        "id": "live_multiple_1-1-0",
        "messages": [{"role": "user", "content": "Find vegan food near Lyon"}],
        "tools": [
            {"type": "function", "function": {"name": name, "parameters": {"type": "object", "properties": {}}}}
            for name in ("vegan_restaurant.find_nearby", "ProjectApi.get_project", "play_song")
        ],
        "answers": [{"name": "vegan_restaurant.find_nearby", "arguments": {"location": "Lyon"}}],
        "possible_answers": [{"vegan_restaurant.find_nearby": {"location": ["Lyon"]}}],
    }
    source = tmp_path / "rows.jsonl"
    source.write_text(json.dumps(row) + "\n" + json.dumps({**row, "id": "live_multiple_2-1-0"}) + "\n")
    script = BENCHMARKS / "restyle_names.py"
    firsts = []
    for attempt in ("a", "b"):
        target = tmp_path / f"restyled_{attempt}.jsonl"
        subprocess.run([sys.executable, str(script), str(source), str(target), "--seed", "3"], check=True)
        firsts.append(target.read_text())
    assert firsts[0] == firsts[1]  # the same seed, the same names
    restyled = [json.loads(line) for line in firsts[0].splitlines()]
    assert len(restyled) == 2
    renamed_any = False
    for new in restyled:
        names = [tool["function"]["name"] for tool in new["tools"]]
        [answer] = new["answers"]
        [possible] = new["possible_answers"]
        assert answer["name"] == names[0] and list(possible) == [names[0]]
        assert answer["arguments"] == {"location": "Lyon"} and possible[names[0]] == {"location": ["Lyon"]}
        words = [re.findall(r"[a-z]+", re.sub(r"([A-Z])", r"_\1", name).lower()) for name in names]
        assert words == [["vegan", "restaurant", "find", "nearby"], ["project", "api", "get", "project"],
                         ["play", "song"]]  # fmt: skip
        renamed_any = renamed_any or names != [tool["function"]["name"] for tool in row["tools"]]
    assert renamed_any


def test_restyling_never_gives_two_offered_functions_one_name(bench):
    """`getWeather` may restyle to `get_weather`, the very name the row's other function has: then it keeps its own."""
    import random

    restyle = importlib.import_module("restyle_names")  # the `bench` fixture puts benchmarks/ on the path
    names = ["getWeather", "get_weather", "GetWeather", "get.weather"]
    row = {"tools": [{"type": "function", "function": {"name": name}} for name in names], "answers": []}
    for seed in range(50):
        restyled = restyle.restyle_row(row, random.Random(seed))
        new = [tool["function"]["name"] for tool in restyled["tools"]]
        assert len(set(new)) == len(names), (seed, new)


def test_namespaced_names_keep_the_name_behind_a_made_up_word_wherever_the_row_names_it(bench):
    """`--namespace` puts a made-up word before each name, the same one in tools, answers and possible answers."""
    import random

    restyle = importlib.import_module("restyle_names")  # the `bench` fixture puts benchmarks/ on the path
    names = ["todo_add", "todo_delete"]
    row = {
        "tools": [{"type": "function", "function": {"name": name}} for name in names],
        "answers": [{"name": "todo_add", "arguments": {"content": "shop"}}],
        "possible_answers": [{"todo_add": {"content": ["shop"]}}],
    }
    namespaced = restyle.restyle_row(row, random.Random(0), namespace=True)
    new = [tool["function"]["name"] for tool in namespaced["tools"]]
    for old, name in zip(names, new, strict=True):
        prefix, _, rest = name.partition(".")
        assert rest == old and re.fullmatch(r"([bdfgklmnprstvz][aeiou]){2,3}", prefix), name
    assert namespaced["answers"] == [{"name": new[0], "arguments": {"content": "shop"}}]
    assert namespaced["possible_answers"] == [{new[0]: {"content": ["shop"]}}]
    assert row["tools"][0]["function"]["name"] == "todo_add"  # the source row is left as it was
    assert restyle.restyle_row(row, random.Random(0), namespace=True) == namespaced


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"tools": [{"type": "function", "function": {}}]}\n', "row 1: field 'tools[0].function.name': missing"),
        ('{"tools": []}\n\n{"tools": "none"}\n', "row 3: field 'tools': not a list"),
        ('{"tools": []}\nnot json\n', "row 2: not JSON"),
        (None, "cannot be read"),
    ],
)
@pytest.mark.parametrize(
    "command", [["restyle_names.py"], ["reorder_tools.py"], ["reorder_tools.py", "--distractor"]], ids=" ".join
)
def test_row_probes_refuse_bad_rows_by_file_row_and_field(command, content, message, tmp_path):
    source = tmp_path / "rows.jsonl"
    if content is not None:
        source.write_text(content)
    target = tmp_path / "out.jsonl"
    result = subprocess.run(
        [sys.executable, str(BENCHMARKS / command[0]), str(source), str(target), *command[1:]],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 1 and result.stderr.strip().startswith(f"{source}: {message}"), result.stderr
    assert "Traceback" not in result.stderr and not target.exists()  # nothing half-written


def _offering(names: list[str], answer: str | None = None, category: str = "multiple") -> dict:
    """A canonical row offering functions of `names`, with `answer` as its gold call if given."""
    return {
        "id": f"row_{'_'.join(names)}",
        "category": category,
        "messages": [{"role": "user", "content": "Do it"}],
        "tools": [{"type": "function", "function": {"name": name, "description": name.upper()}} for name in names],
        "answers": [{"name": answer, "arguments": {"x": 1}}] if answer else [],
        "possible_answers": [{answer: {"x": [1]}}] if answer else [],
    }


def test_reordered_rows_keep_their_tools_and_answers_in_an_order_the_seed_draws(tmp_path):
    """`reorder_tools.py` changes only where each function stands: the same functions, the same gold, and the same
    orders for the same seed."""
    rows = [_offering(["a", "b", "c", "d"], "c"), _offering(["e", "f", "g"]), _offering(["h"], "h", "simple")]
    source = tmp_path / "rows.jsonl"
    source.write_text("".join(json.dumps(row) + "\n" for row in rows * 5))
    outputs = []
    for attempt in ("a", "b"):
        target = tmp_path / f"reordered_{attempt}.jsonl"
        script = BENCHMARKS / "reorder_tools.py"
        subprocess.run([sys.executable, str(script), str(source), str(target), "--seed", "2"], check=True)
        outputs.append(target.read_text())
    assert outputs[0] == outputs[1]
    reordered = [json.loads(line) for line in outputs[0].splitlines()]
    assert len(reordered) == 15
    orders = set()
    for old, new in zip(rows * 5, reordered, strict=True):
        assert sorted(new["tools"], key=json.dumps) == sorted(old["tools"], key=json.dumps)
        assert {key: value for key, value in new.items() if key != "tools"} == {
            key: value for key, value in old.items() if key != "tools"
        }
        orders.add(tuple(tool["function"]["name"] for tool in new["tools"]))
    assert len([order for order in orders if len(order) == 4]) > 1  # the first row's tools did not always stay put


def test_a_distractor_joins_only_call_rows_that_offer_one_function(bench):
    """`--distractor` adds one function of another name, from the other rows, to a one-function call row and makes
    it a `multiple` row; a row that already offers several, or where no call is right, is only reordered."""
    import random

    reorder = importlib.import_module("reorder_tools")  # the `bench` fixture puts benchmarks/ on the path
    single, several, no_call = _offering(["h"], "h", "simple"), _offering(["a", "b"], "a"), _offering(["z"])
    pool = [tool for row in (single, several, no_call) for tool in row["tools"]]
    for seed in range(20):
        rng = random.Random(seed)
        widened = reorder.reorder_row(single, rng, pool)
        names = [tool["function"]["name"] for tool in widened["tools"]]
        assert "h" in names and len(names) == 2 and len(set(names)) == 2, names
        extra = next(tool for tool in widened["tools"] if tool["function"]["name"] != "h")
        assert extra in pool  # a function the file offers, description and all
        assert widened["category"] == "multiple" and widened["answers"] == single["answers"]
        assert len(reorder.reorder_row(several, rng, pool)["tools"]) == 2
        assert len(reorder.reorder_row(no_call, rng, pool)["tools"]) == 1
    assert single["tools"] == [{"type": "function", "function": {"name": "h", "description": "H"}}]  # left as it was


def _call_text(name: str, x: int) -> str:
    """A Hermes-style completion calling `name` with x."""
    return f'<tool_call>\n{{"name": "{name}", "arguments": {{"x": {x}}}}}\n</tool_call>'


def _with_x(row: dict) -> dict:
    """`row` with each offered function taking one integer, x."""
    schema = {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}
    return row | {
        "tools": [{"type": "function", "function": tool["function"] | {"parameters": schema}} for tool in row["tools"]]
    }


def _write_samples(path: Path, samples: dict[str, list[str]]) -> None:
    path.write_text(
        "".join(
            json.dumps({"id": row_id, "sample": index, "completion": text}) + "\n"
            for row_id, texts in samples.items()
            for index, text in enumerate(texts)
        )
    )


def test_rows_within_reach_are_the_ones_some_but_not_all_samples_get_right(tmp_path):
    """`in_reach.py` keeps every call row whose samples are right between once and all-but-once, and the asked number
    of no-call rows within reach, evenly spaced, in the file's order; rows always or never right are left out."""
    rows = {
        "half": _offering(["a", "b"], "a"),
        "never": _offering(["c"], "c", "simple"),
        "always": _offering(["d"], "d", "simple"),
        "once": _offering(["e", "f"], "f"),
    }
    right, wrong = _call_text("a", 1), _call_text("b", 1)
    samples = {
        "half": [right, wrong, right, "no idea"],
        "never": [_call_text("c", 2)] * 4,  # a wrong value every time
        "always": [_call_text("d", 1)] * 4,
        "once": [_call_text("e", 1)] * 3 + [_call_text("f", 1)],
    }
    for index in range(7):  # no-call rows: within reach when some samples abstain and some call
        row = _offering([f"z{index}"])
        row["id"] = f"none{index}"
        rows[row["id"]] = row
        samples[row["id"]] = ["No tool fits.", _call_text(f"z{index}", 1)] if index != 3 else ["No tool fits."] * 2
    source, sample_file, target = tmp_path / "rows.jsonl", tmp_path / "samples.jsonl", tmp_path / "reach.jsonl"
    ordered = [_with_x(rows[key]) | {"id": key} for key in rows]
    source.write_text("".join(json.dumps(row) + "\n" for row in ordered))
    _write_samples(sample_file, samples)
    result = subprocess.run(
        [
            sys.executable,
            str(BENCHMARKS / "in_reach.py"),
            *map(str, (source, sample_file, target)),
            "--no-call-rows",
            "2",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    kept = [json.loads(line) for line in target.read_text().splitlines()]
    # 6 no-call rows within reach (none3 always abstains): every third, the first two of those.
    assert [row["id"] for row in kept] == ["half", "once", "none0", "none4"]
    assert kept[0] == ordered[0]  # rows are copied as they are
    assert "4 rows: 2 of 4 call rows within reach, 2 of the 6 no-call rows within reach" in result.stdout


_A = _offering(["f"], "f", "simple") | {"id": "a"}


@pytest.mark.parametrize(
    ("rows", "samples", "message"),
    [
        ([_A], [{"id": "b", "completion": "x"}], "samples.jsonl: row 1: field id: no row 'b' in the data file"),
        ([_A, _A | {"id": "b"}], [{"id": "a", "completion": "x"}], "rows.jsonl: row 2: field id: no samples"),
        ([_A], [{"id": "a", "text": "x"}], "samples.jsonl: row 1: field completion: not a sample"),
        ([{"id": "a", "tools": []}], [{"id": "a", "completion": "x"}], "rows.jsonl: row 1: answers is missing"),
    ],
)
def test_in_reach_refuses_rows_and_samples_it_cannot_match_by_file_row_and_field(rows, samples, message, tmp_path):
    """A sample of no row, a row without samples, a line that is no sample and a gold that cannot be read each stop
    `in_reach.py` with the file, row and field, and nothing written."""
    source, sample_file, target = tmp_path / "rows.jsonl", tmp_path / "samples.jsonl", tmp_path / "reach.jsonl"
    source.write_text("".join(json.dumps(row) + "\n" for row in rows))
    sample_file.write_text("".join(json.dumps(sample) + "\n" for sample in samples))
    result = subprocess.run(
        [sys.executable, str(BENCHMARKS / "in_reach.py"), str(source), str(sample_file), str(target)],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 1 and result.stderr.strip().startswith(str(tmp_path / message)), result.stderr
    assert "Traceback" not in result.stderr and not target.exists()


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
