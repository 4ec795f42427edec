"""Tests for `grpo-tools eval`: the pass@k estimator against brute-force counting, reports computed from known
completions, the tiny model evaluated on the bundled eval split with `--compare-base` (the base is the adapter
switched off, and its predictions re-scored by `grpo-tools score` give the same report), sampling with pass@k, the
plot, and one clear message with exit 2 for each kind of bad input."""

import json
from itertools import combinations
from pathlib import Path

import pytest

from grpo_tools.cli import main as cli
from grpo_tools.data.prompts import gold_message
from grpo_tools.evaluation.evaluate import evaluate_model, pass_at_k, print_comparison
from grpo_tools.evaluation.scoring import score_files


def read_json_lines(path):
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def gold_text(row):
    """The Hermes text of a row's gold answer, as the tiny model's template writes it."""
    message = gold_message(row)
    calls = message.get("tool_calls") or []
    if not calls:
        return message["content"]
    return "".join(
        "<tool_call>\n" + json.dumps({"name": c["function"]["name"], "arguments": c["function"]["arguments"]})
        + "\n</tool_call>\n"
        for c in calls
    )  # fmt: skip


def test_batches_drawn_by_length_return_completions_in_the_prompts_order(tiny_model_dir):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from grpo_tools.evaluation.generation import generate_completions

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    prompts = [
        "Weather in Lyon?",
        "Convert 50 EUR to JPY, please, right now and twice.",
        "Hi",
        "Book a table for two.",
    ]
    alone = [
        generate_completions(model, tokenizer, [prompt], max_new_tokens=6, progress=False)[0] for prompt in prompts
    ]
    assert len(set(alone)) == len(prompts)  # each prompt has its own completion, so an order mix-up shows
    assert generate_completions(model, tokenizer, prompts, batch_size=3, max_new_tokens=6, progress=False) == alone
    torch.manual_seed(0)
    sampled = generate_completions(
        model, tokenizer, prompts, batch_size=3, max_new_tokens=6, progress=False, num_samples=2, temperature=1e-4
    )  # a temperature near 0 samples the greedy token: each prompt's two samples, in place
    assert sampled == [completion for completion in alone for _ in range(2)]
    assert generate_completions(model, tokenizer, [], progress=False) == []


def test_greedy_completions_are_the_same_with_the_fast_path_and_without(tiny_model_dir, adapter_dir):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from grpo_tools.evaluation.generation import generate_completions

    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_model_dir), adapter_dir)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    prompts = ["Weather in Lyon?", "Convert 50 EUR to JPY, please, right now and twice.", "Hi", "Book a table."]
    settings = {"batch_size": 3, "max_new_tokens": 6, "progress": False}
    completions = {
        setting: generate_completions(model, tokenizer, prompts, cpu_fast_path=setting, **settings)
        for setting in ("auto", "off")
    }
    assert completions["auto"] == completions["off"]
    assert len(set(completions["off"])) == len(prompts)  # each prompt its own completion: an order mix-up shows


def test_a_model_that_only_offers_generate_keeps_its_own_generate_on_the_fast_path(tokenizer):
    import torch

    from grpo_tools.evaluation.generation import generate_completions

    class Echo(torch.nn.Module):
        """No forward pass: generates the last two tokens of each prompt again."""

        device = torch.device("cpu")

        def generate(self, input_ids, attention_mask, max_new_tokens, **kwargs):
            return torch.cat([input_ids, input_ids[:, -2:]], dim=1)  # (B, P + 2)

    prompts = ["Weather in Lyon?", "Book a table for two."]
    completions = generate_completions(Echo(), tokenizer, prompts, max_new_tokens=2, progress=False)
    assert completions == [tokenizer.decode(tokenizer(text).input_ids[-2:]) for text in prompts]


