"""The mutant harness: how many planted bugs the suite's properties catch.

    python -m conformance.kill_rate --jobs 16 --budget-s 240     (a CUDA GPU; the defaults)
    python -m conformance.kill_rate --list                       (any machine)

Every mutant of ``kernels.mutants.MUTANTS`` (and the control: no rewrites)
runs in its own process on ``PreparedAdapter(rewrites=...)``. For each
property kind of ``KINDS`` in order (derived from the test matrix,
conformance.properties.matrix), a Hypothesis search over the strategies the
pytest tests use (flavors restricted to the templates the mutant rewrites)
runs until a property fails; Hypothesis shrinks the failing case. A kind is
searched as a ci run tests it: one search per stratum of the mutant's
flavors (``search_strata``), each drawing the kind's base example count
(times its transform values, ``gate_tests``; the ci run's tests scale
numerics and tails up further), within the kind's share of the time budget
split over its strata.
Verdicts: ``killed`` (a PropertyFailure), ``error`` (the mutated kernel
raised or crashed: killed by crash, listed apart), ``harness_error`` (an
exception raised in the suite's own code: never a kill), ``survived`` (nothing
failed within the budget), ``stale`` (a rewrite does not match exactly once:
never counted). Known findings (the file's, conformance.ground.findings)
excuse exactly the failures they describe, as in a pytest run: a property
whose failed checks are all excused returns an ``xfailed`` observation; any
other failure of the same example kills. The control must survive
everything, else the run is invalid. Kill rate = (killed + error) /
(mutants - stale). Writes mutants.json and mutants.md to --report-dir.
Exit: 0 control survived and kill rate >= --goal; 1 otherwise (or --list
finds a stale mutant); 2 bad arguments or no CUDA GPU.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import queue as queue_mod
import sys
import time
import traceback
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

from conformance.ground.case import Case
from conformance.ground.tables import NO_GPU
from conformance.properties.matrix import BACKWARD as BACKWARD_MODULE  # the backward's families: searched by backward mutants only
from conformance.properties.matrix import MATRIX, PARAM, SOURCE, STRATUM, TRANSFORM, Family, stratum_of
from kernels.mutants import MUTANTS, Mutant

DEFAULT_REPORT_DIR = "sdpa-report"
FINDINGS_FILE = "known_findings.toml"
CONTROL = Mutant("control", "control", (), "", "No rewrites: the installed kernels. Must survive every property.")
FAMILY_FLAVORS = {"f16": ("gptoss", "llama", "dsv3"), "d256": ("qwen",), "host": ("gptoss", "llama", "dsv3", "qwen"),
                  # The backward: one generic template for every flavor, the d=64 MHA kernel for gptoss.
                  "bwd_f16": ("gptoss", "llama", "dsv3", "qwen"), "bwd_d64": ("gptoss",), "bwd_host": ("gptoss", "llama", "dsv3", "qwen"),
                  "bwd_spec": ("gptoss", "llama", "dsv3", "qwen")}  # fmt: skip
LARGE_BUDGET = "large"  # the example budget (strategies.profiles) of the large tier's families
# The kind a mutant was written for searches first with this share of its budget:
# an equal slice of ~20 kinds is one or two compiles, too little for the
# designed catcher; the rest still looks for other killers.
EXPECTED_SHARE = 0.5
GRACE_S = 150  # a worker's start-up, first compiles and overshoot past its budget
# A survivor whose expected killer drew fewer examples than this per stratum
# is marked "starved": its verdict says more about the budget than about the
# property. Seen on the H200 (2026-12-03): 10 backward mutants at --jobs 16,
# budget 130 s: compiles under 16-way CPU contention left backward_dense 15
# examples over 8 strata, the first two of each its simplest (B=1 S=1x1);
# bwd_dsink_log2_units survived there and died at --jobs 2 on the stratum's
# 3rd example (7.8 s).
STARVED_PER_STRATUM = 3


# ------------------------------------------------------------------ kinds
@dataclass(frozen=True, eq=False)
class Kind:
    """One property search, derived from a family of the test matrix
    (conformance.properties.matrix) that names a ``kind``: its source and
    property axes fixed to one value each (``fixed``; one Kind per value),
    its transform axes drawn per example, its strata widened to the
    mutant's flavors (every dtype)."""

    name: str
    family: Family
    fixed: dict = field(default_factory=dict)

    @property
    def examples(self) -> str:  # the example budget kind of strategies.profiles
        return self.family.examples

    @property
    def params(self) -> dict:
        return self.family.params_for(self.fixed)

    @property  # last: the name shadows the builtin in the class body
    def property(self) -> str:
        return self.family.property

    def strategy(self, flavors, dtypes=None):
        """SearchStrategy of (the transform-axis values drawn, the Case checked)."""
        from hypothesis import strategies as st

        fam = self.family
        base = fam.strategy_for(self.fixed, flavors=flavors, **({"dtypes": dtypes} if dtypes else {}))
        drawn = [a for a in fam.axes if a.role == TRANSFORM]
        if not drawn:
            return base.map(lambda case: ({}, case))

        def checked(t):
            values = {arg: v for axis, vals in zip(drawn, t[:-1]) for arg, v in zip(axis.args, vals)}
            return values, fam.apply(t[-1], {**self.fixed, **values})

        return st.tuples(*(st.sampled_from(a.values) for a in drawn), base).map(checked)


