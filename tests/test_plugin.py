"""The pytest plugin, driven through pytester on tiny generated test files
whose "property" is a stand-in judged and recorded through the real judge,
finish() and recorder; known findings end to end (exactly the described
failure is excused, strict by default, subset runs, malformed files)."""

from __future__ import annotations

import json
import os

import pytest
import torch  # noqa: F401 - imported before the in-process runs: pytester's module snapshot must keep it (a C extension cannot be imported twice)
from hypothesis import settings

from ground import findings
from ground.case import Case, load_case_file
from ground.tables import NO_GPU
from properties import CHECKS

pytest_plugins = ["pytester"]

# Registers the plugin in the generated project unless an installed entry point already did.
CONFTEST = """
def pytest_addhooks(pluginmanager):
    if not pluginmanager.has_plugin("sdpa_conformance"):
        import conformance.plugin
        pluginmanager.register(conformance.plugin, "sdpa_conformance")
"""

TOY = """
import time

import pytest
import torch
from hypothesis import Phase, given, settings, strategies as st
from properties import judge, recorder
from properties.common import finish
from ground.case import Case
from ground.outcome import PropertyFailure

def check(case):
    recorder.begin("toy", case, limit=3)

    def judged():
        if case.s_q > 3:
            raise PropertyFailure("toy", case, f"O: s_q {case.s_q} > 3", {"quantity": "o", "worst": []})
        return {"o": case.s_q / 4}

    return finish("toy", case, time.perf_counter(), judged)

def nan_rows(case, *where):
    # A stand-in tails property judged through the real judge and finish: NaN
    # in the O rows past seq_q_len ("padded"), in the first live row of every
    # batch entry ("live"), in LSE row 0 ("lse").
    recorder.begin("tails", case)
    o = torch.zeros(case.batch, case.h_q, case.s_q, 2)
    lse = torch.zeros(case.batch, case.h_q, case.s_q)
    for b, n in enumerate(case.q_lengths()):
        if "padded" in where:
            o[b, :, n:] = float("nan")
        if "live" in where and n:
            o[b, :, 0] = float("nan")
    if "lse" in where:
        lse[0, 0, 0] = float("nan")

    def judged():
        for quantity, got in (("o", o), ("lse", lse)):
            nan = torch.isnan(got)
            judge.exactly("tails", case, quantity, nan, torch.zeros_like(nan), torch.ones_like(nan), "live outputs", check="no nan")
        return {}

    return finish("tails", case, time.perf_counter(), judged)
"""

# One finding: NaN in the O rows past seq_q_len (the shape of dense-padded-q-rows-nan).
# The findings count the examples of property tests only (a ``property``
# marker, as the test matrix gives every property test).
PROPERTY_TEST = """
pytestmark = pytest.mark.property("tails")
"""

PADDED_Q_FINDING = """# known findings of the toy project

[[finding]]
id = "padded-q-nan"
reason = "O rows past seq_q_len come out NaN"
property = "tails"
check = "no nan"
quantity = "o"
region = "padded_q_rows"
"""
PADDED = "Case(s_q=4, s_kv=4, batch=2, seq_q_lens=(2, 4))"  # batch 0 has padded Q rows 2 and 3


