"""The report's statistics count the examples they describe (reports.summary).

Fabricated shard records: a property test of the matrix (a ``property``
marker), the suite's own tests (a power test plants a bug on purpose),
Hypothesis shrinking after a test's first failure, a restarted worker and
deliberate compiles. The error/bound quantiles, examples per minute, the
compile floor and coverage must each count only what they name.
"""

from __future__ import annotations

import json

import pytest

from conformance import gate
from ground.case import Case
from ground.outcome import DELIBERATE_COMPILES
from reports import render, summary

pytest_plugins = ["pytester"]

MATRIX = "conformance/test_numerics.py::test_numerics_dense[gptoss-float16]"
FAILING = "conformance/test_numerics.py::test_numerics_dense[llama-float16]"
POWER = "tests/test_power.py::test_numerics_catches_planted"
DENSE, THD = Case(s_q=3, s_kv=5), Case(layout="thd", q_lens=(3,), kv_lens=(2,), h_q=2, h_kv=1)


class Shards:
    """Records as shards.read returns them: each tagged with its shard (``<worker>-<pid>``)."""

    def __init__(self):
        self.records, self.t = [], 1000.0

    def example(self, test, outcome, ratio, case=DENSE, shard="gw0-1", **obs):
        self.t += 1.0
        c = case.to_dict()
        self.records.append({"kind": "begin", "test": test, "property": "numerics", "case": c, "t": self.t, "shard": shard})
        if outcome is not None:
            ratios = {"o": ratio} if ratio is not None else {}
            rec = {"kind": "obs", "test": test, "property": "numerics", "case": c, "outcome": outcome, "ratios": ratios, "seconds": 0.5, "t_end": self.t + 0.5}
            self.records.append(rec | {"shard": shard} | obs)

    def merge(self, tests: dict, wall=60.0) -> dict:
        """tests: node id -> its outcome; the matrix's carry its property marker."""
        marks = {nodeid: ("numerics" if nodeid.startswith("conformance/") else None) for nodeid in tests}
        tail = [{"kind": "collected", "tests": marks, "shard": "main-1"}]
        tail += [{"kind": "test", "nodeid": n, "outcome": o, "shard": "main-1"} for n, o in tests.items()]
        tail.append({"kind": "session", "wall_seconds": wall, "shard": "main-1"})
        return summary.merge(self.records + tail)


def _documents(s: dict, tmp_path) -> tuple:
    bl = render.blocks(s)
    return render.to_markdown(bl, tmp_path / "plots"), render.to_html(bl)


def test_error_bound_statistics_are_the_passed_matrix_examples(tmp_path):
    """97 passed matrix examples at 0.2 are what a correct kernel uses of its
    bound; a power test's planted failures, excused examples, and a failing
    test's shrinking (after its first failure) must not move p99 or over_bound."""
    sh = Shards()
    for _ in range(97):
        sh.example(MATRIX, "passed", 0.2)
    for _ in range(3):
        sh.example(MATRIX, "xfailed", 1.5)  # excused by a known finding
    for _ in range(40):
        sh.example(POWER, "failed", 7.0)  # a planted bug, caught: the test passes
    sh.example(FAILING, "passed", 0.2, shard="gw1-2")
    sh.example(FAILING, "failed", 4.0, shard="gw1-2")
    for outcome, ratio in (("passed", 0.9), ("failed", 2.0), ("passed", 0.95)):  # Hypothesis shrinking
        sh.example(FAILING, outcome, ratio, shard="gw1-2")
    s = sh.merge({MATRIX: "xfailed", FAILING: "failed", POWER: "passed"})
    num = s["properties"]["numerics"]
    o = num["ratios"]["o"]
    assert (o["count"], o["over_bound"], o["p50"], o["p99"], o["max"]) == (98, 0, 0.2, 0.2, 0.2)
    assert o["excused"] == {"count": 3, "over_bound": 3, "max": 1.5} and o["failed"] == {"count": 1, "over_bound": 1, "max": 4.0}
    assert num["ratios_by_dtype"]["o fp16"] == o
    assert num["ratios_left_out"] == {"after a failure in the test": 3, "outside the matrix": 40}
    # Every example is still counted where the outcome columns count them.
    assert (num["examples"], num["passed"], num["failed"], num["shrinking"], num["expected"], num["xfailed"]) == (145, 100, 1, 1, 40, 3)
    assert sorted(s["_ratios"]["numerics"]["o fp16"]) == [0.2] * 98  # the histogram plots the same population
    md, html = _documents(s, tmp_path)
    cell = "o fp16 p99 0.2 max 0.2 (n 98), excused 3 max 1.5, failed 1 max 4"
    assert cell in md and cell in html
    assert "Left out: numerics: 3 after a failure in the test, 40 outside the matrix." in md