def derive_kinds(families: Sequence[Family]) -> Tuple[Kind, ...]:
    """The searches of ``families``, in their order: one per value of the
    family's source and property axes (name: the family's kind, then each
    such axis' label, joined by ``_``)."""
    kinds = []
    for fam in (f for f in families if f.kind):
        split = [a for a in fam.axes if a.role in (SOURCE, PARAM)]
        for combo in itertools.product(*(zip(a.values, a.kind_labels()) for a in split)):
            fixed = {arg: v for axis, (vals, _) in zip(split, combo) for arg, v in zip(axis.args, vals)}
            kinds.append(Kind("_".join([fam.kind] + [label for _, label in combo]), fam, fixed))
    return tuple(kinds)


KINDS: Tuple[Kind, ...] = derive_kinds(MATRIX)
KIND_NAMES = tuple(k.name for k in KINDS)


def node_id(kind: Kind, case: Case, drawn: Optional[dict] = None) -> str:
    """The pytest node id of the test parameter ``kind`` searched ``case``
    in (``drawn``: the transform-axis values it was drawn with)."""
    return kind.family.nodeid({**stratum_of(case), **kind.fixed, **(drawn or {})})


def searched(mutant: Mutant, kinds: Sequence[str] = KIND_NAMES, *, explicit: bool = False) -> List[Kind]:
    """The kinds of ``kinds`` a run of ``mutant`` searches, in order (its
    expected killer first, then the matrix order). The
    large tier's (gigabytes per example) only for the mutant that names one
    as its expected killer; the backward's only for mutants of the backward's
    files and the forward's only for the others, unless named so; the control (the pristine kernels must pass every
    search a mutant may get), or when ``--properties`` named them
    (``explicit``)."""
    backward_mutant = any(t.startswith("bwd_") for t in mutant.targets)

    def wanted(k: Kind) -> bool:
        if explicit or k.name == mutant.expected_killer or mutant.name == CONTROL.name:
            return True
        # A mutant of the backward's files cannot change a forward launch, nor the reverse:
        # searching the other direction would only spend its budget.
        if (k.family.module == BACKWARD_MODULE) != backward_mutant:
            return False
        return k.examples != LARGE_BUDGET

    chosen = [k for k in KINDS if k.name in kinds and wanted(k)]
    # The expected killer first: a mutant meant for a late kind (a metamorphic relation) would
    # otherwise reach it with only its equal share of what the earlier kinds left.
    return sorted(chosen, key=lambda k: k.name != mutant.expected_killer)


def flavors_for(mutant: Mutant) -> Tuple[str, ...]:
    """Flavors served by the files the mutant rewrites (all for the control)."""
    touched = {f for t in (mutant.targets or ("host",)) for f in FAMILY_FLAVORS[t]}
    return tuple(f for f in FAMILY_FLAVORS["host"] if f in touched)


def case_size(case: Case) -> int:
    """Score elements: batch * h_q * s_q * s_kv (THD: h_q * T_q * T_kv capacities)."""
    if case.is_thd:
        return case.h_q * case.t_q * case.t_kv
    return case.batch * case.h_q * case.s_q * case.s_kv


