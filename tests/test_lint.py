"""The code passes `ruff check` with the project's configuration ([tool.ruff] in pyproject.toml).

CI also runs `ruff check .` before the tests; this test makes the README's one test
command cover the lint too.
"""

import pathlib
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_ruff_check_passes():
    ruff = shutil.which("ruff")
    if ruff is None:
        try:
            import ruff as _ruff  # noqa: F401
        except ImportError:
            pytest.skip("ruff is not installed (pip install -r requirements-dev.txt)")
        command = [sys.executable, "-m", "ruff"]
    else:
        command = [ruff]
    result = subprocess.run([*command, "check", "--no-cache", "."], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, f"ruff check found problems:\n{result.stdout}{result.stderr}"
