"""The pytest plugin, driven through pytester on tiny generated test files
whose "property" is a stand-in that records through the real recorder."""

from __future__ import annotations

import json

import pytest
import torch  # noqa: F401 - imported before the in-process runs: pytester's module snapshot must keep it (a C extension cannot be imported twice)
from hypothesis import settings

from conformance.ground import findings
from conformance.ground.case import Case, load_case_file
from conformance.ground.tables import NO_GPU

pytest_plugins = ["pytester"]

# Registers the plugin in the generated project unless an installed entry point already did.
CONFTEST = """
def pytest_addhooks(pluginmanager):
    if not pluginmanager.has_plugin("sdpa_conformance"):
        import conformance.plugin
        pluginmanager.register(conformance.plugin, "sdpa_conformance")
"""

TOY = """
import pytest
from hypothesis import Phase, given, settings, strategies as st
from conformance.ground import findings
from conformance.properties import recorder
from conformance.ground.case import Case
from conformance.ground.outcome import Observation, PropertyFailure

def check(case):
    recorder.begin("toy", case, limit=3)
    obs = Observation("toy", case, ratios={"o": case.s_q / 4})
    if case.s_q > 3:
        obs.notes["summary"] = "s_q > 3"
        known = findings.match("toy", case)
        if known is None:
            obs.outcome = "failed"
            recorder.observe(obs)
            raise PropertyFailure("toy", case, f"O: s_q {case.s_q} > 3", {"quantity": "o", "worst": []})
        obs.outcome, obs.finding = "xfailed", known.id
    recorder.observe(obs)
    return obs
"""


@pytest.fixture
def project(pytester, monkeypatch):
    """A generated project; the in-process runs must not leak the Hypothesis
    profile or the kernels options they load into this session."""
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
    project.makepyfile(test_toy=TOY + """
@settings(max_examples=25, database=None, derandomize=True, phases=[Phase.generate, Phase.shrink])
@given(st.integers(1, 50))
def test_toy_shrinks(s):
    check(Case(s_q=s, s_kv=s))

def test_needs_gpu(gpu):
    pass
""")
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


def test_known_findings_xfail_tests_and_stale_entries_warn(project):
    project.makefile(".toml", known_findings="""
[[finding]]
id = "toy-big"
reason = "the toy kernel fails on s_q 9"
nodeid = "test_toy.py::test_known_*"

[[finding]]
id = "toy-six"
reason = "s_q 6 is a known discrepancy"
property = "toy"
when = { s_q = 6 }

[[finding]]
id = "stale"
reason = "fixed long ago"
nodeid = "test_toy.py::test_removed"
""")
    project.makepyfile(test_toy=TOY + """
def test_known_bad():
    check(Case(s_q=9, s_kv=9))

def test_example_finding():
    assert check(Case(s_q=6, s_kv=6)).outcome == "xfailed"
""")
    result = _run(project)
    result.assert_outcomes(passed=1, xfailed=1)
    result.stdout.fnmatch_lines(["*known_findings.toml:13: UnmatchedFindingWarning: known finding 'stale'*"])
    s = _report(project)
    status = {e["id"]: e["status"] for e in s["findings"]["entries"]}
    assert status == {"toy-big": "matched", "toy-six": "matched", "stale": "unmatched"}
    # Known either way: the example-level finding and the failing example of the test xfailed by node id.
    assert s["tests"]["xfailed"] == 1 and s["properties"]["toy"]["xfailed"] == 2 and s["properties"]["toy"]["failed"] == 0
    (known,) = [f for f in s["failures"] if f.get("finding") == "toy-big"]
    assert load_case_file(known["case_file"])[0].s_q == 9


def test_xdist_run_merges_every_shard_without_loss(project):
    project.makepyfile(test_toy=TOY + """
@pytest.mark.parametrize("i", range(6))
def test_many(i):
    for s in (1, 2, 3):
        check(Case(s_q=s, s_kv=s, seed=i))

def test_one_fails():
    check(Case(s_q=1, s_kv=1))
    check(Case(s_q=7, s_kv=7))
""")
    result = _run(project, "-n", "2")
    result.assert_outcomes(passed=6, failed=1)
    result.stdout.fnmatch_lines(["*sdpa-conformance: reproduce with*", "sdpa-conformance repro sdpa-report/cases/toy-*.json"])
    s = _report(project)
    toy = s["properties"]["toy"]
    assert (toy["examples"], toy["passed"], toy["failed"], toy["errors"]) == (20, 19, 1, 0)
    assert toy["tests"]["passed"] == 6 and toy["tests"]["failed"] == 1 and s["tests"]["total"] == 7
    assert len(s["failures"]) == 1 and len([x for x in s["run"]["shards"] if x.startswith("gw")]) >= 1


@pytest.mark.parametrize("args, env, message", [
    ([], {"SDPA_ADAPTER": "bogus"}, "SDPA_ADAPTER='bogus': expected one of prepared, wrapper"),
    (["--known-findings", "nope.toml"], {}, "--known-findings nope.toml: no such file"),
    (["--known-findings", "bad.toml"], {}, "finding 'x': unknown key 'nodeids'"),
    (["--adapter", "bogus"], {}, "invalid choice: 'bogus'"),
])
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


# ------------------------------------------------------------- findings file
@pytest.mark.parametrize("entry, message", [
    ({"id": "a", "reason": "r", "property": "numerics"}, "needs 'nodeid', 'rule', or 'property' with a non-empty 'when'"),
    ({"id": "a", "reason": "r", "property": "numerics", "when": {"heads": 2}}, "'when' key 'heads' is not a Case field"),
    ({"id": "a", "reason": "r", "property": "numerics", "when": {"causal": "yes"}}, "'causal': expected true/false"),
    ({"id": "a", "reason": "r", "nodeid": "t.py::*", "rule": "x"}, "cannot be combined"),
    ({"id": "a", "nodeid": "t.py::*"}, "key 'reason' is required"),
])
def test_findings_entries_are_validated(entry, message):
    with pytest.raises(findings.FindingsError, match=message.replace("(", r"\(").replace(")", r"\)")):
        findings.parse({"finding": [entry]}, "kf.toml")


def test_findings_match_examples_and_node_ids(tmp_path):
    path = tmp_path / "kf.json"
    path.write_text(json.dumps({"finding": [
        {"id": "bf16-causal", "reason": "r", "property": "numerics", "when": {"dtype": "bfloat16", "causal": True}},
        {"id": "rule", "reason": "r", "rule": "bias_batch_mismatch"},
        {"id": "node", "reason": "r", "nodeid": "conformance/test_numerics.py::test_numerics_dense[qwen-bf16]"},
    ]}))
    previous = findings.activate(findings.load(path))
    try:
        assert findings.match("numerics", Case(dtype="bfloat16", causal=True)).id == "bf16-causal"
        assert findings.match("tails", Case(dtype="bfloat16", causal=True)) is None
        assert findings.match("numerics", Case(dtype="float16", causal=True)) is None
        assert findings.match("rejection", Case(violation="bias_batch_mismatch")).id == "rule"
        # An exact node id matches literally, brackets included (they are fnmatch classes otherwise).
        assert [f.id for f in findings.match_node("conformance/test_numerics.py::test_numerics_dense[qwen-bf16]")] == ["node"]
    finally:
        findings.activate(previous)