@pytest.mark.parametrize(("cpu_fast_path", "contiguous"), [("auto", True), ("off", False)])
def test_generation_takes_the_lm_head_speed_up_only_with_the_fast_path(cpu_fast_path, contiguous, tiny_model_dir):
    """`contiguous_head_input` is a CPU speed trick of `grpo_tools.fastpath`: with `cpu_fast_path: off` generation
    runs as transformers does (the prefill's last positions reach the LM head as a strided slice)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from grpo_tools.evaluation.generation import generate_completions

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    seen = []
    # A forward hook sees the input the layer ran on, after any pre-hook made it contiguous.
    model.get_output_embeddings().register_forward_hook(lambda _, args, out: seen.append(args[0].is_contiguous()))
    generate_completions(model, tokenizer, ["Weather in Lyon?", "Hi"], max_new_tokens=2, progress=False,
                         cpu_fast_path=cpu_fast_path)  # fmt: skip
    assert all(seen) is contiguous and seen


@pytest.mark.parametrize("n", [1, 2, 3, 5])
def test_pass_at_k_equals_the_fraction_of_k_subsets_with_a_correct_sample(n):
    for correct in range(n + 1):
        outcomes = [True] * correct + [False] * (n - correct)
        for k in range(1, n + 1):
            subsets = list(combinations(outcomes, k))
            expected = sum(any(subset) for subset in subsets) / len(subsets)
            assert pass_at_k(n, correct, k) == pytest.approx(expected)


def test_pass_at_k_rejects_k_outside_the_samples():
    with pytest.raises(ValueError, match="k must be in"):
        pass_at_k(4, 1, 5)


@pytest.fixture(scope="module")
def eval_rows():
    return read_json_lines("data/tool_calls_eval.jsonl")[:24]


def test_report_from_known_completions(eval_rows, tmp_path):
    # Even rows answered with their gold calls, odd rows with nothing at all.
    completions = [gold_text(row) if index % 2 == 0 else "" for index, row in enumerate(eval_rows)]
    report = evaluate_model(None, None, eval_rows, tmp_path, scorer="exact", completions=completions, label="known")
    right = [index % 2 == 0 or not row["answers"] for index, row in enumerate(eval_rows)]
    assert report["accuracy"] == pytest.approx(sum(right) / len(eval_rows))
    assert report["rows"]["data"] == len(eval_rows) and report["rows"]["missing_prediction"] == 0
    assert report["errors"]["missed_call"] == sum(not r for r in right)
    assert report["rewards"]["tool_exact"] == pytest.approx(report["mean_reward"])
    assert set(report["rewards"]) == {
        "tool_format", "tool_schema", "tool_exact", "tool_partial", "tool_bfcl", "tool_decision",
    }  # fmt: skip
    # Gold calls where one is needed are right (+1), and an empty answer abstains (0) on a call row, is quiet (+1) on
    # a no-call row: the decision reward's mean is the share of rows answered right.
    assert report["rewards"]["tool_decision"] == pytest.approx(sum(right) / len(eval_rows))
    saved = json.loads((tmp_path / "known_report.json").read_text())
    assert saved == report
    predictions = read_json_lines(tmp_path / "known_predictions.jsonl")
    assert [p["id"] for p in predictions] == [row["id"] for row in eval_rows]


def test_report_counts_wrong_values_by_argument(eval_rows, tmp_path, capsys):
    rows = [row for row in eval_rows if len(row["answers"]) == 1][:6]
    completions = [gold_text(row) for row in rows]
    # The first row's first argument gets a value no gold call uses; every other value stays right.
    call = rows[0]["answers"][0]
    first = next(iter(call["arguments"]))
    wrong_call = {"name": call["name"], "arguments": {**call["arguments"], first: "no such value"}}
    completions[0] = f"<tool_call>\n{json.dumps(wrong_call)}\n</tool_call>"
    report = evaluate_model(None, None, rows, tmp_path, completions=completions, label="args")
    expected = {}
    for row in rows:
        for key in row["answers"][0]["arguments"]:
            expected.setdefault(f"{row['answers'][0]['name']}.{key}", {"checked": 0, "wrong": 0})["checked"] += 1
    expected[f"{call['name']}.{first}"]["wrong"] = 1
    assert report["arguments"] == expected
    assert next(iter(report["arguments"])) == f"{call['name']}.{first}"  # most often wrong first
    print_comparison({"before": report, "after": report})
    out = capsys.readouterr().out
    assert "wrong values by argument" in out
    checked = expected[f"{call['name']}.{first}"]["checked"]
    assert f"{call['name']}.{first}" in out and f"1 / {checked}" in out


def qwen3_coder_text(row, wrapped):
    """A row's gold answer as Qwen3-Coder writes it: every value as text (JSON for lists and objects)."""
    blocks = []
    for call in row["answers"]:
        parameters = "".join(
            f"<parameter={key}>\n{value if isinstance(value, str) else json.dumps(value)}\n</parameter>\n"
            for key, value in call["arguments"].items()
        )
        block = f"<function={call['name']}>\n{parameters}</function>"
        blocks.append(f"<tool_call>\n{block}\n</tool_call>" if wrapped else block)
    return "\n".join(blocks)


