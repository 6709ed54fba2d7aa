"""Merging the per-process shards and rendering the reports (CPU, no pytest run).

Two simulated xdist workers and a controller write shards through the same
recorder calls the properties and the plugin use; the merge must count every
example, failure and test exactly once.
"""

from __future__ import annotations

import base64
import json

import pytest

import reports
from ground import findings
from ground.case import Case, load_case_file
from ground.coverage import REQUIRED
from ground.outcome import Observation
from ground.tables import flavor_of
from properties import CHECKS, recorder
from reports import casefile, coverage, render, shards, summary

RUN = "20261202-120000-1"
CASES = {
    "dense": Case(s_q=130, s_kv=77, batch=2, h_q=4, h_kv=2, causal=True, seed=1),
    "thd": Case(layout="thd", dtype="bfloat16", d_qk=192, d_v=128, q_lens=(3, 0), kv_lens=(5, 2), q_base=2, seed=2),
    "bias": Case(s_q=8, s_kv=8, bias="float32", sinks=True, d_qk=40, d_v=40, seed=3),
}


def _worker(report_dir, name, tests, run=RUN):
    """tests: {nodeid: [(property, case, outcome or None, ratio)]} (None: the
    check raised without a verdict)."""
    previous = recorder.open_shard(str(report_dir / shards.SHARDS / run / f"{name}-1.jsonl"))
    try:
        # Each test's property marker (the test matrix's): its examples count for the findings.
        recorder.write({"kind": "collected", "tests": {nodeid: examples[0][0] if examples else None for nodeid, examples in tests.items()}})
        for nodeid, examples in tests.items():
            recorder.set_test(nodeid)
            for prop, case, outcome, ratio in examples:
                recorder.begin(prop, case, launch=True)
                if outcome is not None:
                    # Tails examples exercise "f-example" and "f-stale"; only the xfailed one reproduced a finding.
                    exercised = ["f-example", "f-stale"] if prop == "tails" else []
                    recorder.observe(
                        Observation(
                            prop,
                            case,
                            ratios={"o": ratio, "lse": ratio / 2},
                            outcome=outcome,
                            findings=["f-example"] if outcome == "xfailed" else [],
                            exercised=exercised,
                            compile={"misses": 1, "hits": 2, "memo_hits": 0, "seconds": 0.5},
                            seconds=0.1,
                        )
                    )
            last = recorder.last_begun()
            if any(o == "failed" for _, _, o, _ in examples):
                path = casefile.write(
                    report_dir, property=last.property, case=last.case.to_dict(), params=last.params, summary="O differs", detail={"worst": []}, nodeid=nodeid
                )
                recorder.write(
                    {
                        "kind": "failure",
                        "nodeid": nodeid,
                        "property": last.property,
                        "case": last.case.to_dict(),
                        "params": last.params,
                        "summary": "O differs",
                        "case_file": str(path),
                        "repro": casefile.repro_command(path),
                    }
                )
        recorder.set_test(None)
    finally:
        recorder.close_shard(previous)


FINDINGS = [
    f.to_dict()
    for f in findings.parse(
        {
            "finding": [
                {"id": "f-example", "reason": "r", "property": "tails", "check": "no nan", "quantity": "o", "region": "padded_q_rows"},
                {"id": "f-stale", "reason": "r", "property": "tails", "check": "no nan", "quantity": "lse", "region": "padded_q_rows"},
                {
                    "id": "f-not-run",
                    "reason": "r",
                    "property": "numerics",
                    "check": "error model",
                    "quantity": "lse",
                    "region": "padded_q_rows",
                    "when": {"sinks": True},
                },
            ]
        },
        "kf.toml",
        [3, 10, 17],
        checks=CHECKS,
    )
]


def _controller(report_dir, tests, examples_ran=True, run=RUN):
    previous = recorder.open_shard(str(report_dir / shards.SHARDS / run / "main-1.jsonl"))
    try:
        for nodeid, outcome, message in tests:
            recorder.write({"kind": "test", "nodeid": nodeid, "outcome": outcome, "duration": 1.0, "message": message})
        recorder.write(
            {
                "kind": "session",
                "environment": {"mode": "compile-only (no GPU)", "adapter": "prepared", "gpu": None, "versions": {}},
                "start": 0.0,
                "end": 30.0,
                "wall_seconds": 30.0,
                "exitstatus": 1,
                "findings": FINDINGS if examples_ran else [],
                "findings_file": "kf.toml",
            }
        )
    finally:
        recorder.close_shard(previous)


