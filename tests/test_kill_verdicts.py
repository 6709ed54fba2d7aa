"""What the kill harness' verdicts mean (conformance.kill): the same on
every machine and job count, a kill only where the mutant's kernels failed.
A failure of the suite (its own code, a library it called, a refusal), of the
machine (out of memory, a worker killed by a signal), of the cap, or of the
rewritten source's compile is a visible non-verdict, excluded from the rate;
a kill the pristine kernels share makes the run invalid. On the CPU: stand-in
properties and adapters (an adapter with rewrites is the mutant's), exceptions
raised from fabricated frames, the emulated kernels, and real spawned
workers where the parent's handling of a process is what is checked."""

from __future__ import annotations

import json
import os
import signal
import time
import unittest
import zlib
from pathlib import Path
from types import SimpleNamespace

import pytest

from conformance.kill import catalogue as C
from conformance.kill import cli as CLI
from conformance.kill import failures as F
from conformance.kill import kinds as K
from conformance.kill import processes as P
from conformance.kill import replay as R
from conformance.kill import resume as RS
from conformance.kill import search as S
from conformance.kill import tally as T
from conformance.kill import worker as W
from ground.case import Case
from ground.outcome import Observation, PropertyFailure, Unsupported
from kernels.mutants import MUTANTS, Mutant
from kernels.source import Rewrite

QWEN_ONLY = Mutant("qwen_only", "bias", (Rewrite("d256", "a", "b"),), "tails_dense", "w")  # 2 strata per kind
OWN = str(Path(C.__file__).resolve().parents[2] / "reference" / "attention.py")  # a file of the suite
CUDNN = "/site-packages/cudnn/sdpa/fwd/kernels/sm80/prefill_f16.py"  # a file of the kernels under test
REWRITTEN = "/tmp/sdpa-rewrites-x1/prefill_f16_0123abcd.py"  # a mutant's rewritten template (kernels.source)
KINDS = {k.name: k for k in K.KINDS}


def stand_in(rewrites):
    """An adapter that launches nothing, carrying its rewrites."""
    return SimpleNamespace(rewrites=tuple(rewrites))


def survive(kind, case, adapter):
    return Observation(kind.property, case, ratios={"o": 0.5})


def _raised(source: str, filename: str, **names) -> BaseException:
    """The exception ``source`` raises when run as code of ``filename``."""
    try:
        exec(compile(source, filename, "exec"), names)
    except BaseException as e:  # noqa: BLE001
        return e
    raise AssertionError(f"{source!r} raised nothing")


def _in(filename: str, function: str, source: str, **names) -> BaseException:
    """The exception ``source`` raises inside ``function`` of ``filename`` (a frame of that name)."""
    code = f"def {function}():\n" + "".join(f"    {line}\n" for line in source.splitlines()) + f"{function}()\n"
    return _raised(code, filename, **names)


def _one(mutant, check, **kw):
    return S.run_mutant(mutant, check=check, adapter_factory=stand_in, **{"profile": "dev", **kw})


# ------------------------------------------------------------ 1. whose failure
def test_a_suite_bug_inside_a_library_is_a_harness_error():
    """Classified by who raised it, not by the innermost frame: the suite's
    code calling torch, json or the like into an exception is a bug of the
    suite (never a kill), and so is a suite exception whose text merely names
    a CUDA error while the context works; the kernels' own frames (the cudnn
    package, a mutant's rewritten file) are the mutant's crash."""
    import torch

    suite_bugs = [
        _raised("torch.matmul(torch.ones(2, 3), torch.ones(2, 3))", OWN, torch=torch),
        _raised("json.loads('{bad')", OWN, json=json),
        _raised("torch.split(torch.ones(4), [1, 2])", OWN, torch=torch),
        _raised("raise AssertionError('expected a CUDA error for this case')", OWN),
        _raised("raise RuntimeError('CUDA error: an illegal memory access was encountered')", OWN),
        KeyError("no frames at all"),
    ]
    assert [F.crash_or_harness(e) for e in suite_bugs] == ["harness_error"] * len(suite_bugs)
    assert F.crash_or_harness(_raised("raise ValueError('bad tile')", CUDNN)) == "error"
    assert F.crash_or_harness(_raised("undefined_name", REWRITTEN)) == "error"  # a rewritten file, at run time


def test_a_cuda_error_counts_only_with_the_context_lost(monkeypatch):
    """A sticky fault surfaces wherever the next synchronize is, often in the
    suite's code: it is the kernel's crash when the probe confirms this
    process' context is dead (properties.watchdog.context_lost)."""
    from properties import watchdog

    surfaced = _raised("raise RuntimeError('CUDA error: an illegal memory access was encountered')", OWN)
    monkeypatch.setattr(watchdog, "context_lost", lambda exc=None: "CUDA error: an illegal memory access was encountered")
    assert F.crash_or_harness(surfaced) == "error"
    assert F.crash_or_harness(_raised("raise AssertionError('expected 3 rows')", OWN)) == "harness_error"


def test_a_suite_bug_in_a_search_is_no_kill():
    def buggy(kind, case, adapter):
        raise _raised("json.loads('{bad')", OWN, json=json)

    rec = _one(MUTANTS[0], buggy, kinds=("numerics_dense",))
    assert rec["verdict"] == "harness_error" and "JSONDecodeError" in rec["summary"]
    t = T.tally([rec, S.base_record(MUTANTS[1]) | {"verdict": "killed"}])
    assert (t["harness_error"], t["counted"], t["kill_rate"]) == (1, 1, 1.0)


