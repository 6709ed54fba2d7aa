"""Bad options of ``sdpa-conformance mutants``, ``pairs`` and ``gate``: a
one-line usage error (exit 2) naming the option and its value, found
before anything is measured or run, never a traceback or exit 0."""

from __future__ import annotations

import argparse
from types import SimpleNamespace

import pytest

from conformance import cli, gate, pairs, pairs_sm90


def _main(argv, capsys):
    code = cli.main(argv)
    out = capsys.readouterr()
    assert "Traceback" not in out.out + out.err
    return code, out.out, out.err


# ----------------------------------------------------------------- mutants
@pytest.mark.parametrize("listing", [[], ["--list"]])
def test_mutants_with_a_missing_kernels_source_exits_2(tmp_path, capsys, listing):
    """--list checks the rewrites against the tree it is given, so a bad one is refused there too."""
    code, out, err = _main(["mutants", *listing, "--kernels-source", str(tmp_path / "nope")], capsys)
    assert code == 2 and "sdpa-conformance mutants: error: --kernels-source: " in err and "not a cudnn-frontend python/ tree" in err
    assert "mutants," not in out  # no catalogue listed as if the option were not there


@pytest.mark.parametrize(
    "option, needle",
    [
        (["--jobs", "0"], "--jobs 0: expected"),
        (["--budget-s", "nan"], "--budget-s nan: expected"),
        (["--budget-s", "inf"], "--budget-s inf: expected"),
        (["--budget-s", "0"], "--budget-s 0: expected"),
        (["--examples-scale", "-1"], "--examples-scale -1: expected"),
        (["--max-shrinks", "-1"], "--max-shrinks -1: expected"),
        (["--hang-s", "0"], "--hang-s 0: expected"),
        (["--hang-s", "inf"], "--hang-s inf: expected"),
        (["--goal", "1.5"], "--goal 1.5: expected"),
        (["--profile", "nope"], "--profile 'nope': not a registered Hypothesis profile"),
    ],
)
def test_mutants_names_the_option_out_of_range(capsys, option, needle):
    code, _, err = _main(["mutants", "--list", *option], capsys)
    assert code == 2 and needle in err and "--hypothesis-profile" not in err


# ------------------------------------------------------------------- pairs
def test_pairs_profile_is_a_choice(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["pairs", "--profile", "nope"])
    assert e.value.code == 2 and "argument --profile: invalid choice: 'nope'" in capsys.readouterr().err


def _no_measurement(monkeypatch):
    def measured(*a, **k):
        raise AssertionError("measured before the options were checked")

    monkeypatch.setattr(pairs, "measure", measured)
    monkeypatch.setattr(pairs_sm90, "measure", measured)


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["-k", "zzz"], "-k 'zzz': no test of the sm80 family under profile ci holds it"),
        (["--family", "sm90", "-k", "zzz"], "-k 'zzz': no test of the sm90 family"),
        (["--family", "sm90", "--adapter", "wrapper"], "--adapter wrapper: the sm90 family's Cases"),
    ],
)
def test_pairs_refuses_what_would_measure_nothing_or_ignore_an_option(monkeypatch, capsys, argv, needle):
    _no_measurement(monkeypatch)
    code, _, err = _main(["pairs", *argv], capsys)
    assert code == 2 and f"sdpa-conformance pairs: error: {needle}" in err


@pytest.mark.parametrize("where", ["missing/dir/pairs.json", "."])
def test_pairs_checks_json_is_writable_before_measuring(tmp_path, monkeypatch, capsys, where):
    _no_measurement(monkeypatch)
    code, _, err = _main(["pairs", "-k", "dtype_compiles_its_own_kernel", "--json", str(tmp_path / where)], capsys)
    assert code == 2 and "--json " in err and "cannot write it (" in err
    assert list(tmp_path.iterdir()) == []  # the check leaves nothing behind


def test_pairs_writable_json_check_leaves_no_file(tmp_path):
    assert pairs._unwritable(str(tmp_path / "p.json")) is None and not (tmp_path / "p.json").exists()


def test_pairs_shows_nothing_drawn_as_nothing():
    empty = {"examples": 0, "feasible": 10, "drawn": 0, "missing": ["a"] * 10, "drawn_though_excluded": []}
    m = {
        "profile": "ci",
        "adapter": "prepared",
        "fwd": {"feasible": 10, "drawn": 0, "share": 0.0, "layouts": {"dense": empty}},
        "bwd": {"feasible": 0, "drawn": 0, "share": None, "layouts": {"dense": empty | {"feasible": 0, "missing": []}}},
    }
    text = pairs.lines(m)
    fwd = [line for line in text if line.startswith("fwd")]
    bwd = [line for line in text if line.startswith("bwd")]
    assert all(line.endswith("0.0%") for line in fwd) and not any("100.0%" in line for line in text)
    assert all(line.split()[-1] == "-" for line in bwd)  # nothing feasible: no share, not 100%


def test_pairs_sm90_honours_k():
    drawn = pairs_sm90.draws("ci", select="runtime_facts_mint_no_compile")
    names = [f"test_sm90_runtime_facts_mint_no_compile[{layout}]" for layout in ("dense", "thd")]
    assert list(drawn) == names and all(drawn[n] for n in names)


# -------------------------------------------------------------------- gate
def _args(*argv):
    p = argparse.ArgumentParser()
    gate.add_arguments(p)
    return p.parse_args(list(argv))


@pytest.mark.parametrize(
    "option, needle",
    [
        (["--deadline", "-1"], "--deadline -1: expected"),
        (["--deadline", "nan"], "--deadline nan: expected"),
        (["--workers", "0"], "--workers '0': expected auto or"),
        (["--workers", "x"], "--workers 'x': expected auto or"),
        (["--workers", "-2"], "--workers '-2': expected auto or"),
    ],
)
def test_gate_bad_options_exit_2_before_the_gpu_check(monkeypatch, capsys, option, needle):
    monkeypatch.setattr(gate, "_has_gpu", lambda: pytest.fail("the GPU was asked for before the options were checked"))
    assert gate.run(_args(*option)) == 2
    assert needle in capsys.readouterr().err


def test_gate_cold_makes_the_fresh_cache_in_compile_cache_dir(monkeypatch, tmp_path, capsys):
    ran = []
    monkeypatch.setattr(gate, "_has_gpu", lambda: True)
    monkeypatch.setattr(gate.subprocess, "run", lambda cmd, **kw: ran.append(cmd) or SimpleNamespace(returncode=0))
    cache = tmp_path / "cache"
    gate.run(_args("--cold", "--compile-cache", str(cache), "--report-dir", str(tmp_path / "report")))
    given = [c.split("=", 1)[1] for c in ran[0] if c.startswith("--compile-cache=")]
    assert len(given) == 1 and given[0].startswith(str(cache)) and given[0] != str(cache)  # fresh, inside DIR
    assert "with --cold a fresh one is made in DIR" in _help()  # what the help says is what it does


def _help() -> str:
    p = argparse.ArgumentParser()
    gate.add_arguments(p)
    return " ".join(p.format_help().split())


@pytest.mark.parametrize(
    "path, i, want",
    [("/tmp/a.b/j", 2, "/tmp/a.b/j-2"), ("/tmp/a.b/j.xml", 2, "/tmp/a.b/j-2.xml"), ("out/gate.xml", 3, "out/gate-3.xml"), ("gate", 3, "gate-3")],
)
def test_gate_junit_numbers_the_file_name_only(path, i, want):
    assert gate._junit(path, i, 4) == want