@pytest.fixture
def two_workers(tmp_path):
    d, c = CASES["dense"], CASES["thd"]
    _worker(
        tmp_path,
        "gw0",
        {
            "t.py::test_a": [("numerics", d.replace(seed=i), "passed", 0.1 * (i + 1)) for i in range(5)],
            "t.py::test_b": [("numerics", d, "passed", 0.5), ("numerics", d.replace(seed=9), "failed", 3.0), ("numerics", d.replace(seed=9), "failed", 2.0)],
        },
    )
    _worker(
        tmp_path,
        "gw1",
        {
            "t.py::test_c": [("tails", c, "passed", 0.0), ("tails", c, "passed", 0.2), ("tails", CASES["bias"], "passed", 0.3), ("tails", c, "xfailed", 5.0)],
            # The worker died during this example: no verdict, no failure record.
            "t.py::test_d": [("tails", c.replace(seed=77), None, 0.0)],
        },
    )
    _controller(
        tmp_path,
        [
            ("t.py::test_a", "passed", ""),
            ("t.py::test_b", "failed", "PropertyFailure"),
            ("t.py::test_c", "passed", ""),
            ("t.py::test_d", "failed", "worker 'gw1' crashed while running 't.py::test_d'"),
            ("t.py::test_e", "skipped", ""),
        ],
    )
    return tmp_path


def test_merge_counts_every_example_failure_and_test_once(two_workers):
    s, paths = reports.build(two_workers)
    num, tails = s["properties"]["numerics"], s["properties"]["tails"]
    # test_b failed once: its shrunk case is the failure, the other failing example a shrink attempt.
    assert (num["examples"], num["passed"], num["failed"], num["shrinking"], num["expected"], num["xfailed"], num["errors"]) == (8, 6, 1, 1, 0, 0, 0)
    assert (tails["examples"], tails["passed"], tails["failed"], tails["xfailed"], tails["errors"]) == (5, 3, 0, 1, 1)
    assert num["tests"]["passed"] == 1 and num["tests"]["failed"] == 1
    assert tails["tests"]["passed"] == 1 and tails["tests"]["failed"] == 1
    assert s["tests"] == {"passed": 2, "failed": 2, "xfailed": 0, "xpassed": 0, "skipped": 1, "error": 0, "total": 5}
    # test_b's example after its first failure is shrinking: no matrix example, begun all the same.
    assert (s["run"]["examples"], s["run"]["examples_begun"]) == (12, 13) and s["run"]["examples_per_minute"] == pytest.approx(24.0)
    o = num["ratios"]["o"]  # the passed ones' distribution, the failed one beside it
    assert (o["count"], o["over_bound"], o["max"], o["failed"], o["excused"]["count"]) == (6, 0, 0.5, {"count": 1, "over_bound": 1, "max": 3.0}, 0)
    assert num["ratios_left_out"] == {"after a failure in the test": 1}
    by = num["ratios_by_dtype"]  # the same ratios split by the case's dtype
    assert set(by) <= {"o fp16", "o bf16", "lse fp16", "lse bf16"} and sum(by[k]["count"] for k in by if k.startswith("o ")) == 6
    assert s["compile"]["compiles"] == 12 and s["compile"]["hits"] == 24 and s["compile"]["seconds"] == pytest.approx(6.0)
    assert s["coverage"]["examples"] == 13

    # One failure recorded by its worker, one recovered from the crashed worker's last begun case.
    failures = {f["nodeid"]: f for f in s["failures"]}
    assert sorted(failures) == ["t.py::test_b", "t.py::test_d"]
    crashed, doc = load_case_file(failures["t.py::test_d"]["case_file"])
    assert crashed == CASES["thd"].replace(seed=77) and doc["params"] == {"launch": True} and "crashed" in doc["summary"]
    assert failures["t.py::test_b"]["repro"].startswith("sdpa-conformance repro ")

    # Known findings: reproduced (excused a failure), stale (exercised, never
    # reproduced: the plugin fails such a run), not exercised (no example could show it).
    f = {e["id"]: e for e in s["findings"]["entries"]}
    assert (f["f-example"]["status"], f["f-example"]["exercised"], f["f-example"]["reproduced"]) == ("reproduced", 4, 1) and "repro" in f["f-example"]
    assert (f["f-stale"]["status"], f["f-stale"]["exercised"], f["f-stale"]["reproduced"]) == ("stale", 4, 0)
    assert f["f-not-run"]["status"] == "not exercised" and f["f-stale"]["source"] == "kf.toml:10"
    assert s["findings"]["stale"] == ["f-stale"]
    assert any(w.startswith("kf.toml:10: known finding 'f-stale' did not reproduce") for w in s["warnings"])
    _, doc = load_case_file(f["f-example"]["repro"].split()[-1])  # the finding's first excused example, replayable
    assert doc["finding"] == "f-example" and doc["property"] == "tails"

    # Re-rendering from the same shards (sdpa-conformance report DIR) gives the same counts.
    again, _ = reports.build(two_workers)
    assert again["properties"] == json.loads(json.dumps(s["properties"])) and len(again["failures"]) == 2