# ------------------------------------------------------------- 2. the machine
class OutOfMemoryError(RuntimeError):
    """torch.OutOfMemoryError, as its name reads (the real one needs a device to be raised)."""


def test_out_of_memory_is_infra_never_a_kill():
    """Out of memory, on the device or the host, wherever raised (the
    kernels' allocation included, and through the launch check of
    properties.common.accepted): the machine's fault, no verdict."""
    import torch

    from properties.common import accepted

    assert (
        F.crash_or_harness(_raised("raise OutOfMemoryError('CUDA out of memory. Tried to allocate 8.00 GiB')", CUDNN, OutOfMemoryError=OutOfMemoryError))
        == "infra"
    )
    assert F.crash_or_harness(_raised("raise RuntimeError('CUDA error: out of memory')", OWN)) == "infra"
    assert F.crash_or_harness(torch.OutOfMemoryError("CUDA out of memory")) == "infra"

    def launch():
        raise _raised("raise OutOfMemoryError('CUDA out of memory. Tried to allocate 8.00 GiB')", CUDNN, OutOfMemoryError=OutOfMemoryError)

    with pytest.raises(PropertyFailure) as refused:
        accepted("backward", Case(), time.perf_counter(), launch)
    assert refused.value.check == "launch" and F.failure_verdict(refused.value) == "infra"


def test_an_out_of_memory_unit_is_searched_once_more_then_infra(monkeypatch):
    searches, real = [], S.search

    def counted(kind, *a, **kw):
        searches.append(kw.get("stratum"))
        return real(kind, *a, **kw)

    def oom(kind, case, adapter):
        raise torch_oom()

    monkeypatch.setattr(S, "search", counted)
    rec = _one(MUTANTS[0], oom, kinds=("numerics_dense",))
    assert rec["verdict"] == "infra" and rec["kinds"][0]["failed"] and "OutOfMemoryError" in rec["summary"]
    assert len(searches) == 2 and searches[0] == searches[1]  # its first unit, searched twice; the kind ends there
    t = T.tally([rec])
    assert t["infra"] == 1 and t["counted"] == 0 and t["kill_rate"] is None and T.exit_code(t, None, 0.0) == 1
    assert "1 infra" in T.kill_rate_line(t, 0.9)


def torch_oom():
    import torch

    return torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 17.00 GiB")


KILLED_ONCE = "SDPA_TEST_KILLED_ONCE"


def killed_by_the_host(kind, case, adapter):
    """The host's OOM killer: SIGKILL, in the first process only where $SDPA_TEST_KILLED_ONCE names a file."""
    marker = os.environ.get(KILLED_ONCE)
    if marker is None or not Path(marker).exists():
        if marker is not None:
            Path(marker).write_text("killed")
        os.kill(os.getpid(), signal.SIGKILL)
    return survive(kind, case, adapter)


def _opts(tmp_path, check, **kw):
    return dict(profile="dev", budget_s=600, kinds=["tails_dense"], findings=None, log_dir=str(tmp_path), threads=1, adapter_factory=stand_in, check=check) | kw


def test_a_worker_killed_by_a_signal_is_searched_again_then_infra(tmp_path, monkeypatch):
    """Spawned for real: a share SIGKILLed mid-unit is the machine's (never a
    kill): the unit is searched once more in a fresh process, which gives the
    verdict; killed there too, the mutant is ``infra``."""
    monkeypatch.setenv(KILLED_ONCE, str(tmp_path / "marker"))
    (rec,) = P.run_all([QWEN_ONLY], _opts(tmp_path, killed_by_the_host), jobs=1, progress=lambda line: None)
    assert rec["verdict"] == "survived" and P.drew(rec) == "tails_dense 10/10", rec
    assert sorted(p.name for p in tmp_path.iterdir() if p.suffix == ".log") == ["qwen_only.1.log", "qwen_only.log"]  # the retry's own log
    monkeypatch.delenv(KILLED_ONCE)
    (rec,) = P.run_all([QWEN_ONLY], _opts(tmp_path, killed_by_the_host), jobs=1, progress=lambda line: None)
    assert rec["verdict"] == "infra" and "signal 9 (SIGKILL)" in rec["error"] and "searching tails_dense" in rec["error"], rec


def crashes_on_several_heads(kind, case, adapter):
    """The mutated kernel's crash (SIGABRT, as a failed CUDA assertion aborts): on Cases of several
    query heads, on the mutant's adapter only, or on every adapter where $SDPA_TEST_CRASH_ALL is set;
    only while $SDPA_TEST_CRASH_ONCE names no file yet, where it names one (a crash that does not recur)."""
    once = os.environ.get(CRASH_ONCE)
    if case.h_q > 1 and (adapter.rewrites or os.environ.get(CRASH_ALL)) and not (once and Path(once).exists()):
        if once:
            Path(once).write_text("crashed")
        os.abort()
    return survive(kind, case, adapter)


CRASH_ONCE, CRASH_ALL = "SDPA_TEST_CRASH_ONCE", "SDPA_TEST_CRASH_ALL"