def change_line(mutant: Mutant) -> str:
    if not mutant.rewrites:
        return "-"
    rw = mutant.rewrites[0]
    first = lambda s: s.strip().splitlines()[0].strip()  # noqa: E731
    changes = len({(first(r.pattern), first(r.replacement)) for r in mutant.rewrites})
    more = f" (+{changes - 1} more)" if changes > 1 else ""
    return f"{'/'.join(mutant.targets)}: `{first(rw.pattern)}` -> `{first(rw.replacement)}`{more}"


# ---------------------------------------------------------------- search
def check_property(kind: Kind, case: Case, adapter):
    """The property the pytest test of ``kind`` calls."""
    return kind.family.check(case, adapter, kind.fixed)


def search_strata(kind: Kind, flavors) -> List[Optional[Tuple[str, str]]]:
    """The searches a kind makes, as a ci run has one pytest test per stratum:
    the (flavor, dtype) values of the family's stratum axis within the
    mutant's flavors, one search each; [None] (one search over ``flavors``)
    for a family without a stratum axis. One search of one test's examples
    over eight strata would see an eighth of what the gate checks (the H200
    table of 2026-12-03: 40 numerics_dense draws held one RoPE row past a KV
    tile and no LPT-L2 split)."""
    axes = [a for a in kind.family.axes if a.role == STRATUM]
    if not axes:
        return [None]
    values = [dict(zip(axes[0].args, v)) for v in axes[0].values]
    return [(v["flavor"], v["dtype"]) for v in values if v["flavor"] in flavors]


def gate_tests(kind: Kind) -> int:
    """The pytest tests one stratum's search stands for: one per value of the
    family's transform axes (which the search draws per example)."""
    n = 1
    for axis in kind.family.axes:
        n *= len(axis.values) if axis.role == TRANSFORM else 1
    return n


def _settings(profile: str, kind: Kind, tests: int = 1):
    from hypothesis import HealthCheck, Verbosity, settings

    from strategies.profiles import KIND_SCALE

    base = settings.get_profile(profile)
    n = max(1, round(base.max_examples * KIND_SCALE[kind.examples])) * tests  # strategies.profiles.examples(), unloaded, per test
    return settings(base, max_examples=n, database=None, deadline=None, report_multiple_bugs=False,
                    suppress_health_check=list(HealthCheck), verbosity=Verbosity.quiet)  # fmt: skip


@dataclass
class _Search:
    examples: int = 0  # checked before the first failure
    shrinks: int = 0  # checked after it (Hypothesis shrinking)
    excused: int = 0  # xfailed observations: every failed check excused by a known finding
    cut: bool = False
    first: Optional[tuple] = None  # (case, failure, seconds since the mutant started)
    last: Optional[tuple] = None  # the shrunk one: Hypothesis replays it last

    def add(self, other: "_Search") -> None:
        """Fold one stratum's search into a kind's (its failure, if any, is the kind's)."""
        self.examples, self.shrinks, self.excused = self.examples + other.examples, self.shrinks + other.shrinks, self.excused + other.excused
        self.cut |= other.cut
        if other.first is not None:
            self.first, self.last = other.first, other.last