def test_rendering_writes_three_files_with_an_embedded_png(two_workers):
    _, paths = reports.build(two_workers)
    doc = json.loads(paths["json"].read_text(), parse_constant=lambda c: pytest.fail(f"non-strict JSON constant {c}"))
    assert doc["properties"]["numerics"]["examples"] == 8 and "_ratios" not in doc
    html = paths["html"].read_text()
    png = html.split("data:image/png;base64,", 1)[1].split('"', 1)[0]
    assert base64.b64decode(png)[:8] == b"\x89PNG\r\n\x1a\n"
    md = paths["md"].read_text()
    for text in (
        "compile-only (no GPU)",
        "sdpa-conformance repro",
        "f-stale",
        "stale",
        "not exercised",
        "kf.toml:10",
        "examples / min",
        "Coverage",
        "Slowest examples",
    ):
        assert text in md and text in html
    assert (two_workers / "plots" / "ratios-numerics.png").is_file()


def test_cpu_only_run_with_no_examples_renders(tmp_path):
    _controller(tmp_path, [("conformance/test_numerics.py::test_numerics_dense[llama-fp16]", "skipped", "")], examples_ran=False)
    s, paths = reports.build(tmp_path)
    assert s["run"]["examples"] == 0 and s["tests"]["skipped"] == 1 and s["failures"] == [] and list(s["properties"]) == [summary.NO_PROPERTY]
    assert all(p.is_file() for p in paths.values())
    assert "data:image/png" not in paths["html"].read_text()


def test_empty_report_dir_renders_an_incomplete_report(tmp_path):
    s, paths = reports.build(tmp_path)
    assert s["run"]["complete"] is False and s["run"]["examples"] == 0
    assert "did not finish" in paths["md"].read_text()


def test_a_torn_last_line_is_skipped_with_a_warning(tmp_path):
    _worker(tmp_path, "gw0", {"t.py::test_a": [("numerics", CASES["dense"], "passed", 0.5)]})
    with open(tmp_path / shards.SHARDS / RUN / "gw0-1.jsonl", "a") as f:
        f.write('{"kind": "begin", "prop')
    records, warnings = shards.read(tmp_path)
    assert len(records) == 3 and len(warnings) == 1 and f"{RUN}/gw0-1.jsonl line 4" in warnings[0]
    assert summary.merge(records, warnings)["properties"]["numerics"]["examples"] == 1


def test_runs_sharing_a_report_dir_are_kept_apart(tmp_path):
    finished, running = "20261201-080000-7", "20261202-115959-8"
    _worker(tmp_path, "gw0", {"t.py::test_old": [("numerics", CASES["dense"], "passed", 0.5)] * 3}, run=finished)
    _controller(tmp_path, [("t.py::test_old", "passed", "")], run=finished)
    _worker(tmp_path, "gw0", {"t.py::test_live": [("numerics", CASES["dense"], "passed", 0.5)]}, run=running)
    shards.prune(tmp_path, keep=RUN)  # what a new controller does first
    assert not (tmp_path / shards.SHARDS / finished).exists() and (tmp_path / shards.SHARDS / running).exists()
    _worker(tmp_path, "gw0", {"t.py::test_new": [("tails", CASES["thd"], "passed", 0.5)] * 2})
    _controller(tmp_path, [("t.py::test_new", "passed", "")])
    s, _ = reports.build(tmp_path, RUN)
    assert list(s["properties"]) == ["tails"] and s["run"]["examples"] == 2 and s["run"]["id"] == RUN
    assert reports.build(tmp_path)[0]["run"]["id"] == RUN  # default: the latest run