@pytest.fixture
def project(pytester, monkeypatch):
    """A generated project; the in-process runs must not leak the Hypothesis
    profile or the kernels options they load into this pytest session."""
    for var in ("SDPA_ADAPTER", "SDPA_SM80_COMPAT", "SDPA_KERNELS_SOURCE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("PYTHONPATH", str(pytester.path.parent))
    profile = settings.get_current_profile_name()
    pytester.makeconftest(CONFTEST)
    yield pytester
    settings.load_profile(profile)


def _run(pytester, *args):
    # pytest-benchmark warns under xdist (ours runs this file with -n too); not what is tested here.
    return pytester.runpytest("-p", "no:cacheprovider", "-p", "no:benchmark", *args)


def _report(pytester) -> dict:
    return json.loads((pytester.path / "sdpa-report" / "report.json").read_text())


def test_failing_property_writes_its_shrunk_case_and_prints_the_repro(project):
    project.makepyfile(
        test_toy=TOY
        + """
@settings(max_examples=25, database=None, derandomize=True, phases=[Phase.generate, Phase.shrink])
@given(st.integers(1, 50))
def test_toy_shrinks(s):
    check(Case(s_q=s, s_kv=s))

@pytest.mark.property("toy")
def test_needs_gpu(gpu):
    pass
"""
    )
    result = _run(project, "-rs")
    out = result.stdout.str()
    assert "mode: " in out and "adapter: prepared" in out and "report dir sdpa-report" in out  # the header
    files = list((project.path / "sdpa-report" / "cases").glob("toy-*.json"))
    assert len(files) == 1
    case, doc = load_case_file(files[0])
    assert case == Case(s_q=4, s_kv=4)  # the shrunk example, not the first failing one
    assert doc["nodeid"] == "test_toy.py::test_toy_shrinks" and doc["params"] == {"limit": 3} and doc["summary"] == "O: s_q 4 > 3"
    assert doc["hypothesis"]["derandomize"] is True and doc["adapter"] == "prepared" and doc["needs_gpu"] is False
    repro = f"sdpa-conformance repro sdpa-report/cases/{files[0].name}"
    assert doc["repro"] == repro
    result.stdout.fnmatch_lines(["*sdpa-conformance: reproduce with*", repro])
    if not torch.cuda.is_available():
        assert NO_GPU + " (the compile-only tier still runs)" in out
        result.assert_outcomes(failed=1, skipped=1)
    s = _report(project)
    assert s["tests"]["failed"] == 1 and s["properties"]["toy"]["failed"] >= 1 and len(s["failures"]) == 1
    # test_needs_gpu checks nothing: its property marker attributes it.
    assert sum(s["properties"]["toy"]["tests"].values()) == 2 and list(s["properties"]) == ["toy"]


def test_xdist_run_merges_every_shard_without_loss(project):
    project.makepyfile(
        test_toy=TOY
        + """
@pytest.mark.parametrize("i", range(6))
def test_many(i):
    for s in (1, 2, 3):
        check(Case(s_q=s, s_kv=s, seed=i))

def test_one_fails():
    check(Case(s_q=1, s_kv=1))
    check(Case(s_q=7, s_kv=7))
"""
    )
    result = _run(project, "-n", "2")
    result.assert_outcomes(passed=6, failed=1)
    result.stdout.fnmatch_lines(["*sdpa-conformance: reproduce with*", "sdpa-conformance repro sdpa-report/cases/toy-*.json"])
    s = _report(project)
    toy = s["properties"]["toy"]
    assert (toy["examples"], toy["passed"], toy["failed"], toy["errors"]) == (20, 19, 1, 0)
    assert toy["tests"]["passed"] == 6 and toy["tests"]["failed"] == 1 and s["tests"]["total"] == 7
    assert len(s["failures"]) == 1 and len([x for x in s["run"]["shards"] if x.startswith("gw")]) >= 1
    # The plugin renders from the records it judged the known findings on; reading the shards again renders the same.
    import reports

    again, _ = reports.build(project.path / "sdpa-report")
    assert json.loads(json.dumps(reports.render.strict({k: v for k, v in again.items() if not k.startswith("_")}), default=str)) == s


@pytest.mark.parametrize(
    "args, env, message",
    [
        ([], {"SDPA_ADAPTER": "bogus"}, "SDPA_ADAPTER='bogus': expected one of prepared, wrapper"),
        (["--known-findings", "nope.toml"], {}, "--known-findings nope.toml: no such file"),
        (["--known-findings", "bad.toml"], {}, "bad.toml:1: finding 'x': unknown key 'nodeids'"),
        (["--adapter", "bogus"], {}, "invalid choice: 'bogus'"),
    ],
)
def test_bad_options_are_usage_errors(project, monkeypatch, args, env, message):
    project.makefile(".toml", bad='[[finding]]\nid = "x"\nreason = "r"\nnodeids = "a"\n')
    project.makepyfile(test_nothing="def test_x():\n    pass\n")
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    result = _run(project, *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert message in result.stderr.str()


def test_a_path_option_value_taken_for_the_rootdir_is_refused(project):
    elsewhere = project.path.parent / "elsewhere-report"
    elsewhere.mkdir(exist_ok=True)
    project.makepyfile(test_nothing="def test_x():\n    pass\n")
    result = _run(project, "--report-dir", str(elsewhere))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert f"write --report-dir={elsewhere}" in result.stderr.str()
    assert _run(project, f"--report-dir={elsewhere}").ret == pytest.ExitCode.OK


# ------------------------------------------------------------- known findings
def test_a_finding_excuses_only_the_failure_it_describes(project):
    project.makefile(".toml", known_findings=PADDED_Q_FINDING)
    project.makepyfile(
        test_toy=TOY
        + PROPERTY_TEST
        + f"""
def test_only_padded_rows():
    assert nan_rows({PADDED}, "padded").outcome == "xfailed"

def test_a_live_row_too():
    nan_rows({PADDED}, "padded", "live")  # the same check fails outside the finding's region too

def test_another_check_of_the_same_example():
    nan_rows({PADDED}, "padded", "lse")  # the O check is excused, the LSE check is not

def test_another_case():
    nan_rows(Case(s_q=4, s_kv=4), "live")  # no padded rows at all
"""
    )
    result = _run(project)
    result.assert_outcomes(passed=1, failed=3)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    out = result.stdout.str()
    # Padded rows 2, 3 of batch 0 and live row 0 of both batch entries, 2 dims each: one failure, not excused.
    assert "[tails] O: 8 element(s) of live outputs differ from the contract" in out
    assert "[tails] LSE: 1 element(s) of live outputs differ from the contract (+excused: no nan: known finding padded-q-nan)" in out
    s = _report(project)
    assert (s["properties"]["tails"]["xfailed"], s["properties"]["tails"]["failed"], s["tests"]["failed"]) == (1, 3, 3)
    (entry,) = s["findings"]["entries"]
    assert (entry["id"], entry["status"], entry["reproduced"], entry["source"]) == ("padded-q-nan", "reproduced", 2, "known_findings.toml:3")
    assert entry["exercised"] == 3 and entry["repro"].startswith("sdpa-conformance repro ")


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["one-process", "xdist"])
def test_a_stale_finding_fails_the_run_naming_the_entry(project, workers):
    project.makefile(".toml", known_findings=PADDED_Q_FINDING)
    project.makepyfile(
        test_toy=TOY
        + PROPERTY_TEST
        + f"""
def test_padded_rows_are_fine_now():
    assert nan_rows({PADDED}).outcome == "passed"  # exercises the finding: there are padded rows to show it on

def test_something_else():
    assert nan_rows(Case(s_q=2, s_kv=2)).outcome == "passed"
"""
    )
    result = _run(project, *workers)  # strict by default, no -W option
    result.assert_outcomes(passed=2)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        ["ERROR stale known finding: known_findings.toml:3: known finding 'padded-q-nan' did not reproduce: 1 example(s) it selects ran*"]
    )
    s = _report(project)
    assert s["findings"]["stale"] == ["padded-q-nan"] and s["run"]["exitstatus"] == pytest.ExitCode.TESTS_FAILED