def search(kind: Kind, adapter, flavors, *, profile: str, until: float, t0: float, check=check_property,
           stratum: Optional[Tuple[str, str]] = None) -> _Search:  # fmt: skip
    """One Hypothesis search of ``kind`` (in ``stratum``: one (flavor, dtype),
    as one pytest test; None: over ``flavors``); stops drawing at ``until``
    unless a failure was seen (then Hypothesis shrinks, within MAX_SHRINKING_SECONDS)."""
    from hypothesis import given, seed, strategies as st, target
    from hypothesis.errors import UnsatisfiedAssumption

    from conformance.ground.outcome import Unsupported
    from conformance.properties import NoGPU

    state = _Search()
    if time.perf_counter() > until:  # no time left: skip, do not draw a single example
        state.cut = True
        return state
    strategy = kind.strategy(flavors) if stratum is None else kind.strategy((stratum[0],), (stratum[1],))

    # A derandomized profile seeds a search from its function, the same for every
    # stratum (pytest's parameters of one test draw different sequences): each
    # stratum's search gets a seed of its own, fixed by the kind and stratum.
    salt = seed(zlib.crc32(f"{kind.name}[{stratum[0]}-{stratum[1]}]".encode())) if stratum else (lambda f: f)

    @salt
    @_settings(profile, kind, gate_tests(kind))
    @given(data=st.data())
    def probe(data):
        drawn, case = data.draw(strategy, label="case")  # always: a draw-less example confuses Hypothesis
        if state.first is None and time.perf_counter() > until:
            state.cut = True
            return
        if state.first is None:
            state.examples += 1
        else:
            state.shrinks += 1
        try:
            obs = check(kind, case, adapter)
        except UnsatisfiedAssumption:  # the property rejected the draw (e.g. a relation that does not move it): not an example
            state.examples -= state.first is None
            state.shrinks -= state.first is not None
            raise
        except (NoGPU, Unsupported):  # the adapter cannot run this kind: no verdict, not a kill
            raise
        except Exception as failure:  # noqa: BLE001 - a crash of the mutated kernel is a verdict
            hit = (case, failure, time.perf_counter() - t0)
            state.first, state.last = state.first or hit, hit
            raise
        if getattr(obs, "outcome", None) == "xfailed":
            state.excused += 1
        for quantity, ratio in (getattr(obs, "ratios", None) or {}).items():
            if isinstance(ratio, (int, float)) and math.isfinite(ratio):
                target(float(ratio), label=f"error/bound {quantity}")

    try:
        probe()
    except (NoGPU, Unsupported):
        raise
    except Exception:  # noqa: BLE001 - recorded in state (Flaky and groups included)
        if state.first is None:
            raise
    return state


def run_mutant(mutant: Mutant, *, profile: str = "ci", budget_s: float = 240.0, shrink_s: float = 45.0,
               kinds: Sequence[str] = KIND_NAMES, explicit: bool = False, check=check_property, adapter_factory=None) -> dict:  # fmt: skip
    """Run one mutant through the property kinds; returns its verdict record.
    The expected killer searches first with EXPECTED_SHARE of ``budget_s``;
    each other kind gets an equal share of what is left."""
    from hypothesis.internal.conjecture import engine

    from kernels.source import StaleMutant

    t0 = time.perf_counter()
    rec = {"name": mutant.name, "bug_class": mutant.bug_class, "targets": list(mutant.targets), "expected_killer": mutant.expected_killer,
           "change": change_line(mutant), "why": mutant.why, "verdict": "survived", "killed_by": None, "property": None, "summary": None, "first_failure_s": None,
           "case": None, "failure_case": None, "first_case": None, "case_size": None, "complete": True, "error": None, "kinds": []}  # fmt: skip
    if adapter_factory is None:
        from kernels.prepared import PreparedAdapter as adapter_factory
    try:
        adapter = adapter_factory(rewrites=mutant.rewrites)
    except StaleMutant as e:
        return rec | {"verdict": "stale", "error": str(e), "wall_s": round(time.perf_counter() - t0, 1)}
    flavors, deadline = flavors_for(mutant), t0 + budget_s
    chosen = searched(mutant, kinds, explicit=explicit)
    shrink_cap = getattr(engine, "MAX_SHRINKING_SECONDS", None)
    engine.MAX_SHRINKING_SECONDS = shrink_s  # Hypothesis reads it when shrinking starts
    try:
        _search_kinds(rec, chosen, adapter, flavors, profile=profile, deadline=deadline, t0=t0, check=check)
    finally:
        engine.MAX_SHRINKING_SECONDS = shrink_cap
    rec["wall_s"] = round(time.perf_counter() - t0, 1)
    return rec


