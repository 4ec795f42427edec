"""Tests for scripts/check_module_size.py, the `make quality` check that no module under grpo_tools passes 400 lines:
it names each file over the limit and fails, passes a file at the limit, and passes the package as it is."""

import subprocess
import sys
from pathlib import Path


ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "check_module_size.py"


def check(*folders):
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, folders)], capture_output=True, text=True)


def test_a_module_over_the_limit_is_named_and_fails(tmp_path):
    (tmp_path / "part").mkdir()
    (tmp_path / "part" / "long.py").write_text("x = 1\n" * 401)
    (tmp_path / "short.py").write_text("x = 1\n" * 400)
    result = check(tmp_path)
    assert result.returncode == 1
    assert f"{tmp_path / 'part' / 'long.py'}: 401 lines" in result.stderr
    assert "short.py" not in result.stderr


def test_the_package_is_within_the_limit():
    result = check(ROOT / "grpo_tools")
    assert result.returncode == 0, result.stderr