def test_coverage_axes_show_gaps():
    cov = coverage.coverage([CASES["dense"], CASES["thd"], CASES["bias"], Case(violation="d_qk_too_large", d_qk=512)])
    m = cov["matrix"]
    cell = lambda r, c: m["counts"][m["rows"].index(r)][m["columns"].index(c)]  # noqa: E731
    assert cell("dense/causal", "gptoss/float16") == 1 and cell("thd/none", "dsv3/bfloat16") == 1 and cell("dense/none", "gptoss/float16") == 1
    assert cell("dense/swa", "qwen/bfloat16") == 0  # an unexercised cell is listed, as a gap
    assert cov["facts"]["bias"]["float32"] == 1 and cov["facts"]["bias"]["float16"] == 0
    assert cov["facts"]["heads"]["GQA"] == 1 and cov["facts"]["padding"]["thd: first offset > 0"] == 1
    assert cov["facts"]["head dims"]["padded into envelope"] == 1 and cov["contract_rules"] == {"d_qk_too_large": 1}
    # One vocabulary with the strategies' coverage test: every required value is a row, and an unseen one a gap.
    assert {f"{axis}:{v}" for axis, counts in cov["facts"].items() for v in counts} >= REQUIRED
    assert "bias: float16" in cov["gaps"] and "bias: float32" not in cov["gaps"] and cov["empty_cells"] > 0
    md = render.to_markdown(render._coverage({"coverage": cov}), None)
    assert "| float16 | 0 (gap) |" in md and "- bias: float16" in md


def test_kernel_field_table_shows_each_field_value_and_its_gaps():
    """The report's field x value table (ground/feature_space.py):
    every drawn kernel field has its facts' values, seen ones counted, unseen
    ones listed as gaps; out-of-scope fields are listed with their reason."""
    rope = Case(rope=True, d_qk=64, d_v=64, s_q=3, s_kv=3, sched="lpt")
    cov = coverage.coverage([CASES["dense"], CASES["thd"], rope])
    fields = cov["kernel_fields"]
    assert fields["TemplateParams.has_rope"] == {"rope: no": 2, "rope: yes": 1}
    assert fields["wrapper.scheduler"]["sched: lpt"] == 1 and fields["wrapper.scheduler"]["sched: lpt_l2"] == 0
    assert "TemplateParams.sched_policy: sched: lpt_l2" in cov["kernel_field_gaps"]
    assert "TemplateParams.has_rope: rope: yes" not in cov["kernel_field_gaps"]
    assert "TemplateParams.tile_m" in cov["out_of_scope"]
    md = render.to_markdown(render._coverage({"coverage": cov}), None)
    assert "| TemplateParams.sched_policy | sched: lpt_l2 | 0 (gap) |" in md and "- TemplateParams.sched_policy: sched: lpt_l2" in md


def test_envelope_table_picks_the_kernels_flavor():
    specialize = pytest.importorskip("kernels.specialize")
    for d_qk in range(8, 257, 8):
        for d_v in range(8, 257, 8):
            try:
                want = specialize.pick_flavor(d_qk, d_v)
            except ValueError:
                want = "none"
            assert flavor_of(d_qk, d_v) == want, (d_qk, d_v)


def test_failures_a_passing_test_expected_are_not_run_failures(tmp_path):
    """A green run with power tests (a property run against a planted bug
    inside pytest.raises) reports no failed example: they are 'expected'."""
    d = CASES["dense"]
    _worker(tmp_path, "gw0", {"t.py::test_power": [("numerics", d, "passed", 0.5), ("numerics", d.replace(seed=5), "failed", 4.0)]})
    _controller(tmp_path, [("t.py::test_power", "passed", "")], examples_ran=False)
    s, paths = reports.build(tmp_path)
    num = s["properties"]["numerics"]
    assert (num["passed"], num["failed"], num["shrinking"], num["expected"], num["errors"]) == (1, 0, 0, 1, 0)
    md = paths["md"].read_text()
    assert "| property | examples | passed | failed | shrinking | expected | xfailed | errors |" in md
    assert "| numerics | 2 | 1 | 0 | 0 | 1 | 0 | 0 |" in md