def test_shrinking_is_told_apart_per_process():
    """A test's record order says what ran after its failure only within one
    process: the same node id in another shard (a rerun) starts afresh."""
    sh = Shards()
    sh.example(MATRIX, "failed", 3.0, shard="gw0-1")
    sh.example(MATRIX, "passed", 0.5, shard="gw0-1")  # shrinking
    sh.example(MATRIX, "passed", 0.25, shard="gw1-2")
    o = sh.merge({MATRIX: "failed"})["properties"]["numerics"]["ratios"]["o"]
    assert (o["count"], o["max"], o["failed"]["count"]) == (1, 0.25, 1)


@pytest.mark.parametrize(
    "values, p50, p99",
    [
        ([0.1] * 99 + [0.9], 0.1, 0.1),  # 100 values: the 99th, not the max
        ([float(i) for i in range(1, 201)], 100.0, 198.0),
        ([float(i) for i in range(1, 51)], 25.0, 50.0),  # under 100 values p99 is the max: n is shown beside it
        ([0.3], 0.3, 0.3),
    ],
)
def test_quantiles_are_nearest_rank(values, p50, p99):
    st = summary._stats(values[::-1])
    assert (st["count"], st["p50"], st["p99"], st["max"]) == (len(values), p50, p99, max(values))


def test_every_quantile_shows_its_count(tmp_path):
    sh = Shards()
    for i in range(100):
        sh.example(MATRIX, "passed", 0.9 if i == 0 else 0.1)
    s = sh.merge({MATRIX: "passed"})
    o = s["properties"]["numerics"]["ratios_by_dtype"]["o fp16"]
    assert (o["count"], o["p99"], o["max"]) == (100, 0.1, 0.9)
    md, html = _documents(s, tmp_path)
    assert "o fp16 p99 0.1 max 0.9 (n 100)" in md and "o fp16 p99 0.1 max 0.9 (n 100)" in html and "nearest rank" in md
    report = json.loads(json.dumps(s, default=str))
    assert "  numerics error/bound o fp16: p99 0.100 max 0.900 (100 examples)" in gate.summarize(report, 1)


def test_examples_per_minute_counts_matrix_examples(tmp_path):
    """30 matrix examples, 10 more before a failing test's failure, 20 shrink
    attempts after it, 60 of the suite's own tests: 40 examples in a minute."""
    sh = Shards()
    for _ in range(30):
        sh.example(MATRIX, "passed", 0.5)
    for _ in range(9):
        sh.example(FAILING, "passed", 0.5)
    sh.example(FAILING, "failed", 3.0)
    for i in range(20):
        sh.example(FAILING, "failed" if i % 2 else "passed", 0.5)
    for _ in range(60):
        sh.example(POWER, "passed", 0.5)
    s = sh.merge({MATRIX: "passed", FAILING: "failed", POWER: "passed"}, wall=60.0)
    run = s["run"]
    assert (run["examples"], run["examples_begun"], run["examples_by_family"], run["examples_per_minute"]) == (40, 120, {"sm80": 40}, pytest.approx(40.0))
    assert "40 examples in 60 s (40/min)" in gate.summarize(json.loads(json.dumps(s, default=str)), 1)[0]
    md, _ = _documents(s, tmp_path)
    assert "| 40 | 120 | 60 | 40 |" in md and "all begun" in md