def test_a_crash_that_recurs_on_replay_and_not_on_the_pristine_kernels_is_a_kill(tmp_path):
    """Spawned for real: the share dies by SIGABRT launching a Case; the flight
    recorder names it, it crashes the mutant's kernels again in a fresh process
    and passes on the pristine ones: ``error`` (a kill listed apart), that Case
    recorded, with the examples drawn up to it."""
    (rec,) = P.run_all([QWEN_ONLY], _opts(tmp_path, crashes_on_several_heads), jobs=1, progress=lambda line: None)
    assert rec["verdict"] == "error" and rec["killed_by"] == "tails_dense", rec
    assert Case.from_dict(rec["case"]).h_q > 1 and rec["first_case"] == rec["case"] and "signal 6 (SIGABRT)" in rec["summary"]
    assert rec["kinds"][0]["failed"] and rec["kinds"][0]["examples"] >= 1
    t = T.tally([rec])
    assert t["error"] == 1 and t["counted"] == 1 and t["kill_rate"] == 1.0


def test_a_crash_on_the_pristine_kernels_too_is_pristine_fails(tmp_path, monkeypatch):
    monkeypatch.setenv(CRASH_ALL, "1")
    (rec,) = P.run_all([QWEN_ONLY], _opts(tmp_path, crashes_on_several_heads), jobs=1, progress=lambda line: None)
    assert rec["verdict"] == "pristine_fails" and rec["pristine"]["signal"] == "SIGABRT" and Case.from_dict(rec["case"]).h_q > 1, rec


def test_a_crash_that_does_not_recur_is_searched_again(tmp_path, monkeypatch):
    """No kill without the crash recurring on replay: the unit is searched once more (infra's path), and survives."""
    monkeypatch.setenv(CRASH_ONCE, str(tmp_path / "marker"))
    (rec,) = P.run_all([QWEN_ONLY], _opts(tmp_path, crashes_on_several_heads), jobs=1, progress=lambda line: None)
    assert rec["verdict"] == "survived" and P.drew(rec) == "tails_dense 10/10", rec


def test_every_mutant_shares_one_large_tier_lock(tmp_path, monkeypatch):
    """A large-tier example holds 8-17 GB: the lock its searches hold is one
    for every mutant (processes stood in for: each reports its mutant stale)."""
    from multiprocessing.context import SpawnProcess

    started = []

    def start(self):
        mutant, _, _, share, _, _, out, _, large, _ = self._args
        started.append((mutant.name, large))
        out.put(("stale", mutant.name, share, None, "stood in"))

    monkeypatch.setattr(SpawnProcess, "start", start)
    monkeypatch.setattr(SpawnProcess, "join", lambda self, timeout=None: None)
    records = P.run_all([MUTANTS[0], MUTANTS[1]], _opts(tmp_path, survive), jobs=2, progress=lambda line: None)
    assert [r["verdict"] for r in records] == ["stale", "stale"] and len(started) == 2 and started[0][1] is started[1][1]


def test_a_wait_for_the_large_lock_ends_at_the_cap():
    import threading

    lock = threading.Lock()
    lock.acquire()
    t = time.perf_counter()
    with W._holding(lock, t + 0.2):
        waited = time.perf_counter() - t
    assert 0.15 < waited < 2 and lock.locked()  # not taken: the search that follows starts past the cap, cut


# ----------------------------------------------------------------- 3. the cap
def test_the_cap_holds_while_shrinking():
    """The cap is read at the failure, not at the search's start: shrinking
    (and the target optimiser finishing its climb) stops at the cap with the
    failure found so far, its shrink marked as cut by the cap. Judged by what
    ran past the cap, not by the wall time (a loaded machine is slower
    between calls): nothing but Hypothesis' final replay of the failure. The
    failure comes at the mutant's sixth example, however fast the machine;
    its shrinking takes hundreds of 50 ms steps, far past the cap."""
    from hypothesis.control import current_build_context

    budget, calls, t0 = 3.0, [], [None]

    def late_failure(kind, case, adapter):
        now = time.perf_counter()  # on entry: right after the harness read the cap for this call
        t0[0] = t0[0] or now  # no earlier than the search's start: its cap comes no later than t0 + budget
        calls.append((now, current_build_context().is_final))
        time.sleep(0.05)
        if adapter.rewrites and len(calls) > 5:
            raise PropertyFailure(kind.property, case, "planted")
        return survive(kind, case, adapter)

    rec = _one(MUTANTS[0], late_failure, kinds=("numerics_dense",), profile="ci", budget_s=budget)
    assert rec["verdict"] == "killed" and rec["shrink_capped"] and rec["case"], rec["verdict"]
    past_cap = [final for t, final in calls if t > t0[0] + budget]
    assert all(past_cap), f"{past_cap.count(False)} shrink step(s) began past the cap"
    assert "(shrinking stopped by the cap or --max-shrinks)" in T.render_markdown(_doc([rec]))


def hangs(kind, case, adapter):
    time.sleep(3600)


def test_a_worker_past_the_cap_is_incomplete_not_a_kill(tmp_path, monkeypatch):
    """Spawned for real: a share alive past the cap + GRACE_S (its example
    still under the hang bound) is killed and the mutant is ``incomplete``
    (no verdict)."""
    monkeypatch.setattr(P, "GRACE_S", 1)
    (rec,) = P.run_all([QWEN_ONLY], _opts(tmp_path, hangs, budget_s=8), jobs=1, progress=lambda line: None)
    assert rec["verdict"] == "incomplete" and "past the cap" in rec["error"], rec
    assert T.tally([rec])["counted"] == 0


HANG_ALL = "SDPA_TEST_HANG_ALL"


