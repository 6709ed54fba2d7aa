"""The CPU tier (the ``cpu_tier`` marker): tests whose verdict is the same on
every machine (they compile for a fixed arch or into a fresh cache and launch
nothing). The CPU run judges them; ``--no-cpu-tier`` deselects them (the gate
passes it unless ``--cpu-tier``), and says so in the header and the report.
Which tests are of it: the sm80 compile tier that compiles for sm_80, and the
sm90 gate's own test files; never a test that launches."""

from __future__ import annotations

import importlib
import inspect
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch  # noqa: F401 - imported before the in-process runs (pytester's module snapshot must keep it)

from conformance import family_select
from conformance.plugin import CPU_TIER_LEFT_OUT
from properties.matrix import BACKWARD, COMPILE, MATRIX
from tests.toy_project import toy_project

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parents[1]
# The sm80 compile tier's families that compile for sm_80 whatever the live device (compile_distinct compiles for it).
CPU_TIER_FAMILIES = {
    "test_valid_cases_compile_for_sm80",
    "test_runtime_facts_mint_no_compile_cpu",
    "test_backward_cases_compile_for_sm80",
    "test_backward_runtime_facts_mint_no_compile_cpu",
}
GATE_TESTS = [t for name in family_select.FAMILY_NAMES for t in family_select.GATE_TESTS[name]]

TIER_MODULE = """
import pytest

pytestmark = pytest.mark.cpu_tier

def test_module_marked_a():
    pass

def test_module_marked_b():
    pass
"""
OTHERS = """
import pytest

@pytest.mark.cpu_tier
def test_marked():
    pass

@pytest.mark.gpu
def test_launches():
    pass

def test_the_suites_own():
    pass
"""
ALL = {"test_module_marked_a", "test_module_marked_b", "test_marked", "test_launches", "test_the_suites_own"}


@pytest.fixture
def project(pytester, monkeypatch):
    yield from toy_project(pytester, monkeypatch, test_toy_tier_module=TIER_MODULE, test_toy_tier_others=OTHERS)


def _ran(result) -> set:
    return {name for name in ALL if f"::{name} PASSED" in result.stdout.str()}


@pytest.mark.parametrize("left_out", [False, True])
def test_no_cpu_tier_deselects_exactly_the_marked_tests(project, left_out):
    result = project.runpytest("-p", "no:cacheprovider", "-p", "no:benchmark", "-v", *(["--no-cpu-tier"] if left_out else []))
    out = result.stdout.str()
    assert result.ret == 0, out[-2000:]
    assert _ran(result) == ({"test_launches", "test_the_suites_own"} if left_out else ALL)
    assert ("3 deselected" in out) == left_out and "skipped" not in out  # deselected, never skipped
    assert ("sdpa-conformance: cpu tier: " + CPU_TIER_LEFT_OUT in out) == left_out  # the header says so
    env = json.loads((project.path / "sdpa-report" / "report.json").read_text())["environment"]
    assert env["cpu_tier"] == (CPU_TIER_LEFT_OUT if left_out else "run here")  # and so does the report


def test_the_suites_cpu_tier_is_the_four_families_and_the_gate_tests(tmp_path):
    """A collection with --no-cpu-tier of the compile modules and the sm90 gate tests: the
    four families that compile for sm_80 and every gate test are gone, the rest of the
    compile tier (compile_distinct, the GPU compile reuse) is still there."""
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--collect-only",
            "-q",
            "-p",
            "no:xdist",
            "--family=all",
            "--hypothesis-profile=ci",
            f"--report-dir={tmp_path}",
            "--no-cpu-tier",
            COMPILE,
            BACKWARD,
            *GATE_TESTS,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    collected = [line.strip() for line in r.stdout.splitlines() if "::" in line]
    kept = [nodeid for module in (COMPILE, BACKWARD) for f in MATRIX if f.module == module and f.test not in CPU_TIER_FAMILIES for nodeid in f.nodeids()]
    assert collected == kept, r.stdout[-2000:] + r.stderr[-2000:]
    assert any(n.startswith(f"{COMPILE}::test_runtime_facts_mint_no_compile[") for n in collected)
    assert any("_compiles_its_own_kernel[" in n for n in collected)


def test_no_test_that_needs_a_gpu_is_of_the_cpu_tier():
    """--no-cpu-tier can never leave out a launch: the families marked cpu_tier are
    the four compile ones (no gpu marker), and no test of the gate's own files
    asks for the gpu fixture or marker."""
    marked = {f.test for f in MATRIX if "cpu_tier" in f.marks}
    assert marked == CPU_TIER_FAMILIES
    assert all("gpu" not in f.marks and "compile" in f.marks for f in MATRIX if f.test in marked)
    for path in GATE_TESTS:
        module = importlib.import_module(path[:-3].replace("/", "."))
        marks = module.pytestmark if isinstance(module.pytestmark, list) else [module.pytestmark]
        assert "cpu_tier" in {m.name for m in marks}, path
        for name, fn in inspect.getmembers(module, inspect.isfunction):
            if name.startswith("test_"):
                own = {m.name for m in getattr(fn, "pytestmark", [])}
                uses = {a for m in getattr(fn, "pytestmark", []) if m.name == "usefixtures" for a in m.args}
                assert "gpu" not in inspect.signature(fn).parameters and "gpu" not in own | uses, f"{path}::{name}"
