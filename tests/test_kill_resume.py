"""``mutants --resume`` (conformance.kill.resume): a catalogue run over several
time-limited calls. Each record is written to REPORT_DIR/mutants.partial.json
as it is made; a call with --resume and the same options keeps the records
that hold a verdict and runs the rest. On the CPU: the kernels' searches are
stood in for (``run_all`` replaced), the machine is a stub GPU."""

from __future__ import annotations

import json
import signal

import pytest

from conformance.kill import catalogue as C
from conformance.kill import cli as CLI
from conformance.kill import kinds as K
from conformance.kill import processes as P
from conformance.kill import resume as RS
from conformance.kill import search as S
from kernels.mutants import MUTANTS
from tests.test_kill_verdicts import stub_gpu

THREE = [m.name for m in MUTANTS[:3]]


def _record(m, verdict: str) -> dict:
    return S.base_record(m) | {"verdict": verdict, "wall_s": 1.0}


@pytest.fixture
def machine(monkeypatch):
    """A stub SM 8.0 GPU for main(), and ``run_all`` replaced: it makes each
    record from ``verdicts`` (name -> verdict, "control" survives), stopping
    (as a call cut by its time limit) at a name in ``cut``."""
    stub_gpu(monkeypatch)
    state = {"verdicts": {}, "cut": set(), "cut_at": 0, "ran": [], "handed": {}}

    def run_all(mutants, opts, jobs, progress=print, on_record=None, done_units=None, on_unit=None):
        out = []
        for m in mutants:
            handed = (done_units or {}).get(m.name, {})
            state["handed"][m.name] = sorted(handed)
            for i in range(len(P.mutant_units(m, opts))):
                if m.name in state["cut"] and i == state["cut_at"]:
                    raise KeyboardInterrupt(m.name)
                if i not in handed:
                    on_unit(m.name, i, {"cut": False, "failure": None, "examples": 1})
            state["ran"].append(m.name)
            rec = _record(m, state["verdicts"].get(m.name, "survived"))
            on_record(rec)
            out.append(rec)
        return out

    monkeypatch.setattr(CLI, "run_all", run_all)
    before = signal.getsignal(signal.SIGTERM)
    yield state
    signal.signal(signal.SIGTERM, before)  # main() installs its own


def _main(tmp_path, *extra):
    return CLI.main(CLI.parser().parse_args(["--only", ",".join(THREE), "--jobs", "4", "--report-dir", str(tmp_path), *extra]))


def test_a_cut_run_resumes_where_it_stopped(machine, tmp_path, capsys):
    machine["verdicts"] = {THREE[0]: "killed", THREE[1]: "incomplete", THREE[2]: "killed"}
    machine["cut"] = {THREE[2]}
    assert _main(tmp_path) == 130  # interrupted: no traceback, the exit status of a Ctrl-C
    err = capsys.readouterr().err
    assert f"interrupted ({THREE[2]}): 3 of 4 records kept in {tmp_path / RS.PARTIAL}" in err and "with --resume go on" in err
    assert signal.getsignal(signal.SIGTERM) is CLI._interrupted  # a time limit's SIGTERM ends it the same way
    partial = json.loads((tmp_path / RS.PARTIAL).read_text())
    assert list(partial["records"]) == ["control", THREE[0], THREE[1]] and not (tmp_path / "mutants.json").exists()
    machine["cut"], machine["ran"] = set(), []
    machine["verdicts"][THREE[1]] = "killed"
    assert _main(tmp_path, "--resume") == 0
    # the control and the killed mutant kept; the incomplete one searched again, with the one never reached
    assert machine["ran"] == [THREE[1], THREE[2]]
    doc = json.loads((tmp_path / "mutants.json").read_text())
    assert [r["name"] for r in doc["mutants"]] == THREE and [r.get("resumed", False) for r in doc["mutants"]] == [True, False, False]
    assert doc["control"]["resumed"] and doc["run"]["resumed"] == 2 and doc["tally"]["killed"] == 3
    assert "resumed: 2 records kept" in capsys.readouterr().out
    assert "resumed: 2 records from earlier calls" in (tmp_path / "mutants.md").read_text()


