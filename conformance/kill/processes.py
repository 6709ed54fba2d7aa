"""Every mutant over processes (the mutant harness): how many processes
each gets (``plan_shares``), ``run_all`` (spawning the workers, judging a
share that died, hung or outlived the cap), and the progress lines."""

from __future__ import annotations

import queue as queue_mod
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

from conformance import inflight as flight
from conformance.kill.catalogue import CONTROL, GRACE_S
from conformance.kill.kinds import flavors_for, searched
from conformance.kill.replay import HANG_REPLAY_S, HANG_S, REPLAY_S, _replay_fresh, _signal_name
from conformance.kill.search import base_record, failure_fields, first_failing, merge_units, search_units, unit_planned
from conformance.kill.worker import _worker
from conformance.large_lock import LargeTierLock
from ground.case import Case
from kernels.mutants import Mutant
from properties import watchdog


def plan_shares(work: Sequence[float], units: Sequence[int], jobs: int) -> List[int]:
    """Processes per mutant: one each; the jobs left over when there are more
    jobs than mutants go one at a time to the mutant with the most planned
    work per process (``work``), at most one process per unit. Deterministic."""
    n = [1] * len(work)
    for _ in range(max(0, jobs - len(work))):
        open_ = [i for i in range(len(work)) if n[i] < units[i]]
        if not open_:
            break
        n[max(open_, key=lambda i: (work[i] / n[i], -i))] += 1
    return n


def mutant_units(mutant: Mutant, opts: dict) -> list:
    """A mutant's units as a worker of ``opts`` searches them."""
    return search_units(
        searched(mutant, opts["kinds"], explicit=opts.get("explicit", False)), flavors_for(mutant), opts["profile"], opts.get("examples_scale", 1.0)
    )


def share_plan(mutants: Sequence[Mutant], opts: dict, jobs: int) -> Tuple[dict, dict]:
    """Each mutant's units and its processes (``plan_shares``), by name."""
    units = {m.name: mutant_units(m, opts) for m in mutants}
    shares = plan_shares([_work(units[m.name], opts) for m in mutants], [len(units[m.name]) for m in mutants], jobs)
    return units, dict(zip((m.name for m in mutants), shares))


def _work(units, opts: dict) -> float:
    """The planned work of ``units``: examples weighed by the property's seconds (conformance.schedule)."""
    from conformance.schedule import weight_of

    return sum(unit_planned(opts["profile"], u, opts.get("examples_scale", 1.0)) * weight_of(u.kind.property) for u in units)


# The catalogue fields of a record (base_record) that a mutant with no search result keeps
# (its change and rewrites too: --resume compares them).
CATALOGUE_FIELDS = ("name", "bug_class", "family", "targets", "expected_killer", "change", "rewrites", "why", "kinds")


def _fallback(m: Mutant, verdict: str, error: str) -> dict:
    """The record of a mutant whose process died, outlived the cap or failed in the harness."""
    base = base_record(m)
    return {k: base[k] for k in CATALOGUE_FIELDS} | {"verdict": verdict, "error": error}