def hangs_on_several_heads(kind, case, adapter):
    """The mutated kernel's hang (an example that never returns): on Cases of several query heads,
    on the mutant's adapter only, or on every adapter where $SDPA_TEST_HANG_ALL is set."""
    if case.h_q > 1 and (adapter.rewrites or os.environ.get(HANG_ALL)):
        time.sleep(3600)
    return survive(kind, case, adapter)


def test_a_hang_that_recurs_on_replay_and_not_on_the_pristine_kernels_is_a_kill(tmp_path, monkeypatch):
    """Spawned for real: an example past the hang bound ends its worker
    (watchdog.EXIT_HANG); the flight recorder names the Case, it runs past the
    bound again in a fresh process on the mutant's kernels and passes on the
    pristine ones: ``error``, that Case recorded (it was ``incomplete`` once
    the cap ran out, or a run's whole cap spent waiting)."""
    monkeypatch.setattr(P, "HANG_REPLAY_S", 12.0)
    (rec,) = P.run_all([QWEN_ONLY], _opts(tmp_path, hangs_on_several_heads, hang_s=2.0), jobs=1, progress=lambda line: None)
    assert rec["verdict"] == "error" and rec["killed_by"] == "tails_dense", rec
    assert Case.from_dict(rec["case"]).h_q > 1 and "ran past 2 s" in rec["summary"] and "pristine kernels pass it" in rec["summary"]
    assert T.tally([rec])["kill_rate"] == 1.0


def test_a_hang_on_the_pristine_kernels_too_is_pristine_fails(tmp_path, monkeypatch):
    monkeypatch.setattr(P, "HANG_REPLAY_S", 12.0)
    monkeypatch.setenv(HANG_ALL, "1")
    (rec,) = P.run_all([QWEN_ONLY], _opts(tmp_path, hangs_on_several_heads, hang_s=2.0), jobs=1, progress=lambda line: None)
    assert rec["verdict"] == "pristine_fails" and "hung" in rec["pristine"], rec


def hangs_on_the_mutant(kind, case, adapter):
    if adapter.rewrites:
        time.sleep(3600)
    return survive(kind, case, adapter)


def test_several_hangs_of_one_mutant_replay_the_first_units_only(tmp_path, monkeypatch):
    """Spawned for real: four shares of one mutant hang together, one per
    unit. The lowest unit's hang is judged first (its replays: the mutant's,
    then the pristine kernels'), it settles the verdict, and the three later
    units' Cases are not replayed: each replay waits up to HANG_REPLAY_S, one
    at a time, so four hangs cost a run four of them (a GPU run's mutant
    needed more than one 600 s call for its record)."""
    monkeypatch.setattr(P, "HANG_REPLAY_S", 12.0)
    replays = []
    real = P._replay_fresh

    def counted(kind, cases, opts, mutant=None, **kw):
        replays.append((kind.name, mutant is not None))
        return real(kind, cases, opts, mutant, **kw)

    monkeypatch.setattr(P, "_replay_fresh", counted)
    opts = _opts(tmp_path, hangs_on_the_mutant, hang_s=2.0, kinds=["tails_dense", "numerics_dense"])
    assert len(P.mutant_units(QWEN_ONLY, opts)) == 4
    (rec,) = P.run_all([QWEN_ONLY], opts, jobs=4, progress=lambda line: None)
    assert rec["verdict"] == "error" and rec["killed_by"] == "tails_dense" and "a hung kernel" in rec["summary"], rec
    assert replays == [("tails_dense", True), ("tails_dense", False)], replays


# ------------------------------------------------------- 4. refusals while shrinking
def test_a_refusal_while_shrinking_keeps_the_kill():
    """Once a failure is found, a candidate shrinking tries that the adapter
    refuses (Unsupported: a SkipTest, which Hypothesis re-raises at once) is
    rejected: the failure found stands and shrinks on."""
    failures = []

    def refuses_small(kind, case, adapter):
        if adapter.rewrites and case.h_q > 1:
            failures.append(case)
            if len(failures) % 3 == 0:
                raise Unsupported.machine("refused while shrinking")
            raise PropertyFailure(kind.property, case, "planted")
        return survive(kind, case, adapter)

    try:
        rec = _one(MUTANTS[0], refuses_small, kinds=("numerics_dense",), profile="ci")
    except unittest.SkipTest as refusal:  # raised as it is, pytest would skip this test: fail it
        pytest.fail(f"the refusal threw the kill away: {refusal}")
    assert rec["verdict"] == "killed" and Case.from_dict(rec["case"]).h_q == 2 and len(failures) >= 3, rec["verdict"]
    # Before any failure a refusal stops the search unjudged, as before: the worker's harness error.
    with pytest.raises(Unsupported):
        _one(MUTANTS[0], lambda k, c, a: (_ for _ in ()).throw(Unsupported.machine("no GPU")), kinds=("numerics_dense",))


# ------------------------------------------------------- 5. the count drawn
def test_a_search_short_of_its_count_is_no_verdict():
    """A property that rejects most draws ends its search (Hypothesis' own
    rule) short of the planned count: ``short``, neither survived nor killed."""
    from hypothesis import reject

    def rejects_most(kind, case, adapter):
        if zlib.crc32(json.dumps(case.to_dict(), sort_keys=True, default=str).encode()) % 120:
            reject()
        return survive(kind, case, adapter)

    rec = _one(MUTANTS[0], rejects_most, kinds=("numerics_dense",), profile="ci")
    assert rec["verdict"] == "short" and not rec["complete"] and rec["kinds"][0]["short"] and " short" in P.drew(rec), P.drew(rec)
    assert rec["kinds"][0]["examples"] < rec["kinds"][0]["planned"]
    t = T.tally([rec])
    assert (t["short"], t["survived"], t["counted"]) == (1, 0, 0) and T.exit_code(t, None, 0.0) == 1
    assert "drew fewer examples than planned" in T.control_problem(rec | {"name": "control"})


