"""`grpo-tools push` (grpo_tools/hub/push.py): what a push stages and publishes, and what it refuses.

Covers the exact file set of a dry run (no checkpoints, warm-start model, optimizer states or eval rows), the model
card's front matter read back with `ModelCard.load` and its before/after table checked against the reports, the
tokenizer rule (same as the base model: left out; changed: uploaded; base not reachable: uploaded), `--merge` (the
merged model's logits equal base + adapter), a locally converted base (the card names the Hub model its provenance
records and says the weights are not the Hub's) and `--base-model` for any other local base, every refusal through
`main` (exit 2, one message naming the problem, nothing uploaded), and a real push against a stand-in `HfApi`: repo, branch and exactly one commit, with the access
token nowhere in the published files, the output or the logs. Nothing reaches the Hub.
"""

import json
import logging
import shutil
from dataclasses import asdict
from pathlib import Path
from typing import ClassVar

import pytest
import torch
from huggingface_hub import ModelCard

from grpo_tools.hub import push as hub
from grpo_tools.hub import staging
from grpo_tools.models.provenance import PROVENANCE_FILE, write_provenance


TOKEN = "hf_FakeTokenForTestsOnly0123456789abcdef"
HUB_BASE = "example-org/never-published-base"  # looks like a Hub id; in no cache, and the tests run offline
REPORTS = {
    # label -> category -> (rows, correct)
    "before": {"simple": (4, 1), "multiple": (6, 0), "irrelevance": (5, 5)},
    "after": {"simple": (4, 3), "multiple": (6, 2), "irrelevance": (5, 4), "parallel": (2, 1)},
    "base": {"simple": (10, 2)},
    "adapter": {"simple": (10, 7)},
}
RUN_FILES = {
    "README.md",
    "adapter_config.json",
    "adapter_model.safetensors",
    "training/run_info.json",
    "training/recipe.yaml",
    "training/trainer_state.json",
    "training/training_curves.png",
    "eval/before_report.json",
    "eval/after_report.json",
    "eval/accuracy_by_category.png",
}
TOKENIZER_FILES = {"tokenizer.json", "tokenizer_config.json", "chat_template.jinja"}


def scoring_report(categories: dict[str, tuple[int, int]], scorer: str = "exact") -> dict:
    """A report in the layout of `grpo-tools score --output` (docs/cli.md)."""
    rows = sum(count for count, _ in categories.values())
    correct = sum(right for _, right in categories.values())
    return {
        "scorer": scorer,
        "data": "eval.jsonl",
        "predictions": "pred.jsonl",
        "rows": {"data": rows, "predictions": rows, "scored": rows, "missing_prediction": 0},
        "accuracy": correct / rows,
        "mean_reward": correct / rows,
        "by_category": {
            name: {"rows": count, "correct": right, "accuracy": right / count}
            for name, (count, right) in categories.items()
        },
        "errors": {},
    }


@pytest.fixture(scope="session")
def adapter_template(tiny_model_dir, tmp_path_factory):
    """A LoRA adapter on the tiny model (random, non-zero B so it changes the logits) with the re-saved tokenizer."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    config = LoraConfig(r=4, target_modules="all-linear", init_lora_weights=False)
    folder = tmp_path_factory.mktemp("adapter") / "run"
    get_peft_model(model, config).save_pretrained(folder)
    AutoTokenizer.from_pretrained(tiny_model_dir).save_pretrained(folder)  # re-saved: files differ, tokenizer same
    return folder


def make_run(folder: Path, template: Path, *, base: str | None = None, run_info: dict | None = None) -> Path:
    """A run folder as `grpo-tools train` leaves it, junk included; `base` rewrites the adapter's base model."""
    shutil.copytree(template, folder)
    if base is not None:
        config = json.loads((folder / "adapter_config.json").read_text())
        config["base_model_name_or_path"] = base
        (folder / "adapter_config.json").write_text(json.dumps(config))
    info = {
        "command": "grpo-tools train --config recipes/tiny/grpo/cpu.yaml --max_steps 4",
        "base_model": base,
        "warm_start_epochs": 0,
        "dataset": "example-org/tool-calls",
        "eval_data": "data/tool_calls_eval.jsonl",
        "reward_funcs": ["tool_format", "tool_exact"],
        "reward_weights": [0.2, 1.0],
        "kl": {"beta": 0.02, "adaptive_kl": True, "kl_target": 0.05, "kl_controller": "band", "kl_min": 1e-4,
               "kl_max": 10.0},
        "lora": {"r": 4, "alpha": 8, "target_modules": "all-linear"},
        "num_generations": 8, "learning_rate": 1e-3, "max_steps": 4, "seed": 0,
        **(run_info or {}),
    }  # fmt: skip
    (folder / "run_info.json").write_text(json.dumps(info))
    (folder / "recipe.yaml").write_text("# a recipe\nmax_steps: 4\n")
    (folder / "trainer_state.json").write_text(json.dumps({"log_history": [{"step": 1, "reward": 0.5}]}))
    for label in ("before", "after"):
        (folder / f"{label}_report.json").write_text(json.dumps(scoring_report(REPORTS[label])))
        (folder / f"{label}_data.jsonl").write_text('{"id": "a"}\n')
        (folder / f"{label}_predictions.jsonl").write_text('{"id": "a", "completion": ""}\n')
    (folder / "accuracy_by_category.png").write_bytes(b"\x89PNG accuracy")
    (folder / "training_curves.png").write_bytes(b"\x89PNG curves")
    (folder / "training_args.bin").write_bytes(b"args")
    (folder / "eval_summary.json").write_text("{}")
    for junk in ("checkpoint-4", "warmup"):
        (folder / junk).mkdir()
        (folder / junk / "optimizer.pt").write_bytes(b"state")
    shutil.copyfile(folder / "adapter_model.safetensors", folder / "checkpoint-4" / "adapter_model.safetensors")
    return folder


