"""tools/compare_catalogues.py: two kill-rate runs' verdicts side by side."""

import gzip
import json
import subprocess
import sys
from pathlib import Path

TOOL = Path(__file__).resolve().parents[1] / "tools" / "compare_catalogues.py"


def _record(name, verdict, killer=None, examples=1, planned=160):
    kinds = [{"name": killer or "numerics_dense", "examples": examples, "planned": planned}]
    return {"name": name, "verdict": verdict, "killed_by": killer, "kinds": kinds}


def _write(path: Path, recs, gz=False):
    doc = json.dumps({"run": {}, "records": {r["name"]: r for r in recs}}).encode()
    path.write_bytes(gzip.compress(doc) if gz else doc)
    return str(path)


def _compare(*args):
    return subprocess.run([sys.executable, str(TOOL), *args], capture_output=True, text=True, timeout=120)


def test_same_verdicts_pass_and_examples_are_reported(tmp_path):
    a = _write(tmp_path / "a.json.gz", [_record("m1", "killed", "backward_dense", 1), _record("m2", "error", "numerics_thd", 3)], gz=True)
    b = _write(tmp_path / "b.json", [_record("m1", "killed", "backward_dense", 9), _record("m2", "error", "numerics_thd", 3)])
    done = _compare(a, b, "--table")
    assert done.returncode == 0, done.stderr
    assert "2 records in both" in done.stdout and "examples differ m1: A backward_dense 1/160; B backward_dense 9/160" in done.stdout
    assert "| `m1` | killed: backward_dense 1/160 | killed: backward_dense 9/160 |" in done.stdout


def test_a_different_killer_fails_and_extra_reports_fill_missing_records(tmp_path):
    a = _write(tmp_path / "a.json", [_record("m1", "killed", "backward_dense"), _record("m2", "killed", "numerics_dense")])
    b = _write(tmp_path / "b.json", [_record("m1", "killed", "backward_thd")])
    extra = _write(tmp_path / "only-m2.json", [_record("control", "survived"), _record("m2", "killed", "numerics_dense")])
    done = _compare(a, b, "--extra", extra)
    assert done.returncode == 1
    assert "DIFFERENT VERDICT m1" in done.stdout and "filled: m2 (B from only-m2.json)" in done.stdout


def test_extra_a_and_extra_b_fill_only_their_own_side(tmp_path):
    a = _write(tmp_path / "a.json", [_record("m1", "killed", "backward_dense")])
    b = _write(tmp_path / "b.json", [_record("m1", "killed", "backward_dense")])
    only_a = _write(tmp_path / "m2-a.json", [_record("m2", "killed", "numerics_dense")])
    only_b = _write(tmp_path / "m2-b.json", [_record("m2", "killed", "numerics_thd")])
    done = _compare(a, b, "--extra-a", only_a, "--extra-b", only_b)
    assert done.returncode == 1  # each side kept its own run's record, so the killers differ
    assert "filled: m2 (A from m2-a.json, B from m2-b.json)" in done.stdout
    assert "DIFFERENT VERDICT m2" in done.stdout


def test_an_unreadable_report_exits_2(tmp_path):
    (tmp_path / "bad.json").write_text("{")
    done = _compare(str(tmp_path / "bad.json"), str(tmp_path / "missing.json"))
    assert done.returncode == 2 and "cannot read a report" in done.stderr