def test_the_compile_floor_counts_worker_ids_and_the_compiles_it_counts():
    """gw0 restarted (a second pid) is one worker; a deliberate cold compile
    (10 s) is no floor compile and stays out of the mean seconds per compile."""
    sh = Shards()
    compiled = lambda key, seconds: {"compile": {"misses": 1, "seconds": seconds}, "notes": {"compile_key": key}}  # noqa: E731
    sh.example(MATRIX, "passed", 0.5, shard="gw0-100", **compiled("k1", 2.0))
    sh.example(MATRIX, "passed", 0.5, shard="gw0-101", **compiled("k2", 2.0))  # gw0 after a restart
    sh.example(MATRIX, "passed", 0.5, shard="gw1-200", **compiled("k3", 2.0))
    sh.example(MATRIX, "passed", 0.5, shard="gw1-200", compile={"misses": 1, "seconds": 10.0}, notes={DELIBERATE_COMPILES: "a fresh cache"})
    comp = sh.merge({MATRIX: "passed"}, wall=30.0)["compile"]
    assert (comp["compiles"], comp["artifacts"], comp["deliberate"]["compiles"]) == (4, 3, 1)
    floor = comp["floor"]
    assert (floor["workers"], floor["per_compile"], floor["seconds"]) == (2, pytest.approx(2.0), pytest.approx(3 * 2.0 / 2))
    assert comp["keys_floor"]["seconds"] == pytest.approx(3 * 2.0 / 2) and "restarted worker once" in floor["definition"]
    assert summary.worker_id("gw12-4711") == "gw12" and summary.worker_id("main-1") == "main"


def test_coverage_counts_the_examples_the_findings_count():
    """The property tests' examples, shrinking included (their facts ran), as
    ground.findings.property_test_observations takes them; a suite test's
    examples (THD here) are no coverage."""
    sh = Shards()
    sh.example(MATRIX, "passed", 0.5)
    sh.example(FAILING, "failed", 3.0)
    sh.example(FAILING, "passed", 0.5, case=Case(s_q=2, s_kv=2))  # shrinking: it exercised its facts
    for _ in range(5):
        sh.example(POWER, "passed", 0.5, case=THD)
    s = sh.merge({MATRIX: "passed", FAILING: "failed", POWER: "passed"})
    cov = s["coverage"]
    assert cov["examples"] == 3 and cov["facts"]["layout"]["dense"] == 3 and cov["facts"]["layout"]["thd"] == 0
    from ground.findings import property_test_observations

    assert len(property_test_observations(sh.records + [{"kind": "collected", "tests": {MATRIX: "numerics", FAILING: "numerics", POWER: None}}])) == 3


TOY = """
import time

import pytest
from hypothesis import Phase, given, settings, strategies as st
from ground.case import Case
from ground.outcome import PropertyFailure
from properties import recorder
from properties.common import finish

@pytest.mark.property("toy")
@settings(max_examples=25, database=None, derandomize=True, phases=[Phase.generate, Phase.shrink])
@given(st.integers(1, 50))
def test_toy(s):
    case = Case(s_q=s, s_kv=s)
    recorder.begin("toy", case)

    def judged():
        if s > 3:
            raise PropertyFailure("toy", case, f"O: s_q {s} > 3", {"quantity": "o", "worst": []})
        return {"o": s / 4}

    finish("toy", case, time.perf_counter(), judged)
"""

CONFTEST = """
def pytest_addhooks(pluginmanager):
    if not pluginmanager.has_plugin("sdpa_conformance"):
        import conformance.plugin
        pluginmanager.register(conformance.plugin, "sdpa_conformance")
"""


def test_a_real_shrink_is_left_out_of_the_statistics(pytester, monkeypatch):
    """Hypothesis, shrinking a failure, runs passing examples too (s_q 2 and 3
    here): the statistics keep only what passed before the first failure."""
    from hypothesis import settings

    for var in ("SDPA_ADAPTER", "SDPA_SM80_COMPAT", "SDPA_KERNELS_SOURCE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("PYTHONPATH", str(pytester.path.parent))
    profile = settings.get_current_profile_name()
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_toy=TOY)
    try:
        pytester.runpytest("-p", "no:cacheprovider", "-p", "no:benchmark").assert_outcomes(failed=1)
    finally:
        settings.load_profile(profile)
    lines = [json.loads(x) for p in (pytester.path / "sdpa-report" / "shards").rglob("*.jsonl") for x in p.read_text().splitlines()]
    outcomes = [r["outcome"] for r in lines if r["kind"] == "obs"]
    first = outcomes.index("failed")
    assert "passed" in outcomes[first:]  # shrinking ran passing examples
    s = json.loads((pytester.path / "sdpa-report" / "report.json").read_text())
    toy = s["properties"]["toy"]
    assert toy["ratios"]["o"]["count"] == first  # the failure raised before its ratios: it has none
    assert toy["ratios_left_out"] == {"after a failure in the test": len(outcomes) - first - 1}
    assert s["run"]["examples"] == first + 1 and s["run"]["examples_begun"] == len(outcomes)