@dataclass
class _Running:
    """The parent's view of one mutant's shares."""

    mutant: Mutant
    units: list
    procs: dict  # share -> Process
    stop: object  # multiprocessing Value: the first failing unit (run_share)
    born: float
    current: dict = field(default_factory=dict)  # share -> the unit it searches
    finished: set = field(default_factory=set)  # shares that ended (done, or dead and recorded)
    results: dict = field(default_factory=dict)  # unit -> unit_result
    events: dict = field(default_factory=dict)  # unit (-1: before any) -> (verdict, error): a share died or raised
    stale: Optional[str] = None
    tasks: object = None  # the mutant's queue of unit indices, then one None per share
    large: object = None  # the lock its shares hold while searching a large-tier kind (one for every mutant)
    queued: list = field(default_factory=list)  # the unit indices put in its queue, in search order
    retried: set = field(default_factory=set)  # units searched again in a fresh process after an infra failure
    own: list = field(default_factory=list)  # those processes' own queues: held here (a process keeps no reference once started)

    def ended(self, share: int, unit: Optional[int], verdict: str, error: str) -> None:
        """A share ended without its result (it raised in the harness, died or
        hung) while searching ``unit`` (None: before any): the verdict stops there."""
        i = -1 if unit is None else unit
        self.events[i] = (verdict, error)
        self.stop.value = min(self.stop.value, i)
        self.finished.add(share)

    def unstarted(self) -> List[int]:
        """Units no share has started that the verdict may still need (before the first known failure)."""
        busy = set(self.current.values())
        return [i for i in self.queued if i < self.stop.value and i not in self.results and i not in busy]

    def record(self, opts: dict) -> dict:
        m = self.mutant
        wall = round(time.time() - self.born, 1)
        if self.stale is not None:
            return base_record(m, opts.get("examples_scale", 1.0)) | {"verdict": "stale", "error": self.stale, "wall_s": wall}
        first = first_failing(self.results, self.events)
        missing = [i for i in range(len(self.units) if first is None else first) if i not in self.results]
        if missing:  # no unit before the verdict's may go unsearched (run_share): a bug of the harness
            return _fallback(m, "harness_error", f"no result for unit {missing[0]} ({self.units[missing[0]][0].name})")
        if first is not None and first in self.events:
            verdict, error = self.events[first]
            where = f" (searching {self.units[first][0].name}{_stratum_label(self.units[first][1])})" if first >= 0 else ""
            return _fallback(m, verdict, error + where)
        rec = base_record(m, opts.get("examples_scale", 1.0))
        merge_units(rec, self.units, self.results, profile=opts["profile"], scale=opts.get("examples_scale", 1.0))
        return rec | {"wall_s": wall}


def _stratum_label(stratum) -> str:
    return f"[{stratum[0]}-{stratum[1]}]" if stratum else ""


def late_share_for(running, opts: dict) -> Optional[_Running]:
    """The running mutant a freed job should join as one more share: the one
    with the most planned work (``_work``) in units no share has started, per
    live share, if any has more such units than live shares to take them;
    its last unit cannot start before it (units are taken in search order).
    A mutant none of whose shares has started a unit yet (still starting, or
    stale) gets none. None: no mutant has work left for another process."""
    best, key = None, None
    for run in running:
        live = len(run.procs) - len(run.finished)
        left = run.unstarted()
        if run.stale is not None or live == 0 or not (run.current or run.results) or len(left) <= live or (run.born + opts["budget_s"] - time.time()) <= 0:
            continue
        k = _work([run.units[i] for i in left], opts) / live
        if key is None or k > key:
            best, key = run, k
    return best


