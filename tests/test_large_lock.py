"""conformance.large_lock: one holder at a time across processes, and a
holder that dies (a mutated kernel crashing its process) frees it, where a
multiprocessing lock stays taken and starved every later large-tier search
of the run, the control's included."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal

from conformance.kill.catalogue import CONTROL, CONTROL_SM90
from conformance.large_lock import LargeTierLock
from tests.test_kill_verdicts import _opts, survive


def _hold_then_die(lock, held):
    assert lock.acquire(timeout=5)
    held.set()
    os.kill(os.getpid(), signal.SIGKILL)  # dies holding it, as a crashed launch does


def _hold(lock, held, done):
    assert lock.acquire(timeout=5)
    held.set()
    done.wait(10)
    lock.release()


def _dead_holder(ctx, lock) -> None:
    held = ctx.Event()
    p = ctx.Process(target=_hold_then_die, args=(lock, held))
    p.start()
    assert held.wait(30)
    p.join(30)
    assert p.exitcode == -signal.SIGKILL


def test_a_holder_that_dies_frees_the_lock(tmp_path):
    ctx = mp.get_context("spawn")
    lock = LargeTierLock(tmp_path / "large.lock")
    _dead_holder(ctx, lock)
    assert lock.acquire(timeout=2)
    lock.release()


def test_a_multiprocessing_lock_stays_taken_by_a_dead_holder():
    """Why the file lock: the harness's lock before it, under the same death."""
    ctx = mp.get_context("spawn")
    lock = ctx.Lock()
    _dead_holder(ctx, lock)
    assert not lock.acquire(timeout=1)


def test_a_live_holder_excludes_the_others_until_it_releases(tmp_path):
    ctx = mp.get_context("spawn")
    lock, held, done = LargeTierLock(tmp_path / "large.lock"), ctx.Event(), ctx.Event()
    p = ctx.Process(target=_hold, args=(lock, held, done))
    p.start()
    assert held.wait(30)
    assert not lock.acquire(timeout=0.5)
    done.set()
    p.join(30)
    assert p.exitcode == 0 and lock.acquire(timeout=2)
    lock.release()


def test_the_controls_are_the_bug_class_that_takes_no_lock():
    """run_all (conformance.kill.processes) hands the large-tier lock to every mutant but the controls (by bug class)."""
    assert CONTROL.bug_class == CONTROL_SM90.bug_class == "control"


def crash_the_mutant(kind, case, adapter):
    """The mutant's process (its stand-in adapter carries rewrites) dies at its first large-tier example, holding the lock."""
    if adapter.rewrites:
        os.kill(os.getpid(), signal.SIGKILL)
    return survive(kind, case, adapter)


def test_a_mutant_that_dies_holding_the_lock_starves_no_search(tmp_path):
    """Spawned for real, --jobs 2: a mutant's large-tier search dies by a
    signal while holding the lock, and is searched once more (an infra death)
    by a process that must get the lock; the control's large-tier search runs
    to its count. With a lock that stays taken, both waited out the cap
    (the control ended `incomplete`)."""
    from conformance.kill import catalogue as C
    from conformance.kill import processes as P
    from kernels.mutants import Mutant
    from kernels.source import Rewrite

    crasher = Mutant("crasher", "large_offsets", (Rewrite("f16", "a", "b"),), "numerics_large_offsets", "w")
    opts = _opts(tmp_path, crash_the_mutant, profile="ci", budget_s=90, kinds=["numerics_large_offsets"])
    control, rec = P.run_all([C.CONTROL, crasher], opts, jobs=2, progress=lambda line: None)
    assert control["verdict"] == "survived" and control["complete"], control
    assert rec["verdict"] == "infra" and "SIGKILL" in rec["error"], rec  # died again when searched once more
    assert sorted(p.name for p in tmp_path.glob("crasher*.log")) == ["crasher.1.log", "crasher.log"]  # the first process, the one more
    assert (tmp_path / ".large-tier.lock").exists()