def test_faults_are_listed_with_their_repro(tmp_path):
    _worker(tmp_path, "gw0", {"t.py::test_a": [("numerics", CASES["dense"], None, 0.0)]})
    previous = recorder.open_shard(str(tmp_path / shards.SHARDS / RUN / "gw0-2.jsonl"))
    recorder.write(
        {
            "kind": "fatal",
            "fault": "hang",
            "nodeid": "t.py::test_a",
            "message": "no verdict within 5 s",
            "repro": "sdpa-conformance repro x.json",
            "worker": "gw0",
            "pid": 2,
        }
    )
    recorder.close_shard(previous)
    _controller(tmp_path, [("t.py::test_a", "failed", "worker 'gw0' crashed")], examples_ran=False)
    s, paths = reports.build(tmp_path)
    assert s["faults"] == [
        {"fault": "hang", "nodeid": "t.py::test_a", "message": "no verdict within 5 s", "repro": "sdpa-conformance repro x.json", "worker": "gw0", "pid": 2}
    ]
    assert "Processes ended by a fault (1)" in paths["md"].read_text() and "hang: t.py::test_a (gw0, pid 2): no verdict within 5 s" in paths["html"].read_text()


def test_merge_counts_examples_and_splits_ratios_by_family():
    """Another family's examples and error/bound ratios keep rows of their own (its error model is its own)."""
    from reports.summary import merge

    def records(family, ratio):
        case = Case(family=family).to_dict()
        return [
            {"kind": "begin", "property": "numerics", "test": "t", "case": case, "t": 0.0},
            {"kind": "obs", "property": "numerics", "test": "t", "case": case, "outcome": "passed", "ratios": {"o": ratio}},
        ]

    s = merge(records("sm80", 0.5) + records("sm90", 0.25) + records("sm90", 0.75) + [{"kind": "collected", "tests": {"t": "numerics"}}])
    assert s["run"]["examples_by_family"] == {"sm80": 1, "sm90": 2}
    by = s["properties"]["numerics"]["ratios_by_dtype"]
    assert by["o fp16"]["count"] == 1 and by["o fp16 sm90"]["count"] == 2 and by["o fp16 sm90"]["max"] == 0.75


def test_each_family_counts_its_own_pairs():
    """sm90 Cases meet pairs of the sm90 factors only; the SM80 table counts SM80 Cases only."""
    from reports.coverage import coverage
    from strategies.sm90 import pool_rows

    sm90 = list(pool_rows("dense"))
    alone = coverage([Case()])
    both = coverage([Case(), *sm90])
    assert both["pairs"]["fwd"]["drawn"] == alone["pairs"]["fwd"]["drawn"] and not alone["family_pairs"]
    assert both["family_pairs"]["sm90"]["fwd"]["layouts"]["dense"]["examples"] == len(sm90) > 0


def test_each_family_lists_the_labels_it_can_exercise_that_no_case_did():
    """The sm90 family's gaps are its own (its unreachable labels and SM80 flavor axes left out): one plain dense
    sm90 Case leaves THD labels as gaps, but never a label the family declares unreachable; the SM80 Cases count
    for nothing there, and a run without sm90 Cases has no sm90 list. The report shows the list."""
    from ground.families import FAMILIES
    from reports.coverage import coverage
    from reports.render import _coverage

    cov = coverage([Case(), Case(family="sm90")])
    gaps = cov["family_gaps"]["sm90"]
    assert "padding:thd: Q capacity slack" in gaps and "memory:thd packed" in gaps
    assert not set(gaps) & set(FAMILIES["sm90"].unreachable) and not any(g.startswith(("flavor:", "head dims:")) for g in gaps)
    assert coverage([Case()])["family_gaps"] == {}
    shown = [b for b in _coverage({"coverage": cov}) if b[0] == "h" and "sm90 family" in b[2]]
    assert shown