def staged_files(folder: Path) -> set[str]:
    return {str(path.relative_to(folder)) for path in folder.rglob("*") if path.is_file()}


def table_row(card_text: str, name: str) -> list[str]:
    """The cells of the first markdown table row whose first cell is `name` (bold or not)."""
    for line in card_text.splitlines():
        cells = [cell.strip().strip("*") for cell in line.strip().strip("|").split("|")]
        if line.startswith("|") and cells[0] == name:
            return cells
    raise AssertionError(f"no table row {name!r} in the card")


@pytest.fixture(autouse=True)
def no_hub(monkeypatch):
    """No token unless a test sets one, and any real HfApi use fails the test."""
    monkeypatch.setattr(hub, "get_token", lambda: None)

    def refuse(*args, **kwargs):
        raise AssertionError("HfApi must not be used here")

    monkeypatch.setattr(hub, "HfApi", refuse)


def test_dry_run_stages_the_run_and_a_card(adapter_template, tmp_path, caplog, capsys):
    run = make_run(tmp_path / "run", adapter_template, base=HUB_BASE)
    evals = tmp_path / "evals"
    evals.mkdir()
    for label in ("base", "adapter"):
        (evals / f"{label}_report.json").write_text(json.dumps(scoring_report(REPORTS[label], scorer="bfcl")))
    (evals / "adapter_predictions.jsonl").write_text("{}\n")
    out = tmp_path / "staged"
    caplog.set_level(logging.INFO, logger="grpo_tools.hub.push")

    code = hub.main(
        ["--adapter", str(run), "--repo-id", "me/tool-grpo", "--dry-run", str(out), "--eval-dir", str(evals)]
    )

    assert code == 0
    expected = RUN_FILES | TOKENIZER_FILES | {"eval/base_report.json", "eval/adapter_report.json"}
    assert staged_files(out) == expected
    assert str(out) in capsys.readouterr().out
    # The base is a Hub id this offline machine cannot compare against: the tokenizer goes up, and a log line says so.
    assert any("uploading the tokenizer" in record.getMessage() for record in caplog.records)
    assert (out / "adapter_model.safetensors").read_bytes() == (run / "adapter_model.safetensors").read_bytes()

    card = ModelCard.load(out / "README.md")
    assert card.data.base_model == HUB_BASE
    assert card.data.library_name == "peft"
    assert {"grpo", "tool-calling", "lora"} <= set(card.data.tags)
    assert card.data.datasets == ["example-org/tool-calls"]
    for first, second in (("before", "after"), ("base", "adapter")):
        reports = [json.loads((out / "eval" / f"{label}_report.json").read_text()) for label in (first, second)]
        for category in reports[1]["by_category"]:
            cells = table_row(card.text.split(f"| {first} | {second} |")[1], category)
            old = reports[0]["by_category"].get(category, {}).get("accuracy")
            new = reports[1]["by_category"][category]["accuracy"]
            assert float(cells[3]) == pytest.approx(new, abs=5e-4)
            if old is None:
                assert cells[2] == cells[4] == "–"
            else:
                assert float(cells[2]) == pytest.approx(old, abs=5e-4)
                assert float(cells[4]) == pytest.approx(new - old, abs=5e-4)
        overall = table_row(card.text.split(f"| {first} | {second} |")[1], "all")
        assert [float(cell) for cell in overall[2:]] == pytest.approx(
            [reports[0]["accuracy"], reports[1]["accuracy"], reports[1]["accuracy"] - reports[0]["accuracy"]],
            abs=5e-4,
        )
    assert "![accuracy by category](eval/accuracy_by_category.png)" in card.text
    assert "![training curves](training/training_curves.png)" in card.text
    for fact in ("`tool_format` × 0.2", "`tool_exact` × 1", "0.05", "`band`", "r 4, alpha 8", "--max_steps 4"):
        assert fact in card.text