def _search_kinds(rec: dict, chosen, adapter, flavors, *, profile, deadline, t0, check) -> None:
    """Search each kind in order until one fails; the expected killer gets
    EXPECTED_SHARE of the time, every other kind an equal share of the time
    left. Fills ``rec`` with the verdict."""
    from conformance.ground.outcome import PropertyFailure

    for i, kind in enumerate(chosen):
        now = time.perf_counter()
        share = EXPECTED_SHARE if kind.name == rec["expected_killer"] and len(chosen) > 1 else 1 / (len(chosen) - i)
        until = now + max(0.0, deadline - now) * share
        s, strata = _Search(), search_strata(kind, flavors)
        for j, stratum in enumerate(strata):  # each stratum an equal share of the time left (a fast one leaves more)
            t = time.perf_counter()
            one = search(kind, adapter, flavors, profile=profile, until=t + max(0.0, until - t) / (len(strata) - j), t0=t0, check=check, stratum=stratum)
            s.add(one)
            if one.first is not None:
                break
        rec["kinds"].append({"name": kind.name, "examples": s.examples, "shrinks": s.shrinks, "excused": s.excused, "cut": s.cut,
                             "strata": len(strata), "seconds": round(time.perf_counter() - now, 1), "failed": s.first is not None})  # fmt: skip
        rec["complete"] &= not s.cut
        if s.first is not None:
            case, failure, _ = s.last
            killed = isinstance(failure, PropertyFailure)
            failing = getattr(failure, "case", None)
            rec.update(
                verdict="killed" if killed else crash_or_harness(failure), killed_by=kind.name, property=kind.property, params=kind.params,
                summary=failure.summary if killed else f"{type(failure).__name__}: {str(failure)[:300]}",
                first_failure_s=round(s.first[2], 1), case=case.to_dict(), case_size=case_size(case), case_text=case.describe(),
                first_case=s.first[0].to_dict(), failure_case=failing.to_dict() if killed and failing != case else None,
            )  # fmt: skip
            return


def crash_or_harness(exc: BaseException) -> str:
    """``error`` (the mutated kernel crashed: a CUDA error, or an exception
    raised inside the kernel's own code) or ``harness_error`` (raised by the
    suite's code: a bug of the harness, which must not count as a kill)."""
    from conformance.properties.watchdog import SUITE_PACKAGES, looks_like_cuda_error

    frames = traceback.extract_tb(exc.__traceback__)
    if looks_like_cuda_error(exc) or not frames:
        return "error"
    # raised in one of the suite's own frames (not a CUDA error surfacing there): a bug of the suite
    return "harness_error" if str(Path(frames[-1].filename).resolve()).startswith(SUITE_PACKAGES) else "error"


# ------------------------------------------------------------- processes
def _worker(mutant: Mutant, opts: dict, out) -> None:
    """Process entry: one mutant, output to its log, the record to ``out``."""
    log = Path(opts["log_dir"]) / f"{mutant.name}.log"
    with open(log, "w") as f:
        os.dup2(f.fileno(), 1)
        os.dup2(f.fileno(), 2)
    try:
        from kernels.source import use_kernels_source

        use_kernels_source(opts.get("kernels_source"))
        import torch

        torch.set_num_threads(opts.get("threads", 1))
        if opts.get("findings"):
            from conformance.ground import findings

            findings.activate(findings.load(opts["findings"]))
        rec = run_mutant(mutant, profile=opts["profile"], budget_s=opts["budget_s"], shrink_s=opts["shrink_s"], kinds=opts["kinds"], explicit=opts.get("explicit", False))
    except BaseException as e:  # noqa: BLE001 - outside any property call: the harness, not the mutant
        traceback.print_exc()
        rec = {"name": mutant.name, "bug_class": mutant.bug_class, "targets": list(mutant.targets), "expected_killer": mutant.expected_killer,
               "why": mutant.why, "verdict": "harness_error", "error": f"{type(e).__name__}: {e}", "kinds": []}  # fmt: skip
    out.put(rec)


