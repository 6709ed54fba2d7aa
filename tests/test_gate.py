"""``sdpa-conformance gate``: its pytest command lines, its per-run summary, and no GPU."""

from __future__ import annotations

import argparse

import pytest

from conformance import gate


def _args(*argv):
    p = argparse.ArgumentParser()
    gate.add_arguments(p)
    return p.parse_args(list(argv))


def test_command_carries_every_option_to_pytest(tmp_path):
    args = _args(
        "--adapter",
        "wrapper",
        "--sm80-compat",
        "--profile",
        "dev",
        "--runs",
        "2",
        "--workers",
        "16",
        "--report-dir",
        str(tmp_path),
        "--junitxml",
        "gate.xml",
        "--",
        "-k",
        "numerics",
    )
    cmd = gate.command(args, 2, "/tmp/cache")
    assert cmd[1:5] == ["-m", "pytest", "-n", "16"]
    assert "--adapter=wrapper" in cmd and "--sm80-compat" in cmd and "--hypothesis-profile=dev" in cmd
    assert f"--report-dir={tmp_path.resolve() / 'run-2'}" in cmd and "--compile-cache=/tmp/cache" in cmd
    assert any(c.startswith("--junitxml=") and c.endswith("gate-2.xml") for c in cmd)
    assert cmd[-2:] == ["-k", "numerics"]


def test_the_cpu_tier_is_left_out_unless_asked_for():
    """The CPU run judges the cpu_tier tests: the gate deselects them (--no-cpu-tier) unless --cpu-tier."""
    assert "--no-cpu-tier" in gate.command(_args(), 1, None)
    assert "--no-cpu-tier" not in gate.command(_args("--cpu-tier"), 1, None)


def test_one_run_keeps_the_junit_name():
    assert gate._junit("out/gate.xml", 1, 1) == "out/gate.xml" and gate._junit("gate", 3, 4) == "gate-3"


REPORT = {
    "tests": {"passed": 320, "failed": 1, "skipped": 22, "total": 343},
    "run": {"examples": 8000, "wall_seconds": 200.0, "examples_per_minute": 2400.0},
    "compile": {
        "compiles": 600,
        "compiled_keys": 500,
        "artifacts": 540,
        "unkeyed_compiles": 20,
        "repeat_compiles": 20,
        "repeats": {"by_class": {"several workers": 15, "one worker": 5}},
        "deliberate": {"compiles": 20},
        "hits": 900,
        "floor": {"seconds": 112.0, "ratio": 1.79, "artifacts": 560},
        "keys_floor": {"seconds": 100.0, "ratio": 2.0},
    },
    "properties": {"numerics": {"ratios_by_dtype": {"o fp16": {"p99": 0.91, "max": 0.99, "count": 1200}}}},
    "findings": {"entries": [{"id": "a", "status": "reproduced"}, {"id": "b", "status": "stale"}], "stale": ["b"]},
    "skips": [{"reason": "needs a GPU", "count": 20, "tests": []}, {"reason": "large tier", "count": 2, "tests": []}],
}


def test_summary_names_counts_floor_ratios_and_findings():
    text = "\n".join(gate.summarize(REPORT, 1))
    assert "320 passed, 1 failed, 22 skipped" in text and "8000 examples in 200 s (2400/min)" in text
    assert "compiles 600: 540 artifacts of 500 keys, 20 of examples naming no key, 20 repeats (15 races, 5 memos lost), 20 deliberate" in text
    assert "compile floor 112 s, wall / floor 1.79 (560 artifacts); keys floor 100 s, wall / floor 2.00" in text
    assert "numerics error/bound o fp16: p99 0.910 max 0.990 (1200 examples)" in text
    assert "1 reproduced, 1 stale; stale: b" in text
    assert "  skipped 20: needs a GPU\n  skipped 2: large tier" in text


def test_no_gpu_is_a_usage_error(monkeypatch, capsys):
    monkeypatch.setattr(gate, "_has_gpu", lambda: False)
    assert gate.run(_args()) == 2
    assert "no CUDA GPU" in capsys.readouterr().err


def test_runs_must_be_positive(capsys):
    assert gate.run(_args("--runs", "0")) == 2


@pytest.mark.parametrize("bad", [["--profile", "weekly"], ["--adapter", "other"]])
def test_unknown_choices_exit_2(bad):
    with pytest.raises(SystemExit) as e:
        _args(*bad)
    assert e.value.code == 2


