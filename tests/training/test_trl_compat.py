"""Tests for `grpo_tools.training.trl_compat` and the refusals around it: the trl range the trainer checks at start-up
is the one pyproject.toml declares, a trl outside it is refused with the range named, the trainer's private-name
hooks reach trl's steps, and combinations that cannot work are refused by `ToolGRPOConfig` (so the Python API refuses
them too) or, for multi-turn rollouts, by the trainer."""

import re
from pathlib import Path

import pytest

from grpo_tools.training import configs
from grpo_tools.training.configs import ConfigError, ToolGRPOConfig
from grpo_tools.training.trl_compat import TRL_VERSIONS, check_trl_version


def test_the_checked_range_is_the_one_pyproject_declares():
    pyproject = (Path(__file__).resolve().parents[2] / "pyproject.toml").read_text()
    assert re.findall(r'^    "(trl[<>=!~][^"]*)",$', pyproject, flags=re.MULTILINE) == [f"trl{TRL_VERSIONS}"]


@pytest.mark.parametrize("extra", ["vllm", "deepspeed"])
def test_our_extras_ask_for_what_the_installed_trl_asks_for(extra):
    """`pip install grpo-tools[vllm]` must install a vLLM (and its helpers) that the installed trl runs with, never one
    it refuses: every requirement trl declares for the extra is ours too, with the same range."""
    import importlib.metadata

    from packaging.requirements import Requirement

    pyproject = (Path(__file__).resolve().parents[2] / "pyproject.toml").read_text()
    line = re.search(rf"^{extra} = \[(.*)\]$", pyproject, flags=re.MULTILINE).group(1)
    ours = {req.name: req.specifier for req in map(Requirement, re.findall(r'"([^"]+)"', line))}
    trls = {}
    for text in importlib.metadata.requires("trl"):
        requirement = Requirement(text)
        if requirement.marker is not None and requirement.marker.evaluate({"extra": extra}):
            trls[requirement.name] = requirement.specifier
    assert extra in trls
    assert {name: ours.get(name) for name in trls} == trls


def test_make_test_min_versions_installs_the_lowest_versions_pyproject_allows():
    """`make test-min-versions` is what makes the lower bounds honest: it must install exactly those."""
    from packaging.requirements import Requirement
    from packaging.version import Version

    root = Path(__file__).resolve().parents[2]
    pins = re.search(r"^MIN_VERSIONS := (.*)$", (root / "Makefile").read_text(), flags=re.MULTILINE).group(1).split()
    pinned = {name: Version(version) for name, version in (pin.split("==") for pin in pins)}
    declared = re.findall(r'^    "([a-z_]+[<>=][^"]*)",', (root / "pyproject.toml").read_text(), flags=re.MULTILINE)
    lowest = {}
    for text in declared:
        requirement = Requirement(text)
        floors = [Version(spec.version) for spec in requirement.specifier if spec.operator == ">="]
        lowest[requirement.name.replace("_", "-")] = floors[0]
    assert set(pinned) == {"trl", "transformers", "peft", "accelerate", "datasets"}
    assert {name: lowest[name] for name in pinned} == pinned


@pytest.mark.parametrize("version", ["0.24.0", "1.15.0", "2.0.0"])
def test_a_trl_outside_the_range_is_refused_naming_the_range(version):
    with pytest.raises(ConfigError, match=rf"trl {version} is installed; .*trl>=1\.16,<2"):
        check_trl_version(version)


def test_the_installed_trl_is_accepted():
    check_trl_version()


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"cpu_fast_path": "on", "use_cpu": False}, "cpu_fast_path: on needs a run on the CPU"),
        ({"cpu_fast_path": "fast"}, "cpu_fast_path must be auto, on or off, got 'fast'"),
    ],
)
def test_combinations_that_cannot_work_are_refused_by_the_config(settings, message, tmp_path, monkeypatch):
    monkeypatch.setattr(configs, "_cuda_available", lambda: True)  # as on a machine with a GPU
    settings = {"use_cpu": True, "bf16": False, **settings}
    with pytest.raises(ConfigError, match=message):
        ToolGRPOConfig(output_dir=str(tmp_path), **settings)