def run_all(mutants: Sequence[Mutant], opts: dict, jobs: int, progress=print) -> List[dict]:
    """Every mutant in its own spawned process, ``jobs`` at a time; a worker
    past its budget + shrink + GRACE_S is killed (verdict error: a hang)."""
    import multiprocessing as mp

    from conformance.kill_rate import _worker  # by its module name even when run as __main__

    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    pending, running, records = list(mutants), {}, {}
    limit = opts["budget_s"] + opts["shrink_s"] + GRACE_S
    while pending or running:
        while pending and len(running) < jobs:
            m = pending.pop(0)
            p = ctx.Process(target=_worker, args=(m, opts, out), name=f"mutant-{m.name}", daemon=True)
            p.start()
            running[m.name] = (m, p, time.monotonic())
        try:
            rec = out.get(timeout=1.0)
            records[rec["name"]] = rec
            progress(_progress_line(rec, len(records), len(mutants)))
        except queue_mod.Empty:
            pass
        for name, (m, p, started) in list(running.items()):
            if name in records:
                p.join(timeout=5)
                del running[name]
            elif not p.is_alive() or time.monotonic() - started > limit:
                if p.is_alive():
                    p.kill()
                    why = f"worker killed after {limit:.0f} s (hung?)"
                else:
                    why = f"worker exited with code {p.exitcode} without a verdict"
                p.join(timeout=5)
                time.sleep(0.2)
                try:  # a record may have landed just before it exited
                    while True:
                        rec = out.get_nowait()
                        records[rec["name"]] = rec
                except queue_mod.Empty:
                    pass
                if name not in records:
                    # A signal (a crash in the kernel) or a hang is the mutant's; a Python exit is the harness'.
                    verdict = "harness_error" if (p.exitcode or 0) > 0 else "error"
                    records[name] = {"name": name, "bug_class": m.bug_class, "targets": list(m.targets), "verdict": verdict, "error": why,
                                     "expected_killer": m.expected_killer, "why": m.why, "kinds": []}  # fmt: skip
                    progress(_progress_line(records[name], len(records), len(mutants)))
                del running[name]
    return [records[m.name] for m in mutants]


def starved(rec: dict) -> Optional[str]:
    """For a survivor whose expected killer drew fewer than STARVED_PER_STRATUM
    examples per stratum: what it drew (None otherwise)."""
    if rec["verdict"] != "survived":
        return None
    for k in rec.get("kinds", ()):
        if k["name"] == rec.get("expected_killer") and k.get("strata") and k["examples"] < STARVED_PER_STRATUM * k["strata"]:
            return f"starved: {k['name']} drew {k['examples']} examples over {k['strata']} strata; lower --jobs or raise --budget-s"
    return None


def _progress_line(rec: dict, done: int, total: int) -> str:
    how = f" by {rec['killed_by']} after {rec['first_failure_s']} s" if rec.get("killed_by") else ""
    # An error's message tells a crash of the kernel from a bug of the harness.
    text = rec.get("error") or rec.get("summary")
    why = starved(rec) or (text if rec["verdict"] != "killed" else None)
    why = f" ({why})" if why else ""
    return f"[{done}/{total}] {rec['verdict']:<9} {rec['name']}{how}{why}"


# ---------------------------------------------------------------- verdicts
def tally(mutant_records: Sequence[dict]) -> dict:
    """Counts and the kill rate: (killed + error) / (total - stale)."""
    n = {v: sum(r["verdict"] == v for r in mutant_records) for v in ("killed", "error", "survived", "stale", "harness_error")}
    counted = len(mutant_records) - n["stale"]
    rate = (n["killed"] + n["error"]) / counted if counted else None
    return {**n, "total": len(mutant_records), "counted": counted, "kill_rate": rate}


def control_problem(control: Optional[dict]) -> Optional[str]:
    """Why the run is invalid because of the control (None: it survived)."""
    if control is None:
        return None
    if control["verdict"] == "survived":
        return None
    if control["verdict"] == "harness_error":
        return f"the control's worker failed in the harness ({control.get('error')}), so mutant verdicts mean nothing"
    what = f"failed {control.get('killed_by')}" if control.get("killed_by") else control["verdict"]
    case = f" on {control.get('case_text')}" if control.get("case_text") else ""
    detail = control.get("summary") or control.get("error") or ""
    return f"the control (no rewrites) {what}{case}: {detail} -- the suite is not green on the installed kernels (fix it or add a known finding), so mutant verdicts mean nothing"


def exit_code(t: dict, control: Optional[dict], goal: float) -> int:
    ok = control_problem(control) is None and not t["harness_error"] and t["kill_rate"] is not None and t["kill_rate"] >= goal
    return 0 if ok else 1