def run_all(mutants: Sequence[Mutant], opts: dict, jobs: int, progress=print, on_record=None, done_units=None, on_unit=None) -> List[dict]:
    """Every mutant in spawned processes, ``jobs`` processes at a time: one
    each, or, when there are more jobs than mutants, the spare jobs split the
    mutants' units (``plan_shares``): each share a process taking the next
    unit in search order from the mutant's queue, the record merged as one
    process would have made it (``merge_units``). Once no mutant waits, a job
    a finished mutant frees joins a running one as a late share
    (``late_share_for``; its cap: what is left of the mutant's), so a long
    search (the control's) does not run alone at the end. ``on_record(rec)``:
    called with each mutant's record as it is made; ``on_unit(name, i,
    result)`` with each unit's result; ``done_units`` (name -> unit index ->
    result, of an earlier call): units not searched again, their results
    merged as if searched here (a mutant whose needed units are all done
    starts no process). The machine's faults are no verdict: a unit whose
    search ran out of memory, or whose share was killed by a signal (the
    host's OOM killer's SIGKILL, or a crash that did not recur on replay:
    ``crashed``), is searched once more in a fresh process (its cap: what is
    left of the mutant's), and ``infra`` if that fails the same way.
    A share whose example runs past ``hang_s`` (HANG_S) ends itself
    (watchdog.EXIT_HANG) and its Case is judged as a crash's (``hung``).
    Deaths are judged in search order, each after the shares on lower units
    are done with them, and one past a unit that already failed is not
    replayed (``waits``, ``moot``): its verdict could not change. A
    share still alive past the cap (--budget-s: searching and shrinking) +
    GRACE_S is killed: ``incomplete`` (a slow search, each example under the
    hang bound). A share that exits without a result is a ``harness_error``.
    Either ends the mutant's verdict at its unit (the first failure in search
    order still wins)."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    # One for every mutant (a large-tier example holds 8-17 GB of the device); a file lock, so a holder's crash frees it.
    large = LargeTierLock(Path(opts["log_dir"]) / ".large-tier.lock")
    units, plan = share_plan(mutants, opts, jobs)
    pending, running, records = list(mutants), {}, {}
    limit = opts["budget_s"] + GRACE_S

    def left_s(run: _Running) -> float:
        return opts["budget_s"] - (time.time() - run.born)

    def retry(run: _Running, i: Optional[int], replace: bool) -> bool:
        """Unit ``i`` (None: the share's start) searched once more, by a fresh
        share that takes it first, then (``replace``: in place of a share that
        died) the mutant's queue as that share would have; False where it
        cannot be (searched again already, or past the cap)."""
        key = -1 if i is None else i
        if key in run.retried or left_s(run) <= 0:
            return False
        run.retried.add(key)
        first = ctx.Queue()
        run.own.append(first)
        for task in ([] if i is None else [i]) + [None]:
            first.put(task)
        spawn(run, len(run.procs), len(run.procs) + 1, left_s(run), [first] + [run.tasks] * replace)
        return True

    def lost(run: _Running, share: int, i: Optional[int], verdict: str, why: str) -> None:
        """A share ended without a result for unit ``i``: an infra fault is searched again, once."""
        run.current.pop(share, None)
        if verdict == "infra" and retry(run, i, replace=True):
            run.finished.add(share)
            return
        run.ended(share, i, verdict, why)

    def crashed(run: _Running, share: int, i: Optional[int], signum: int) -> bool:
        """A share killed by signal ``signum`` while launching a recorded Case
        of unit ``i`` (conformance.inflight): that Case replayed in a fresh
        process on the mutant's kernels, then on the pristine ones. Dying
        again on the mutant's while the pristine kernels pass it is a kill,
        ``error`` (the mutated kernel crashes its process); dying or failing
        on the pristine ones too is ``pristine_fails``. False (not judged:
        ``infra``, searched once more) for the OOM killer's signal, no Case
        in flight, or a replay that does not die again."""
        if signum == flight.OOM_SIGNAL:
            return False
        how = f"the process was killed by signal {signum} ({_signal_name(signum)}) launching this Case, and again on replay"
        return in_flight_death(run, share, i, how, lambda again: "died" in again, REPLAY_S)

    def hung(run: _Running, share: int, i: Optional[int]) -> bool:
        """A share that ended with ``watchdog.EXIT_HANG``: its example of unit
        ``i`` ran past the bound (``hang_s``). Judged as ``crashed`` judges a
        death: the recorded Case must run past the bound again in a fresh
        process on the mutant's kernels and pass on the pristine ones (each
        replay bounded by HANG_REPLAY_S) for ``error`` (the
        mutated kernel hangs); False (``infra``, searched once more) otherwise."""
        bound = opts.get("hang_s", HANG_S)
        how = f"the example ran past {bound:g} s launching this Case, and past {HANG_REPLAY_S:g} s alone in a fresh process (a hung kernel)"
        return in_flight_death(run, share, i, how, lambda again: "hung" in again, HANG_REPLAY_S)

    def in_flight_unit(run: _Running, share: int) -> Optional[int]:
        """The unit a share was searching: its last "start", else its flight record's (written before a launch)."""
        i = run.current.get(share)
        if i is None:
            got = flight.read(flight.path(opts["log_dir"], run.mutant.name, share))
            i = None if got is None else got["unit"]
        return i

    def waits(run: _Running, share: int) -> bool:
        """A dead share whose unit comes after one another share is still searching: a failure there may
        settle the verdict, making this death's replays (up to HANG_REPLAY_S each, one at a time) moot."""
        i = in_flight_unit(run, share)
        return i is not None and any(j is not None and j < i for s, j in run.current.items() if s != share and s not in run.finished)

    def moot(run: _Running, share: int) -> bool:
        """A dead share whose unit comes after a unit that already failed: no verdict waits on it (the first
        failure in search order wins), so its Case is not replayed."""
        i = in_flight_unit(run, share)
        return i is not None and i > run.stop.value

    def in_flight_death(run: _Running, share: int, i: Optional[int], how: str, recurs, timeout: float) -> bool:
        """The share's recorded Case of unit ``i`` replayed on the mutant's
        kernels (``recurs(result)``: it ended the same way again) then on the
        pristine ones; a kill (``error``) or ``pristine_fails`` recorded as
        that unit's result, else False."""
        got = flight.read(flight.path(opts["log_dir"], run.mutant.name, share))
        if got is None or (i is not None and got["unit"] != i):
            return False
        i = got["unit"]  # the file, written before the launch, also where the "start" message died with the process
        if i in run.results:  # a unit already searched to its result: the death came between units
            return False
        kind, case = run.units[i][0], Case.from_dict(got["case"])
        again = _replay_fresh(kind, [case], opts, run.mutant, timeout=timeout)
        if not (again and recurs(again)):
            return False
        pristine = _replay_fresh(kind, [case], opts, timeout=timeout)
        if pristine is not None and "unknown" in pristine:
            return False
        verdict = "error" if pristine is None else "pristine_fails"
        summary = how + ("; the pristine kernels pass it" if pristine is None else "; so did it, or it failed, on the pristine kernels")
        failure = failure_fields(verdict, summary, time.time() - run.born, case, case)
        if pristine is not None:
            failure.update(pristine=pristine, mutant_verdict="error")
        planned = unit_planned(opts["profile"], run.units[i], opts.get("examples_scale", 1.0))
        run.results[i] = dict(
            examples=got["example"], planned=planned, shrinks=0, excused=0, cut=False, shrink_capped=False, seconds=0.0, failure=failure, abandoned=False
        )
        run.stop.value = min(run.stop.value, i)
        run.current.pop(share, None)
        run.finished.add(share)
        if on_unit is not None:
            on_unit(run.mutant.name, i, run.results[i])
        return True

    def handle(msg) -> None:
        what, name, share, i, payload = msg
        run = running.get(name)
        if run is None:
            return
        if what == "start":
            run.current[share] = i
        elif what == "unit":
            run.current[share] = None
            if payload["abandoned"]:
                return
            infra = (payload["failure"] or {}).get("verdict") == "infra"
            if infra and retry(run, i, replace=False):
                return
            run.results[i] = payload
            if infra:  # its share did not lower it: the verdict stops here
                run.stop.value = min(run.stop.value, i)
            if on_unit is not None:
                on_unit(name, i, payload)
        elif what == "stale":
            run.stale = payload
            run.finished.add(share)
        elif what == "harness":
            lost(run, share, i, *payload)
        elif what == "done":
            run.finished.add(share)

    def drain() -> None:
        try:
            while True:
                handle(out.get_nowait())
        except queue_mod.Empty:
            pass

    def spawn(run: _Running, share: int, shares: int, budget_s: float, tasks=None) -> None:
        specs = [(u.kind.name, *u[1:]) for u in run.units]
        p = ctx.Process(
            target=_worker,
            args=(run.mutant, specs, opts | {"budget_s": budget_s}, share, shares, tasks or [run.tasks], out, run.stop, run.large, run.born),
            name=f"mutant-{run.mutant.name}-{share}",
            daemon=True,
        )
        p.start()
        run.procs[share] = p

    while pending or running:
        while pending and sum(len(r.procs) for r in running.values()) + plan[pending[0].name] <= max(jobs, plan[pending[0].name]):
            m = pending.pop(0)
            saved = (done_units or {}).get(m.name, {})
            stop = min([len(units[m.name])] + [i for i, r in saved.items() if r.get("failure")])
            run = running[m.name] = _Running(m, units[m.name], {}, ctx.Value("q", stop, lock=False), time.time())
            run.results.update(saved)
            run.queued = [i for i in range(len(run.units)) if i < stop and i not in saved]
            n = min(plan[m.name], len(run.queued))
            # The control never waits on a mutant's large-tier search (conformance.large_lock).
            run.tasks, run.large = ctx.Queue(), None if m.bug_class == CONTROL.bug_class else large
            for i in run.queued + [None] * n:
                run.tasks.put(i)
            for share in range(n):
                spawn(run, share, n, opts["budget_s"])
        if not pending:  # a job a finished mutant freed: a late share for the mutant with the most work left per process
            idle = jobs - sum(len(r.procs) - len(r.finished) for r in running.values())
            while idle > 0 and (run := late_share_for(running.values(), opts)) is not None:
                run.tasks.put(None)  # the queue's units come first: the new share takes the next unit, then its own end
                spawn(run, len(run.procs), len(run.procs) + 1, left_s(run))
                idle -= 1
        try:
            handle(out.get(timeout=1.0))
        except queue_mod.Empty:
            pass
        for name, run in list(running.items()):
            # Deaths in search order: the lowest unit's may settle the verdict and spare the later ones' replays.
            for share, p in sorted(run.procs.items(), key=lambda sp: (run.current.get(sp[0]) is None, run.current.get(sp[0]) or 0)):
                if share in run.finished or (p.is_alive() and time.time() - run.born <= limit):
                    continue
                overdue = p.is_alive()
                if not overdue and p.exitcode and waits(run, share):
                    continue  # judged once the lower units' shares are done with them
                if overdue:
                    p.kill()
                p.join(timeout=5)
                time.sleep(0.2)
                drain()  # a message may have landed just before it exited
                if share in run.finished:
                    continue
                if not overdue and p.exitcode and moot(run, share):
                    run.current.pop(share, None)
                    run.finished.add(share)
                    continue
                unit = run.current.get(share)
                if overdue:
                    lost(run, share, unit, "incomplete", f"worker killed {limit:.0f} s after the mutant's start: past the cap (--budget-s) + {GRACE_S} s")
                elif (p.exitcode or 0) < 0:  # a signal: a crash of the mutated kernel only if replay says so (crashed)
                    if not crashed(run, share, unit, -p.exitcode):
                        lost(run, share, unit, "infra", f"worker killed by signal {-p.exitcode} ({_signal_name(-p.exitcode)}) without a verdict")
                elif p.exitcode == watchdog.EXIT_HANG:  # an example past the bound: a hang of the mutated kernel only if replay says so
                    if not hung(run, share, unit):
                        bound = opts.get("hang_s", HANG_S)
                        lost(run, share, unit, "infra", f"worker's example ran past {bound:g} s, and its Case did not do so again on replay")
                else:
                    lost(run, share, unit, "harness_error", f"worker exited with code {p.exitcode} without a verdict")
            if len(run.finished) == len(run.procs):
                for p in run.procs.values():
                    p.join(timeout=5)
                records[name] = run.record(opts)
                del running[name]
                progress(_progress_line(records[name], len(records), len(mutants)))
                if on_record is not None:
                    on_record(records[name])
    return [records[m.name] for m in mutants]