def test_a_selection_that_searches_nothing_is_refused(capsys):
    relation = next(k for k in K.KIND_NAMES if k.startswith("metamorphic_dense"))  # pr runs no metamorphic test
    code = CLI.main(CLI.parser().parse_args(["--profile", "pr", "--properties", relation, "--only", MUTANTS[0].name]))
    err = capsys.readouterr().err
    assert code == 2 and "control would search nothing" in err


# ------------------------------------------------------- 6. merging a cut run
def _unit(examples=10, planned=10, cut=False, failure=None):
    return {"examples": examples, "planned": planned, "shrinks": 0, "excused": 0, "cut": cut, "shrink_capped": False, "seconds": 1.0, "failure": failure}


def test_merging_stops_at_the_first_unit_the_cap_cut():
    """A later unit's failure does not kill a mutant whose earlier unit the
    cap cut: one process would have stopped at the cut (and a faster one might
    have killed earlier). Merged: incomplete, the units up to the cut."""
    units = P.mutant_units(QWEN_ONLY, {"kinds": ["tails_dense", "numerics_dense"], "profile": "dev"})
    failure = {"verdict": "killed", "summary": "planted", "case": Case().to_dict(), "first_failure_s": 1.0}
    results = {0: _unit(), 1: _unit(examples=3, cut=True), 2: _unit(examples=2, failure=failure)}
    rec = S.base_record(QWEN_ONLY)
    S.merge_units(rec, units, results, profile="dev")
    assert rec["verdict"] == "incomplete" and rec["killed_by"] is None and [k["name"] for k in rec["kinds"]] == ["tails_dense"]
    results[1] = _unit()
    rec = S.base_record(QWEN_ONLY)
    S.merge_units(rec, units, results, profile="dev")
    assert rec["verdict"] == "killed" and rec["killed_by"] == "numerics_dense"


# ------------------------------------------------------- 7. compile errors
def test_a_compile_error_of_the_rewritten_source_is_no_kill():
    """A SyntaxError of a rewritten template through the template loader, a
    DSL compile error below compile_cached, a rewritten module's body that
    fails to load: ``compile_error``, forward (raised as it is) and backward
    (through the launch check); a launch's failure stays the kernel's."""
    from properties.common import accepted

    syntax = _in("/site-packages/cudnn/frost/template_loader.py", "load_template", "exec(compile('bad(', REWRITTEN, 'exec'))", REWRITTEN=REWRITTEN)
    dsl = _in("/site-packages/cudnn/frost/compiled_cache.py", "compile_cached", "raise TypeError('cannot trace Int32 + Float32')")
    launch = _in(CUDNN, "launch", "raise ValueError('bad pointer')")
    assert [F.crash_or_harness(e) for e in (syntax, dsl, launch)] == ["compile_error", "compile_error", "error"]
    assert F.crash_or_harness(SyntaxError("x", (REWRITTEN, 1, 1, "bad("))) == "compile_error"  # a rewritten module's body (host_module)

    def backward(exc):
        def raises():
            raise exc

        with pytest.raises(PropertyFailure) as refused:
            accepted("backward", Case(), time.perf_counter(), raises)
        return F.failure_verdict(refused.value)

    assert backward(syntax) == "compile_error" and backward(dsl) == "compile_error" and backward(launch) == "killed"


def reaches_the_template(kind, case, adapter):
    """A stand-in property that loads (compiles) the Case's template through the adapter the harness built."""
    adapter.compile_only(case)
    return survive(kind, case, adapter)


def test_a_mutant_whose_template_does_not_parse_is_a_compile_error():
    """End to end on the real adapter: a rewrite that leaves prefill_f16.py
    unparsable fails in the kernels' template loader before any compile or
    launch: a compile error, not a kill, and not counted."""
    broken = Mutant(
        "unparsable", "bias", (Rewrite("f16", "    iter_count = kv_right - kv_left\n", "    iter_count = (kv_right - kv_left\n"),), "numerics_dense", "w"
    )
    rec = S.run_mutant(broken, check=reaches_the_template, profile="dev", kinds=("numerics_dense",))
    assert rec["verdict"] == "compile_error" and "SyntaxError" in rec["summary"], rec.get("summary")
    assert T.tally([rec])["counted"] == 0 and "1 compile_error" in T.kill_rate_line(T.tally([rec]), 0.9)


# ------------------------------------------------- 8. the pristine kernels' replay
@pytest.fixture
def on_cpu(monkeypatch):
    """The numerics property on the CPU (the emulated kernels)."""
    import torch

    import properties.numerics

    monkeypatch.setattr(properties.numerics, "device", lambda: torch.device("cpu"))


def emulated(rewrites):
    """The emulated kernels: a mutant's with its LSE in log2 units, the pristine ones faithful."""
    from tests.kernel_emulation import PLANTS, EmulatedAdapter

    return EmulatedAdapter(plant=PLANTS["lse_log2_units"]) if rewrites else EmulatedAdapter()


def emulated_both(rewrites):
    """The same planted bug in the pristine kernels too: a failure of the suite's kind, not the mutant's."""
    from tests.kernel_emulation import PLANTS, EmulatedAdapter

    return EmulatedAdapter(plant=PLANTS["lse_log2_units"])