@pytest.mark.parametrize("scorer", ["exact", "bfcl"])
def test_qwen3_coder_answers_score_as_right_in_the_report(eval_rows, tmp_path, scorer):
    # Values written as text are cast by each row's tool schema (numbers, booleans, lists), as the rewards do.
    rows = [row for row in eval_rows if row["answers"]]
    assert any(not isinstance(v, str) for row in rows for call in row["answers"] for v in call["arguments"].values())
    completions = [qwen3_coder_text(row, wrapped=index % 2 == 1) for index, row in enumerate(rows)]
    report = evaluate_model(None, None, rows, tmp_path, scorer=scorer, completions=completions, label="coder")
    assert (report["accuracy"], report["errors"]) == (1.0, {})
    assert report["rewards"][f"tool_{scorer}"] == 1.0


def test_pass_at_k_report_from_known_samples(eval_rows, tmp_path):
    rows = [row for row in eval_rows if row["answers"]][:8]
    # Row i gets (i % 5) correct samples out of 4, capped at 4: 0, 1, 2, 3, 4, 4, 1, 2.
    correct_counts = [min(index % 5, 4) for index in range(len(rows))]
    completions = [
        gold_text(row) if sample < correct else "no call"
        for row, correct in zip(rows, correct_counts, strict=True)
        for sample in range(4)
    ]
    report = evaluate_model(
        None, None, rows, tmp_path, completions=completions, num_samples=4, temperature=1.0, label="sampled"
    )
    sampling = report["sampling"]
    assert sampling["num_samples"] == 4
    assert sampling["pass@1"] == pytest.approx(sum(c / 4 for c in correct_counts) / len(rows))
    assert sampling["pass@4"] == pytest.approx(sum(c > 0 for c in correct_counts) / len(rows))
    assert sampling["pass@1"] <= sampling["pass@2"] <= sampling["pass@4"]
    samples = read_json_lines(tmp_path / "sampled_samples.jsonl")
    assert len(samples) == 4 * len(rows) and {s["sample"] for s in samples} == {0, 1, 2, 3}
    # The predictions file holds each row's first sample, and the headline accuracy is that file's.
    assert report["accuracy"] == pytest.approx(sum(c > 0 for c in correct_counts) / len(rows))


@pytest.fixture(scope="module")
def eval_data(eval_rows, tmp_path_factory):
    path = tmp_path_factory.mktemp("evaldata") / "eval.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in eval_rows))
    return str(path)


def run_eval(*args):
    return cli(["eval", "--max-new-tokens", "24", "--quiet", *args])


