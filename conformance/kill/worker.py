"""One worker process of the mutant harness: its share of a mutant's units
(``run_share``), searched as one process searching them all would, and the
spawned process' entry point (``_worker``)."""

from __future__ import annotations

import os
import time
import traceback
from contextlib import contextmanager
from pathlib import Path

from conformance import inflight as flight
from conformance.kill.catalogue import LARGE_BUDGET, adapter_for
from conformance.kill.failures import out_of_memory
from conformance.kill.kinds import KINDS, check_property, flavors_for
from conformance.kill.replay import HANG_S, _setup
from conformance.kill.search import Unit, confirmation, search, unit_result
from kernels.mutants import Mutant
from properties import watchdog


def run_share(
    mutant: Mutant,
    units,
    take,
    report,
    stop,
    *,
    adapter,
    profile: str,
    budget_s: float,
    scale: float,
    t0: float,
    check=check_property,
    large=None,
    confirm=None,
    inflight=None,
    max_shrinks=None,
) -> None:
    """One process's share of a mutant's units (``search_units``): ``take()``
    gives the next unit's index (None: no more), each searched exactly as one
    process searching them all searches it (its own count, seed and settings:
    ``search``), and reported as ``report("start", i)`` then
    ``report("unit", i, unit_result)``. ``stop.value``: the first unit known
    to have failed, over every share of the mutant; a unit after it is not
    needed for the verdict, so it is skipped, or abandoned mid-search (its
    check no longer launches; its result says ``abandoned``). Only a failure
    lowers it (not an ``infra`` one: the parent searches that unit again
    first), so no unit before the first failure is ever skipped (two shares
    lowering it at once may leave the larger of their indices: that only skips
    less). The cap: ``budget_s`` from this share's start, as a single
    process's from its own. ``large``: a lock every share of every mutant
    but the controls holds while searching a large-tier kind (8-17 GB per
    example), so that they search them one at a time; waiting for it spends
    the cap (conformance.large_lock).
    ``confirm``: the kill confirmation (``confirmation``). ``inflight``:
    the flight recorder (conformance.inflight), told each Case before its
    check runs."""
    deadline, flavors = time.perf_counter() + budget_s, flavors_for(mutant)
    while (i := take()) is not None:
        if stop.value < i:
            continue
        report("start", i)
        unit = units[i]
        kind = unit.kind

        def gated(kind, case, adapter, i=i):
            if stop.value < i:
                return None
            if inflight is not None:
                inflight(i, kind.name, case.to_dict())
            watchdog.arm(f"unit {i}")  # a started watchdog (the harness' workers) ends a hung example's process
            try:
                return check(kind, case, adapter)
            finally:
                watchdog.disarm()

        now = time.perf_counter()
        with _holding(large if kind.examples == LARGE_BUDGET else None, deadline):  # a kill's pristine replay too
            one = search(unit, adapter, flavors, profile=profile, until=deadline, t0=t0, check=gated, scale=scale, max_shrinks=max_shrinks)
            res = unit_result(one, time.perf_counter() - now, confirm and confirm(kind)) | {"abandoned": stop.value < i}
        if res["failure"] and res["failure"]["verdict"] != "infra" and not res["abandoned"]:
            stop.value = min(stop.value, i)
        report("unit", i, res)


def _taking(queues):
    """``take()`` over ``queues`` in turn: each until its None (the next unit index; None: no more)."""
    left = list(queues)

    def take():
        while left:
            task = left[0].get()
            if task is not None:
                return task
            left.pop(0)
        return None

    return take


@contextmanager
def _holding(lock, deadline: float):
    """``lock`` held (None: nothing to hold), waited for until ``deadline`` at
    most (a search that starts past it is cut without drawing)."""
    if lock is None:
        yield
        return
    held = lock.acquire(timeout=max(0.0, deadline - time.perf_counter()))
    try:
        yield
    finally:
        if held:
            lock.release()


def _worker(mutant: Mutant, specs, opts: dict, share: int, shares: int, tasks, out, stop, large, born: float) -> None:
    """Process entry: one share of a mutant (``specs``: its units as (kind
    name, stratum, part, parts)); ``tasks``: queues of unit indices, each taken from until
    its None, in turn), output to its log, messages to ``out``: ("start" |
    "unit" | "stale" | "harness" | "done", mutant, share, unit index, payload)."""
    log = Path(opts["log_dir"]) / (f"{mutant.name}.log" if shares == 1 else f"{mutant.name}.{share}.log")
    with open(log, "w") as f:
        os.dup2(f.fileno(), 1)
        os.dup2(f.fileno(), 2)
    current = [None]

    def report(what, i, res=None):
        current[0] = i if what == "start" else None
        out.put((what, mutant.name, share, i, res))

    try:
        from kernels.source import StaleMutant

        _setup(opts)
        by_name = {k.name: k for k in KINDS}
        units = [Unit(by_name[name], *rest) for name, *rest in specs]
        t0 = time.perf_counter() - (time.time() - born)  # first_failure_s: from the mutant's start
        try:
            adapter = adapter_for(mutant, opts.get("adapter_factory"))
        except StaleMutant as e:
            out.put(("stale", mutant.name, share, None, str(e)))
            return
        check = opts.get("check") or check_property
        # An example past the bound: the process ends with EXIT_HANG, its Case in the flight record (run_all: hung).
        watchdog.start(opts.get("hang_s", HANG_S), lambda label, seconds: None, backstop=False, exit_code=watchdog.EXIT_HANG)
        run_share(
            mutant,
            units,
            _taking(tasks),
            report,
            stop,
            adapter=adapter,
            profile=opts["profile"],
            budget_s=opts["budget_s"],
            scale=opts.get("examples_scale", 1.0),
            t0=t0,
            check=check,
            large=large,
            confirm=confirmation(mutant, check, opts.get("adapter_factory"), opts),
            inflight=flight.recorder(flight.path(opts["log_dir"], mutant.name, share)),
            max_shrinks=opts.get("max_shrinks"),
        )
    except BaseException as e:  # noqa: BLE001 - outside any property call (or a refusal): the harness, not the mutant
        traceback.print_exc()
        out.put(("harness", mutant.name, share, current[0], ("infra" if out_of_memory(e) else "harness_error", f"{type(e).__name__}: {e}")))
        return
    out.put(("done", mutant.name, share, None, None))