def kill_rate_line(t: dict, goal: float) -> str:
    if t["kill_rate"] is None:
        return f"kill rate: n/a (no mutant to count; {t['stale']} stale)"
    return (f"kill rate: {t['kill_rate']:.0%} ({t['killed']} killed + {t['error']} by crash of {t['counted']}; "
            f"{t['survived']} survived, {t['stale']} stale) goal {goal:.0%}")  # fmt: skip


COLUMNS = ("mutant", "bug class", "targets", "verdict", "killed by", "expected killer", "first failure (s)", "shrunk case size", "shrunk case")


def render_markdown(doc: dict) -> str:
    run, t = doc["run"], doc["tally"]
    lines = ["# Mutants", "", f"profile `{run['profile']}`, budget {run['budget_s']} s per mutant (+{run['shrink_s']} s shrinking), "
             f"{run['jobs']} jobs, {run['wall_s']} s wall; {run.get('gpu') or 'no GPU'} ({run.get('mode') or '-'})", "",
             f"**{kill_rate_line(t, run['goal'])}**", ""]  # fmt: skip
    problem = control_problem(doc.get("control"))
    lines += [f"**INVALID RUN**: {problem}", ""] if problem else []
    lines += ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for r in ([doc["control"]] if doc.get("control") else []) + doc["mutants"]:
        short = starved(r)
        cut = ("" if r.get("complete", True) or r["verdict"] != "survived" else " (budget)") + (f" ({short})" if short else "")
        case = r.get("first_case") if r["verdict"] == "error" else r.get("case")
        text = Case.from_dict(case).describe() if case else (r.get("error") or "-")
        cells = (r["name"], r.get("bug_class", "-"), "/".join(r.get("targets") or []) or "-", r["verdict"] + cut, r.get("killed_by") or "-",
                 r.get("expected_killer") or "-", r.get("first_failure_s") or "-", r.get("case_size") if r.get("case_size") is not None else "-", text)  # fmt: skip
        lines.append("| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines) + "\n"


def write_reports(doc: dict, report_dir) -> Tuple[Path, Path]:
    d = Path(report_dir)
    d.mkdir(parents=True, exist_ok=True)
    js, md = d / "mutants.json", d / "mutants.md"
    js.write_text(json.dumps(doc, indent=1, default=str) + "\n")
    md.write_text(render_markdown(doc))
    return js, md


# -------------------------------------------------------------------- CLI
class Usage(Exception):
    """Exit 2 with this message."""


def add_arguments(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    p.add_argument("--list", action="store_true", help="print the catalogue and check every rewrite applies exactly once (no GPU needed); exit 1 if one is stale")
    p.add_argument("--only", metavar="NAME[,NAME]", default=None, help="run only these mutants")
    p.add_argument("--properties", metavar="KIND[,KIND]", default=None, help=f"property kinds to search, in this order: {', '.join(KIND_NAMES)} (default: all)")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="mutants run at once, one process each (default: the number of CPUs)")
    p.add_argument("--profile", default="ci", help="Hypothesis profile of strategies.profiles (default: ci)")
    p.add_argument("--budget-s", type=float, default=240.0, help="search time per mutant: half for its expected killer, the rest shared equally by the other property kinds (default: 240)")
    p.add_argument("--shrink-s", type=float, default=45.0, help="time Hypothesis may spend shrinking a failure (default: 45)")
    p.add_argument("--goal", type=float, default=0.9, help="kill rate for exit status 0 (default: 0.9)")
    p.add_argument("--report-dir", default=DEFAULT_REPORT_DIR, help=f"where mutants.json/.md and the worker logs go (default: ./{DEFAULT_REPORT_DIR})")
    p.add_argument("--known-findings", metavar="FILE", default=None, help=f"known findings file (default: {FINDINGS_FILE} of the repository, if present)")
    p.add_argument("--kernels-source", metavar="PATH", default=None, help="cudnn-frontend python/ tree to mutate instead of the installed wheel")
    return p


def _names(raw: Optional[str], known: Sequence[str], what: str) -> Optional[List[str]]:
    if raw is None:
        return None
    names = [n.strip() for n in raw.split(",") if n.strip()]
    bad = [n for n in names if n not in known]
    if bad or not names:
        raise Usage(f"{what} {bad[0] if bad else raw!r}: not one of {', '.join(known)}")
    return names


def _validate(args) -> dict:
    from strategies.profiles import profile_name

    if args.jobs < 1 or args.budget_s <= 0 or args.shrink_s < 0 or not 0 <= args.goal <= 1:
        raise Usage("--jobs >= 1, --budget-s > 0, --shrink-s >= 0 and 0 <= --goal <= 1")
    try:
        profile = profile_name(args.profile)
    except ValueError as e:
        raise Usage(str(e)) from None
    only = _names(args.only, [m.name for m in MUTANTS], "--only: mutant")
    kinds = _names(args.properties, KIND_NAMES, "--properties: kind") or list(KIND_NAMES)
    found = args.known_findings or next((str(p) for p in (Path.cwd() / FINDINGS_FILE, Path(__file__).resolve().parents[1] / FINDINGS_FILE) if p.is_file()), None)
    if found:
        from conformance.ground import findings

        try:
            findings.load(found)
        except findings.FindingsError as e:
            raise Usage(str(e)) from None
    return {"mutants": [m for m in MUTANTS if only is None or m.name in only], "kinds": kinds, "explicit": args.properties is not None, "profile": profile,
            "findings": found}  # fmt: skip


def list_catalogue(mutants: Sequence[Mutant], out=print) -> int:
    from kernels.source import StaleMutant, check_rewrites

    stale = 0
    for m in mutants:
        try:
            check_rewrites(m.rewrites)
            state = "ok"
        except StaleMutant as e:
            state, stale = f"STALE: {e}", stale + 1
        out(f"{m.name:<30} {m.bug_class:<18} {'/'.join(m.targets):<9} killer {m.expected_killer:<16} {state}\n    {change_line(m)}")
    out(f"{len(mutants)} mutants, {stale} stale")
    return 1 if stale else 0


def main(args) -> int:
    try:
        v = _validate(args)
        if args.list:
            return list_catalogue(v["mutants"])
        if args.kernels_source:
            from kernels.source import use_kernels_source

            use_kernels_source(args.kernels_source)
        import torch

        if not torch.cuda.is_available():
            raise Usage(NO_GPU + " (--list works anywhere)")
    except Usage as e:
        print(f"sdpa-conformance mutants: error: {e}", file=sys.stderr)
        return 2
    from kernels.environment import detect

    env, start = detect(), time.time()
    log_dir = Path(args.report_dir) / "mutants-logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    opts = {"profile": v["profile"], "budget_s": args.budget_s, "shrink_s": args.shrink_s, "kinds": v["kinds"], "explicit": v["explicit"],
            "findings": v["findings"], "kernels_source": args.kernels_source, "log_dir": str(log_dir), "threads": max(1, (os.cpu_count() or 1) // args.jobs)}  # fmt: skip
    print(f"{len(v['mutants'])} mutants + control, {args.jobs} jobs, budget {args.budget_s:g} s each, profile {v['profile']}, kinds {', '.join(v['kinds'])}")
    records = run_all([CONTROL] + v["mutants"], opts, args.jobs)
    control, mutant_records = records[0], records[1:]
    t = tally(mutant_records)
    run = {"profile": v["profile"], "budget_s": args.budget_s, "shrink_s": args.shrink_s, "jobs": args.jobs, "goal": args.goal, "kinds": v["kinds"],
           "known_findings": v["findings"], "wall_s": round(time.time() - start, 1), "gpu": env.gpu, "mode": env.mode, "versions": env.versions}  # fmt: skip
    doc = {"run": run, "control": control, "mutants": mutant_records, "tally": t, "valid": control_problem(control) is None}
    js, md = write_reports(doc, args.report_dir)
    print(kill_rate_line(t, args.goal))
    problem = control_problem(control)
    if problem:
        print(f"INVALID RUN: {problem}", file=sys.stderr)
    if t["harness_error"]:
        print(f"harness errors in {t['harness_error']} worker(s): see {log_dir}", file=sys.stderr)
    print(f"{js}\n{md}")
    return exit_code(t, control, args.goal)


def parser() -> argparse.ArgumentParser:
    return add_arguments(argparse.ArgumentParser(prog="sdpa-conformance mutants", description=__doc__.split("\n\n")[0]))


if __name__ == "__main__":
    sys.exit(main(parser().parse_args()))