def test_a_kill_is_replayed_on_the_pristine_kernels(on_cpu):
    """The real numerics property on the emulated kernels: the mutant's bug
    kills and the pristine kernels pass its Cases; where they fail them too
    the verdict is ``pristine_fails``: not counted, the run invalid, the Case named."""
    lse = {m.name: m for m in MUTANTS}["lse_in_log2_units"]
    rec = S.run_mutant(lse, profile="dev", kinds=("numerics_dense",), adapter_factory=emulated)
    assert rec["verdict"] == "killed" and "LSE" in rec["summary"] and "pristine" not in rec
    shared = S.run_mutant(lse, profile="dev", kinds=("numerics_dense",), adapter_factory=emulated_both)
    assert shared["verdict"] == "pristine_fails" and shared["mutant_verdict"] == "killed" and "LSE" in shared["pristine"]["failure"]
    t = T.tally([rec, shared])
    assert (t["killed"], t["pristine_fails"], t["counted"], t["kill_rate"]) == (1, 1, 1, 1.0) and T.exit_code(t, None, 0.0) == 1
    problem = T.run_problem([S.base_record(C.CONTROL)], [rec, shared])
    assert problem.startswith("lse_in_log2_units: its kill (numerics_dense) fails on the pristine kernels too, on dense ") and "LSE" in problem
    md = T.render_markdown(_doc([rec, shared]))
    assert md.index("**INVALID RUN**: lse_in_log2_units") < md.index("kill rate: n/a (INVALID RUN)")


def fails_everywhere(kind, case, adapter):
    raise PropertyFailure(kind.property, case, f"planted (rewrites: {len(adapter.rewrites)})")


def test_a_dead_context_replays_the_kill_in_a_fresh_process(monkeypatch):
    """A crash that killed this process' CUDA context leaves nothing to replay
    on here: the pristine replay runs in a fresh Python process."""
    from properties import watchdog

    kind, cases = KINDS["numerics_dense"], [Case(), Case(h_q=2, h_kv=2)]
    assert R.pristine_failure(kind, cases, lambda: stand_in(()), survive) is None  # alive: here, and it passes
    monkeypatch.setattr(watchdog, "probe", lambda: "CUDA error: an illegal memory access was encountered")
    fresh = {"adapter_factory": stand_in, "check": fails_everywhere, "family": "sm80"}
    seen = R.pristine_failure(kind, cases, lambda: pytest.fail("no replay in a dead process"), fails_everywhere, fresh)
    assert seen["case"] == Case().to_dict() and "planted (rewrites: 0)" in seen["failure"]  # the control's adapter, there
    assert "unknown" in R.pristine_failure(kind, cases, lambda: None, survive)  # no fresh process asked for: never a guess


def test_the_search_steers_by_target_only_where_the_test_does(monkeypatch):
    """hypothesis.target() only for a family that sets ``target`` (as the
    pytest tests call it: conformance.testgen), so a mutant's search draws
    what the ci run draws, whatever its kernel's error ratios."""
    import hypothesis

    targeted = []
    monkeypatch.setattr(hypothesis, "target", lambda value, label="": targeted.append(label) or value)

    def cases(kind, ratio_of):
        seen = []

        def check(k, case, adapter):
            seen.append(repr(case))
            return Observation(k.property, case, ratios={"o": ratio_of(case)})

        S.search(S.Unit(kind, ("gptoss", "float16")), None, K.flavors_for(C.CONTROL), profile="ci", until=time.perf_counter() + 600, t0=0.0, check=check)
        return seen

    tails = KINDS["tails_dense"]
    assert not tails.target and cases(tails, lambda c: 0.5) == cases(tails, lambda c: 0.1 + 0.8 * (c.s_kv % 97) / 97) and targeted == []
    assert KINDS["numerics_dense"].target and cases(KINDS["numerics_dense"], lambda c: 0.5) and targeted
    assert not any(k.target for k in K.KINDS if k.family_name == "sm90")


# ------------------------------------------------------------------ 9. --resume
def _partial(tmp_path, before: dict, records=None, units=None) -> Path:
    RS.write_partial(tmp_path / RS.PARTIAL, before, records or {}, 1.0, units)
    return tmp_path / RS.PARTIAL


@pytest.mark.parametrize("key", ["kernels_source", "findings_digest", "explicit", "environment", "suite"])
def test_resume_refuses_another_source_findings_selection_environment_or_suite(tmp_path, key):
    run = {k: None for k in RS.RESUME_KEYS}
    partial = _partial(tmp_path, run | {key: "before"})
    with pytest.raises(RS.Usage, match=f"was made with {key}='before', this run has 'now'"):
        RS.resumed_records(partial, run | {key: "now"}, [])


def test_resume_goes_on_on_another_card_of_the_same_arch_only(tmp_path):
    """The card's name is recorded, not compared: the same sm_XX artifacts run on it, and counts (not speed) set a verdict."""
    run = {k: None for k in RS.RESUME_KEYS} | {"arch": "sm_90", "gpu": "NVIDIA H100 80GB HBM3"}
    partial = _partial(tmp_path, run)
    assert RS.resumed_records(partial, run | {"gpu": "NVIDIA H200"}, [])[0] == {}
    with pytest.raises(RS.Usage, match="was made with arch='sm_90', this run has 'sm_80'"):
        RS.resumed_records(partial, run | {"arch": "sm_80"}, [])