def test_the_fast_path_follows_its_switch(tmp_path):
    import torch

    from grpo_tools import fastpath

    cpu, cuda = torch.device("cpu"), torch.device("cuda", 0)
    assert fastpath.enabled("auto", cpu) and fastpath.enabled("on", cpu)
    assert (
        not fastpath.enabled("off", cpu) and not fastpath.enabled("auto", cuda) and not fastpath.enabled("off", cuda)
    )
    with pytest.raises(ValueError, match="runs on the CPU only; this run is on cuda:0"):
        fastpath.enabled("on", cuda)


def test_gold_turns_with_multi_turn_rollouts_are_refused_by_the_trainer(tmp_path):
    from grpo_tools.training.trainer import ToolGRPOTrainer

    args = ToolGRPOConfig(output_dir=str(tmp_path), use_cpu=True, gold_in_group=True)
    with pytest.raises(ConfigError, match=r"gold_in_group needs single-turn rollouts; .*\['environment_factory'\]"):
        ToolGRPOTrainer(model="unused", reward_funcs=[], args=args, environment_factory=lambda: None)


HOOKS = [
    "_generate_single_turn",
    "_generate_and_score_completions",
    "_calculate_rewards",
    "_compute_loss",
    "_get_per_token_logps_and_entropies",
    "_save_checkpoint",
    "_load_optimizer_and_scheduler",
]


def rename(monkeypatch, cls, name):
    """As a trl (or transformers) release that renames `name` would leave `cls`: the method under another name only
    (`_save_checkpoint` and `_load_optimizer_and_scheduler` are transformers' `Trainer`'s, overridden by trl)."""
    owners = [klass for klass in cls.__mro__ if name in vars(klass)]
    monkeypatch.setattr(cls, f"{name}_renamed", getattr(cls, name), raising=False)
    for owner in owners:
        monkeypatch.delattr(owner, name)


@pytest.mark.parametrize("name", HOOKS)
def test_a_trl_without_one_of_our_hooks_is_refused_naming_it(name, monkeypatch):
    import importlib.metadata

    from trl import GRPOTrainer

    from grpo_tools.training.trl_compat import check_trl_hooks

    rename(monkeypatch, GRPOTrainer, name)
    with pytest.raises(ConfigError, match=rf"GRPOTrainer has no method {name}\b") as refusal:
        check_trl_hooks()
    assert f"trl {importlib.metadata.version('trl')}'s" in str(refusal.value)


def test_a_trl_whose_hook_takes_other_parameters_is_refused_naming_them(monkeypatch):
    from trl import GRPOTrainer

    from grpo_tools.training.trl_compat import check_trl_hooks

    monkeypatch.setattr(GRPOTrainer, "_calculate_rewards", lambda self, inputs, prompts, completions: None)
    with pytest.raises(ConfigError, match=r"_calculate_rewards.*completion_ids_list"):
        check_trl_hooks()


def test_the_trainer_refuses_a_trl_that_renamed_a_hook_instead_of_switching_it_off(
    tiny_model_dir, small_data, tmp_path, monkeypatch
):
    """Adaptive KL reads each micro-batch's KL in `_compute_loss`: renamed in trl, the trainer would build and train
    with a KL coefficient that never moves."""
    from trainer_builders import make_trainer
    from trl import GRPOTrainer

    rename(monkeypatch, GRPOTrainer, "_compute_loss")
    with pytest.raises(ConfigError, match=r"_compute_loss"):
        make_trainer(tiny_model_dir, small_data["train"], tmp_path)


def test_the_trainer_refuses_a_trl_without_the_private_state_it_reads(
    tiny_model_dir, small_data, tmp_path, monkeypatch
):
    from trainer_builders import make_trainer
    from trl import GRPOTrainer

    init = GRPOTrainer.__init__

    def init_without_metrics(self, *args, **kwargs):
        init(self, *args, **kwargs)
        self._metrics_renamed = self.__dict__.pop("_metrics")

    monkeypatch.setattr(GRPOTrainer, "__init__", init_without_metrics)
    with pytest.raises(ConfigError, match=r"_metrics"):
        make_trainer(tiny_model_dir, small_data["train"], tmp_path)
