"""The per-example phase timer (ground.phases) and the report's
per-worker profile built from it."""

import time

from ground import phases
from reports.summary import merge


def test_nested_phases_are_charged_exclusively():
    phases.take()
    with phases.phase("launch"):
        time.sleep(0.02)
        with phases.phase("reference"):
            time.sleep(0.03)
    got = phases.take(compile_seconds=0.005)
    assert 0.029 <= got["reference"] < 0.06
    assert 0.01 <= got["launch"] < 0.03  # 20 ms of its own, less the 5 ms compile moved out
    assert got["compile"] == 0.005
    assert phases.take() == {}


def test_timed_decorator_and_unknown_phase():
    @phases.timed("inputs")
    def make():
        time.sleep(0.01)
        return 7

    phases.take()
    assert make() == 7 and phases.take()["inputs"] >= 0.009
    try:
        with phases.phase("not-a-phase"):
            pass
    except AssertionError:
        pass
    else:
        raise AssertionError("an unknown phase name must be refused")


def test_profile_sums_per_worker_and_reports_time_between_examples():
    case = {"layout": "dense"}
    recs = []
    for shard, t0 in (("gw0-1", 100.0), ("gw1-2", 100.0)):
        for i in range(2):
            recs.append({"kind": "begin", "shard": shard, "property": "numerics", "case": case, "t": t0 + 10 * i})
            recs.append(
                {
                    "kind": "obs",
                    "shard": shard,
                    "property": "numerics",
                    "case": case,
                    "outcome": "passed",
                    "seconds": 4.0,
                    "phases": {"compile": 3.0, "launch": 0.5},
                    "t_end": t0 + 10 * i + 4,
                }
            )
    prof = merge(recs)["profile"]
    assert [w["worker"] for w in prof["workers"]] == ["gw0-1", "gw1-2"]
    w = prof["workers"][0]
    assert w["examples"] == 2 and w["span_seconds"] == 14.0 and w["example_seconds"] == 8.0 and w["between_examples"] == 6.0
    assert w["phases"] == {"compile": 6.0, "launch": 1.0, "other": 1.0}
    assert prof["phases"]["compile"] == 12.0 and prof["example_seconds"] == 16.0


def test_each_workers_timeline_is_counted_from_the_run_start(tmp_path):
    """A worker's collected record carries when it loaded the plugin and when it collected; with its first and
    last example, its timeline in seconds since the session began; the report renders it beside the wall."""
    from reports import render

    case = {"layout": "dense"}
    recs = [
        {"kind": "collected", "shard": "gw0-1", "tests": {"t": "numerics"}, "t_loaded": 103.0, "t": 105.5},
        {"kind": "begin", "shard": "gw0-1", "property": "numerics", "case": case, "test": "t", "t": 107.0},
        {"kind": "obs", "shard": "gw0-1", "property": "numerics", "case": case, "test": "t", "outcome": "passed", "seconds": 2.0, "t_end": 109.0},
        {"kind": "session", "shard": "main-1", "start": 100.0, "end": 112.0, "wall_seconds": 12.0},
    ]
    s = merge(recs)
    (w,) = s["profile"]["workers"]
    assert w["timeline"] == {"loaded": 3.0, "collected": 5.5, "first": 7.0, "last": 9.0}
    md = render.to_markdown(render.blocks(s), tmp_path / "plots")
    assert "Worker timeline" in md and "(wall 12 s)" in md and "| gw0-1 | 3 | 5.5 | 7 | 9 |" in md
    # Shards written before the collected record carried its times: those cells are blank.
    old = merge([r for r in recs if r["kind"] != "collected"])
    assert old["profile"]["workers"][0]["timeline"] == {"loaded": None, "collected": None, "first": 7.0, "last": 9.0}
    assert "| gw0-1 | - | - | 7 | 9 |" in render.to_markdown(render.blocks(old), tmp_path / "plots")


def test_slowest_tests_are_ranked_by_their_span_on_their_worker():
    """A test's span runs from its first begun example to its last verdict; what its examples did not use is 'between'."""
    case = {"layout": "dense"}
    recs = []
    for test, shard, t0, n in (("a", "gw0-1", 0.0, 3), ("b", "gw1-2", 0.0, 1), ("c", "gw0-1", 50.0, 2)):
        for i in range(n):
            recs.append({"kind": "begin", "shard": shard, "property": "numerics", "case": case, "test": test, "t": t0 + 10 * i})
            recs.append(
                {
                    "kind": "obs",
                    "shard": shard,
                    "property": "numerics",
                    "case": case,
                    "test": test,
                    "outcome": "passed",
                    "seconds": 2.0,
                    "t_end": t0 + 10 * i + 2,
                }
            )
    got = merge(recs)["slowest_tests"]
    assert [(r["test"], r["worker"], r["examples"], r["span_seconds"], r["example_seconds"], r["between_examples"]) for r in got] == [
        ("a", "gw0-1", 3, 22.0, 6.0, 16.0),
        ("c", "gw0-1", 2, 12.0, 4.0, 8.0),
        ("b", "gw1-2", 1, 2.0, 2.0, 0.0),
    ]