def test_a_changed_later_rewrite_is_not_kept(tmp_path):
    import dataclasses

    m = next(x for x in MUTANTS if len(x.rewrites) > 1)
    last = m.rewrites[-1]
    edited = dataclasses.replace(m, rewrites=m.rewrites[:-1] + (dataclasses.replace(last, replacement=last.replacement + "\n        x = 0"),))
    assert K.change_line(edited) == K.change_line(m) and edited.digest != m.digest  # the table's line cannot tell them apart
    partial = _partial(tmp_path, {}, {m.name: S.base_record(m) | {"verdict": "survived"}})
    assert list(RS.resumed_records(partial, {}, [m])[0]) == [m.name] and RS.resumed_records(partial, {}, [edited])[0] == {}


def test_the_suite_revision_is_the_packages_content_not_a_commit(tmp_path):
    """The same code resumes on any checkout of it: committed or left
    uncommitted, on another commit; any change to a package file (or a new
    one) is another revision, a change outside the packages is not."""
    import subprocess

    def git(*args):
        subprocess.run(["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t", *args], check=True, capture_output=True)

    (tmp_path / "conformance").mkdir()
    (tmp_path / "conformance" / "a.py").write_text("x = 1\n")
    (tmp_path / "README.md").write_text("r\n")
    git("init", "-q")
    git("add", ".")
    git("commit", "-qm", "one")
    first = RS.suite_revision(tmp_path)
    (tmp_path / "README.md").write_text("r2\n")
    git("commit", "-qam", "two")
    assert RS.suite_revision(tmp_path) == first and len(first) == 16
    (tmp_path / "conformance" / "a.py").write_text("x = 2\n")
    changed = RS.suite_revision(tmp_path)
    git("commit", "-qam", "three")
    assert changed != first and RS.suite_revision(tmp_path) == changed
    (tmp_path / "conformance" / "b.py").write_text("")
    assert RS.suite_revision(tmp_path) not in (first, changed)


def test_the_suite_revision_tolerates_no_git(monkeypatch):
    import subprocess

    rev = RS.suite_revision()
    assert rev is None or len(rev) == 16

    def no_git(*a, **kw):
        raise FileNotFoundError("git")

    monkeypatch.setattr(subprocess, "run", no_git)
    assert RS.suite_revision() is None


def stub_gpu(monkeypatch) -> None:
    """main() sees a stub SM 8.0 GPU (no device is touched)."""
    import torch

    from kernels import environment

    env = environment.Environment("stub GPU", (8, 0), "13.0", environment.installed_versions(), "native sm80")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (8, 0))
    monkeypatch.setattr(environment, "detect", lambda: env)


@pytest.fixture
def machine(monkeypatch):
    """A stub SM 8.0 GPU for main(), and ``run_all`` stood in for: each
    mutant's record from ``state["verdicts"]`` (name -> verdict; survived),
    each unit's result from ``state["unit"]`` (reported to ``on_unit``)."""
    stub_gpu(monkeypatch)
    state = {"verdicts": {}, "unit": None}

    def run_all(mutants, opts, jobs, progress=print, on_record=None, done_units=None, on_unit=None):
        out = []
        for m in mutants:
            if state["unit"] is not None:
                on_unit(m.name, 0, state["unit"])
            rec = S.base_record(m) | {"verdict": state["verdicts"].get(m.name, "survived"), "wall_s": 1.0}
            on_record(rec)
            out.append(rec)
        return out

    monkeypatch.setattr(CLI, "run_all", run_all)
    before = signal.getsignal(signal.SIGTERM)
    yield state
    signal.signal(signal.SIGTERM, before)


def _main(tmp_path, *extra):
    return CLI.main(CLI.parser().parse_args(["--only", MUTANTS[0].name, "--jobs", "2", "--report-dir", str(tmp_path / "report"), *extra]))


def test_a_run_records_what_resume_compares(machine, tmp_path, capsys, monkeypatch):
    """The kernels' source, the findings file's content (not just its path),
    the selection, $SDPA_GEOMETRY and $SDPA_PLANT_REFERENCE_BUG, the suite's
    revision: a later call with any of them changed refuses to resume, naming it."""
    findings = tmp_path / "findings.toml"
    findings.write_text((Path(C.__file__).resolve().parents[2] / C.FINDINGS_FILE).read_text())
    monkeypatch.delenv("SDPA_GEOMETRY", raising=False)
    machine["verdicts"] = {MUTANTS[0].name: "killed"}
    assert _main(tmp_path, "--known-findings", str(findings)) == 0
    run = json.loads((tmp_path / "report" / RS.PARTIAL).read_text())["run"]
    assert set(RS.RESUME_KEYS) <= set(run) and run["explicit"] is False and run["kernels_source"] is None
    assert run["findings_digest"] == RS.file_digest(findings) and run["environment"] == {"SDPA_GEOMETRY": None, "SDPA_PLANT_REFERENCE_BUG": None}
    assert _main(tmp_path, "--known-findings", str(findings), "--resume") == 0
    monkeypatch.setenv("SDPA_GEOMETRY", "free")
    assert _main(tmp_path, "--known-findings", str(findings), "--resume") == 2 and "was made with environment=" in capsys.readouterr().err
    monkeypatch.delenv("SDPA_GEOMETRY")
    findings.write_text(findings.read_text() + "\n# edited\n")
    assert _main(tmp_path, "--known-findings", str(findings), "--resume") == 2 and "was made with findings_digest=" in capsys.readouterr().err


