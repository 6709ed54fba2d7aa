"""Bad input to ``sdpa-conformance repro`` and ``report``: a malformed case
file, shard or option is a one-line usage error (exit 2) naming what is
wrong, never a traceback, and never a kernel failure or a verdict."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import reference  # noqa: F401 - imported once here: a bad $SDPA_PLANT_REFERENCE_BUG is then checked, not re-imported
from conformance import cli
from ground.case import Case

CASE = Case(s_q=5, s_kv=7, h_q=2, h_kv=1, seed=11)


def _doc(**change) -> dict:
    return {"schema": 1, "case": CASE.to_dict(), "property": "numerics", "mode": "sm80 code on sm_90", "gpu": "NVIDIA H200", "needs_gpu": True} | change


def _file(tmp_path, data, name="case.json") -> str:
    path = tmp_path / name
    path.write_bytes(data if isinstance(data, bytes) else json.dumps(data).encode())
    return str(path)


def _repro(argv, capsys):
    code = cli.main(["repro", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def _usage(argv, capsys, *needles):
    code, out, err = _repro(argv, capsys)
    assert code == 2 and err.startswith("sdpa-conformance repro: error: ") and err.count("\n") == 1, err
    assert "Traceback" not in out + err and "FAIL" not in out and "still fails" not in out
    for needle in needles:
        assert needle in err, err
    return err


# ------------------------------------------------------------ param values
@pytest.mark.parametrize(
    "prop, params, needle",
    [
        ("metamorphic", {"relation": "nope"}, "'params.relation': 'nope' is not one of batch_perm"),
        ("compile_distinct", {"fact": "nope"}, "'params.fact': 'nope' is not one of layout"),
        ("numerics", {"legacy": "yes"}, "'params.legacy': expected true/false, got 'yes'"),
        ("metamorphic", {"relation": 3}, "'params.relation': expected a string, got 3"),
        ("nope", {}, "'property': 'nope' is not one of numerics"),
    ],
)
def test_a_bad_param_value_is_named_before_the_gpu_check(tmp_path, capsys, prop, params, needle):
    """On a CPU machine too the real problem is named (the case needs a GPU):
    checked before the no-GPU refusal, and never launched as a kernel failure."""
    err = _usage([_file(tmp_path, _doc(property=prop, params=params))], capsys, needle)
    assert "no CUDA GPU" not in err


@pytest.mark.parametrize("seed", [-1, 2**63, 2**64])
def test_a_seed_out_of_range_is_refused_by_the_case_file(tmp_path, capsys, seed):
    _usage([_file(tmp_path, _doc(case=CASE.to_dict() | {"seed": seed}))], capsys, f"case field 'seed': expected 0 to 2**63 - 1, got {seed}")


def test_the_largest_seed_is_read(tmp_path):
    from ground.case import load_case_file

    case, _ = load_case_file(_file(tmp_path, _doc(case=CASE.to_dict() | {"seed": 2**63 - 1})))
    assert case.seed == 2**63 - 1


# -------------------------------------------------------- unreadable files
@pytest.mark.parametrize("hypothesis", ["x", [1], 3])
def test_a_hypothesis_field_that_is_no_object_exits_2(tmp_path, capsys, hypothesis):
    _usage([_file(tmp_path, _doc(hypothesis=hypothesis))], capsys, "case file field 'hypothesis': expected an object")


def test_a_case_file_that_is_not_utf8_exits_2(tmp_path, capsys):
    _usage([_file(tmp_path, b'{"schema": 1, "case": "\xff\xfe"}')], capsys, "cannot read it (not UTF-8 text: byte 0xff at offset 23)")


def test_a_directory_is_named_once(tmp_path, capsys):
    d = tmp_path / "adir.json"
    d.mkdir()
    err = _usage([str(d)], capsys, "cannot read it (")
    assert err.count(str(d)) == 1


def _begin(**change) -> dict:
    return {"kind": "begin", "test": "t.py::test_x", "property": "numerics", "case": CASE.to_dict(), "params": {}, "context": {}, "t": 1.0} | change


def _shard(tmp_path, *records, name="gw0-1.jsonl") -> str:
    path = tmp_path / name
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records))
    return str(path)


def test_a_shard_line_that_is_no_object_exits_2(tmp_path, capsys):
    path = _shard(tmp_path, "[1]")
    _usage([f"{path}:1"], capsys, "line 1: a JSON list, not a record (an object)")
    _usage([path], capsys, "no 'begin' record")  # skipped when searching for the last begin


def test_a_shard_context_that_is_no_object_exits_2(tmp_path, capsys):
    _usage([_shard(tmp_path, _begin(context=[1]))], capsys, "field 'context': expected an object")


def test_a_session_environment_that_is_no_object_exits_2(tmp_path, capsys):
    _shard(tmp_path, {"kind": "session", "environment": [1]}, name="main-2.jsonl")
    _usage([_shard(tmp_path, _begin())], capsys, "main-2.jsonl line 1: the session's field 'environment': expected an object")


def test_a_shard_seed_out_of_range_exits_2(tmp_path, capsys):
    _usage([_shard(tmp_path, _begin(case=CASE.to_dict() | {"seed": -1}))], capsys, "case field 'seed'")


def test_a_bad_param_in_a_shard_is_named_before_the_gpu_check(tmp_path, capsys):
    err = _usage([_shard(tmp_path, _begin(property="metamorphic", params={"relation": "nope"}))], capsys, "'params.relation'")
    assert "no CUDA GPU" not in err


def test_the_newline_ending_a_shard_starts_no_line(tmp_path, capsys):
    path = _shard(tmp_path, _begin())
    _usage([f"{path}:2"], capsys, "line 2: the shard has 1 line(s)")
    _usage([f"{path}:0"], capsys, "line 0: the shard has 1 line(s)")
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    _usage([f"{empty}:1"], capsys, "line 1: the shard has 0 line(s)")


def test_an_unknown_reference_plant_is_a_usage_error(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("SDPA_PLANT_REFERENCE_BUG", "nope")
    _usage([_file(tmp_path, _doc())], capsys, "SDPA_PLANT_REFERENCE_BUG='nope': unknown plant")


# ----------------------------------------------------------------- options
@pytest.mark.parametrize(
    "option, needle",
    [
        (["--max-runs", "0"], "--max-runs 0: expected"),
        (["--max-runs", "-1"], "--max-runs -1: expected"),
        (["--timeout", "-5"], "--timeout -5: expected"),
        (["--timeout", "nan"], "--timeout nan: expected"),
        (["--timeout", "inf"], "--timeout inf: expected"),
    ],
)
def test_repro_options_out_of_range_exit_2(tmp_path, capsys, option, needle):
    _usage([_file(tmp_path, _doc()), *option], capsys, needle)


# ------------------------------------------------------------------ report
def _run_dir(tmp_path, *lines) -> Path:
    d = tmp_path / "shards" / "20261202-120000-1"
    d.mkdir(parents=True)
    (d / "main-1.jsonl").write_bytes(b"".join(line + b"\n" for line in lines))
    return tmp_path


TEST = json.dumps({"kind": "test", "nodeid": "t.py::test_x", "outcome": "passed", "duration": 0.1, "message": ""}).encode()


@pytest.mark.parametrize(
    "line, why",
    [
        (b"[1]", "line 1: a JSON list, not a record (an object); record skipped"),
        (b'{"kind": "obs", "outcome": "passed"}', "line 1: a record of kind 'obs' without 'property'; record skipped"),
        (b'{"kind": "begin", "property": "numerics", "case": [1]}', "line 1: field 'case': expected an object"),
        (b"\xff\xfe", "line 1: unreadable record skipped"),
    ],
)
def test_report_skips_a_malformed_line_naming_it(tmp_path, capsys, line, why):
    run = _run_dir(tmp_path, line, TEST)
    assert cli.main(["report", str(run)]) == 0
    err = capsys.readouterr().err
    assert f"warning: shard 20261202-120000-1/main-1.jsonl {why}" in err
    assert json.loads((run / "report.json").read_text())["tests"]["total"] == 1


def test_report_with_no_readable_record_exits_2_and_writes_nothing(tmp_path, capsys):
    run = _run_dir(tmp_path, b"[1]", b"{torn")
    assert cli.main(["report", str(run)]) == 2
    err = capsys.readouterr().err
    assert "line 1: a JSON list" in err and "line 2: unreadable record" in err
    assert "error: " in err and "no readable record" in err and not (run / "report.json").exists()


# ---------------------------------------------------------- the command text
def test_the_description_names_every_subcommand_and_the_gate_status(capsys):
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "gate runs the suite" in out and "mutants" in out and "pairs" in out and "facts" in out
    assert "Run the suite with pytest; this command replays" not in out
    assert "gate: the first failing run's pytest status" in out


def test_one_known_finding_note():
    assert Path(cli.__file__).read_text().count("def _known_finding_note(") == 1