def test_compare_base_evaluates_the_base_as_the_adapter_switched_off(tiny_model_dir, adapter_dir, eval_data, tmp_path):
    assert run_eval("--model", tiny_model_dir, "--adapter", adapter_dir, "--data", eval_data,
                    "--compare-base", "--output-dir", str(tmp_path / "both")) == 0  # fmt: skip
    assert run_eval("--model", tiny_model_dir, "--data", eval_data, "--output-dir", str(tmp_path / "plain")) == 0
    both, plain = tmp_path / "both", tmp_path / "plain"
    base = read_json_lines(both / "base_predictions.jsonl")
    adapted = read_json_lines(both / "adapter_predictions.jsonl")
    assert base == read_json_lines(plain / "base_predictions.jsonl")
    assert base != adapted
    for label in ("base", "adapter"):
        report = json.loads((both / f"{label}_report.json").read_text())
        rescored, _ = score_files(both / f"{label}_data.jsonl", both / f"{label}_predictions.jsonl", "exact")
        for key in ("accuracy", "mean_reward", "by_category", "errors", "rows"):
            assert report[key] == rescored[key]
    png = (both / "accuracy_by_category.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 1000


def test_sampling_writes_every_sample_and_reports_pass_at_k(tiny_model_dir, eval_data, tmp_path, capsys):
    assert run_eval("--model", tiny_model_dir, "--data", eval_data, "--num-samples", "3", "--max-rows", "6",
                    "--output-dir", str(tmp_path)) == 0  # fmt: skip
    report = json.loads((tmp_path / "base_report.json").read_text())
    assert report["sampling"]["num_samples"] == 3 and report["sampling"]["temperature"] == 1.0
    assert 0 <= report["sampling"]["pass@1"] <= report["sampling"]["pass@3"] <= 1
    samples = read_json_lines(tmp_path / "base_samples.jsonl")
    assert len(samples) == 18
    assert "pass@k over 3 samples" in capsys.readouterr().out


def test_training_folder_tokenizer_is_used_with_its_adapter(tiny_model_dir, adapter_dir, eval_data, tmp_path):
    # The adapter folder carries a tokenizer; a broken base tokenizer path would not be read at all.
    assert Path(adapter_dir, "tokenizer_config.json").is_file()
    assert run_eval("--model", tiny_model_dir, "--adapter", adapter_dir, "--data", eval_data, "--max-rows", "2",
                    "--output-dir", str(tmp_path)) == 0  # fmt: skip
    assert len(read_json_lines(tmp_path / "adapter_predictions.jsonl")) == 2


@pytest.mark.parametrize(
    ("make_args", "message"),
    [
        (lambda m, a, d, t: ["--model", m, "--adapter", str(t / "nowhere"), "--data", d], "no such folder"),
        (lambda m, a, d, t: ["--model", m, "--adapter", m, "--data", d], "no adapter_config.json"),
        (lambda m, a, d, t: ["--model", m, "--data", str(t / "missing.jsonl")], "missing.jsonl"),
        (lambda m, a, d, t: ["--model", str(t / "no-model"), "--data", d], "no-model: no such folder"),
        (lambda m, a, d, t: ["--model", str(t), "--data", d], ": not a model folder"),
        (lambda m, a, d, t: ["--model", a, "--data", d], ": not a model folder (no config.json in it)"),
    ],
)
def test_bad_input_gets_one_message_and_exit_2(
    make_args, message, tiny_model_dir, adapter_dir, eval_data, tmp_path, capsys
):
    args = make_args(tiny_model_dir, adapter_dir, eval_data, tmp_path)
    assert run_eval(*args, "--output-dir", str(tmp_path / "out")) == 2
    error = capsys.readouterr().err
    assert message in error and "Traceback" not in error


def test_bad_rows_are_named_with_their_row_and_field(tiny_model_dir, tmp_path, capsys):
    data = tmp_path / "bad.jsonl"
    data.write_text(json.dumps({"id": "a", "messages": [{"role": "user", "content": "hi"}], "tools": []}) + "\n")
    assert run_eval("--model", tiny_model_dir, "--data", str(data)) == 2
    error = capsys.readouterr().err
    assert "bad.jsonl: row 1" in error and "answers" in error


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--num-samples", "0"], "--num-samples"),
        (["--num-samples", "4", "--temperature", "0"], "temperature"),
        (["--compare-base"], "give --adapter"),
    ],
)
def test_contradictory_options_are_refused(args, message, tiny_model_dir, eval_data, capsys):
    with pytest.raises(SystemExit) as exit_info:
        run_eval("--model", tiny_model_dir, "--data", eval_data, *args)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_vllm_asked_for_but_not_installed_is_one_message(tiny_model_dir, eval_data, tmp_path, monkeypatch, capsys):
    import sys

    monkeypatch.setitem(sys.modules, "vllm", None)  # import vllm now raises ImportError
    assert run_eval("--model", tiny_model_dir, "--data", eval_data, "--vllm", "--output-dir", str(tmp_path)) == 2
    assert "pip install 'grpo-tools[vllm]'" in capsys.readouterr().err


