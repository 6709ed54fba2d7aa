"""The import structure: pyproject.toml's [tool.importlinter] layers hold
(ground <- kernels | reference | strategies <- properties <- reports <-
conformance), no module imports back into a cycle, and both checks fail on
a planted back-edge / a planted cycle (so they can fail at all)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("conformance", "reports", "properties", "kernels", "strategies", "reference", "ground")


def _lint(root: Path) -> subprocess.CompletedProcess:
    # lint-imports resolves the root packages on sys.path: point it at ``root`` alone.
    code = "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"
    return subprocess.run(
        [sys.executable, "-c", code, "--no-cache"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
        env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"},
    )


def _cycles(root: Path) -> list:
    """The import cycles among the suite's modules (every import that runs, inside functions too;
    not those under ``if TYPE_CHECKING:``, which only annotations read),
    as sorted module lists: the strongly connected components of more than one module."""
    code = f"""
import grimp, json, sys
sys.setrecursionlimit(100000)
g = grimp.build_graph(*{PACKAGES!r}, cache_dir=None, exclude_type_checking_imports=True)
index, low, stack, on, out = {{}}, {{}}, [], set(), []
def visit(v):
    index[v] = low[v] = len(index); stack.append(v); on.add(v)
    for w in g.find_modules_directly_imported_by(v):
        if w not in index:
            visit(w); low[v] = min(low[v], low[w])
        elif w in on:
            low[v] = min(low[v], index[w])
    if low[v] == index[v]:
        comp = []
        while True:
            w = stack.pop(); on.discard(w); comp.append(w)
            if w == v: break
        if len(comp) > 1: out.append(sorted(comp))
for m in sorted(g.modules):
    if m not in index: visit(m)
print(json.dumps(out))
"""
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=300, env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"}
    )
    assert done.returncode == 0, done.stderr[-2000:]
    import json

    return json.loads(done.stdout)


def _copy(tmp_path: Path) -> Path:
    for name in PACKAGES + ("tests",):
        shutil.copytree(ROOT / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def _plant(path: Path, line: str) -> None:
    path.write_text(path.read_text() + f"\n{line}  # planted\n")


def test_import_layers_hold():
    pytest.importorskip("importlinter", reason="import-linter is a dependency of the suite (pip install -e .)")
    done = _lint(ROOT)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout


def test_a_planted_back_edge_breaks_the_layers(tmp_path):
    pytest.importorskip("importlinter", reason="import-linter is a dependency of the suite (pip install -e .)")
    root = _copy(tmp_path)
    _plant(root / "ground" / "case.py", "from properties import judge")
    done = _lint(root)
    assert done.returncode != 0 and "BROKEN" in done.stdout, done.stdout[-3000:]
    assert "ground.case -> properties.judge" in done.stdout


def test_no_import_cycles():
    pytest.importorskip("grimp", reason="grimp comes with import-linter, a dependency of the suite")
    assert _cycles(ROOT) == []


def test_a_planted_cycle_is_found(tmp_path):
    pytest.importorskip("grimp", reason="grimp comes with import-linter, a dependency of the suite")
    root = _copy(tmp_path)
    _plant(root / "kernels" / "base.py", "import kernels.prepared")  # prepared imports base: a cycle inside one layer
    assert ["kernels.base", "kernels.prepared"] in [[m for m in c if m in ("kernels.base", "kernels.prepared")] for c in _cycles(root)]
