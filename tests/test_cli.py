"""The sdpa-conformance command on CPU: version, help, usage errors, malformed
case files, repro without a GPU, and repro's verdicts with a stand-in property."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import pytest

from conformance import cli
from ground.case import Case
from ground.outcome import Observation, PropertyFailure
from reports import casefile

CASE = Case(s_q=5, s_kv=7, h_q=2, h_kv=1, seed=11)


def _exit(argv, capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(argv)
    out = capsys.readouterr()
    return e.value.code, out.out, out.err


def test_version_names_the_kernel_packages(capsys):
    code, out, _ = _exit(["--version"], capsys)
    assert code == 0
    assert out.splitlines()[0].startswith("sdpa-conformance 0.1.0")
    for name in ("nvidia-cudnn-frontend", "nvidia-cutlass-dsl", "torch"):
        assert f"  {name} " in out


def test_help_lists_the_subcommands(capsys):
    code, out, _ = _exit(["--help"], capsys)
    assert code == 0 and "repro" in out and "report" in out and "exit status" in out


@pytest.mark.parametrize("argv", [["--bogus"], ["mutants", "--jobs", "x"], ["repro"], ["repro", "x.json", "--adapter", "nope"], []])
def test_usage_errors_exit_2(argv, capsys):
    code, _, err = _exit(argv, capsys)
    assert code == 2 and "usage: sdpa-conformance" in err


def test_module_entry_point_runs():
    r = subprocess.run([sys.executable, "-m", "conformance.cli", "--version"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.startswith("sdpa-conformance ")


def _case_file(tmp_path, doc=None, text=None):
    path = tmp_path / "case.json"
    if text is None:
        base = {"schema": 1, "case": CASE.to_dict(), "property": "numerics", "mode": "sm80 code on sm_90", "gpu": "NVIDIA H200"}
        text = json.dumps(base | (doc or {}))
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize(
    "change, text, field",
    [
        (None, "{not json", "not valid JSON"),
        ({"schema": 7}, None, "'schema'"),
        ({"case": CASE.to_dict() | {"heads": 3}}, None, "'heads'"),
        ({"case": {k: v for k, v in CASE.to_dict().items() if k != "h_q"}}, None, "case field 'h_q': missing"),
        ({"case": CASE.to_dict() | {"batch": "2"}}, None, "'batch'"),
        ({"case": CASE.to_dict() | {"causal": 1}}, None, "'causal'"),
        ({"property": 3}, None, "'property'"),
        ({"params": [1]}, None, "'params'"),
        (
            {"property": "rejection", "case": CASE.to_dict() | {"violation": "no_such_rule"}, "params": {"entry": "config"}},
            None,
            "'case.violation': contract rule 'no_such_rule': unknown",
        ),
        ({"property": "rejection", "params": {"entry": "config"}}, None, "'case.violation': missing"),
        (
            {"property": "rejection", "case": CASE.to_dict() | {"violation": "params_tile_n"}},
            None,
            "'params.entry': missing; rule 'params_tile_n' targets config",
        ),
        ({"property": "rejection", "case": CASE.to_dict() | {"violation": "params_tile_n"}, "params": {"entry": "wrapper"}}, None, "'params.entry': 'wrapper'"),
        ({"property": "compiles", "params": {"bogus": 1}, "mode": "compile-only (no GPU)"}, None, "'params': got an unexpected keyword argument 'bogus'"),
    ],
    ids=[
        "bad-json",
        "wrong-schema",
        "unknown-field",
        "missing-field",
        "wrong-type-int",
        "wrong-type-bool",
        "property",
        "params",
        "unknown-violation",
        "missing-violation",
        "missing-entry",
        "entry-not-targeted",
        "unknown-param",
    ],
)
def test_malformed_case_files_exit_2_naming_the_field(tmp_path, capsys, change, text, field):
    assert cli.main(["repro", _case_file(tmp_path, change, text)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("sdpa-conformance repro: error: ") and field in err


def test_missing_case_file_exits_2(tmp_path, capsys):
    assert cli.main(["repro", str(tmp_path / "nope.json")]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_repro_without_a_gpu_exits_2_clearly(tmp_path, capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("checks the no-GPU path")
    assert cli.main(["repro", _case_file(tmp_path, {"needs_gpu": True})]) == 2
    out = capsys.readouterr()
    assert "no CUDA GPU found" in out.err and "NVIDIA H200" in out.err
    assert "case:      dense B=1 S=5x7" in out.out  # it still says what the case is


# ------------------------------------------------- verdicts, stand-in property
class _Adapter:
    name = "prepared"


def _toy(fails):
    def check(case, adapter=None, *, scale=1.0):
        assert isinstance(adapter, _Adapter) and scale == 2.0  # params from the file reach the property
        if fails:
            raise PropertyFailure(
                "toy",
                case,
                "LSE max|kernel - ref32| = 0.5 exceeds bound 0.01",
                {
                    "quantity": "lse",
                    "error": 0.5,
                    "bound": 0.01,
                    "worst": [{"quantity": "lse", "batch": 0, "head": 1, "token": 4, "region": "last partial Q tile", "got": 1.5, "want": 1.0}],
                },
            )
        return Observation("toy", case, ratios={"o": 0.25})

    return check


@pytest.mark.parametrize("fails, code", [(True, 1), (False, 0)])
def test_repro_replays_the_recorded_property(tmp_path, capsys, monkeypatch, fails, code):
    import kernels
    import properties

    monkeypatch.setitem(
        properties.PROPERTIES, "toy", properties.Property("toy", _toy(fails), {}, cold_seconds=1.0, directions=("fwd",), doc="a stand-in property")
    )
    monkeypatch.setattr(kernels, "get_adapter", lambda name=None, **kw: _Adapter())
    path = casefile.write(
        tmp_path,
        property="toy",
        case=CASE.to_dict(),
        params={"scale": 2.0},
        summary="was bad",
        nodeid="t.py::test_toy",
        environment={"mode": "compile-only (no GPU)", "adapter": "prepared"},
        hypothesis={"seed": 42, "reproduce_failure": None},
        digest=casefile.inputs_digest(CASE),
        needs_gpu=False,
    )
    assert cli.main(["repro", str(path)]) == code
    out = capsys.readouterr().out
    assert "t.py::test_toy" in out and "seed 42" in out and "regenerated bit for bit" in out
    if fails:
        assert "FAIL toy: LSE" in out and "batch 0 head 1 token 4" in out and "last partial Q tile" in out and "still fails" in out
    else:
        assert "PASS toy: o error/bound 0.25" in out and "passes now" in out


def test_report_subcommand(tmp_path, capsys):
    assert cli.main(["report", str(tmp_path / "missing")]) == 2
    assert "not a directory" in capsys.readouterr().err
    # A directory without shards is no run's report dir: saying "0 examples" would read as a green run.
    assert cli.main(["report", str(tmp_path)]) == 2
    assert "no shards" in capsys.readouterr().err and not (tmp_path / "report.json").exists()
    (tmp_path / "shards" / "20261202-120000-1").mkdir(parents=True)  # a run dir whose shards were removed
    assert cli.main(["report", str(tmp_path)]) == 2
    from properties import recorder

    previous = recorder.open_shard(str(tmp_path / "shards" / "20261202-120000-1" / "main-1.jsonl"))
    recorder.write({"kind": "test", "nodeid": "t.py::test_x", "outcome": "passed", "duration": 0.1, "message": "", "findings": []})
    recorder.close_shard(previous)
    assert cli.main(["report", str(tmp_path)]) == 0
    assert "report.html" in capsys.readouterr().out and (tmp_path / "report.json").is_file()


def test_repro_applies_no_finding_but_names_the_one_describing_each_failed_check(tmp_path, capsys, monkeypatch):
    import torch

    import kernels
    import properties
    from ground import findings

    padded = Case(s_q=3, s_kv=3, seq_q_lens=(1,))

    def toy(case, adapter=None):
        assert findings.active() == []  # nothing in force while replaying
        nan = torch.zeros(1, 1, 3, 64, dtype=torch.bool)
        nan[0, 0, 1:] = True  # O rows past seq_q_len
        live = PropertyFailure("tails", case, "LSE row 0 NaN", {"quantity": "lse"}, check="no nan", where=torch.tensor([[[True, False, False]]]))
        failure = PropertyFailure("tails", case, "O padded rows NaN", {"quantity": "o"}, check="no nan", where=nan)
        failure.failures = [failure, live]
        raise failure

    (tmp_path / "known_findings.toml").write_text(
        '[[finding]]\nid = "q-rows"\nreason = "padded rows NaN"\nproperty = "tails"\ncheck = "no nan"\nquantity = "o"\nregion = "padded_q_rows"\n'
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setitem(properties.PROPERTIES, "tails", dataclasses.replace(properties.PROPERTIES["tails"], check=toy))
    monkeypatch.setattr(kernels, "get_adapter", lambda name=None, **kw: _Adapter())
    path = casefile.write(
        tmp_path, property="tails", case=padded.to_dict(), params={}, summary="was bad", environment={"mode": "compile-only (no GPU)"}, needs_gpu=False
    )
    assert cli.main(["repro", str(path)]) == 1
    out = capsys.readouterr().out
    assert "no nan: known finding q-rows (known_findings.toml:1): padded rows NaN" in out
    assert "no nan: no known finding describes it" in out and "still fails (exit 1)" in out


def test_pairs_subcommand(tmp_path, capsys):
    """sdpa-conformance pairs draws a profile's examples without running them
    and counts the compile-key pairs they make meet (here two small tests)."""
    from hypothesis import settings

    before = settings.get_current_profile_name()
    out = tmp_path / "pairs.json"
    assert cli.main(["pairs", "--profile", "ci", "-k", "dtype_compiles_its_own_kernel", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "pair coverage: profile ci, adapter prepared" in text and "missing fwd dense:" in text
    m = json.loads(out.read_text())
    # -k selects by substring: the dtype-like compiled facts of both passes
    assert {"test_dtype_compiles_its_own_kernel", "test_dbias_dtype_compiles_its_own_kernel"} <= set(m["tests"])
    assert all("dtype_compiles_its_own_kernel" in t for t in m["tests"])
    assert 0 < m["fwd"]["drawn"] < m["fwd"]["feasible"] and m["bwd"]["drawn"] > 0
    assert settings.get_current_profile_name() == before  # the profile of the run it was called from is back
