"""The code is formatted and lint-clean (ruff, configured in pyproject.toml):
the test command runs both, so unformatted code fails CI like a failing test."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "pyproject.toml"


def _ruff(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ruff", *args], cwd=cwd, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module", autouse=True)
def _ruff_installed():
    if _ruff("--version").returncode != 0:
        pytest.fail("ruff is not installed: it is a dependency of the suite (pip install -e .)")


def test_the_project_is_formatted():
    done = _ruff("format", "--check", ".")
    assert done.returncode == 0, f"run `ruff format .`:\n{done.stdout}{done.stderr}"


def test_the_project_is_lint_clean():
    done = _ruff("check", ".")
    assert done.returncode == 0, f"run `ruff check .`:\n{done.stdout}{done.stderr}"


def test_both_checks_fail_on_planted_code(tmp_path):
    """Their power: a misformatted file and an unused import, under the project's config."""
    (tmp_path / "planted.py").write_text("import os\nx = {  'a':1 }\n")
    assert _ruff("format", "--check", "--config", str(CONFIG), ".", cwd=tmp_path).returncode == 1
    done = _ruff("check", "--config", str(CONFIG), ".", cwd=tmp_path)
    assert done.returncode == 1 and "F401" in done.stdout
