"""Tests for the experiments under `experiments/`: the gold-turn KL probe measures what it says, and the dataset
transforms (restyled names, reordered tools and distractors, rows within reach) keep each row's gold and refuse bad
rows by file, row and field."""

import json
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest


ROOT = Path(__file__).resolve().parent.parent


def experiment(name: str, *args: str) -> list[str]:
    """The command line of `python -m experiments.NAME ARGS`, run with the repository's root as the folder."""
    return [sys.executable, "-m", f"experiments.{name}", *args]


def test_gold_kl_probe_measures_samples_and_gold_turns_against_the_warm_start(tiny_model_dir, tmp_path):
    """With the adapter as peft initialises it (B = 0) the policy is the reference and every k3 is 0; once the
    adapter moves the model, both the samples and the gold turns measure a positive KL."""
    import shutil

    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from experiments import probe_gold_kl as probe
    from grpo_tools.data.prompts import load_rows

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
    firsts = []
    for attempt in ("a", "b"):
        target = tmp_path / f"restyled_{attempt}.jsonl"
        subprocess.run(experiment("restyle_names", str(source), str(target), "--seed", "3"), cwd=ROOT, check=True)
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


def test_restyling_never_gives_two_offered_functions_one_name():
    """`getWeather` may restyle to `get_weather`, the very name the row's other function has: then it keeps its own."""
    from experiments import restyle_names as restyle

    names = ["getWeather", "get_weather", "GetWeather", "get.weather"]
    row = {"tools": [{"type": "function", "function": {"name": name}} for name in names], "answers": []}
    for seed in range(50):
        restyled = restyle.restyle_row(row, random.Random(seed))
        new = [tool["function"]["name"] for tool in restyled["tools"]]
        assert len(set(new)) == len(names), (seed, new)


def test_namespaced_names_keep_the_name_behind_a_made_up_word_wherever_the_row_names_it():
    """`--namespace` puts a made-up word before each name, the same one in tools, answers and possible answers."""
    from experiments import restyle_names as restyle

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
    "command", [["restyle_names"], ["reorder_tools"], ["reorder_tools", "--distractor"]], ids=" ".join
)
def test_row_probes_refuse_bad_rows_by_file_row_and_field(command, content, message, tmp_path):
    source = tmp_path / "rows.jsonl"
    if content is not None:
        source.write_text(content)
    target = tmp_path / "out.jsonl"
    result = subprocess.run(
        experiment(command[0], str(source), str(target), *command[1:]),
        cwd=ROOT,
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
        subprocess.run(experiment("reorder_tools", str(source), str(target), "--seed", "2"), cwd=ROOT, check=True)
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


def test_a_distractor_joins_only_call_rows_that_offer_one_function():
    """`--distractor` adds one function of another name, from the other rows, to a one-function call row and makes
    it a `multiple` row; a row that already offers several, or where no call is right, is only reordered."""
    from experiments import reorder_tools as reorder

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
        experiment("in_reach", *map(str, (source, sample_file, target)), "--no-call-rows", "2"),
        cwd=ROOT,
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
        experiment("in_reach", str(source), str(sample_file), str(target)),
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 1 and result.stderr.strip().startswith(str(tmp_path / message)), result.stderr
    assert "Traceback" not in result.stderr and not target.exists()