def test_card_says_what_it_does_not_know(adapter_template, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    for name in hub.ADAPTER_FILES:
        shutil.copyfile(adapter_template / name, run / name)

    result = hub.push_run(run, "me/bare", dry_run_dir=tmp_path / "out")

    assert set(result.files) == {"README.md", *hub.ADAPTER_FILES}
    text = (result.folder / "README.md").read_text()
    assert "No evaluation reports were found" in text
    assert "No `run_info.json` was found" in text


def test_card_states_the_multi_turn_settings(adapter_template, tmp_path):
    settings = {"outcome_reward_weight": 2.0, "extra_call_cost": 0.1, "tool_timeout": 5.0}
    single = make_run(tmp_path / "single", adapter_template, run_info={"multi_turn": None})
    multi = make_run(
        tmp_path / "multi", adapter_template, run_info={"multi_turn": {**settings, "max_tool_calling_iterations": 4}}
    )

    single_card = (hub.push_run(single, "me/single", dry_run_dir=tmp_path / "out1").folder / "README.md").read_text()
    multi_card = (hub.push_run(multi, "me/multi", dry_run_dir=tmp_path / "out2").folder / "README.md").read_text()

    assert "Multi-turn" not in single_card
    assert "outcome reward × 2, 0.1 off per extra call, 5 s per tool call, at most 4 tool rounds" in multi_card


def test_warm_started_adapter_is_flagged(adapter_template, tiny_model_dir, tmp_path, caplog):
    run = make_run(tmp_path / "run", adapter_template, base=tiny_model_dir)
    info = json.loads((run / "run_info.json").read_text())
    (run / "run_info.json").write_text(json.dumps({**info, "base_model": HUB_BASE, "warm_start_epochs": 2}))

    result = hub.push_run(run, "me/warm", dry_run_dir=tmp_path / "out")

    card = ModelCard.load(result.folder / "README.md")
    assert card.data.base_model == HUB_BASE  # the model training started from, not the local warm-started folder
    assert f"trained on top of `{tiny_model_dir}` (the warm-started copy of" in card.text
    assert "--merge" in card.text
    assert any(record.levelno == logging.WARNING and "--merge" in record.getMessage() for record in caplog.records)


def test_adapter_on_the_runs_own_warm_start_folder_is_flagged(adapter_template, tiny_model_dir, tmp_path):
    run = make_run(tmp_path / "run", adapter_template)
    warmup = shutil.copytree(tiny_model_dir, run / "warmup", dirs_exist_ok=True)
    config = json.loads((run / "adapter_config.json").read_text())
    (run / "adapter_config.json").write_text(json.dumps({**config, "base_model_name_or_path": str(warmup)}))
    (run / "run_info.json").unlink()  # an older run: nothing says it was warm-started but the folder itself

    result = hub.push_run(run, "me/warm", dry_run_dir=tmp_path / "out")

    assert not any(name.startswith("warmup") for name in result.files)
    assert set(result.files) >= TOKENIZER_FILES  # the base cannot be downloaded, so its tokenizer travels along
    text = (result.folder / "README.md").read_text()
    assert "a folder of the training run" in text
    assert "--merge" in text


@pytest.mark.parametrize("change", [None, "chat_template", "added_token"])
def test_tokenizer_uploaded_only_when_it_differs_from_the_base(adapter_template, tiny_model_dir, tmp_path, change):
    from transformers import AutoTokenizer

    run = make_run(tmp_path / "run", adapter_template, base=tiny_model_dir)
    if change is not None:
        tokenizer = AutoTokenizer.from_pretrained(run)
        if change == "chat_template":
            tokenizer.chat_template = tokenizer.chat_template.replace("# Tools", "# Functions")
        else:
            tokenizer.add_tokens(["<think>"])
        tokenizer.save_pretrained(run)

    result = hub.push_run(run, "me/tokenizer", dry_run_dir=tmp_path / "out")

    staged_tokenizer = {name for name in result.files if name in hub.TOKENIZER_FILES}
    if change is None:
        assert staged_tokenizer == set()
        assert "The tokenizer is the base model's, unchanged." in (result.folder / "README.md").read_text()
    else:
        assert staged_tokenizer == TOKENIZER_FILES
        for name in staged_tokenizer:
            assert (result.folder / name).read_bytes() == (run / name).read_bytes()


def test_merge_stages_a_full_model_equal_to_base_plus_adapter(adapter_template, tiny_model_dir, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    run = make_run(tmp_path / "run", adapter_template, base=tiny_model_dir, run_info={"base_model": HUB_BASE})

    result = hub.push_run(run, "me/merged", merge=True, dry_run_dir=tmp_path / "out")

    files = set(result.files)
    assert {"config.json", "model.safetensors", "README.md"} | TOKENIZER_FILES <= files
    assert not files & set(hub.ADAPTER_FILES)
    card = ModelCard.load(result.folder / "README.md")
    assert card.data.library_name != "peft"
    assert card.data.base_model == HUB_BASE
    assert "merged" in card.text
    input_ids = torch.tensor([[5, 17, 42, 99, 3, 250]])
    with torch.no_grad():
        merged = AutoModelForCausalLM.from_pretrained(result.folder).eval()(input_ids).logits
        base = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
        plain = base(input_ids).logits
        with_adapter = PeftModel.from_pretrained(base, run).eval()(input_ids).logits
    assert torch.allclose(merged, with_adapter, atol=1e-5)
    assert not torch.allclose(merged, plain, atol=1e-3)  # the adapter does change the model


@pytest.fixture
def converted_base(tiny_model_dir, tmp_path, smollm2_provenance):
    """A local model folder with the `provenance.json` a conversion writes (the tiny model stands in for SmolLM2)."""
    folder = Path(shutil.copytree(tiny_model_dir, tmp_path / "smollm2-135m"))
    write_provenance(folder, smollm2_provenance)
    return folder


@pytest.mark.parametrize("recorded_by", ["run_info", "base_folder"])
def test_card_names_the_hub_model_a_converted_base_was_made_from(
    adapter_template, converted_base, tmp_path, recorded_by, smollm2_provenance
):
    # As `grpo-tools train` records it, or (a run that recorded nothing) as the base folder's own provenance.json.
    recorded = {"base_provenance": asdict(smollm2_provenance)} if recorded_by == "run_info" else {}
    run = make_run(tmp_path / "run", adapter_template, base=str(converted_base), run_info=recorded)
    if recorded_by == "run_info":
        shutil.rmtree(converted_base)  # pushed from where the base folder is not: only run_info.json knows

    result = hub.push_run(run, "me/smol-tools", dry_run_dir=tmp_path / "out")

    card = ModelCard.load(result.folder / "README.md")
    assert card.data.base_model == smollm2_provenance.base_model
    intro = card.text.split("## Usage")[0]
    assert (
        f"A LoRA adapter for [{smollm2_provenance.base_model}](https://huggingface.co/{smollm2_provenance.base_model})"
        in intro
    )
    assert f"the local folder `{converted_base}`" in intro
    assert f"whose weights were {smollm2_provenance.weights}" in intro
    assert f"not bit-identical to the weights of {smollm2_provenance.base_model} on the Hub" in intro
    assert "close but not identical model" in intro
    assert smollm2_provenance.converted_by in intro
    # The loading code fetches the Hub model; the run's tokenizer (with its tool template) travels with the adapter,
    # since it cannot be compared with the Hub model's here.
    assert f'AutoModelForCausalLM.from_pretrained("{smollm2_provenance.base_model}"' in card.text
    assert set(result.files) >= TOKENIZER_FILES
    assert f"`{converted_base}`, made from [{smollm2_provenance.base_model}]" in table_row(card.text, "Base model")[1]


def test_base_model_names_the_hub_model_of_a_local_base(adapter_template, tiny_model_dir, tmp_path, capsys):
    run = make_run(tmp_path / "run", adapter_template, base=tiny_model_dir)
    named = "example-org/tiny-origin"
    args = ["--adapter", str(run), "--repo-id", "me/tiny-tools"]

    assert hub.main([*args, "--dry-run", str(tmp_path / "plain")]) == 0
    assert hub.main([*args, "--dry-run", str(tmp_path / "named"), "--base-model", named]) == 0

    plain = ModelCard.load(tmp_path / "plain" / "README.md")
    assert plain.data.base_model is None  # a local path cannot go in the metadata, and nothing names a Hub model
    card = ModelCard.load(tmp_path / "named" / "README.md")
    assert card.data.base_model == named
    assert f"A LoRA adapter for [{named}](https://huggingface.co/{named})" in card.text
    # Only the user says so: the card does not claim the weights are the Hub model's.
    assert f"the local folder `{tiny_model_dir}`, which the publisher names as made from [{named}]" in card.text
    assert "its weights may differ from those on the Hub" in card.text
    assert "bit-identical" not in card.text


def test_a_base_model_the_hub_does_not_have_is_refused(
    adapter_template, tiny_model_dir, tmp_path, monkeypatch, capsys
):
    looked_up = []

    def hub_without_it(name):  # what staging learns online when the Hub answers 404 for the model
        looked_up.append(name)
        return None, False

    monkeypatch.setattr(staging, "_base_folder", hub_without_it)
    run = make_run(tmp_path / "run", adapter_template, base=tiny_model_dir)
    args = ["--adapter", str(run), "--repo-id", "me/tiny-tools", "--dry-run", str(tmp_path / "out")]

    assert hub.main([*args, "--base-model", "example-org/typo"]) == 2

    assert looked_up == ["example-org/typo"]  # the tokenizer is compared with the Hub model users are sent to
    assert "grpo-tools push: example-org/typo: not a model on the Hub" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_base_model_overrides_the_recorded_provenance(
    adapter_template, converted_base, tmp_path, caplog, smollm2_provenance
):
    run = make_run(tmp_path / "run", adapter_template, base=str(converted_base))

    result = hub.push_run(run, "me/smol-tools", dry_run_dir=tmp_path / "out", base_model="example-org/other")

    card = ModelCard.load(result.folder / "README.md")
    assert card.data.base_model == "example-org/other"
    assert (
        smollm2_provenance.base_model not in card.text and smollm2_provenance.weights not in card.text
    )  # that record is not about it
    assert any(
        record.levelno == logging.WARNING and "--base-model" in record.getMessage() for record in caplog.records
    )


def test_warm_started_adapter_on_a_converted_base_names_each_step(
    adapter_template, converted_base, tmp_path, smollm2_provenance
):
    run = make_run(
        tmp_path / "run", adapter_template, run_info={"base_model": str(converted_base), "warm_start_epochs": 2}
    )
    warmup = shutil.copytree(converted_base, run / "warmup", dirs_exist_ok=True)
    (warmup / PROVENANCE_FILE).unlink()  # the warm start saves a model, not the conversion's record
    config = json.loads((run / "adapter_config.json").read_text())
    (run / "adapter_config.json").write_text(json.dumps({**config, "base_model_name_or_path": str(warmup)}))

    result = hub.push_run(run, "me/warm-smol", dry_run_dir=tmp_path / "out")

    card = ModelCard.load(result.folder / "README.md")
    assert card.data.base_model == smollm2_provenance.base_model
    # adapter -> warm-started folder (not published) -> local dequantized copy -> the Hub model
    assert f"trained on top of `{warmup}` (the warm-started copy of `{converted_base}`)" in card.text
    assert f"the local folder `{converted_base}`, a copy of [{smollm2_provenance.base_model}]" in card.text
    assert "--merge" in card.text


def test_a_run_with_a_stacked_adapter_publishes_it_for_the_base_itself(
    adapter_template, converted_base, tmp_path, smollm2_provenance, caplog
):
    """After a LoRA warm start the run holds `base_adapter`, its adapter stacked with the warm start's, which applies
    to the base training started from: that one is published, with no note sending users to --merge."""
    from safetensors.torch import load_file, save_file

    run = make_run(
        tmp_path / "run", adapter_template, run_info={"base_model": str(converted_base), "warm_start_epochs": 2}
    )
    warmup = shutil.copytree(converted_base, run / "warmup", dirs_exist_ok=True)
    config = json.loads((run / "adapter_config.json").read_text())
    (run / "adapter_config.json").write_text(json.dumps({**config, "base_model_name_or_path": str(warmup)}))
    stacked = run / "base_adapter"
    stacked.mkdir()
    weights = load_file(run / "adapter_model.safetensors")
    save_file({name: 2 * tensor for name, tensor in weights.items()}, stacked / "adapter_model.safetensors")
    stacked_config = {**config, "r": 2 * config["r"], "base_model_name_or_path": str(converted_base)}
    (stacked / "adapter_config.json").write_text(json.dumps(stacked_config))

    result = hub.push_run(run, "me/stacked-smol", dry_run_dir=tmp_path / "out")

    staged = result.folder
    assert (staged / "adapter_model.safetensors").read_bytes() == (stacked / "adapter_model.safetensors").read_bytes()
    assert json.loads((staged / "adapter_config.json").read_text())["base_model_name_or_path"] == str(converted_base)
    assert not any(name.startswith(("warmup", "base_adapter")) for name in result.files)
    card = ModelCard.load(staged / "README.md")
    assert card.data.base_model == smollm2_provenance.base_model
    assert "--merge" not in card.text and "trained on top of" not in card.text
    assert f"holds the two side by side (rank {2 * config['r']})" in table_row(card.text, "Warm start")[1]
    assert "before and after GRPO (before means after the warm start)" in card.text
    assert not any(record.levelno == logging.WARNING and "--merge" in record.getMessage() for record in caplog.records)


def malformed_provenance(run: Path) -> None:
    base = Path(json.loads((run / "adapter_config.json").read_text())["base_model_name_or_path"])
    (base / PROVENANCE_FILE).write_text(json.dumps({"base_model": "HuggingFaceTB/SmolLM2-135M-Instruct"}))


def malformed_recorded_provenance(run: Path) -> None:
    info = json.loads((run / "run_info.json").read_text())
    (run / "run_info.json").write_text(
        json.dumps(
            {
                **info,
                "base_provenance": {
                    "base_model": "example-org/origin",
                    "weights": None,
                    "license": "mit",
                    "converted_by": "a script",
                },
            }
        )
    )


def corrupt_safetensors(run: Path) -> None:
    (run / "adapter_model.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00not a header")


def bad_report(run: Path) -> None:
    (run / "after_report.json").write_text("{not json")


@pytest.mark.parametrize(
    ("breakage", "args", "message"),
    [
        (None, ["--adapter", "{tmp}/nowhere"], "nowhere: no such folder"),
        (lambda run: (run / "adapter_config.json").unlink(), [], "no adapter_config.json"),
        (lambda run: (run / "adapter_model.safetensors").unlink(), [], "no adapter_model.safetensors"),
        (corrupt_safetensors, [], "adapter_model.safetensors: cannot be read as safetensors"),
        (bad_report, [], "after_report.json: not readable JSON"),
        (None, ["--repo-id", "just-a-name"], "'just-a-name': expected owner/name"),
        (None, ["--repo-id", "me/too/deep"], "'me/too/deep': expected owner/name"),
        (None, ["--repo-id", "me/bad name!"], "repo id 'me/bad name!'"),
        (None, ["--real"], "no Hugging Face token"),
        (lambda run: (run.parent / "out" / "old").mkdir(parents=True), [], "out: already exists"),
        (None, ["--eval-dir", "{tmp}/no-evals"], "no-evals: no such folder"),
        (None, ["--base-model", "not a model!"], "--base-model 'not a model!': not a Hub model id"),
        (None, ["--base-model", "org/too/deep"], "--base-model 'org/too/deep': not a Hub model id"),
        (None, ["--base-model", "{tmp}/run"], "run': a local path; name the Hub model that folder was made from"),
        (malformed_provenance, [], f"{PROVENANCE_FILE}: missing field 'weights', missing field 'license'"),
        (malformed_recorded_provenance, [], "run_info.json: base_provenance: field 'weights' must be a non-empty"),
    ],
)
def test_refusals_exit_2_with_one_message(adapter_template, tiny_model_dir, tmp_path, capsys, breakage, args, message):
    # The base is a copy of the tiny model, so that a breakage may write into it.
    run = make_run(tmp_path / "run", adapter_template, base=str(shutil.copytree(tiny_model_dir, tmp_path / "base")))
    if breakage is not None:
        breakage(run)
    options = {"--adapter": str(run), "--repo-id": "me/tool-grpo", "--dry-run": str(tmp_path / "out")}
    args = [arg.replace("{tmp}", str(tmp_path)) for arg in args]
    if "--real" in args:
        del options["--dry-run"]
        args.remove("--real")
    for flag, value in zip(args[::2], args[1::2], strict=True):
        options[flag] = value

    code = hub.main([item for pair in options.items() for item in pair])

    err = capsys.readouterr().err
    assert code == 2
    assert message in err
    assert err.startswith("grpo-tools push: ") and err.count("\n") == 1
    assert "Traceback" not in err


class FakeHfApi:
    """Records what a push asks of the Hub; keeps the committed files' contents (the staging folder is removed)."""

    calls: ClassVar[list] = []

    def __init__(self, token=None):
        self.calls.append(("init", {"token": token}))

    def create_repo(self, repo_id, **kwargs):
        self.calls.append(("create_repo", {"repo_id": repo_id, **kwargs}))

    def create_branch(self, repo_id, **kwargs):
        self.calls.append(("create_branch", {"repo_id": repo_id, **kwargs}))

    def list_repo_files(self, repo_id, **kwargs):
        self.calls.append(("list_repo_files", {"repo_id": repo_id, **kwargs}))
        return [".gitattributes", "README.md", "model.safetensors", "notes.md"]

    def create_commit(self, repo_id, operations, **kwargs):
        added = {
            op.path_in_repo: Path(op.path_or_fileobj).read_bytes()
            for op in operations
            if hasattr(op, "path_or_fileobj")
        }
        deleted = [op.path_in_repo for op in operations if not hasattr(op, "path_or_fileobj")]
        self.calls.append(("create_commit", {"repo_id": repo_id, "added": added, "deleted": deleted, **kwargs}))
        return type("CommitInfo", (), {"commit_url": f"https://huggingface.co/{repo_id}/commit/abc"})()


@pytest.mark.parametrize(("private", "revision"), [(True, "exp-1"), (False, None), (False, "main")])
def test_push_makes_one_commit_and_never_leaks_the_token(
    adapter_template, tiny_model_dir, tmp_path, monkeypatch, capsys, caplog, private, revision
):
    # The command that trained the run carried the token too (trl's --hub_token): it must not reach the Hub either.
    command = f"grpo-tools train --config r.yaml --push_to_hub --hub_token {TOKEN}"
    run = make_run(tmp_path / "run", adapter_template, base=tiny_model_dir, run_info={"command": command})
    (run / "recipe.yaml").write_text(f"hub_token: {TOKEN}\n")
    monkeypatch.setattr(FakeHfApi, "calls", [])
    monkeypatch.setattr(hub, "HfApi", FakeHfApi)
    monkeypatch.setattr(hub, "get_token", lambda: TOKEN)
    caplog.set_level(logging.DEBUG)
    args = ["--adapter", str(run), "--repo-id", "me/tool-grpo", "--commit-message", "first push"]
    args += ["--private"] * private + (["--revision", revision] if revision else [])

    assert hub.main(args) == 0

    calls = FakeHfApi.calls
    names = [name for name, _ in calls]
    assert names == ["init", "create_repo"] + ["create_branch"] * (revision == "exp-1") + [
        "list_repo_files",
        "create_commit",
    ]
    assert calls[0][1]["token"] == TOKEN
    assert calls[1][1] == {"repo_id": "me/tool-grpo", "private": private, "exist_ok": True}
    if revision == "exp-1":
        assert calls[2][1] == {"repo_id": "me/tool-grpo", "branch": "exp-1", "exist_ok": True}
    commit = calls[-1][1]
    assert commit["revision"] == revision
    assert commit["commit_message"] == "first push"
    assert set(commit["added"]) == RUN_FILES  # tokenizer unchanged from the local base: not uploaded
    assert commit["deleted"] == ["model.safetensors"]  # an earlier push's weights go; the user's own notes file stays
    out, err = capsys.readouterr()
    assert "https://huggingface.co/me/tool-grpo/commit/abc" in out
    logged = "\n".join(f"{record.getMessage()} {record.args}" for record in caplog.records)
    for place in (*commit["added"].values(), out.encode(), err.encode(), logged.encode()):
        assert TOKEN.encode() not in place
    assert b"<redacted>" in commit["added"]["training/recipe.yaml"]
