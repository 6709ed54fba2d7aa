"""The kill harness split over processes (conformance.kill.processes.run_all with
more jobs than mutants), on the CPU with stand-in properties: a mutant's
units (one Hypothesis search per kind and stratum) shared out between
processes give the record one process gives, apart from timings: the same
counts per kind, the same Cases checked, the same killer, the first failure
by search order whatever share finds one first. Shares are simulated in this
process (``run_share`` in a chosen order) and, once, spawned for real."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from conformance.kill import catalogue as C
from conformance.kill import cli as CLI
from conformance.kill import kinds as K
from conformance.kill import processes as P
from conformance.kill import search as S
from conformance.kill import tally as T
from conformance.kill import worker as W
from ground.outcome import Observation, PropertyFailure
from kernels.mutants import Mutant
from kernels.source import Rewrite, check_rewrites

TIMINGS = ("wall_s", "first_failure_s")
TWO_KINDS = ("numerics_dense", "tails_dense")  # 8 strata each for the control: 16 units


def no_adapter(rewrites):
    """The stand-in properties launch nothing."""
    return None


def survive(kind, case, adapter):
    return Observation(kind.property, case, ratios={"o": 0.5})


def fail_late(kind, case, adapter):
    """Fails tails_dense (the control's second kind) on bf16 Cases of several heads."""
    if kind.name == "tails_dense" and case.dtype == "bfloat16" and case.h_q > 1:
        raise PropertyFailure(kind.property, case, "planted")
    return survive(kind, case, adapter)


def _timeless(rec: dict) -> dict:
    return {k: v for k, v in rec.items() if k not in TIMINGS} | {"kinds": [{k: v for k, v in kind.items() if k != "seconds"} for kind in rec["kinds"]]}


class _Stop:
    def __init__(self, value: int):
        self.value = value


def _split(mutant, shares, check, *, kinds, profile="ci", order=None, budget_s=C.CAP_S):
    """``mutant`` searched by ``shares`` simulated shares, unit i going to
    share ``shares[i]`` (a list) or ``i % shares`` (an int), the shares run
    one after the other in ``order`` (default: last first, so a later unit's
    failure is found first). Returns (record, the units each share started)."""
    units = P.mutant_units(mutant, {"kinds": kinds, "profile": profile})
    owner = shares if isinstance(shares, list) else [i % shares for i in range(len(units))]
    n = max(owner) + 1
    stop, results, started = _Stop(len(units)), {}, {s: [] for s in range(n)}
    for share in order or reversed(range(n)):
        mine = iter([i for i in range(len(units)) if owner[i] == share])

        def report(what, i, res=None, share=share):
            if what == "start":
                started[share].append(i)
            elif not res["abandoned"]:
                results[i] = res

        W.run_share(
            mutant, units, lambda mine=mine: next(mine, None), report, stop, adapter=None, profile=profile, budget_s=budget_s, scale=1.0, t0=0.0, check=check
        )
    rec = S.base_record(mutant)
    S.merge_units(rec, units, results, profile=profile)
    return rec, started


def _one(mutant, check, *, kinds, profile="ci"):
    return S.run_mutant(mutant, check=check, profile=profile, kinds=kinds, adapter_factory=no_adapter)


def _seen(into):
    def check(kind, case, adapter):
        into[kind.name, repr(case)] += 1
        return survive(kind, case, adapter)

    return check


@pytest.mark.parametrize("shares", [2, 5])
def test_a_split_control_draws_what_one_process_draws(shares):
    """Every kind of the control (the large tier's too), split over 2 and 5
    shares: per kind the same examples drawn and planned, the same Cases
    checked (each unit's search keeps its count, seed and settings), the
    same record."""
    kinds = [k.name for k in K.searched(C.CONTROL)]
    alone, split = Counter(), Counter()
    one = _one(C.CONTROL, _seen(alone), kinds=kinds)
    rec, started = _split(C.CONTROL, shares, _seen(split), kinds=kinds)
    assert one["verdict"] == rec["verdict"] == "survived" and len(one["kinds"]) == len(kinds)
    assert all(k["examples"] == k["planned"] > 0 for k in rec["kinds"])
    assert _timeless(rec) == _timeless(one) and split == alone
    assert all(started.values()) and sorted(i for s in started.values() for i in s) == list(
        range(len(P.mutant_units(C.CONTROL, {"kinds": kinds, "profile": "ci"})))
    )


def test_a_failure_in_one_share_kills_as_one_process_does():
    """A failure planted in tails_dense (the control's units 8-15) kills with
    the killer, shrunk Case and counts of the unsplit run: numerics_dense in
    full, tails_dense up to its failing stratum."""
    one = _one(C.CONTROL, fail_late, kinds=TWO_KINDS)
    rec, _ = _split(C.CONTROL, 3, fail_late, kinds=TWO_KINDS)
    assert one["verdict"] == "killed" and one["killed_by"] == "tails_dense" and one["kinds"][0]["examples"] == one["kinds"][0]["planned"]
    assert one["kinds"][1]["examples"] < one["kinds"][1]["planned"]
    assert _timeless(rec) == _timeless(one)


def test_two_failing_shares_give_the_first_failure_in_search_order():
    """numerics_dense fails in its last stratum (unit 7), tails_dense in its
    first (unit 8): the share holding unit 8 runs first, so its failure is
    found first; the record is still the unsplit one's, killed by
    numerics_dense. Once unit 7 failed, the later share skips what it had
    left (unit 8 is searched only because it was found before)."""

    def fails(kind, case, adapter):
        if kind.name == "numerics_dense" and case.dtype == "bfloat16" and case.d_qk == 256:  # qwen bf16: its last stratum
            raise PropertyFailure(kind.property, case, "planted early")
        if kind.name == "tails_dense":
            raise PropertyFailure(kind.property, case, "planted late")
        return survive(kind, case, adapter)

    units = P.mutant_units(C.CONTROL, {"kinds": TWO_KINDS, "profile": "ci"})
    assert [(u.kind.name, u.stratum) for u in units[7:9]] == [("numerics_dense", ("qwen", "bfloat16")), ("tails_dense", ("gptoss", "float16"))]
    one = _one(C.CONTROL, fails, kinds=TWO_KINDS)
    assert one["killed_by"] == "numerics_dense" and "planted early" in one["summary"]
    later_first, started = _split(C.CONTROL, [0] * 8 + [1] * 8, fails, kinds=TWO_KINDS, order=[1, 0])
    assert started[1] == [8] and started[0] == list(range(8))  # unit 8 failed first: share 1 stopped there
    assert _timeless(later_first) == _timeless(one)
    earlier_first, started = _split(C.CONTROL, [0] * 8 + [1] * 8, fails, kinds=TWO_KINDS, order=[0, 1])
    assert started[1] == [] and _timeless(earlier_first) == _timeless(one)  # unit 7 known first: nothing after it searched


def test_two_failing_strata_of_one_kind_count_as_one_process_counts():
    """numerics_dense fails in qwen fp16 (unit 6) and qwen bf16 (unit 7), unit
    7 found first: the kind counts the strata up to unit 6, as one process
    that stopped there, not unit 7's draws too."""

    def fails(kind, case, adapter):
        if kind.name == "numerics_dense" and case.d_qk == 256:
            raise PropertyFailure(kind.property, case, f"planted in {case.dtype}")
        return survive(kind, case, adapter)

    one = _one(C.CONTROL, fails, kinds=TWO_KINDS)
    assert "float16" in one["summary"] and "bfloat16" not in one["summary"] and one["kinds"][0]["examples"] > 6 * 40
    rec, started = _split(C.CONTROL, [0] * 7 + [1] * 9, fails, kinds=TWO_KINDS, order=[1, 0])
    assert started[1] == [7] and _timeless(rec) == _timeless(one)


def test_a_search_after_a_known_failure_is_abandoned():
    """A unit in flight when an earlier one fails stops launching: its check
    is no longer called, its result is marked abandoned and never merged."""
    calls, stop, reported = [], _Stop(10**6), []
    units = P.mutant_units(C.CONTROL, {"kinds": ("numerics_dense",), "profile": "ci"})

    def check(kind, case, adapter):
        calls.append(case)
        if len(calls) == 3:
            stop.value = 0  # unit 0 failed in another share meanwhile
        return survive(kind, case, adapter)

    take = iter([5, None]).__next__  # this share is handed unit 5, then nothing
    W.run_share(C.CONTROL, units, take, lambda *a: reported.append(a), stop, adapter=None, profile="ci", budget_s=60, scale=1.0, t0=0.0, check=check)
    (_, i), (what, j, res) = reported
    assert (i, what, j) == (5, "unit", 5) and res["abandoned"] and len(calls) == 3 and res["examples"] == 40


def test_the_cap_applies_to_each_share_from_its_start():
    """--budget-s caps each share's wall clock from its own start (the shares
    of a mutant start together): a share past it draws nothing more, and the
    merged record is incomplete, as one process past its cap."""
    rec, _ = _split(C.CONTROL, 2, survive, kinds=TWO_KINDS, budget_s=0)
    assert rec["verdict"] == "incomplete" and not rec["complete"] and all(k["cut"] and k["examples"] == 0 for k in rec["kinds"])


def test_spare_jobs_go_to_the_mutant_with_the_most_work():
    assert P.plan_shares([100.0, 1.0], [200, 5], 16) == [15, 1]
    assert P.plan_shares([100.0, 60.0], [200, 5], 16) == [11, 5]  # at most a process per unit
    assert P.plan_shares([1.0, 1.0, 1.0], [9, 9, 9], 2) == [1, 1, 1]  # no more jobs than mutants: one each
    _, plan = P.share_plan([C.CONTROL], {"kinds": K.KIND_NAMES, "profile": "ci"}, 16)
    assert plan == {"control": 16}


def test_run_all_splits_a_lone_mutant_over_its_jobs(tmp_path):
    """Spawned for real: the control alone at --jobs 3 runs as 3 processes
    (one log each) and gives the unsplit record, apart from timings; with a
    failure planted in its second kind too."""
    opts = dict(profile="ci", budget_s=600, kinds=list(TWO_KINDS), findings=None, log_dir=str(tmp_path), threads=1, adapter_factory=no_adapter, check=survive)
    lines = []
    (rec,) = P.run_all([C.CONTROL], opts, jobs=3, progress=lines.append)
    assert _timeless(rec) == _timeless(_one(C.CONTROL, survive, kinds=TWO_KINDS)) and rec["verdict"] == "survived"
    assert sorted(p.name for p in tmp_path.glob("*.log")) == ["control.0.log", "control.1.log", "control.2.log"]
    assert lines == [f"[1/1] survived  control [drew {P.drew(rec)}]"] and "numerics_dense 320/320, tails_dense 160/160" in lines[0]
    (rec,) = P.run_all([C.CONTROL], opts | {"check": fail_late}, jobs=3, progress=lines.append)
    assert rec["killed_by"] == "tails_dense" and _timeless(rec) == _timeless(_one(C.CONTROL, fail_late, kinds=TWO_KINDS))


def survive_after_a_late_share(kind, case, adapter):
    """``survive``, once the file ``$SDPA_TEST_LATE_LOG`` (a late share's log) exists: the
    control's first example waits for the share its freed job starts (a bounded wait), so
    that share has units left to take however fast each process starts."""
    import os
    import time
    from pathlib import Path

    late, until = Path(os.environ["SDPA_TEST_LATE_LOG"]), time.monotonic() + 120
    while not late.exists() and time.monotonic() < until:
        time.sleep(0.05)
    return survive(kind, case, adapter)


def checked_adapter(rewrites):
    """No adapter, but a rewrite that does not match is stale, as the real adapters find it."""
    check_rewrites(rewrites)
    return None


def _running(units, *, procs, finished=(), current=None, results=(), stop=None, stale=None):
    run = P._Running(C.CONTROL, units, dict.fromkeys(range(procs)), _Stop(len(units) if stop is None else stop), S.time.time())
    run.finished, run.current, run.results, run.stale = set(finished), dict(current or {}), dict.fromkeys(results, {}), stale
    run.queued = list(range(len(units)))
    return run


def test_a_freed_job_joins_the_mutant_with_the_most_work_left():
    """Once no mutant waits, a job that finished one goes to a running
    mutant as a late share: the one with the most planned work in units no
    share has started, per live share; never to one whose units left (before
    its first known failure) are no more than its live shares."""
    units = P.mutant_units(C.CONTROL, {"kinds": TWO_KINDS, "profile": "ci"})  # 8 numerics_dense, then 8 tails_dense
    opts = {"profile": "ci", "budget_s": 600}
    busy = _running(units, procs=1, current={0: 3}, results=range(3))  # units 4..15 left to one share
    light = _running(units, procs=2, current={0: 12, 1: 13}, results=range(12))  # 14, 15 left to two shares
    assert busy.unstarted() == list(range(4, 16)) and P.late_share_for([light, busy], opts) is busy
    assert P.late_share_for([light], opts) is None  # two units left, two live shares
    assert P.late_share_for([_running(units, procs=1, current={0: 3}, results=range(3), stop=5)], opts) is None  # a failure at 5: unit 4 alone needed
    assert P.late_share_for([_running(units, procs=2, finished={0, 1})], opts) is None  # no live share: its record is being made
    assert P.late_share_for([_running(units, procs=1, stale="x", current={0: 0})], opts) is None
    assert P.late_share_for([_running(units, procs=1)], opts) is None  # no unit started yet: still starting, or stale
    assert P.late_share_for([busy], opts | {"budget_s": 0}) is None  # past its cap: no new process would search


def test_run_all_gives_a_freed_job_to_a_running_mutant(tmp_path, monkeypatch):
    """Spawned for real, --jobs 2: a stale mutant ends at once and its job
    joins the control as a late share (its own log, which the control's
    examples wait for); the control's record is still the one process's,
    apart from timings."""
    monkeypatch.setenv("SDPA_TEST_LATE_LOG", str(tmp_path / "control.1.log"))
    stale = Mutant("stale", "bias", (Rewrite("f16", "not in the file", "x"),), "numerics_dense", "w")
    opts = dict(
        profile="ci",
        budget_s=600,
        kinds=list(TWO_KINDS),
        findings=None,
        log_dir=str(tmp_path),
        threads=1,
        adapter_factory=checked_adapter,
        check=survive_after_a_late_share,
    )
    control, rec = P.run_all([C.CONTROL, stale], opts, jobs=2, progress=lambda line: None)
    assert (rec["verdict"], control["verdict"]) == ("stale", "survived"), (rec.get("error"), control.get("error"))
    assert _timeless(control) == _timeless(_one(C.CONTROL, survive, kinds=TWO_KINDS))
    assert sorted(p.name for p in tmp_path.glob("*.log")) == ["control.1.log", "control.log", "stale.log"]


def _unit_results(mutant, check, *, kinds, upto: int) -> dict:
    """Index -> unit_result of ``mutant``'s first ``upto`` units searched as one process searches them (stopping at a failure)."""
    import math

    units, out = P.mutant_units(mutant, {"kinds": kinds, "profile": "ci"}), {}
    for i, u in enumerate(units[:upto]):
        one = S.search(u, None, K.flavors_for(mutant), profile="ci", until=math.inf, t0=0.0, check=check)
        out[i] = S.unit_result(one, 0.0)
        if one.first is not None:
            break
    return out


def test_run_all_merges_the_units_an_earlier_call_searched(tmp_path):
    """Spawned for real: the control's first 10 units handed over as done (an
    earlier call's, --resume) are not searched again (``on_unit`` sees only
    the other 6) and the record is the one process's; with a failure among
    the units handed over (and every unit before it), no process starts."""
    opts = dict(profile="ci", budget_s=600, kinds=list(TWO_KINDS), findings=None, log_dir=str(tmp_path), threads=1, adapter_factory=no_adapter, check=survive)
    seen = []
    (rec,) = P.run_all(
        [C.CONTROL],
        opts,
        jobs=2,
        progress=lambda line: None,
        done_units={"control": _unit_results(C.CONTROL, survive, kinds=TWO_KINDS, upto=10)},
        on_unit=lambda n, i, r: seen.append(i),
    )
    assert sorted(seen) == list(range(10, 16)) and _timeless(rec) == _timeless(_one(C.CONTROL, survive, kinds=TWO_KINDS))
    failing = _unit_results(C.CONTROL, fail_late, kinds=TWO_KINDS, upto=16)
    assert any(r["failure"] for r in failing.values())
    logs = set(tmp_path.iterdir())
    (rec,) = P.run_all([C.CONTROL], opts | {"check": fail_late}, jobs=2, progress=lambda line: None, done_units={"control": failing})
    assert set(tmp_path.iterdir()) == logs  # no process, no new log
    assert rec["killed_by"] == "tails_dense" and _timeless(rec) == _timeless(_one(C.CONTROL, fail_late, kinds=TWO_KINDS))


def _validate(*argv):
    return CLI._validate(CLI.parser().parse_args(list(argv)))


def test_only_control_runs_the_control_alone(capsys):
    """The control's name selects no mutant (each family's control always
    runs); a control-only run that survives passes (no kill rate to reach)."""
    v = _validate("--only", "control")
    assert [c.name for c in v["controls"]] == ["control"] and v["mutants"] == []
    v = _validate("--family", "all", "--only", "control,control_sm90")
    assert [c.name for c in v["controls"]] == ["control", "control_sm90"] and v["mutants"] == []
    code = CLI.main(CLI.parser().parse_args(["--only", "control_sm90"]))
    assert code == 2 and "--family sm90" in capsys.readouterr().err
    control = S.base_record(C.CONTROL)
    assert T.exit_code(T.tally([]), [control], goal=0.9) == 0 and "the control alone" in T.kill_rate_line(T.tally([]), 0.9)
    assert T.exit_code(T.tally([]), [control | {"verdict": "incomplete"}], goal=0.9) == 1


def test_a_long_stratum_is_searched_in_parts_of_seeds_of_their_own():
    """No pr, ci or dev count needs parts (their searches are the ones the
    catalogue's verdicts were measured with); the controls at 10x ci (nightly
    x0.4) search every stratum in parts of at most PART_EXAMPLES that add up
    to its count, each part with a seed of its own, labelled apart for --resume."""
    import math

    from conformance.kill.resume import unit_label

    assert all(S.planned_examples(p, k) <= S.PART_EXAMPLES for p in ("pr", "ci", "dev") for k in K.KINDS)
    for control in C.CONTROLS.values():
        opts = {"kinds": K.KIND_NAMES, "profile": "nightly", "examples_scale": 0.4}
        units = P.mutant_units(control, opts)
        assert units and all(S.unit_planned("nightly", u, 0.4) <= S.PART_EXAMPLES for u in units)
        per_stratum = {u.kind.name: S.planned_examples("nightly", u.kind, 0.4) * len({v.stratum for v in units if v.kind is u.kind}) for u in units}
        assert S.planned_by_kind(units, "nightly", 0.4) == per_stratum
        assert len({json.dumps(unit_label(u)) for u in units}) == len(units)
    assert max(u.parts for u in P.mutant_units(C.CONTROLS["sm90"], opts)) == 4  # sm90_numerics_dense: 400 in 4 parts of 100

    kind, stratum = K.KINDS[K.KIND_NAMES.index("numerics_dense")], ("qwen", "float16")
    drawn = {}

    def record(part):
        def check(kind, case, adapter):
            drawn.setdefault(part, []).append(case)

        return check

    for part in range(2):
        one = S.search(S.Unit(kind, stratum, part, 2), None, ("qwen",), profile="ci", until=math.inf, t0=0.0, check=record(part), scale=2.75)
        assert one.examples == one.planned == S.unit_planned("ci", S.Unit(kind, stratum, part, 2), 2.75) == 55
    shared = set(drawn[0]) & set(drawn[1])
    assert len(shared) <= 2, shared  # Hypothesis begins every search at its simplest draws; the rest are the part's own
