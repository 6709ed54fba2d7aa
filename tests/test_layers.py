"""The import layers of pyproject.toml's [tool.importlinter] contract hold,
and the check fails on a planted back-edge (so it can fail at all)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("conformance", "kernels", "strategies", "reference", "reports", "tests")


def _lint(root: Path) -> subprocess.CompletedProcess:
    # lint-imports resolves the root packages on sys.path: point it at ``root`` alone.
    code = "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"
    return subprocess.run([sys.executable, "-c", code, "--no-cache"], cwd=root, capture_output=True, text=True, timeout=300,
                          env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"})  # fmt: skip


def test_import_layers_hold():
    pytest.importorskip("importlinter", reason="import-linter is a dependency of the suite (pip install -e .)")
    done = _lint(ROOT)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout


def test_a_planted_back_edge_breaks_the_layers(tmp_path):
    pytest.importorskip("importlinter", reason="import-linter is a dependency of the suite (pip install -e .)")
    for name in PACKAGES:
        shutil.copytree(ROOT / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    case = tmp_path / "conformance" / "ground" / "case.py"
    case.write_text(case.read_text() + "\nfrom conformance.properties import judge  # planted back-edge\n")
    done = _lint(tmp_path)
    assert done.returncode != 0 and "BROKEN" in done.stdout, done.stdout[-3000:]
    assert "conformance.ground.case -> conformance.properties.judge" in done.stdout