def test_an_unexercised_finding_does_not_fail_a_subset_run(project):
    project.makefile(".toml", known_findings=PADDED_Q_FINDING)
    project.makepyfile(
        test_toy=TOY
        + PROPERTY_TEST
        + f"""
def test_padded():
    assert nan_rows({PADDED}, "padded").outcome == "xfailed"

def test_unpadded():
    assert nan_rows(Case(s_q=4, s_kv=4)).outcome == "passed"  # no padded rows: nothing to show the finding on
"""
    )
    subset = _run(project, "-k", "unpadded")
    subset.assert_outcomes(passed=1)
    assert subset.ret == pytest.ExitCode.OK
    subset.stdout.fnmatch_lines(["*known findings: 0 reproduced, 0 stale, 1 not exercised*"])
    assert [e["status"] for e in _report(project)["findings"]["entries"]] == ["not exercised"]
    whole = _run(project)
    whole.assert_outcomes(passed=2)
    assert whole.ret == pytest.ExitCode.OK and [e["status"] for e in _report(project)["findings"]["entries"]] == ["reproduced"]


@pytest.mark.parametrize(
    "entry, message",
    [
        ('region = "padded_q_rows"\nnodeid = "test_toy.py::*"', "known_findings.toml:3: finding 'bad': key 'nodeid': node-id selectors are gone"),
        (
            'region = "padded_rows"',
            "known_findings.toml:3: finding 'bad': key 'region': 'padded_rows' is not one of padded_q_rows, live_rows_loading_padded_kv, live_rows_of_padded_kv_entries, q_tiles_loading_padded_kv, kv_rows_of_empty_q_entries, thd_lse_past_compact_zeroing, thd_lse_compact_extent",
        ),
        ("", "known_findings.toml:3: finding 'bad': key 'region' is required for the row check 'no nan'"),
    ],
    ids=["nodeid", "unknown-region", "no-region"],
)
def test_a_malformed_findings_file_is_a_usage_error_naming_entry_and_key(project, entry, message):
    project.makefile(".toml", known_findings=PADDED_Q_FINDING.replace('id = "padded-q-nan"', 'id = "bad"').replace('region = "padded_q_rows"', entry))
    project.makepyfile(test_nothing="def test_x():\n    pass\n")
    result = _run(project)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert message in result.stderr.str()


# ------------------------------------------------------------- findings file
ROW = {"property": "tails", "check": "no nan", "quantity": "o", "region": "padded_q_rows"}
REJECTS = {"property": "rejection", "check": "rejects", "observed": "accepted"}