def test_a_tokenizer_without_chat_template_is_refused(tiny_model_dir, eval_data, tmp_path, capsys):
    import shutil

    model = tmp_path / "model"
    shutil.copytree(tiny_model_dir, model)
    config = json.loads((model / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)
    (model / "tokenizer_config.json").write_text(json.dumps(config))
    (model / "chat_template.jinja").unlink(missing_ok=True)
    assert run_eval("--model", str(model), "--data", eval_data, "--output-dir", str(tmp_path / "out")) == 2
    assert "no chat template" in capsys.readouterr().err


def test_multi_turn_rows_run_their_environments_and_report_tool_use(tiny_model_dir, tmp_path, capsys):
    data = tmp_path / "multi.jsonl"
    data.write_text("".join(Path("data/multi_turn_eval.jsonl").read_text().splitlines(keepends=True)[:4]))
    assert run_eval("--model", tiny_model_dir, "--data", str(data), "--output-dir", str(tmp_path / "out")) == 0
    report = json.loads((tmp_path / "out" / "base_report.json").read_text())
    assert report["scorer"] == "outcome" and report["rows"]["data"] == 4
    assert set(report["tools"]["failures"]) >= {"validation", "exception", "timeout"}
    out = capsys.readouterr().out
    assert "accuracy (outcome)" in out and "tool use per rollout" in out


def test_mixed_single_and_multi_turn_rows_are_refused(tiny_model_dir, eval_rows, tmp_path, capsys):
    data = tmp_path / "mixed.jsonl"
    multi = Path("data/multi_turn_eval.jsonl").read_text().splitlines()[0]
    data.write_text(json.dumps(eval_rows[0]) + "\n" + multi + "\n")
    assert run_eval("--model", tiny_model_dir, "--data", str(data), "--output-dir", str(tmp_path / "out")) == 2
    assert "mix multi-turn rows" in capsys.readouterr().err


LLAMA_REASON = "This model only supports single tool-calls at once!"  # hermes-b-1 and -b-2: two calls in the history


def test_rows_the_chat_template_cannot_render_are_refused_naming_them(
    llama_template_model_dir, hermes_data, tmp_path, capsys
):
    assert run_eval("--model", llama_template_model_dir, "--data", hermes_data, "--output-dir", str(tmp_path)) == 2
    err = capsys.readouterr().err
    assert f"grpo-tools eval: {hermes_data}: 2 of 4 rows cannot be rendered by the chat template" in err
    assert f"row id=hermes-b-1: prompt: {LLAMA_REASON}" in err and f"row id=hermes-b-2: prompt: {LLAMA_REASON}" in err
    assert "--unrenderable-rows fail" in err and "Traceback" not in err
    assert not (tmp_path / "base_report.json").exists()


def test_unrenderable_rows_can_be_scored_as_failures(llama_template_model_dir, hermes_data, tmp_path, caplog):
    with caplog.at_level("WARNING"):
        assert run_eval("--model", llama_template_model_dir, "--data", hermes_data, "--unrenderable-rows", "fail",
                        "--output-dir", str(tmp_path)) == 0  # fmt: skip
    report = json.loads((tmp_path / "base_report.json").read_text())
    assert report["rows"]["data"] == 4 and report["rows"]["scored"] == 2 and report["rows"]["unrenderable"] == 2
    assert report["unrenderable"] == [
        {"id": "hermes-b-1", "reason": f"prompt: {LLAMA_REASON}"},
        {"id": "hermes-b-2", "reason": f"prompt: {LLAMA_REASON}"},
    ]
    verdicts = {row["id"]: row for row in read_json_lines(tmp_path / "base_rows.jsonl")}
    assert verdicts["hermes-b-1"]["score"] == verdicts["hermes-b-2"]["score"] == 0.0  # failures, over every row
    assert report["accuracy"] <= 0.5
    assert [row["id"] for row in read_json_lines(tmp_path / "base_predictions.jsonl")] == ["hermes-a-0", "hermes-b-0"]
    assert "2 of 4 rows cannot be rendered by the chat template; scored as failures" in caplog.text
