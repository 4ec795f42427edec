"""The boundary between the library and the lab, as a user who runs `pip install .` gets it: the installed package
holds no module that exists only for our demo tasks, benchmarks or experiments, imports nothing from the folders
beside it, and `grpo-tools --help`, `score` and `train` (the tiny model, one step) run from that install alone, from a
folder outside the checkout, with no path into the repository."""

import ast
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml


ROOT = Path(__file__).resolve().parent.parent
# The folders beside the package: what exists for our demos, benchmarks, experiments and tests; the library imports
# none of them, and defines nothing that one of their modules defines (the same name and the same code).
LAB = ("tasks", "benchmarks", "experiments", "scripts", "tests")
# The demo modules issue 55 found inside the package (task builders, the multi-turn data generator, the models we
# build): none may come back under any name inside it.
DEMO_MODULES = {
    "tasks.bfcl",
    "tasks.catalog",
    "tasks.mapping",
    "tasks.synthetic",
    "tasks.smollm2",
    "tasks.tiny_model",
    "tasks.multiturn",
}
# Copying the checkout for the install leaves out what is not source.
NOT_SOURCE = shutil.ignore_patterns(
    ".git", ".venv*", "outputs", "build", "*.egg-info", "__pycache__", ".pytest_cache", ".ruff_cache", ".hypothesis"
)


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """`pip install --no-deps --target` of a copy of the checkout (so the build leaves nothing in it): the folder."""
    source = tmp_path_factory.mktemp("source") / "grpo-tools"
    shutil.copytree(ROOT, source, ignore=NOT_SOURCE)
    target = tmp_path_factory.mktemp("installed")
    pip = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation", "--no-compile"]
    subprocess.run(
        [*pip, "--target", str(target), str(source)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    return target


def _modules(folder: Path, package: str) -> dict[str, Path]:
    """Every module under `folder` (the folder of `package`), by dotted name."""
    names = {}
    for path in sorted(folder.rglob("*.py")):
        parts = path.relative_to(folder).with_suffix("").parts
        names[".".join((package, *parts)).removesuffix(".__init__")] = path
    return names


def _public_definitions(path: Path) -> dict[str, str]:
    """The public functions and classes a module defines at its top level, each with its syntax tree (as text): two
    definitions are the same when name and tree are."""
    tree = ast.parse(path.read_text())
    return {
        node.name: ast.dump(node)
        for node in tree.body
        if isinstance(node, ast.FunctionDef | ast.ClassDef) and not node.name.startswith("_") and node.name != "main"
    }


def _imported_roots(path: Path) -> set[str]:
    """The top-level names of every module a file imports, absolute imports only (the library uses no other kind to
    reach outside itself)."""
    roots = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            roots |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
    return roots


def test_installed_package_holds_only_library_modules(installed):
    packages = sorted(path.name for path in installed.iterdir() if not path.name.endswith(".dist-info"))
    assert [name for name in packages if name not in ("bin", "grpo_tools")] == [], "installed beside grpo_tools"
    modules = _modules(installed / "grpo_tools", "grpo_tools")
    assert "grpo_tools.cli" in modules and "grpo_tools.rewards" in modules
    assert sorted(DEMO_MODULES & modules.keys()) == [], "demo modules inside the installed package"
    lab_definitions = {
        definition: str(path.relative_to(ROOT))
        for folder in LAB
        if (ROOT / folder).is_dir()
        for path in (ROOT / folder).rglob("*.py")
        for definition in _public_definitions(path).items()
    }
    copies = {
        f"{module}.{name}": lab_definitions[name, tree]
        for module, path in modules.items()
        for name, tree in _public_definitions(path).items()
        if (name, tree) in lab_definitions
    }
    assert copies == {}, "the library defines what a lab module defines (a copy left behind, or a lab module moved in)"
    leaning = {
        module: sorted(roots & set(LAB))
        for module, path in modules.items()
        if (roots := _imported_roots(path)) & set(LAB)
    }
    assert leaning == {}, "the library imports from the folders beside it"


def _run_installed(installed: Path, cwd: Path, *args: str, timeout: int = 120) -> subprocess.CompletedProcess:
    """`grpo-tools ARGS` from the install: `python -S` skips the site folder and its `.pth` files (the checkout's
    editable install among them), and the path holds only the install and the dependencies' site folder."""
    site_packages = next(Path(p) for p in sys.path if p.endswith("site-packages") and Path(p).is_dir())
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(installed), str(site_packages)]), "HF_HUB_OFFLINE": "1"}
    command = [sys.executable, "-S", str(installed / "bin" / "grpo-tools"), *args]
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def test_grpo_tools_runs_from_the_install_outside_the_checkout(installed, tiny_model_dir, tmp_path):
    where = _run_installed(installed, tmp_path, "--help")
    assert where.returncode == 0, where.stderr
    for command in ("train", "score", "check-data", "convert", "eval", "plot", "push"):
        assert command in where.stdout
    site_packages = next(Path(p) for p in sys.path if p.endswith("site-packages") and Path(p).is_dir())
    located = subprocess.run(
        [
            sys.executable,
            "-S",
            "-c",
            "import grpo_tools, json, sys; print(grpo_tools.__file__); print(json.dumps(sys.path))",
        ],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(installed), str(site_packages)])},
        capture_output=True,
        text=True,
        check=True,
    )
    assert located.stdout.startswith(str(installed / "grpo_tools")), located.stdout
    # The checkout's root would make its lab folders importable (its .venv, in CI, may hold the dependencies).
    path = [Path(entry or tmp_path).resolve() for entry in json.loads(located.stdout.splitlines()[1])]
    assert ROOT.resolve() not in path, "the checkout is on the path"

    rows = [json.loads(line) for line in (ROOT / "data" / "tool_calls_train.jsonl").read_text().splitlines()[:16]]
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    gold = rows[0]["answers"][0]
    predictions = tmp_path / "predictions.jsonl"
    predictions.write_text(
        json.dumps({"id": rows[0]["id"], "completion": f"<tool_call>{json.dumps(gold)}</tool_call>"}) + "\n"
    )
    scored = _run_installed(
        installed, tmp_path, "score", "--data", str(data), "--predictions", str(predictions), "--scorer", "exact",
        "--output", "report.json", "--quiet",
    )  # fmt: skip
    assert scored.returncode == 0, scored.stderr
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["rows"]["scored"] == 1 and report["rows"]["missing_prediction"] == len(rows) - 1
    assert report["accuracy"] == pytest.approx(1 / len(rows))

    recipe = {
        "model_name_or_path": tiny_model_dir,
        "dataset_name": str(data),
        "use_peft": True,
        "lora_r": 4,
        "lora_alpha": 8,
        "lora_target_modules": "all-linear",
        "reward_funcs": ["tool_format", "tool_exact"],
        "num_generations": 4,
        "per_device_train_batch_size": 8,
        "max_completion_length": 8,
        "max_steps": 1,
        "use_cpu": True,
        "gradient_checkpointing": False,
        "output_dir": "run",
        "report_to": "none",
        "disable_tqdm": True,
        "seed": 0,
    }
    (tmp_path / "recipe.yaml").write_text(yaml.safe_dump(recipe))
    trained = _run_installed(installed, tmp_path, "train", "--config", "recipe.yaml", timeout=300)
    assert trained.returncode == 0, trained.stderr[-3000:]
    assert (tmp_path / "run" / "adapter_config.json").is_file()