# ------------------------------------------------------- 10. what a call keeps
def test_a_harness_error_is_searched_again_on_resume(machine, tmp_path):
    """A record without a search result keeps its change and rewrites (a kept
    verdict would stand); a unit that failed by a harness error is not kept
    as done, in the partial report or from an older one."""
    fallback = P._fallback(MUTANTS[0], "error", "worker exited")
    assert fallback["change"] == K.change_line(MUTANTS[0]) and fallback["rewrites"] == MUTANTS[0].digest
    assert list(RS.resumed_records(_partial(tmp_path, {}, {MUTANTS[0].name: fallback}), {}, [MUTANTS[0]])[0]) == [MUTANTS[0].name]
    harness = _unit(examples=1, failure={"verdict": "harness_error", "summary": "KeyError: x"})
    assert not RS.unit_kept(harness) and RS.unit_kept(_unit()) and RS.unit_kept(_unit(failure={"verdict": "killed"})) and not RS.unit_kept(_unit(cut=True))
    machine["unit"], machine["verdicts"] = harness, {MUTANTS[0].name: "harness_error"}
    assert _main(tmp_path) == 1
    partial = json.loads((tmp_path / "report" / RS.PARTIAL).read_text())
    assert partial["units"] == {} and partial["records"][MUTANTS[0].name]["verdict"] == "harness_error"
    opts = {"kinds": K.KIND_NAMES, "profile": "ci", "explicit": False}
    labels = [RS.unit_label(u) for u in P.mutant_units(MUTANTS[0], opts)[:2]]
    done = {"0": {"unit": labels[0], "result": harness}, "1": {"unit": labels[1], "result": _unit()}}
    kept, _, units = RS.resumed_records(_partial(tmp_path, {}, {}, {MUTANTS[0].name: {"rewrites": MUTANTS[0].digest, "done": done}}), {}, [MUTANTS[0]], opts)
    assert kept == {} and units == {MUTANTS[0].name: {1: _unit()}}  # an older call's harness-error unit: searched again


# ------------------------------------------------------- 11, 12. the rate and an invalid run
def _doc(mutants, controls=None):
    controls = controls or [S.base_record(C.CONTROL)]
    run = dict(profile="ci", examples_scale=1.0, budget_s=3600, jobs=16, goal=0.9, wall_s=1, gpu=None, mode=None)
    return {"run": run, "control": controls[0], "controls": controls, "mutants": mutants, "tally": T.tally(mutants)}


def test_the_rate_counts_verdicts_only_and_says_so():
    records = [S.base_record(MUTANTS[0]) | {"name": v, "verdict": v} for v in F.VERDICTS]
    t = T.tally(records)
    assert (t["counted"], t["excluded"], t["kill_rate"]) == (3, len(F.NON_VERDICTS), pytest.approx(2 / 3))
    line = T.kill_rate_line(t, 0.9)
    assert line.startswith("kill rate: 67% = (killed 1 + error 1) / (killed 1 + error 1 + survived 1) = 2/3; excluded (no verdict): ")
    assert all(f"1 {v}" in line for v in F.NON_VERDICTS) and T.exit_code(t, None, 0.0) == 1


def test_an_invalid_run_gives_no_rate(machine, tmp_path, capsys):
    """INVALID first (stderr, and the report's top), the tally's rate null."""
    machine["verdicts"] = {"control": "killed", MUTANTS[0].name: "killed"}
    assert _main(tmp_path) == 1
    out = capsys.readouterr()
    assert out.err.startswith("INVALID RUN: the control (no rewrites) killed") and "kill rate: n/a (INVALID RUN)" in out.out
    doc = json.loads((tmp_path / "report" / "mutants.json").read_text())
    assert doc["valid"] is False and doc["tally"]["kill_rate"] is None and doc["tally"]["killed"] == 1
    md = (tmp_path / "report" / "mutants.md").read_text()
    assert md.index("**INVALID RUN**") < md.index("kill rate: n/a") and "100%" not in md


def test_a_first_failure_of_another_kind_stays_in_the_record():
    """The verdict is the shrunk failure's; the first failing example's own
    verdict and summary are kept beside it, and the table says when they
    differ (a first failure that was the machine's, not the mutant's)."""
    first, shrunk = Case(batch=1), Case(batch=2)
    s = S._Search(examples=1, planned=20, shrinks=5)
    s.first = (first, RuntimeError("cudaErrorLaunchTimeout"), 1.0)
    s.last = (shrunk, PropertyFailure("numerics", shrunk, "planted"), 9.0)
    failure = S.unit_result(s, 10.0)["failure"]
    assert (failure["verdict"], failure["first_verdict"]) == ("killed", F.failure_verdict(s.first[1]))
    assert failure["first_summary"] == "RuntimeError: cudaErrorLaunchTimeout" and failure["first_case"] == first.to_dict()
    rec = S.base_record(MUTANTS[0]) | failure | {"killed_by": "numerics_dense"}
    assert f"(first failure: {failure['first_verdict']}, RuntimeError: cudaErrorLaunchTimeout)" in T.render_markdown(_doc([rec]))
    s.first = (first, PropertyFailure("numerics", first, "planted"), 1.0)
    same = S.base_record(MUTANTS[0]) | S.unit_result(s, 10.0)["failure"]
    assert same["first_verdict"] == "killed" and "(first failure:" not in T.render_markdown(_doc([same]))