def test_summary_splits_examples_and_ratios_by_family():
    report = {
        **REPORT,
        "run": {**REPORT["run"], "examples_by_family": {"sm80": 7600, "sm90": 400}},
        "properties": {
            "numerics": {"ratios_by_dtype": {"o fp16": {"p99": 0.91, "max": 0.99, "count": 1200}, "o fp16 sm90": {"p99": 0.5, "max": 0.6, "count": 80}}}
        },
    }
    text = "\n".join(gate.summarize(report, 1))
    assert "8000 examples (7600 sm80, 400 sm90) in 200 s" in text
    assert "numerics error/bound o fp16 sm90: p99 0.500 max 0.600 (80 examples)" in text


def test_summary_names_each_familys_pair_share():
    fwd = {"feasible": 100, "drawn": 99, "share": 0.99, "layouts": {}}
    cov = {"pairs": {"fwd": fwd, "bwd": {**fwd, "share": 0.5}}, "family_pairs": {"sm90": {"fwd": {**fwd, "share": 0.98}, "bwd": {"share": None}}}}
    text = "\n".join(gate.summarize({**REPORT, "coverage": cov}, 1))
    assert "pairs drawn: sm80 fwd 99.0%, sm80 bwd 50.0%, sm90 fwd 98.0%" in text


def test_runs_the_deadline_leaves_unstarted_fail_the_gate(monkeypatch, capsys, tmp_path):
    """Fewer runs than asked for is no pass: a deadline that leaves a run
    unstarted exits 1 and says how many ran (here none, and no pytest starts)."""
    started = []
    monkeypatch.setattr(gate, "_has_gpu", lambda: True)
    monkeypatch.setattr(gate.subprocess, "run", lambda *a, **k: started.append(a))
    assert gate.run(_args("--runs", "3", "--deadline", "30", "--report-dir", str(tmp_path))) == 1
    assert not started and "0 of 3 run(s) ran before --deadline" in capsys.readouterr().out


def test_the_last_line_is_the_gates_verdict(monkeypatch, capsys, tmp_path):
    """Three runs, the second red: the gate ends with one line naming it, and exits with its status."""
    rcs = iter([0, 1, 0])

    class Done:
        def __init__(self, cmd):
            self.returncode = next(rcs) if "pytest" in cmd else 0

    monkeypatch.setattr(gate, "_has_gpu", lambda: True)
    monkeypatch.setattr(gate.subprocess, "run", lambda cmd, **k: Done(cmd))
    assert gate.run(_args("--runs", "3", "--report-dir", str(tmp_path))) == 1
    assert capsys.readouterr().out.rstrip().splitlines()[-1] == "gate: red: run 2 failed; 2 of 3 run(s) passed (exit status 1)"
    rcs = iter([0])
    assert gate.run(_args("--report-dir", str(tmp_path))) == 0
    assert capsys.readouterr().out.rstrip().splitlines()[-1] == "gate: green; 1 of 1 run(s) passed (exit status 0)"


def test_a_cold_gate_names_its_fresh_cache_before_the_verdict(monkeypatch, capsys, tmp_path):
    """--cold compiles into a new directory inside --compile-cache DIR; DIR
    itself holds none of its kernels, so the gate prints the new path (the one
    a later warm gate must be given) and its runs used it."""

    class Done:
        returncode = 0

    seen = []
    monkeypatch.setattr(gate, "_has_gpu", lambda: True)
    monkeypatch.setattr(gate.subprocess, "run", lambda cmd, **k: seen.append(cmd) or Done())
    parent = tmp_path / "cc"
    assert gate.run(_args("--cold", "--compile-cache", str(parent), "--report-dir", str(tmp_path))) == 0
    lines = capsys.readouterr().out.rstrip().splitlines()
    fresh = list(parent.iterdir())
    assert len(fresh) == 1 and fresh[0].name.startswith("compile-cache-")
    assert f"--compile-cache={fresh[0]}" in seen[0]
    assert lines[-2] == f"compiled cache: {fresh[0]} (a later gate with --compile-cache {fresh[0]} runs warm on it)"
    gate.run(_args("--compile-cache", str(parent), "--report-dir", str(tmp_path)))
    assert not any(line.startswith("compiled cache:") for line in capsys.readouterr().out.splitlines())