def drew(rec: dict) -> str:
    """What each searched kind drew: ``kind drawn/planned`` (``cut``: the
    cap stopped it; ``short``: a stratum drew fewer than planned), joined by
    commas; ``-`` when none was searched."""
    return (
        ", ".join(
            f"{k['name']} {k['examples']}/{k.get('planned', '?')}" + (" cut" if k.get("cut") else "") + (" short" if k.get("short") else "")
            for k in rec.get("kinds") or ()
        )
        or "-"
    )


# Why a record holds no verdict, where its own error says nothing.
NO_VERDICT_WHY = {
    "incomplete": "the cap (--budget-s) stopped the search before its example counts",
    "short": "a search drew fewer examples than planned: its property rejected the rest",
}


def _progress_line(rec: dict, done: int, total: int) -> str:
    how = f" by {rec['killed_by']} after {rec['first_failure_s']} s" if rec.get("killed_by") else ""
    # An error's message tells a crash of the kernel from a bug of the harness.
    text = rec.get("error") or NO_VERDICT_WHY.get(rec["verdict"]) or rec.get("summary")
    if rec["verdict"] == "pristine_fails":
        text = f"fails on the pristine kernels too: {pristine_text(rec)}"
    why = f" ({text})" if text and rec["verdict"] != "killed" else ""
    kinds = f" [drew {drew(rec)}]" if rec.get("kinds") else ""
    return f"[{done}/{total}] {rec['verdict']:<9} {rec['name']}{how}{why}{kinds}"


def pristine_text(rec: dict) -> str:
    p = rec.get("pristine") or {}
    return f"{p.get('case_text', '?')}: {p.get('failure', '?')}"