@pytest.mark.parametrize(
    "entry, message",
    [
        ({"id": "a", "reason": "r", "property": "numerics", "check": "error model"}, "finding 'a': key 'quantity' is required for the row check 'error model'"),
        ({"id": "a", "reason": "r", **ROW, "property": "speed"}, "finding 'a': key 'property': 'speed' is not one of numerics, tails"),
        ({"id": "a", "reason": "r", **ROW, "check": "nan"}, "finding 'a': key 'check': 'nan' is not one of capacity, pad columns, no nan"),
        ({"id": "a", "reason": "r", **ROW, "check": "pad columns"}, "finding 'a': key 'check': tails check 'pad columns' judges whole storage"),
        ({"id": "a", "reason": "r", **ROW, "when": {"heads": 2}}, "finding 'a': key 'when': 'heads' is not a Case field, a derived fact"),
        ({"id": "a", "reason": "r", **ROW, "when": {"causal": "yes"}}, "finding 'a': key 'when': case field 'causal': expected true/false"),
        ({"id": "a", "reason": "r", **ROW, "when": {"off_envelope": 1}}, "finding 'a': key 'when': 'off_envelope': expected true/false"),
        ({"id": "a", "reason": "r", **ROW, "observed": "accepted"}, "finding 'a': key 'observed': check 'no nan' has no observed outcome"),
        ({"id": "a", "reason": "r", **REJECTS}, "finding 'a': key 'rule' is required for a rejection finding"),
        ({"id": "a", "reason": "r", **REJECTS, "rule": "thd_bias"}, "finding 'a': key 'entry' is required with 'rule'"),
        (
            {"id": "a", "reason": "r", **REJECTS, "observed": None, "rule": "thd_bias", "entry": "prepared"},
            "finding 'a': key 'observed' must be a non-empty string",
        ),
        ({"id": "a", "reason": "r", **REJECTS, "rule": "no_rule", "entry": "config"}, "finding 'a': key 'rule': 'no_rule' is not one of"),
        (
            {"id": "a", "reason": "r", **REJECTS, "rule": "flavor_unknown", "entry": "wrapper"},
            "finding 'a': key 'entry': rule 'flavor_unknown' targets config, not 'wrapper'",
        ),
        ({"id": "a", "reason": "r", "property": "compile_reuse", "check": "compile budget"}, "finding 'a': key 'when' (or 'rule') is required"),
        ({"id": "a", "reason": "r", **ROW, "nodeid": "t.py::*"}, "finding 'a': key 'nodeid': node-id selectors are gone"),
        ({"id": "a", **ROW}, "finding 'a': key 'reason' is required"),
    ],
)
def test_findings_entries_are_validated(entry, message):
    with pytest.raises(findings.FindingsError) as e:
        findings.parse({"finding": [entry]}, "kf.toml", [7], checks=CHECKS)
    assert str(e.value).startswith("kf.toml:7: ") and message in str(e.value), str(e.value)


def test_the_report_names_every_skipped_test_with_its_reason(project):
    project.makepyfile(
        test_skips="""
import pytest

def test_a():
    pytest.skip("planted reason one")

def test_b():
    pytest.skip("planted reason one")

@pytest.mark.skip(reason="planted reason two")
def test_c():
    pass

def test_d():
    pass
"""
    )
    _run(project).assert_outcomes(passed=1, skipped=3)
    s = _report(project)
    assert s["skips"] == [
        {"reason": "planted reason one", "count": 2, "tests": ["test_skips.py::test_a", "test_skips.py::test_b"]},
        {"reason": "planted reason two", "count": 1, "tests": ["test_skips.py::test_c"]},
    ]
    md = (project.path / "sdpa-report" / "report.md").read_text()
    assert "Skipped tests (3), by reason" in md and "planted reason two" in md


def test_a_run_leaves_the_environment_as_it_found_it(project, monkeypatch):
    """The options mirrored into the environment for the run's processes
    (--family, --adapter, --sm80-compat) are put back when it ends: an
    in-process run (pytester, an IDE) must not change what the tests and
    subprocesses after it select."""
    from conformance.family_select import FAMILY_ENV
    from ground.tables import ADAPTER_ENV, COMPAT_ENV

    monkeypatch.delenv(FAMILY_ENV, raising=False)
    monkeypatch.setenv(ADAPTER_ENV, "prepared")
    monkeypatch.delenv(COMPAT_ENV, raising=False)
    project.makepyfile(test_env="def test_x():\n    pass\n")
    seen = {}
    result = _run(project, "--family", "sm90", "--adapter", "wrapper", "--sm80-compat")
    assert result.ret in (0, 5), result.stdout.str()[-2000:]  # ran (or deselected everything): not a usage error
    seen.update({k: os.environ.get(k) for k in (FAMILY_ENV, ADAPTER_ENV, COMPAT_ENV)})
    assert seen == {FAMILY_ENV: None, ADAPTER_ENV: "prepared", COMPAT_ENV: None}
