"""The maintenance scripts in tools/ (most need a GPU to run) at least name
only what the project still has: every import of one of our packages in
them resolves on the CPU. A GPU-only script is otherwise never imported by
the CPU test command, and a rename in the ground would first show up on a
GPU runner."""

from __future__ import annotations

import ast
import importlib
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
OURS = ("ground", "kernels", "properties", "reference", "strategies", "conformance", "reports")
TOOLS = sorted((ROOT / "tools").glob("*.py"))


def tool_module(name: str):
    """tools/<name>.py imported as a module (tools/ is no package: on the path for the import only)."""
    import sys

    sys.path.insert(0, str(ROOT / "tools"))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(ROOT / "tools"))


def unresolved(source: str) -> list:
    """(module, name) pairs of ``source``'s imports from our packages that do not resolve."""
    missing = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            targets = [(a.name, None) for a in node.names if a.name.split(".")[0] in OURS]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and node.module.split(".")[0] in OURS:
            targets = [(node.module, a.name) for a in node.names]
        else:
            continue
        for module, name in targets:
            try:
                mod = importlib.import_module(module)
            except ImportError:
                missing.append((module, name))
                continue
            if name is not None and name != "*" and not hasattr(mod, name):
                try:
                    importlib.import_module(f"{module}.{name}")
                except ImportError:
                    missing.append((module, name))
    return missing


def test_there_are_tools_to_check():
    assert TOOLS, "tools/ holds no scripts: drop this test with the folder"


@pytest.mark.parametrize("path", TOOLS, ids=lambda p: p.name)
def test_a_tool_imports_only_what_the_project_has(path):
    assert unresolved(path.read_text()) == []


def test_a_planted_stale_import_is_found():
    planted = "from ground.case import Case, no_such_name\nimport kernels.no_such_module\nfrom os import path\n"
    assert unresolved(planted) == [("ground.case", "no_such_name"), ("kernels.no_such_module", None)]


def test_the_standin_run_passes_a_stratum_through_the_plugin_and_report(tmp_path):
    """tools/standin_run.py: the conformance tests of both families on the honest stand-ins, in one process, pass and leave a report
    that counts their examples, with no known finding read (the stand-in is no real kernel)."""
    import json
    import subprocess
    import sys

    report = tmp_path / "report"
    cmd = [sys.executable, "tools/standin_run.py", "-n", "0", "--profile", "dev", "-k", "(test_tails_dense and gptoss-fp16) or test_sm90_tails_dense"]
    cmd.append(f"--report-dir={report}")
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    summary = json.loads((report / "report.json").read_text())
    assert summary["run"]["examples"] > 0 and summary["properties"]["tails"]["passed"] == summary["run"]["examples"]
    assert set(summary["run"]["examples_by_family"]) == {"sm80", "sm90"}
    assert summary["findings"]["entries"] == []


def test_count_model_ops_counts_the_judging_of_each_judged_test(capsys):
    """tools/count_model_ops.py --judging: one row per numerics and tails test;
    each example's judging reads the device in the fewest syncs it needs
    (numerics: the error ratios, then the deferred verdicts; tails: the
    verdicts)."""

    tool = tool_module("count_model_ops")
    assert tool.main(["--judging", "--examples", "1"]) == 0
    rows = [line.split("|")[1].strip() for line in capsys.readouterr().out.splitlines() if line.startswith("| test_")]
    assert sorted(rows) == sorted(tool.JUDGED)
    for name, cases in tool.judging_cases_of(3).items():
        for case in cases:
            k = tool.count_judging(name, case, False)
            assert k.ops > 0 and k.syncs <= (2 if "numerics" in name else 1), (name, case.describe(), k.ops, k.syncs)


def test_count_model_ops_counts_the_bytes_each_launching_op_writes():
    """tools/count_model_ops.py's OpCount: a launching op's outputs are its
    bytes written (an add of 100 float64 values: 800); a view writes none."""

    import torch

    tool = tool_module("count_model_ops")
    x = torch.zeros(100, dtype=torch.float64)
    with tool.OpCount() as k:
        x.view(10, 10)
        x + 1
    assert (k.ops, k.syncs, k.written) == (1, 0, 800)


def test_store_durations_keeps_the_tests_that_ran(tmp_path):
    """tools/store_durations.py reads a run's shards as the report does: each test that ran, by node id."""
    import json

    store_durations = tool_module("store_durations")
    shard = tmp_path / "shards" / "run-a" / "gw0.jsonl"
    shard.parent.mkdir(parents=True)
    records = [
        {"kind": "test", "nodeid": "conformance/test_x.py::test_a", "outcome": "passed", "duration": 12.34},
        {"kind": "test", "nodeid": "conformance/test_x.py::test_b", "outcome": "skipped", "duration": 0.01},
        {"kind": "obs", "property": "numerics", "case": {}},
    ]
    shard.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    assert store_durations.measured(tmp_path) == {"conformance/test_x.py::test_a": 12.3}


def test_screen_backward_judges_a_profiles_draws_and_reports_a_wrong_backward(monkeypatch):
    """tools/screen_backward.py: the first ci THD backward draws pass on the
    emulated backward; with the mask off when P is recomputed (a planted bug)
    those the mask reaches are reported as failures, not passed."""
    import functools

    from tests import kernel_emulation

    tool = tool_module("screen_backward")
    job = dict(profile="ci", test="test_backward_thd", first=8, every=1, part=0, parts=2)  # draws 0, 2, 4, 6
    clean = tool._judge(job)
    assert clean["judged"] >= 2 and not clean["failures"] and clean["worst"], clean
    broken = functools.partial(kernel_emulation.EmulatedBackward, bwd=kernel_emulation.BwdPlant(mask_off=True))
    monkeypatch.setattr(kernel_emulation, "EmulatedBackward", broken)
    failed = tool._judge(job)["failures"]
    assert failed and all("mask=" in f and "mask=none" not in f.split(":")[0] for f in failed), failed
