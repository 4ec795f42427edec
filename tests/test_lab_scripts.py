"""Every script of the lab beside the library (`tasks/`, `benchmarks/`, `experiments/`) still starts after a move:
run as `python -m <folder>.<module> --help` from the repository's root, as the Makefile and the docs run them, each
prints its usage and exits 0. Run in this process (`runpy`), so the imports they share are paid once."""

import runpy
import sys
from pathlib import Path

import pytest


ROOT = Path(__file__).resolve().parent.parent
# Modules that are libraries of the lab, not scripts: imported by the scripts, with no command line of their own.
NOT_SCRIPTS = {"__init__", "common", "bfcl_reference", "bfcl_multi_turn_reference", "catalog", "swapped"}
SCRIPTS = sorted(
    f"{folder}.{path.stem}"
    for folder in ("tasks", "benchmarks", "experiments")
    for path in (ROOT / folder).glob("*.py")
    if path.stem not in NOT_SCRIPTS
)


def test_the_lab_has_scripts_to_check():
    assert {"tasks.bfcl", "benchmarks.bench_learning", "experiments.probe_decision"} <= set(SCRIPTS)


@pytest.mark.parametrize("module", SCRIPTS)
def test_every_lab_script_prints_its_usage(module, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", [module, "--help"])
    with pytest.raises(SystemExit) as exit_:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    assert exit_.value.code in (0, None)
    assert "usage:" in capsys.readouterr().out