@pytest.mark.parametrize(
    "extra,field",
    [
        (("--jobs", "16"), "jobs"),
        (("--examples-scale", "2"), "examples_scale"),
        (("--profile", "pr"), "profile"),
        (("--properties", "numerics_dense"), "kinds"),
        (("--max-shrinks", "5"), "max_shrinks"),
        (("--hang-s", "120"), "hang_s"),
    ],
)
def test_resume_refuses_a_partial_report_of_other_options(machine, tmp_path, capsys, extra, field):
    machine["verdicts"] = dict.fromkeys(THREE, "killed")
    assert _main(tmp_path) == 0
    args = ["--only", ",".join(THREE), "--jobs", "4", "--report-dir", str(tmp_path), "--resume", *extra]
    assert CLI.main(CLI.parser().parse_args(args)) == 2
    assert f"was made with {field}=" in capsys.readouterr().err


def test_resume_without_a_partial_report_or_with_a_broken_one_exits_2(machine, tmp_path, capsys):
    assert _main(tmp_path, "--resume") == 2 and "--resume: no " in capsys.readouterr().err
    (tmp_path / RS.PARTIAL).write_text("{not json")
    assert _main(tmp_path, "--resume") == 2 and "is not a partial report" in capsys.readouterr().err


def test_kept_records_hold_a_verdict_of_the_mutant_as_it_is(tmp_path):
    run = {"profile": "ci", "jobs": 4}
    a, b, c, d = MUTANTS[:4]
    records = {
        a.name: _record(a, "killed"),
        b.name: _record(b, "harness_error"),
        c.name: _record(c, "error") | {"rewrites": "0" * 16},  # the catalogue's rewrites changed since
        d.name: _record(d, "stale"),
    }
    RS.write_partial(tmp_path / RS.PARTIAL, run, records, 12.5)
    kept, before, units = RS.resumed_records(tmp_path / RS.PARTIAL, run, [a, b, c, d])
    assert set(kept) == {a.name, d.name} and before == 12.5 and units == {}


def test_a_mutant_cut_mid_search_resumes_its_searches(machine, tmp_path, capsys):
    """A call cut inside a mutant's search (the control's long one) leaves
    the units it searched in the partial report; --resume hands them over
    (run_all searches only the others) and the record notes how many."""
    machine["verdicts"] = dict.fromkeys(THREE, "killed")
    machine["cut"], machine["cut_at"] = {"control"}, 5
    assert _main(tmp_path) == 130 and "0 of 4 records kept" in capsys.readouterr().err
    partial = json.loads((tmp_path / RS.PARTIAL).read_text())
    assert partial["records"] == {} and sorted(partial["units"]["control"]["done"], key=int) == ["0", "1", "2", "3", "4"]
    machine["cut"] = set()
    assert _main(tmp_path, "--resume") == 0
    assert machine["handed"]["control"] == [0, 1, 2, 3, 4] and "5 of their searches (units) done" in capsys.readouterr().out
    doc = json.loads((tmp_path / "mutants.json").read_text())
    assert doc["control"]["resumed_units"] == 5 and "resumed" not in doc["control"]
    # a unit whose place in the search plan now holds another kind and stratum is searched again
    opts = {"kinds": K.KIND_NAMES, "profile": "ci", "explicit": False}
    assert RS.unit_label(P.mutant_units(C.CONTROL, opts)[0]) == partial["units"]["control"]["done"]["0"]["unit"]
    partial["units"]["control"]["done"]["0"]["unit"] = ["tails_dense", None]
    (tmp_path / RS.PARTIAL).write_text(json.dumps(partial))
    _, _, units = RS.resumed_records(tmp_path / RS.PARTIAL, partial["run"], [C.CONTROL], opts)
    assert sorted(units["control"]) == [1, 2, 3, 4]


def test_the_hang_bound_reaches_the_workers_and_the_header(monkeypatch, tmp_path, capsys):
    """--hang-s is the bound each worker's watchdog gets (conformance.kill.worker reads opts["hang_s"]); the
    header names it when it is not the default."""
    stub_gpu(monkeypatch)
    seen = []

    def run_all(mutants, opts, jobs, progress=print, on_record=None, done_units=None, on_unit=None):
        seen.append(opts["hang_s"])
        return [_record(m, "survived") for m in mutants]

    monkeypatch.setattr(CLI, "run_all", run_all)
    before = signal.getsignal(signal.SIGTERM)
    try:
        _main(tmp_path, "--hang-s", "120")
        assert "hang bound 120 s" in capsys.readouterr().out
        _main(tmp_path)
        assert "hang bound" not in capsys.readouterr().out
    finally:
        signal.signal(signal.SIGTERM, before)
    assert seen == [120.0, P.HANG_S]