def test_rejected_examples_are_tallied_per_test_and_worker():
    """A rejected example (drawn, refused, no verdict) is counted with its seconds on its test and worker, part of
    the time between verdicts; examples and example seconds stay the verdicts'."""
    case = {"layout": "dense"}
    recs = [
        {"kind": "begin", "shard": "gw0-1", "property": "metamorphic", "case": case, "test": "t", "t": 0.0},
        {"kind": "rejected", "shard": "gw0-1", "property": "metamorphic", "test": "t", "seconds": 1.5, "reason": "r", "t": 1.5},
        {"kind": "rejected", "shard": "gw0-1", "property": None, "test": "t", "seconds": 0.5, "reason": "r", "t": 2.0},
        {"kind": "begin", "shard": "gw0-1", "property": "metamorphic", "case": case, "test": "t", "t": 2.0},
        {
            "kind": "obs",
            "shard": "gw0-1",
            "property": "metamorphic",
            "case": case,
            "test": "t",
            "outcome": "passed",
            "seconds": 1.0,
            "t_end": 3.0,
            "draw_seconds": 0.25,
        },
    ]
    got = merge(recs)
    (w,) = got["profile"]["workers"]
    assert (w["examples"], w["example_seconds"], w["between_examples"], w["rejected"], w["rejected_seconds"], w["draw_seconds"]) == (1, 1.0, 2.0, 2, 2.0, 0.25)
    assert (got["profile"]["rejected"], got["profile"]["rejected_seconds"], got["profile"]["draw_seconds"]) == (2, 2.0, 0.25)
    (t,) = got["slowest_tests"]
    assert (t["test"], t["rejected"], t["rejected_seconds"], t["between_examples"], t["draw_seconds"]) == ("t", 2, 2.0, 2.0, 0.25)


def test_the_recorder_times_a_rejection_from_its_draw(tmp_path):
    """recorder.rejected writes one record per rejection, its seconds counted from the draw's mark (testgen's
    ``recorder.drawing``), and the next one from the last rejection."""
    import json

    from ground.case import Case
    from ground.outcome import Observation
    from properties import recorder

    previous = recorder.open_shard(str(tmp_path / "shard.jsonl"))
    try:
        recorder.set_test("t")
        recorder.begin("metamorphic", Case())
        recorder.drawing()
        time.sleep(0.05)
        recorder.rejected("case: the relation does not move it\nmore")
        recorder.rejected("again")
        recorder.drawing()
        time.sleep(0.02)
        recorder.drawn()
        recorder.observe(Observation("metamorphic", Case(), outcome="passed"))
        recorder.observe(Observation("metamorphic", Case(), outcome="passed"))  # no draw marked: none recorded
    finally:
        recorder.close_shard(previous)
    rows = [json.loads(line) for line in (tmp_path / "shard.jsonl").read_text().splitlines()]
    first, second = [r for r in rows if r["kind"] == "rejected"]
    assert first["test"] == "t" and first["property"] == "metamorphic" and first["reason"] == "case: the relation does not move it"
    assert 0.05 <= first["seconds"] < 1.0 and second["seconds"] < 0.05
    drawn, undrawn = [r for r in rows if r["kind"] == "obs"]
    assert 0.02 <= drawn["draw_seconds"] < 1.0 and "draw_seconds" not in undrawn


def test_phase_ends_synchronize_the_device_only_when_asked(monkeypatch):
    """A phase's end waits for the device (its seconds are its own) only with SDPA_PHASE_SYNC=1; by default
    it times the host's issuing. The run's report names the mode; the switch is read from the environment."""
    import subprocess
    import sys
    from unittest import mock

    import torch

    calls = []
    with mock.patch.object(torch.cuda, "is_available", lambda: True), mock.patch.object(torch.cuda, "is_initialized", lambda: True):
        with mock.patch.object(torch.cuda, "synchronize", lambda *a: calls.append(1)):
            for sync, waits in ((True, 1), (False, 0)):
                monkeypatch.setattr(phases, "SYNC", sync)
                calls.clear()
                with phases.phase("bounds"):
                    pass
                assert len(calls) == waits
    phases.take()
    base = {k: v for k, v in __import__("os").environ.items() if k != "SDPA_PHASE_SYNC"}
    for env, expected in (
        (base, "False host issue time only (the default; SDPA_PHASE_SYNC=1 syncs each phase)"),
        (dict(base, SDPA_PHASE_SYNC="0"), "False host issue time only (the default; SDPA_PHASE_SYNC=1 syncs each phase)"),
        (dict(base, SDPA_PHASE_SYNC="1"), "True device synchronized at each phase's end (SDPA_PHASE_SYNC=1)"),
    ):
        code = "from ground import phases; print(phases.SYNC, phases.mode())"
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
        assert out.stdout.strip() == expected
