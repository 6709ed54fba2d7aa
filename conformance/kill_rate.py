"""The mutant harness: how many planted bugs the suite's properties catch.

    python -m conformance.kill_rate --jobs 16                    (a CUDA GPU; the defaults)
    python -m conformance.kill_rate --only control --examples-scale 10   (a long control search, over every job)
    python -m conformance.kill_rate --family sm90                (a Hopper GPU: the sm90 catalogue)
    python -m conformance.kill_rate --list                       (any machine)

Every mutant of ``kernels.mutants.MUTANTS`` (and the control: no rewrites)
runs in its own process on ``PreparedAdapter(rewrites=...)`` (with more
--jobs than mutants, in several: ``run_all`` splits its searches, and the
record is the one a single process gives); with
``--family sm90`` (or ``all``) those of ``kernels.mutants_sm90`` and their
control on ``Sm90Adapter(rewrites=...)`` (SM 9.0 only), searched by the sm90
kinds of ``conformance.kill_sm90`` (each family's mutants by its own kinds).
Without --family the SM80 catalogue runs, as it always has. For each
property kind of ``KINDS`` in order (derived from the test matrix,
properties.matrix; the mutant's expected killer first), a
Hypothesis search over the strategies the pytest tests use (flavors
restricted to the templates the mutant rewrites) runs until a property
fails; Hypothesis shrinks the failing case within its own count limits
(and the cap). A
kind is searched as a ci run tests it: one search per stratum of the
mutant's flavors (``search_strata``), each drawing exactly the kind's
example count (``planned_examples``: the profile's count for the kind times
its transform values, ``gate_tests``, times ``--examples-scale``). Example
counts, never time, decide how much is searched, so a verdict means the same
on every machine and at every ``--jobs``. ``--budget-s`` is only a safety
cap on a mutant's wall clock (searching and shrinking); the table says per
kind how many examples were drawn of how many planned.
Verdicts (``VERDICTS``; docs/mutants.md says why each counts or not): a
kill is ``killed`` (a PropertyFailure) or ``error`` (an exception the
mutated kernels raised, a CUDA error that left the context dead, a death
by a signal other than SIGKILL launching a Case that kills a fresh process
on the mutant's kernels again: conformance.inflight, or an example past the
hang bound, ``HANG_S``, whose Case runs past it again there), each
replayed on the pristine kernels before it counts (``pristine_fails`` when
it fails there too: a failure of the suite, which makes the run invalid);
``survived``: every search drew its planned count and nothing failed. No
verdict, never counted: ``harness_error`` (raised by the suite's own code,
a refusal, a worker that exited), ``infra`` (out of memory, a worker killed
by SIGKILL or by a crash or hang that did not recur: retried once in a fresh process), ``compile_error`` (the
rewritten source failed to load or compile before any launch), ``short`` (a
search drew fewer examples than planned: its property rejected the rest),
``incomplete`` (the cap stopped a search, or a worker outlived it),
``stale`` (a rewrite does not match exactly once). Known findings (the
file's, ground.findings) excuse exactly the failures they describe, as in a
pytest run: a property whose failed checks are all excused returns an
``xfailed`` observation; any other failure of the same example kills. The
control must survive everything, or the run is invalid (its rate is not
given). Kill rate = (killed + error) / (killed + error + survived).
A refusal (``ground.outcome.Unsupported``) is no verdict, never a kill: one
of scope "case" rejects its example (not counted as drawn), any other
stops the search unjudged (a harness error), unless a failure was found
already (then it rejects the example shrinking tried).
Writes mutants.json and mutants.md to --report-dir, and mutants.partial.json
as each record is made: ``--resume`` keeps its verdicts (a run of the same
options, kernels, findings and suite revision the last call did not finish,
e.g. cut by a time limit) and runs the rest.
Exit: 0 every control survived, every mutant has a verdict or is stale, and
kill rate >= --goal; 1 otherwise (or --list finds a stale mutant); 2 bad
arguments, no CUDA GPU, or (sm90 selected) no Hopper GPU.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import math
import os
import queue as queue_mod
import signal
import subprocess
import sys
import time
import traceback
import unittest
import zlib
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from conformance import family_select
from conformance import inflight as flight
from conformance.kill_sm90 import PENDING, SM90_KINDS, hopper_refusal
from conformance.large_lock import LargeTierLock
from ground.case import Case
from ground.families import DEFAULT_FAMILY, FAMILY_NAMES
from ground.outcome import Unsupported
from ground.tables import NO_GPU
from kernels.mutants import MUTANTS, SM90_MUTANTS, Mutant
from properties import watchdog
from properties.matrix import BACKWARD as BACKWARD_MODULE  # the backward's families: searched by backward mutants only
from properties.matrix import MATRIX, PARAM, SOURCE, STRATUM, TRANSFORM, Family, in_profile, stratum_of
from properties.watchdog import EXAMPLE_S

DEFAULT_REPORT_DIR = "sdpa-report"
FINDINGS_FILE = "known_findings.toml"
CONTROL = Mutant("control", "control", (), "", "No rewrites: the installed kernels. Must survive every property.")
CONTROL_SM90 = Mutant("control_sm90", "control", (), "", "No rewrites: the installed sm90 kernels. Must survive every sm90 property.", family="sm90")


@dataclass(frozen=True)
class FamilyHarness:
    """What the harness needs of a kernel family (``--family``): the control
    its catalogue runs with; its catalogue (read when called: tests plant
    their own); the adapter its mutants are planted in (module, class);
    whether that adapter applies rewrites only when it compiles (then they
    are checked before the search); why a GPU cannot launch its kernels
    (capability -> reason; None: any CUDA GPU can); and what the catalogue
    listing says of its mutants."""

    control: Mutant
    catalogue: Callable[[], Tuple[Mutant, ...]]
    adapter: Tuple[str, str]
    rewrites_at_compile: bool = False
    gpu_refusal: Optional[Callable[[Optional[tuple]], Optional[str]]] = None
    listing: str = ""


HARNESS: Dict[str, FamilyHarness] = {
    "sm80": FamilyHarness(CONTROL, lambda: MUTANTS, ("kernels.prepared", "PreparedAdapter")),
    "sm90": FamilyHarness(
        CONTROL_SM90,
        lambda: SM90_MUTANTS,
        ("kernels.sm90.adapter", "Sm90Adapter"),
        rewrites_at_compile=True,
        gpu_refusal=hopper_refusal,  # sm_90a artifacts: no other GPU launches them
        listing=" (sm90: --family sm90 on a Hopper GPU)",
    ),
}
assert set(HARNESS) == set(FAMILY_NAMES)
CONTROLS = {name: h.control for name, h in HARNESS.items()}  # per family: the control its catalogue runs with


def catalogue_of(family: str) -> Tuple[Mutant, ...]:
    """The mutants of ``family`` (read when called: tests plant their own)."""
    return HARNESS[family].catalogue()


FAMILY_FLAVORS = {
    "f16": ("gptoss", "llama", "dsv3"),
    "d256": ("qwen",),
    "host": ("gptoss", "llama", "dsv3", "qwen"),
    # The backward: one generic template for every flavor, the d=64 MHA kernel for gptoss.
    "bwd_f16": ("gptoss", "llama", "dsv3", "qwen"),
    "bwd_d64": ("gptoss",),
    "bwd_host": ("gptoss", "llama", "dsv3", "qwen"),
    "bwd_spec": ("gptoss", "llama", "dsv3", "qwen"),
}
LARGE_BUDGET = "large"  # the example budget (strategies.profiles) of the large tier's families
# The safety cap on one mutant's wall clock (--budget-s): searching and shrinking. Never
# what decides how many examples a kind draws (its count does); a search it stops is
# "incomplete", not survived. Generous: a full control search on the H200 takes minutes.
CAP_S = 3600.0
GRACE_S = 150  # a worker's start-up, first compiles and one last example past its cap


# ------------------------------------------------------------------ kinds
@dataclass(frozen=True, eq=False)
class Kind:
    """One property search, derived from a family of the test matrix
    (properties.matrix) that names a ``kind``: its source and
    property axes fixed to one value each (``fixed``; one Kind per value),
    its transform axes drawn per example, its strata widened to the
    mutant's flavors (every dtype)."""

    name: str
    family: Family
    fixed: dict = field(default_factory=dict)
    family_name = DEFAULT_FAMILY  # the kernel family it judges (conformance.kill_sm90: the sm90 kinds)

    @property
    def backward(self) -> bool:
        return self.family.module == BACKWARD_MODULE

    @property
    def examples(self) -> str:  # the example budget kind of strategies.profiles
        return self.family.examples

    @property
    def params(self) -> dict:
        return self.family.params_for(self.fixed)

    @property
    def target(self) -> bool:  # the pytest test steers its search with hypothesis.target() (conformance.testgen)
        return self.family.target

    @property  # last: the name shadows the builtin in the class body
    def property(self) -> str:
        return self.family.property

    def strategy(self, flavors, dtypes=None, adapter=None):
        """SearchStrategy of (the transform-axis values drawn, the Case checked),
        each Case served to the adapters its example launches as a pytest run
        serves it (``Family.serve``: projected facts, crash findings steered)."""
        from hypothesis import strategies as st

        fam = self.family
        base = fam.strategy_for(self.fixed, flavors=flavors, **({"dtypes": dtypes} if dtypes else {}))
        drawn = [a for a in fam.axes if a.role == TRANSFORM]

        def checked(t):
            values = {**self.fixed, **{arg: v for axis, vals in zip(drawn, t[:-1]) for arg, v in zip(axis.args, vals)}}
            case = fam.apply(t[-1], values)
            drawn_values = {k: v for k, v in values.items() if k not in self.fixed}
            return drawn_values, fam.serve(case, values, fam.launches(values, adapter)).case

        return st.tuples(*(st.sampled_from(a.values) for a in drawn), base).map(checked)

    def check(self, case: Case, adapter):
        """The property the pytest test of this kind calls."""
        return self.family.check(case, adapter, self.fixed)

    def strata(self, flavors) -> List[Optional[Tuple[str, str]]]:
        axes = [a for a in self.family.axes if a.role == STRATUM]
        if not axes:
            return [None]
        values = [dict(zip(axes[0].args, v)) for v in axes[0].values]
        return [(v["flavor"], v["dtype"]) for v in values if v["flavor"] in flavors]

    def tests(self) -> int:
        n = 1
        for axis in self.family.axes:
            n *= len(axis.values) if axis.role == TRANSFORM else 1
        return n

    def runs_in(self, profile: str, stratum: Optional[Tuple[str, str]]) -> bool:
        return in_profile(profile, self.family.test, {**self.fixed, **({"flavor": stratum[0], "dtype": stratum[1]} if stratum else {})})

    def nodeid(self, case: Case, drawn: Optional[dict] = None) -> str:
        return self.family.nodeid({**stratum_of(case), **self.fixed, **(drawn or {})})


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


# The SM80 family's searches (the matrix'), then the sm90 family's (conformance.kill_sm90).
KINDS: Tuple[Kind, ...] = derive_kinds(MATRIX) + SM90_KINDS
KIND_NAMES = tuple(k.name for k in KINDS)


def node_id(kind: Kind, case: Case, drawn: Optional[dict] = None) -> str:
    """The pytest node id of the test parameter ``kind`` searched ``case``
    in (``drawn``: the transform-axis values it was drawn with)."""
    return kind.nodeid(case, drawn)


def searched(mutant: Mutant, kinds: Sequence[str] = KIND_NAMES, *, explicit: bool = False) -> List[Kind]:
    """The kinds of ``kinds`` a run of ``mutant`` searches, in order (its
    expected killer first, then the matrix order): its own family's only. The
    large tier's (gigabytes per example) only for the mutant that names one
    as its expected killer; the backward's only for mutants of the backward's
    files and the forward's only for the others, unless named so; the control (the pristine kernels must pass every
    search a mutant may get), or when ``--properties`` named them
    (``explicit``)."""
    backward_mutant = any(t.startswith("bwd_") for t in mutant.targets)

    def wanted(k: Kind) -> bool:
        if k.family_name != mutant.family:  # the other family's kernels: a mutant cannot reach them
            return False
        if explicit or k.name == mutant.expected_killer or mutant.bug_class == CONTROL.bug_class:
            return True
        # A mutant of the backward's files cannot change a forward launch, nor the reverse:
        # searching the other direction would only spend its budget.
        if k.backward != backward_mutant:
            return False
        return k.examples != LARGE_BUDGET

    chosen = [k for k in KINDS if k.name in kinds and wanted(k)]
    # The expected killer first: a kill there ends the mutant soonest, long before the cap.
    return sorted(chosen, key=lambda k: k.name != mutant.expected_killer)


def flavors_for(mutant: Mutant) -> Tuple[str, ...]:
    """Flavors served by the files the mutant rewrites (all for the control;
    none for the sm90 family, which has no flavors)."""
    if mutant.family != DEFAULT_FAMILY:
        return ()
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
    return kind.check(case, adapter)


def search_strata(kind: Kind, flavors) -> List[Optional[Tuple[str, str]]]:
    """The searches a kind makes, as a ci run has one pytest test per stratum:
    the (flavor, dtype) values of the family's stratum axis within the
    mutant's flavors, one search each; [None] (one search over ``flavors``)
    for a family without a stratum axis. One search of one test's examples
    over eight strata would see an eighth of what the gate checks (the H200
    table of 2026-12-03: 40 numerics_dense draws held one RoPE row past a KV
    tile and no LPT-L2 split)."""
    return kind.strata(flavors)


def profile_strata(kind: Kind, flavors, profile: str) -> List[Optional[Tuple[str, str]]]:
    """``search_strata`` less those whose test ``profile`` does not run (pr: part of the matrix)."""
    return [st for st in search_strata(kind, flavors) if kind.runs_in(profile, st)]


@contextmanager
def _geometry_of(profile: str):
    """The profile loaded while a search's strategy is built: its geometry
    mode (strategies.geometry.PROFILE_MODES: pr's "few" rows) is read then."""
    from hypothesis import settings

    previous = settings.get_current_profile_name()
    settings.load_profile(profile)
    try:
        yield
    finally:
        settings.load_profile(previous)


def gate_tests(kind: Kind) -> int:
    """The pytest tests one stratum's search stands for: one per value of the
    family's transform axes (which the search draws per example)."""
    return kind.tests()


def planned_examples(profile: str, kind: Kind, scale: float = 1.0) -> int:
    """The examples one stratum's search of ``kind`` draws: the profile's
    count for the kind's example budget (strategies.profiles.KIND_SCALE,
    unloaded: one test's) times its transform values (``gate_tests``) times
    ``scale`` (--examples-scale). A count, the same on every machine."""
    from hypothesis import settings

    from strategies.profiles import KIND_SCALE

    base = settings.get_profile(profile)
    per_test = max(1, round(base.max_examples * KIND_SCALE[kind.examples]))  # strategies.profiles.examples(), unloaded, per test
    return max(1, round(per_test * gate_tests(kind) * scale))


def _settings(profile: str, kind: Kind, scale: float = 1.0):
    from hypothesis import HealthCheck, Verbosity, settings

    return settings(
        settings.get_profile(profile),
        max_examples=planned_examples(profile, kind, scale),
        database=None,
        deadline=None,
        report_multiple_bugs=False,
        suppress_health_check=list(HealthCheck),
        verbosity=Verbosity.quiet,
    )


@dataclass
class _Search:
    examples: int = 0  # checked before the first failure (drawn)
    planned: int = 0  # the count the search was to draw (planned_examples per stratum)
    shrinks: int = 0  # checked after it (Hypothesis shrinking)
    excused: int = 0  # xfailed observations: every failed check excused by a known finding
    cut: bool = False  # the cap stopped it before Hypothesis ended it by its count
    shrink_capped: bool = False  # the cap, not Hypothesis' count limits, ended shrinking
    first: Optional[tuple] = None  # (case, failure, seconds since the mutant started)
    last: Optional[tuple] = None  # the shrunk one: Hypothesis replays it last


def search(
    kind: Kind, adapter, flavors, *, profile: str, until: float, t0: float, check=check_property, stratum: Optional[Tuple[str, str]] = None, scale: float = 1.0
) -> _Search:
    """One Hypothesis search of ``kind`` (in ``stratum``: one (flavor, dtype),
    as one pytest test; None: over ``flavors``): ``planned_examples`` draws,
    unless a failure is seen (then Hypothesis shrinks it, within its own
    count limits and the cap: the failure found so far is kept) or the clock
    passes ``until``, the safety cap (then the search is ``cut``: it checks
    nothing more)."""
    from hypothesis import given, reject, seed, target
    from hypothesis import strategies as st
    from hypothesis.control import current_build_context
    from hypothesis.errors import UnsatisfiedAssumption
    from hypothesis.internal.conjecture import engine

    from properties import recorder

    recorder.set_test(None)  # a search starts as a test does: no failure of an earlier search turns its refusals into rejections
    state = _Search(planned=planned_examples(profile, kind, scale))
    if time.perf_counter() > until:  # past the cap: skip, do not draw a single example
        state.cut = True
        return state
    with _geometry_of(profile):
        strategy = kind.strategy(flavors, adapter=adapter) if stratum is None else kind.strategy((stratum[0],), (stratum[1],), adapter=adapter)

    # A derandomized profile seeds a search from its function, the same for every
    # stratum (pytest's parameters of one test draw different sequences): each
    # stratum's search gets a seed of its own, fixed by the kind and stratum.
    salt = seed(zlib.crc32(f"{kind.name}[{stratum[0]}-{stratum[1]}]".encode())) if stratum else (lambda f: f)

    @salt
    @_settings(profile, kind, scale)
    @given(data=st.data())
    def probe(data):
        drawn, case = data.draw(strategy, label="case")  # always: a draw-less example confuses Hypothesis
        if state.first is None and time.perf_counter() > until:
            state.cut = True
            return
        if state.first is not None and time.perf_counter() > until and not current_build_context().is_final:
            # Past the cap with a failure found (shrinking it, or the generate phase's target optimiser
            # ending its climb): nothing more is checked; Hypothesis' last replay of the failure still runs.
            state.shrink_capped = True
            reject()
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
        except unittest.SkipTest:  # a refusal (Unsupported; scope "case" was rejected above): no verdict, not a kill
            if state.first is None:
                raise
            state.shrinks -= 1
            reject()  # while shrinking a failure found: the refused candidate is no example, the failure stands
        except Exception as failure:  # noqa: BLE001 - a crash of the mutated kernel is a verdict
            hit = (case, failure, time.perf_counter() - t0)
            if state.first is None:
                # Shrinking's time limit is read when shrinking starts, right after this example:
                # what is left of the cap, so that shrinking ends at the cap with the failure found so far.
                engine.MAX_SHRINKING_SECONDS = max(0.0, until - time.perf_counter())
            state.first, state.last = state.first or hit, hit
            raise
        if getattr(obs, "outcome", None) == "xfailed":
            state.excused += 1
        if kind.target:  # as the pytest test steers its search: the same draws
            for quantity, ratio in (getattr(obs, "ratios", None) or {}).items():
                if isinstance(ratio, (int, float)) and math.isfinite(ratio):
                    target(float(ratio), label=f"error/bound {quantity}")

    was = engine.MAX_SHRINKING_SECONDS
    try:
        probe()
    except unittest.SkipTest:
        if state.first is None:
            raise
    except Exception:  # noqa: BLE001 - recorded in state (Flaky and groups included)
        if state.first is None:
            raise
    finally:
        engine.MAX_SHRINKING_SECONDS = was
    state.shrink_capped |= state.first is not None and time.perf_counter() > until
    return state


def base_record(mutant: Mutant, examples_scale: float = 1.0) -> dict:
    """A mutant's record before any search: its catalogue entry, verdict ``survived``."""
    return {
        "name": mutant.name,
        "bug_class": mutant.bug_class,
        "family": mutant.family,
        "targets": list(mutant.targets),
        "expected_killer": mutant.expected_killer,
        "change": change_line(mutant),
        "rewrites": mutant.digest,  # every rewrite in full: what --resume compares
        "why": mutant.why,
        "verdict": "survived",
        "killed_by": None,
        "property": None,
        "summary": None,
        "first_failure_s": None,
        "case": None,
        "failure_case": None,
        "first_case": None,
        "case_size": None,
        "shrink_capped": False,
        "complete": True,
        "error": None,
        "examples_scale": examples_scale,
        "kinds": [],
    }


def adapter_for(mutant: Mutant, adapter_factory=None):
    """The adapter a mutant's searches run on; raises StaleMutant for a rewrite
    that does not match exactly once (a family whose adapter applies its
    rewrites only when it compiles, ``HARNESS``: they are checked here)."""
    import importlib

    from kernels.source import check_rewrites

    harness = HARNESS[mutant.family]
    if adapter_factory is None:
        module, name = harness.adapter
        adapter_factory = getattr(importlib.import_module(module), name)
    if harness.rewrites_at_compile:
        check_rewrites(mutant.rewrites)
    return adapter_factory(rewrites=mutant.rewrites)


def run_mutant(
    mutant: Mutant,
    *,
    profile: str = "ci",
    budget_s: float = CAP_S,
    examples_scale: float = 1.0,
    kinds: Sequence[str] = KIND_NAMES,
    explicit: bool = False,
    check=check_property,
    adapter_factory=None,
    fresh: Optional[dict] = None,
) -> dict:
    """Run one mutant through the property kinds (the expected killer first);
    returns its verdict record. Each kind draws its planned example count per
    stratum; ``budget_s`` only caps the mutant's wall clock (a search it cuts
    makes the verdict ``incomplete``, unless a failure was found first). A
    kill is replayed on the pristine kernels (``pristine_failure``; ``fresh``:
    the options of a fresh process for it, where a crash killed this one's
    CUDA context)."""
    from kernels.source import StaleMutant

    t0 = time.perf_counter()
    rec = base_record(mutant, examples_scale)
    try:
        adapter = adapter_for(mutant, adapter_factory)
    except StaleMutant as e:
        return rec | {"verdict": "stale", "error": str(e), "wall_s": round(time.perf_counter() - t0, 1)}
    chosen = searched(mutant, kinds, explicit=explicit)
    confirm = confirmation(mutant, check, adapter_factory, fresh)
    _search_kinds(rec, chosen, adapter, flavors_for(mutant), profile=profile, deadline=t0 + budget_s, t0=t0, check=check, scale=examples_scale, confirm=confirm)
    rec["wall_s"] = round(time.perf_counter() - t0, 1)
    return rec


def confirmation(mutant: Mutant, check, adapter_factory=None, fresh: Optional[dict] = None):
    """kind -> the kill confirmation ``unit_result`` takes for a unit of that
    kind: its Cases replayed with the unwrapped ``check`` on the control's
    adapter (made once, when a kill first needs it). None for a mutant of no
    rewrites (a control): its kernels are the pristine ones."""
    if not mutant.rewrites:
        return None
    made = []

    def pristine():
        made[:] = made or [adapter_for(CONTROLS[mutant.family], adapter_factory)]
        return made[0]

    fresh = None if fresh is None else fresh | {"family": mutant.family}
    return lambda kind: lambda cases: pristine_failure(kind, cases, pristine, check, fresh)


def search_units(chosen, flavors, profile: str) -> List[Tuple[Kind, Optional[Tuple[str, str]]]]:
    """The searches of a mutant, in the order one process makes them: each
    kind of ``chosen`` in order, each of its strata the profile runs (a kind
    whose test the profile does not run has none: properties.matrix.PROFILE_TESTS).
    A unit is one Hypothesis search, its count, seed and settings its own
    (``search``): the unit a mutant's searches are split by over processes."""
    return [(kind, stratum) for kind in chosen for stratum in profile_strata(kind, flavors, profile)]


def unit_result(s: _Search, seconds: float, confirm=None) -> dict:
    """One unit's search as plain data (it crosses processes): its counts and,
    if it failed, the record fields of its failure (its verdict:
    ``failure_verdict``). ``confirm(cases)``: a kill's Cases replayed on the
    pristine kernels (``pristine_failure``); where one fails there too the
    verdict is ``pristine_fails`` (the kill is not the mutant's)."""
    res = {
        "examples": s.examples,
        "planned": s.planned,
        "shrinks": s.shrinks,
        "excused": s.excused,
        "cut": s.cut,
        "shrink_capped": s.shrink_capped,
        "seconds": seconds,
        "failure": None,
    }
    if s.first is not None:
        from ground.outcome import PropertyFailure

        case, failure, _ = s.last
        verdict = failure_verdict(failure)
        judged = isinstance(failure, PropertyFailure)
        failing = getattr(failure, "case", None)
        summary = failure.summary if judged else f"{type(failure).__name__}: {str(failure)[:300]}"
        res["failure"] = failure_fields(verdict, summary, s.first[2], case, s.first[0], failing if judged and failing != case else None)
        if verdict in KILLS and confirm is not None:
            pristine = confirm(list(dict.fromkeys((case, s.first[0]))))
            if pristine is not None:
                unknown = pristine.get("unknown")
                res["failure"].update(verdict="harness_error" if unknown else "pristine_fails", pristine=pristine, mutant_verdict=verdict)
    return res


def failure_fields(verdict: str, summary: str, seconds: float, case: Case, first: Case, failing: Optional[Case] = None) -> dict:
    """A unit's failure as record fields: the verdict, the (shrunk) Case, the first failing one."""
    return dict(
        verdict=verdict,
        summary=summary,
        first_failure_s=round(seconds, 1),
        case=case.to_dict(),
        case_size=case_size(case),
        case_text=case.describe(),
        first_case=first.to_dict(),
        failure_case=None if failing is None else failing.to_dict(),
    )


def first_failing(results: dict, events: Optional[dict] = None) -> Optional[int]:
    """The index of the unit whose failure decides the verdict: the first in
    search order (``events``: units whose process died or raised in the
    harness), whatever order the processes found them in; None: none failed."""
    failed = [i for i, r in results.items() if r.get("failure")] + list(events or ())
    return min(failed) if failed else None


def short(r: dict) -> bool:
    """A unit searched to its end that drew fewer examples than planned (its
    property rejected the rest): the same on every machine, but not a full search."""
    return not r["failure"] and not r["cut"] and r["examples"] < r["planned"]


def merge_units(rec: dict, units, results: dict, *, profile: str, scale: float = 1.0) -> None:
    """Fill ``rec`` (its ``kinds``, ``complete`` and verdict) from the units'
    results (index -> ``unit_result``), as one process searching them in
    order would: every unit up to the first that failed or that the cap cut,
    each kind's strata summed; a failure there is the verdict, a cut unit
    makes it ``incomplete`` (a later unit's failure is not counted: one
    process past its cap would not have searched it, a faster one might have
    killed earlier); else ``short`` where a unit drew fewer examples than
    planned, ``survived`` where every unit drew its count."""
    end = min([i for i, r in results.items() if r.get("failure") or r["cut"]], default=None)
    for kind in dict.fromkeys(k for k, _ in units):
        mine = [i for i, (k, _) in enumerate(units) if k is kind]
        done = [results[i] for i in mine if end is None or i <= end]
        if not done:
            break
        cut = any(r["cut"] for r in done)
        failure = next((r["failure"] for r in done if r["failure"]), None)
        rec["kinds"].append(
            {
                "name": kind.name,
                "examples": sum(r["examples"] for r in done),
                "planned": planned_examples(profile, kind, scale) * len(mine),
                "shrinks": sum(r["shrinks"] for r in done),
                "excused": sum(r["excused"] for r in done),
                "cut": cut,
                "short": any(short(r) for r in done),
                "strata": len(mine),
                "seconds": round(sum(r["seconds"] for r in done), 1),
                "failed": failure is not None,
            }
        )
        rec["complete"] &= not cut and not any(short(r) for r in done)
        if failure is not None:
            rec.update(failure, killed_by=kind.name, property=kind.property, params=kind.params, shrink_capped=results[end]["shrink_capped"])
            return
        if cut:
            rec["verdict"] = "incomplete"
            return
    if not rec["complete"]:
        rec["verdict"] = "short"


def _search_kinds(rec: dict, chosen, adapter, flavors, *, profile, deadline, t0, check, scale: float = 1.0, confirm=None) -> None:
    """Search each kind in order, every stratum its planned count, until one
    fails or the clock passes ``deadline`` (the cap: the kinds and strata
    left are recorded as cut, with nothing drawn). A unit whose failure is
    ``infra`` (out of memory) is searched once more. Fills ``rec`` with the
    verdict (``merge_units``). ``confirm(kind)``: the kill confirmation of
    ``unit_result`` for a unit of ``kind``."""
    units, results = search_units(chosen, flavors, profile), {}
    for i, (kind, stratum) in enumerate(units):
        for _ in range(2):
            now = time.perf_counter()
            one = search(kind, adapter, flavors, profile=profile, until=deadline, t0=t0, check=check, stratum=stratum, scale=scale)
            results[i] = unit_result(one, time.perf_counter() - now, confirm and confirm(kind))
            if (results[i]["failure"] or {}).get("verdict") != "infra":
                break
        if one.first is not None:
            break
    merge_units(rec, units, results, profile=profile, scale=scale)


# ------------------------------------------------------------------ verdicts of one failure
# The verdicts a kill counts (the rate's numerator), and the ones counted at all (its denominator);
# every other verdict is none: listed, never counted (docs/mutants.md: why each).
KILLS = ("killed", "error")
COUNTED = KILLS + ("survived",)
NON_VERDICTS = ("pristine_fails", "compile_error", "infra", "harness_error", "short", "incomplete", "stale")
VERDICTS = COUNTED + NON_VERDICTS
REWRITTEN = "sdpa-rewrites-"  # kernels.source writes a mutant's rewritten files to a temp directory of this prefix
# Where the kernels load or compile their sources before any launch (file, function; None:
# any): an exception raised below one of these frames is the source's compile error.
COMPILE_STAGES = (
    ("cudnn/frost/template_loader.py", "load_template"),  # executes a template's (rewritten) source
    ("cudnn/frost/compiled_cache.py", "compile_cached"),  # every DSL compile of the SM80 and sm90 hosts
    ("cutlass/base_dsl/compiler.py", None),  # cute.compile, the DSL's compiler
    ("kernels/source.py", "host_module"),  # a rewritten host module's body
    ("kernels/source.py", "_package_module"),  # a rewritten backward or sm90 module's body
)


def _rewritten(filename: str) -> bool:
    return any(part.startswith(REWRITTEN) for part in Path(filename).parts)


def raised_by_kernels(exc: BaseException) -> bool:
    """``properties.watchdog.raised_by_kernels``, with the mutant's rewritten
    files (loaded from a temp directory, outside the cudnn package) counted
    as the kernels', and a SyntaxError as raised where its source is."""
    from properties.watchdog import SUITE_PACKAGES
    from properties.watchdog import raised_by_kernels as in_cudnn

    if in_cudnn(exc):
        return True
    if isinstance(exc, SyntaxError) and _rewritten(exc.filename or ""):
        return True
    files = [str(Path(f.filename).resolve()) for f in traceback.extract_tb(exc.__traceback__)]
    last_own = max((i for i, f in enumerate(files) if f.startswith(SUITE_PACKAGES)), default=-1)
    return any(_rewritten(f) for f in files[last_own + 1 :])


def out_of_memory(exc: BaseException) -> bool:
    """The device or the host ran out of memory (torch.OutOfMemoryError, "CUDA error: out of memory", MemoryError)."""
    text = f"{type(exc).__name__}: {exc}".lower()
    return isinstance(exc, MemoryError) or type(exc).__name__ == "OutOfMemoryError" or "out of memory" in text


def compiling(exc: BaseException) -> bool:
    """``exc`` was raised while the kernels loaded or compiled their sources (``COMPILE_STAGES``), before any launch."""
    if isinstance(exc, SyntaxError):
        return True
    for frame in traceback.extract_tb(exc.__traceback__):
        name = Path(frame.filename).as_posix()
        if any(name.endswith("/" + where) and fn in (None, frame.name) for where, fn in COMPILE_STAGES):
            return True
    return False


def crash_or_harness(exc: BaseException) -> str:
    """The verdict of an exception a property raised (not a PropertyFailure):
    ``infra`` (out of memory: the machine, not the mutant), ``compile_error``
    (raised by the kernels while loading or compiling the rewritten source),
    ``error`` (raised by the kernels' own code, or a CUDA error after which
    this process' context is dead: a crash of the mutated kernel), else
    ``harness_error`` (the suite's code, or a library it called: never a kill;
    a message that merely names a CUDA error included)."""
    from properties.watchdog import context_lost, looks_like_cuda_error

    if out_of_memory(exc):
        return "infra"
    if raised_by_kernels(exc):
        return "compile_error" if compiling(exc) else "error"
    if looks_like_cuda_error(exc) and context_lost(exc) is not None:
        return "error"
    return "harness_error"


def failure_verdict(failure: BaseException) -> str:
    """The verdict of a failing example: a PropertyFailure kills, but the
    launch check's (the kernels raised on a valid Case: properties.common.accepted)
    is judged by what they raised (``crash_or_harness``: out of memory and a
    compile error are no kill); any other exception by ``crash_or_harness``."""
    from ground.outcome import PropertyFailure

    if not isinstance(failure, PropertyFailure):
        return crash_or_harness(failure)
    cause = failure.__cause__ if getattr(failure, "check", None) == "launch" else None
    if cause is not None and out_of_memory(cause):
        return "infra"
    if cause is not None and raised_by_kernels(cause) and compiling(cause):
        return "compile_error"
    return "killed"


# ---------------------------------------------------------- the pristine replay of a kill
REPLAY_S = 900.0  # a fresh process' replay of a kill's Cases: start-up, compiles, two examples (the large tier's too)
# A worker's example still running past HANG_S (properties.watchdog.EXAMPLE_S, the pytest run's bound
# too) ends the worker with watchdog.EXIT_HANG: its in-flight Case is replayed like a crash's, each
# replay bounded by HANG_REPLAY_S: a fresh process' start-up, the Case's compiles and the example alone
# on the device (the slowest example measured, a large-tier one, took 77 s among 16 workers). A slow
# example that overran HANG_S among 16 workers ends within it; a hung kernel does not. The harness
# waits on these replays (as on a crash's), so the bound is what a hang costs a run's wall.
HANG_S = EXAMPLE_S
HANG_REPLAY_S = 180.0


def pristine_failure(kind: Kind, cases: Sequence[Case], pristine, check, fresh: Optional[dict] = None) -> Optional[dict]:
    """Replay a kill's ``cases`` (the shrunk one and the first) with ``check``
    on the pristine kernels (``pristine()``: the control's adapter): None when
    none fails there (rejected or refused: no failure), else the first that
    does, as record fields. In this process while its CUDA context works,
    else (a crash killed it) in a fresh one made from ``fresh`` (a worker's
    options); ``{"unknown": why}`` when no replay could run."""
    from properties.watchdog import probe

    if probe() is None:
        return _replay(kind, cases, pristine(), check)
    if fresh is None:
        return {"unknown": "the CUDA context is dead and no fresh process was asked for"}
    return _replay_fresh(kind, cases, fresh)


def _replay(kind: Kind, cases: Sequence[Case], adapter, check) -> Optional[dict]:
    """Each Case as one explicit Hypothesis example (a property may reject it, as in its search)."""
    from hypothesis import HealthCheck, Phase, example, given, settings
    from hypothesis import strategies as st

    for case in cases:

        @settings(database=None, deadline=None, phases=[Phase.explicit], suppress_health_check=list(HealthCheck), report_multiple_bugs=False)
        @example(c=case)
        @given(c=st.just(case))
        def replay(c):
            check(kind, c, adapter)

        try:
            replay()
        except unittest.SkipTest:  # refused on the pristine kernels: no failure there
            continue
        except Exception as e:  # noqa: BLE001 - any failure on the pristine kernels: the kill is not the mutant's
            return {"case": case.to_dict(), "case_text": case.describe(), "failure": f"{type(e).__name__}: {str(e).strip()[:300]}"}
    return None


def _replay_fresh(kind: Kind, cases: Sequence[Case], opts: dict, mutant: Optional[Mutant] = None, timeout: float = REPLAY_S) -> Optional[dict]:
    """``_replay`` in a fresh Python process (a worker, a daemon, may not start
    a multiprocessing child), on the pristine kernels or (``mutant``) on that
    mutant's; ``{"died": signal number, "signal": name}`` when the process
    was killed by a signal, ``{"hung": seconds}`` when it ran past ``timeout``
    (then killed)."""
    import base64
    import pickle

    keep = {k: opts.get(k) for k in ("kernels_source", "findings", "adapter_factory", "check", "family")}
    job = base64.b64encode(pickle.dumps((kind.name, [c.to_dict() for c in cases], keep, mutant)))
    code = "import sys; from conformance.kill_rate import _replay_main; _replay_main(sys.stdin.read())"
    env = os.environ | {"PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    try:
        done = subprocess.run([sys.executable, "-c", code], input=job.decode(), capture_output=True, text=True, timeout=timeout, env=env)
        if done.returncode < 0:
            return {"died": -done.returncode, "signal": _signal_name(-done.returncode)}
        return json.loads(done.stdout.strip().splitlines()[-1])["pristine"]
    except subprocess.TimeoutExpired:
        return {"hung": timeout}
    except (OSError, subprocess.SubprocessError, ValueError, IndexError, KeyError) as e:
        return {"unknown": f"the fresh process' replay gave no answer ({type(e).__name__}: {e})"}


def _replay_main(job: str) -> None:
    """The fresh process of ``_replay_fresh``: prints {"pristine": ...} as its last line."""
    import base64
    import pickle

    name, cases, opts, mutant = pickle.loads(base64.b64decode(job))
    _setup(opts)
    kind = next(k for k in KINDS if k.name == name)
    adapter = adapter_for(mutant or CONTROLS[opts.get("family") or DEFAULT_FAMILY], opts.get("adapter_factory"))
    result = _replay(kind, [Case.from_dict(c) for c in cases], adapter, opts.get("check") or check_property)
    print(json.dumps({"pristine": result}))


# ------------------------------------------------------------- processes
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
        kind, stratum = units[i]

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
            one = search(kind, adapter, flavors, profile=profile, until=deadline, t0=t0, check=gated, stratum=stratum, scale=scale)
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


def _setup(opts: dict) -> None:
    """A worker's process state: the kernels' source, torch's threads, the known findings."""
    from kernels.source import use_kernels_source

    use_kernels_source(opts.get("kernels_source"))
    import torch

    torch.set_num_threads(opts.get("threads") or 1)
    if opts.get("findings"):
        from ground import findings
        from properties import CHECKS

        findings.activate(findings.load(opts["findings"], checks=CHECKS))


def _worker(mutant: Mutant, specs, opts: dict, share: int, shares: int, tasks, out, stop, large, born: float) -> None:
    """Process entry: one share of a mutant (``specs``: its units as (kind
    name, stratum); ``tasks``: queues of unit indices, each taken from until
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
        units = [(by_name[name], stratum) for name, stratum in specs]
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
        )
    except BaseException as e:  # noqa: BLE001 - outside any property call (or a refusal): the harness, not the mutant
        traceback.print_exc()
        out.put(("harness", mutant.name, share, current[0], ("infra" if out_of_memory(e) else "harness_error", f"{type(e).__name__}: {e}")))
        return
    out.put(("done", mutant.name, share, None, None))


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
    return search_units(searched(mutant, opts["kinds"], explicit=opts.get("explicit", False)), flavors_for(mutant), opts["profile"])


def share_plan(mutants: Sequence[Mutant], opts: dict, jobs: int) -> Tuple[dict, dict]:
    """Each mutant's units and its processes (``plan_shares``), by name."""
    units = {m.name: mutant_units(m, opts) for m in mutants}
    shares = plan_shares([_work(units[m.name], opts) for m in mutants], [len(units[m.name]) for m in mutants], jobs)
    return units, dict(zip((m.name for m in mutants), shares))


def _work(units, opts: dict) -> float:
    """The planned work of ``units``: examples weighed by the property's seconds (conformance.schedule)."""
    from conformance.schedule import weight_of

    return sum(planned_examples(opts["profile"], k, opts.get("examples_scale", 1.0)) * weight_of(k.property) for k, _ in units)


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
    (watchdog.EXIT_HANG) and its Case is judged as a crash's (``hung``). A
    share still alive past the cap (--budget-s: searching and shrinking) +
    GRACE_S is killed: ``incomplete`` (a slow search, each example under the
    hang bound). A share that exits without a result is a ``harness_error``.
    Either ends the mutant's verdict at its unit (the first failure in search
    order still wins)."""
    import multiprocessing as mp

    from conformance.kill_rate import _worker  # by its module name even when run as __main__

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
        planned = planned_examples(opts["profile"], kind, opts.get("examples_scale", 1.0))
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
        specs = [(k.name, st) for k, st in run.units]
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
            for share, p in list(run.procs.items()):
                if share in run.finished or (p.is_alive() and time.time() - run.born <= limit):
                    continue
                overdue = p.is_alive()
                if overdue:
                    p.kill()
                p.join(timeout=5)
                time.sleep(0.2)
                drain()  # a message may have landed just before it exited
                if share in run.finished:
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


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return "?"


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


# ---------------------------------------------------------------- verdicts
def tally(mutant_records: Sequence[dict]) -> dict:
    """Counts and the kill rate: (killed + error) / (killed + error + survived);
    every other verdict (``NON_VERDICTS``) is excluded, counted apart."""
    n = {v: sum(r["verdict"] == v for r in mutant_records) for v in VERDICTS}
    counted = sum(n[v] for v in COUNTED)
    rate = sum(n[v] for v in KILLS) / counted if counted else None
    return {**n, "total": len(mutant_records), "counted": counted, "excluded": len(mutant_records) - counted, "kill_rate": rate}


def invalidated(t: dict) -> dict:
    """A tally of an invalid run: its counts, no rate (it would measure the suite's failure)."""
    return t | {"kill_rate": None, "invalid": True}


def control_problem(control: Optional[dict]) -> Optional[str]:
    """Why the run is invalid because of the control (None: it survived)."""
    if control is None or control["verdict"] == "survived":
        return None
    verdict, error = control["verdict"], control.get("error")
    if verdict == "incomplete":
        return (
            f"the control's search was stopped by the cap (--budget-s) before its example counts ({error or drew(control)}): "
            "raise --budget-s (or lower --examples-scale), the control must fully survive"
        )
    if verdict == "short":
        return (
            f"the control's search drew fewer examples than planned ({drew(control)}): a property rejects most of its draws, the control must draw its counts"
        )
    if verdict == "harness_error":
        return f"the control's worker failed in the harness ({error or control.get('summary')}), so mutant verdicts mean nothing"
    if verdict == "infra":
        return f"the control's search met a fault of the machine ({error or control.get('summary')}): run it again (fewer --jobs)"
    what = f"failed {control.get('killed_by')}" if control.get("killed_by") else verdict
    case = f" on {control.get('case_text')}" if control.get("case_text") else ""
    detail = control.get("summary") or error or ""
    return f"the control (no rewrites) {what}{case}: {detail} -- the suite is not green on the installed kernels (fix it or add a known finding), so mutant verdicts mean nothing"


def controls_problem(controls) -> Optional[str]:
    """Why the run is invalid because of a control (a record or a list of
    them, one per family; None: every one survived)."""
    if controls is None or isinstance(controls, dict):
        return control_problem(controls)
    problems = [(c["name"], control_problem(c)) for c in controls]
    bad = [f"{name}: {p}" if len(controls) > 1 else p for name, p in problems if p]
    return "; ".join(bad) or None


def run_problem(controls, mutants: Sequence[dict] = ()) -> Optional[str]:
    """Why the run is invalid (None: it is not): a control that did not
    survive, or a mutant's kill that fails on the pristine kernels too (a
    failure of the suite, named with its Case)."""
    bad = [controls_problem(controls)] + [
        f"{r['name']}: its kill ({r.get('killed_by')}) fails on the pristine kernels too, on {pristine_text(r)} -- "
        "a failure of the suite, not the mutant's (fix it or add a known finding)"
        for r in mutants
        if r["verdict"] == "pristine_fails"
    ]
    return "; ".join(p for p in bad if p) or None


def exit_code(t: dict, control, goal: float) -> int:
    """``control``: the control's record, or the list of the families' controls."""
    # A mutant with no verdict (stale aside: a catalogue entry to fix, never run) fails the run: on
    # another machine, or with the suite's bug fixed, it might have been killed or survived.
    # No mutant run (--only control): the goal has nothing to measure.
    rate_ok = t["total"] == 0 or (t["kill_rate"] is not None and t["kill_rate"] >= goal)
    ok = controls_problem(control) is None and not any(t[v] for v in NON_VERDICTS if v != "stale") and rate_ok
    return 0 if ok else 1


def kill_rate_line(t: dict, goal: float) -> str:
    """The rate, its formula with the counts, and every excluded verdict's count."""
    if t["total"] == 0:
        return "kill rate: n/a (no mutant run: the control alone)"
    excluded = "excluded (no verdict): " + ", ".join(f"{t.get(v, 0)} {v}" for v in NON_VERDICTS)
    if t.get("invalid"):
        return f"kill rate: n/a (INVALID RUN); {excluded}"
    formula = f"(killed {t['killed']} + error {t['error']}) / (killed {t['killed']} + error {t['error']} + survived {t['survived']})"
    if t["kill_rate"] is None:
        return f"kill rate: n/a = {formula}: no mutant to count; {excluded}"
    return f"kill rate: {t['kill_rate']:.0%} = {formula} = {t['killed'] + t['error']}/{t['counted']}; {excluded}; goal {goal:.0%}"


COLUMNS = (
    "mutant",
    "bug class",
    "targets",
    "verdict",
    "killed by",
    "expected killer",
    "first failure (s)",
    "shrunk case size",
    "shrunk case",
    "examples drawn / planned",
)


def render_markdown(doc: dict) -> str:
    run, t = doc["run"], doc["tally"]
    shares = run.get("shares") or {}
    split = f" (searches split over processes: {', '.join(f'{name} {n}' for name, n in shares.items())})" if shares else ""
    split += f", resumed: {run['resumed']} records from earlier calls (--resume)" if run.get("resumed") else ""
    controls = doc.get("controls") or ([doc["control"]] if doc.get("control") else [])
    problem = run_problem(controls, doc["mutants"])
    valid = invalidated if problem else dict
    lines = [
        "# Mutants",
        "",
        f"profile `{run['profile']}`, example counts x{run.get('examples_scale', 1):g} (per kind and stratum: the verdicts mean the same on "
        f"every machine), cap {run['budget_s']:g} s per mutant, {run['jobs']} jobs{split}, {run['wall_s']} s wall; {run.get('gpu') or 'no GPU'} ({run.get('mode') or '-'})",
        "",
    ]
    lines += [f"**INVALID RUN**: {problem}", ""] if problem else []  # first: no rate stands above it
    lines += [f"**{kill_rate_line(valid(t), run['goal'])}**", ""]
    lines += [f"- {f}: {kill_rate_line(valid(ft), run['goal'])}" for f, ft in (doc.get("tally_by_family") or {}).items()]
    lines += [""] if doc.get("tally_by_family") else []
    lines += ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for r in controls + doc["mutants"]:
        case = r.get("first_case") if r["verdict"] == "error" else r.get("case")
        text = Case.from_dict(case).describe() if case else (r.get("error") or "-")
        text += " (shrinking stopped by the cap)" if r.get("shrink_capped") else ""
        cells = (
            r["name"],
            r.get("bug_class", "-"),
            "/".join(r.get("targets") or []) or "-",
            r["verdict"],
            r.get("killed_by") or "-",
            r.get("expected_killer") or "-",
            r.get("first_failure_s") or "-",
            r.get("case_size") if r.get("case_size") is not None else "-",
            text,
            drew(r),
        )
        lines.append("| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------- resume
PARTIAL = "mutants.partial.json"
# What must be equal for a record of an earlier call to stand in a run: the searches it made
# (options, selection, environment that the strategies and reference read) and what judged
# them (the kernels' source and versions, the findings file's content, the suite's revision).
RESUME_KEYS = (
    "families",
    "profile",
    "examples_scale",
    "kinds",
    "explicit",
    "jobs",
    "budget_s",
    "known_findings",
    "findings_digest",
    "kernels_source",
    "environment",
    "suite",
    "gpu",
    "versions",
)
RESUME_ENV = ("SDPA_GEOMETRY", "SDPA_PLANT_REFERENCE_BUG")  # read by the strategies and the reference in every worker
# The verdicts a record keeps (each the same on every machine); the others are searched again.
KEPT = ("killed", "error", "compile_error", "survived", "short", "stale")
UNIT_KEPT = ("killed", "error", "compile_error")  # a unit's failure kept; any other failing unit is searched again


def unit_kept(res: dict) -> bool:
    """A unit's result stands in a later call: searched to its end (not cut) and, if it failed, with a verdict of ``UNIT_KEPT``."""
    return not res["cut"] and (res["failure"] is None or res["failure"].get("verdict") in UNIT_KEPT)


def file_digest(path) -> Optional[str]:
    """sha256 of the file's bytes (None: no file)."""
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16] if path else None
    except OSError:
        return None


def suite_revision() -> Optional[str]:
    """The suite's commit (``git rev-parse HEAD``) with a digest of its uncommitted
    changes to the suite's packages (tracked and untracked files); None without git."""
    from properties.watchdog import SUITE_PACKAGES

    root = Path(__file__).resolve().parents[1]
    packages = [Path(p).name for p in SUITE_PACKAGES]

    def git(*args) -> str:
        done = subprocess.run(["git", "--no-optional-locks", "-C", str(root), *args], capture_output=True, text=True, timeout=60)
        if done.returncode:
            raise OSError(done.stderr.strip())
        return done.stdout

    try:
        head = git("rev-parse", "HEAD").strip()
        changes = git("diff", "HEAD", "--", *packages)
        new = git("ls-files", "--others", "--exclude-standard", "--", *packages).split()
    except (OSError, subprocess.SubprocessError):
        return None
    digest = hashlib.sha256(changes.encode())
    for name in sorted(new):
        digest.update(name.encode() + b"\0" + ((root / name).read_bytes() if (root / name).is_file() else b""))
    return head if not changes and not new else f"{head}+{digest.hexdigest()[:12]}"


def resumed_records(
    partial: Path, run: dict, mutants: Sequence[Mutant], opts: Optional[dict] = None
) -> Tuple[Dict[str, dict], float, Dict[str, Dict[int, dict]]]:
    """What this run keeps of ``partial`` (an earlier call's
    mutants.partial.json): the records, by name; the wall seconds the calls
    before took; and, of a mutant with no record kept, its units searched to
    their count or to a kept failure (``unit_kept``): name -> unit index ->
    result (``opts``: this run's, whose ``mutant_units`` each must still be).
    Usage for a missing or unreadable file, or one made with other options
    (``RESUME_KEYS``, named); a record is kept when its verdict is one
    (``KEPT``) and its mutant's rewrites are the catalogue's now (every one,
    in full: ``Mutant.digest``)."""
    try:
        doc = json.loads(partial.read_text())
        before, records, saved = doc["run"], doc["records"], doc.get("units", {})
    except FileNotFoundError:
        raise Usage(f"--resume: no {partial} (a run writes it as its records are made)") from None
    except (ValueError, KeyError, TypeError) as e:
        raise Usage(f"--resume: {partial} is not a partial report ({type(e).__name__}: {e})") from None
    differ = [k for k in RESUME_KEYS if json.dumps(before.get(k), default=str) != json.dumps(run.get(k), default=str)]
    if differ:
        k = differ[0]
        raise Usage(f"--resume: {partial} was made with {k}={before.get(k)!r}, this run has {run.get(k)!r}: run the same options, or drop --resume")
    current = {m.name: m.digest for m in mutants}
    kept = {n: r for n, r in records.items() if n in current and r.get("verdict") in KEPT and r.get("rewrites") == current[n]}
    units: Dict[str, Dict[int, dict]] = {}
    for m in mutants:
        mine = saved.get(m.name) or {}
        if m.name in kept or not mine or opts is None or mine.get("rewrites") != current[m.name]:
            continue
        plan = [unit_label(u) for u in mutant_units(m, opts)]
        units[m.name] = {int(i): r["result"] for i, r in mine["done"].items() if int(i) < len(plan) and r["unit"] == plan[int(i)] and unit_kept(r["result"])}
    return kept, float(doc.get("wall_s") or 0.0), units


def unit_label(unit) -> list:
    """A unit (kind, stratum) as the partial report names it: [kind name, stratum or None]."""
    kind, stratum = unit
    return [kind.name, list(stratum) if stratum else None]


def write_partial(path: Path, run: dict, records: Dict[str, dict], wall_s: float, units: Optional[dict] = None) -> None:
    """The records made so far, with the options they were made under, and
    the units searched of mutants with no record yet (atomically: a call cut
    mid-write leaves the last one)."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"run": run, "wall_s": round(wall_s, 1), "records": records, "units": units or {}}, indent=1, default=str) + "\n")
    tmp.replace(path)


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
    p.add_argument(
        "--list", action="store_true", help="print the catalogue and check every rewrite applies exactly once (no GPU needed); exit 1 if one is stale"
    )
    p.add_argument(
        "--only",
        metavar="NAME[,NAME]",
        default=None,
        help="run only these mutants (of the --family catalogues); each family's control always runs, and naming it (control, control_sm90) runs it alone",
    )
    p.add_argument(
        "--family",
        choices=FAMILY_NAMES + ("all",),
        default=None,
        help="kernel families whose catalogue runs, each with its control: sm80 (kernels/mutants.py), sm90 (kernels/mutants_sm90.py: "
        "a Hopper GPU) or all (default: sm80; --list: all)",
    )
    p.add_argument("--properties", metavar="KIND[,KIND]", default=None, help=f"property kinds to search, in this order: {', '.join(KIND_NAMES)} (default: all)")
    p.add_argument(
        "--jobs",
        type=int,
        default=os.cpu_count() or 1,
        help="processes at once: one per mutant; with more jobs than mutants (e.g. --only control), and once no mutant waits, the spare "
        "ones split the mutants' searches (kinds and strata) between them, with the verdict one process would give (default: the number of CPUs)",
    )
    p.add_argument("--profile", default="ci", help="Hypothesis profile of strategies.profiles (default: ci)")
    p.add_argument(
        "--examples-scale",
        type=float,
        default=1.0,
        metavar="X",
        help="multiply every kind's example count per stratum (the profile's count for the kind times its transform values) by X, "
        "e.g. 10 for a long control search (default: 1)",
    )
    p.add_argument(
        "--budget-s",
        type=float,
        default=CAP_S,
        metavar="S",
        help=f"safety cap on one mutant's wall clock, searching and shrinking; example counts, not time, decide what is searched, and a search "
        f"the cap stops is 'incomplete', never 'survived' (default: {CAP_S:g})",
    )
    p.add_argument("--goal", type=float, default=0.9, help="kill rate for exit status 0 (default: 0.9)")
    p.add_argument("--report-dir", default=DEFAULT_REPORT_DIR, help=f"where mutants.json/.md and the worker logs go (default: ./{DEFAULT_REPORT_DIR})")
    p.add_argument("--known-findings", metavar="FILE", default=None, help=f"known findings file (default: {FINDINGS_FILE} of the repository, if present)")
    p.add_argument(
        "--kernels-source",
        metavar="PATH",
        default=None,
        help="cudnn-frontend python/ tree to mutate instead of the installed wheel (--list checks the rewrites against it)",
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help=f"keep the verdicts in REPORT_DIR/{PARTIAL} (written as each record is made) of an earlier call with the same options, "
        "and run the rest: a catalogue run over several time-limited calls",
    )
    return p


def _names(raw: Optional[str], known: Sequence[str], what: str) -> Optional[List[str]]:
    if raw is None:
        return None
    names = [n.strip() for n in raw.split(",") if n.strip()]
    bad = [n for n in names if n not in known]
    if bad or not names:
        raise Usage(f"{what} {bad[0] if bad else raw!r}: not one of {', '.join(known)}")
    return names


def selected_families(family: Optional[str], *, listing: bool = False) -> Tuple[str, ...]:
    """The families --family names; not given: the SM80 family for a run (the
    measured catalogue; the sm90 one needs a Hopper GPU and is asked for by
    name), every family for --list (which needs no GPU)."""
    if family is None:
        return FAMILY_NAMES if listing else (DEFAULT_FAMILY,)
    return FAMILY_NAMES if family == "all" else (family,)


def _validate(args) -> dict:
    from strategies.profiles import MAX_EXAMPLES, profile_name

    for option, value, ok, expected in (
        ("--jobs", args.jobs, args.jobs >= 1, "a number of processes >= 1"),
        ("--budget-s", args.budget_s, 0 < args.budget_s < math.inf, "a finite number of seconds > 0"),
        ("--examples-scale", args.examples_scale, 0 < args.examples_scale < math.inf, "a finite factor > 0"),
        ("--goal", args.goal, 0 <= args.goal <= 1, "a kill rate from 0 to 1"),
    ):
        if not ok:  # nan fails every comparison
            raise Usage(f"{option} {value:g}: expected {expected}")
    try:
        profile = profile_name(args.profile)
    except ValueError:
        raise Usage(f"--profile {args.profile!r}: not a registered Hypothesis profile (ours: {', '.join(MAX_EXAMPLES)})") from None
    families = selected_families(args.family, listing=args.list)
    catalogue = tuple(m for f in families for m in catalogue_of(f))
    asked = {n.strip() for n in (args.only or "").split(",")}
    elsewhere = [m for f in FAMILY_NAMES if f not in families for m in (CONTROLS[f],) + catalogue_of(f) if m.name in asked]
    if elsewhere:
        raise Usage(f"--only: {elsewhere[0].name} is an {elsewhere[0].family} mutant: run it with --family {elsewhere[0].family} (or all)")
    # A control's name selects no mutant: each family's control always runs, so --only control runs it alone.
    only = _names(args.only, [CONTROLS[f].name for f in families] + [m.name for m in catalogue], "--only: mutant")
    pending = [n.strip() for n in (args.properties or "").split(",") if n.strip() in PENDING]
    if pending:
        raise Usage(f"--properties: {pending[0]} cannot run yet: {PENDING[pending[0]]}")
    kinds = _names(args.properties, KIND_NAMES, "--properties: kind") or list(KIND_NAMES)
    unsearched = [f for f in families if not any(k.family_name == f for k in KINDS if k.name in kinds)]
    if unsearched and not args.list:  # its mutants would all "survive" a search of nothing
        raise Usage(f"--properties: no kind of the {unsearched[0]} family (its kinds: {', '.join(k.name for k in KINDS if k.family_name == unsearched[0])})")
    found = args.known_findings or next(
        (str(p) for p in (Path.cwd() / FINDINGS_FILE, Path(__file__).resolve().parents[1] / FINDINGS_FILE) if p.is_file()), None
    )
    if found:
        from ground import findings
        from properties import CHECKS

        try:
            findings.load(found, checks=CHECKS)
        except findings.FindingsError as e:
            raise Usage(str(e)) from None
    v = {
        "families": families,
        "controls": [CONTROLS[f] for f in families],
        "mutants": [m for m in catalogue if only is None or m.name in only],
        "kinds": kinds,
        "explicit": args.properties is not None,
        "profile": profile,
        "findings": found,
    }
    # A mutant (or control) with no search would "survive" a search of nothing.
    empty = [] if args.list else [m for m in v["controls"] + v["mutants"] if not mutant_units(m, v)]
    if empty:
        raise Usage(
            f"{empty[0].name} would search nothing: no kind it is searched by among {','.join(kinds)} runs under --profile {profile} "
            "(a mutant with no search would survive it): name other --properties or another --profile"
        )
    return v


def list_catalogue(mutants: Sequence[Mutant], out=print) -> int:
    from kernels.source import StaleMutant, check_rewrites

    stale = 0
    for m in mutants:
        try:
            check_rewrites(m.rewrites)
            state = "ok"
        except StaleMutant as e:
            state, stale = f"STALE: {e}", stale + 1
        waits = HARNESS[m.family].listing
        pending = f" (killer not runnable yet: {PENDING[m.expected_killer]})" if m.expected_killer in PENDING else ""
        out(f"{m.name:<32} {m.bug_class:<18} {'/'.join(m.targets):<11} killer {m.expected_killer:<27} {state}{waits}{pending}\n    {change_line(m)}")
    out(f"{len(mutants)} mutants, {stale} stale")
    return 1 if stale else 0


def _interrupted(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def main(args) -> int:
    try:
        v = _validate(args)
        if args.kernels_source:  # before --list too: it checks the rewrites against this tree's files
            from kernels.source import KernelSourceError, use_kernels_source

            try:
                use_kernels_source(args.kernels_source)
            except KernelSourceError as e:
                raise Usage(f"--kernels-source: {e}") from None
        if args.list:
            return list_catalogue(v["mutants"])
        import torch

        capability = torch.cuda.get_device_capability() if torch.cuda.is_available() else None
        why = next((w for f in v["families"] if HARNESS[f].gpu_refusal and (w := HARNESS[f].gpu_refusal(capability))), None)
        if why:
            raise Unsupported.machine(f"{why} (--list works anywhere)")
        if capability is None:
            raise Unsupported.machine(NO_GPU + " (--list works anywhere)")
    except Usage as e:
        print(f"sdpa-conformance mutants: error: {e}", file=sys.stderr)
        return 2
    except Unsupported as refusal:  # the refusal policy (ground.outcome.REFUSALS): its exit status
        print(f"sdpa-conformance mutants: error: {refusal.usage()}", file=sys.stderr)
        return refusal.exit_status
    from kernels.environment import detect

    env, start = detect(), time.time()
    log_dir = Path(args.report_dir) / "mutants-logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    opts = {
        "profile": v["profile"],
        "budget_s": args.budget_s,
        "examples_scale": args.examples_scale,
        "kinds": v["kinds"],
        "explicit": v["explicit"],
        "findings": v["findings"],
        "kernels_source": args.kernels_source,
        "log_dir": str(log_dir),
        "threads": max(1, (os.cpu_count() or 1) // args.jobs),
    }
    controls = v["controls"]
    print(
        f"{len(v['mutants'])} mutants + {len(controls)} control{'s' if len(controls) > 1 else ''} (family {', '.join(v['families'])}), {args.jobs} jobs, profile {v['profile']} example counts x{args.examples_scale:g}, "
        f"cap {args.budget_s:g} s each, kinds {', '.join(v['kinds'])}"
    )
    everyone = controls + v["mutants"]
    run = {
        "families": list(v["families"]),
        "profile": v["profile"],
        "examples_scale": args.examples_scale,
        "budget_s": args.budget_s,
        "jobs": args.jobs,
        "goal": args.goal,
        "kinds": v["kinds"],
        "explicit": v["explicit"],
        "known_findings": v["findings"],
        "findings_digest": file_digest(v["findings"]),
        "kernels_source": str(Path(args.kernels_source).expanduser().resolve()) if args.kernels_source else None,
        "environment": {name: os.environ.get(name) for name in RESUME_ENV},
        "suite": suite_revision(),
        "gpu": env.gpu,
        # The families' modes ("native sm90"), not the SM80 code's alone.
        "mode": family_select.mode(tuple(v["families"]), env.capability) if v["families"] != (DEFAULT_FAMILY,) else env.mode,
        "versions": env.versions,
    }
    partial = Path(args.report_dir) / PARTIAL
    try:
        kept, before_s, done = resumed_records(partial, run, everyone, opts) if args.resume else ({}, 0.0, {})
    except Usage as e:
        print(f"sdpa-conformance mutants: error: {e}", file=sys.stderr)
        return 2
    todo = [m for m in everyone if m.name not in kept]
    if args.resume:
        print(
            f"resumed: {len(kept)} records kept from {partial} ({before_s:g} s before), {len(todo)} to run"
            + (f", {sum(map(len, done.values()))} of their searches (units) done" if done else "")
        )
    _, plan = share_plan(todo, opts, args.jobs)
    split = {name: n for name, n in plan.items() if n > 1}
    if split:
        print("split over processes: " + ", ".join(f"{name} {n}" for name, n in split.items()))
    made, plans = dict(kept), {m.name: mutant_units(m, opts) for m in todo}
    searched = {m.name: {"change": change_line(m), "rewrites": m.digest, "done": {}} for m in todo}
    for name, mine in done.items():
        searched[name]["done"] = {str(i): {"unit": unit_label(plans[name][i]), "result": r} for i, r in mine.items()}

    def save() -> None:
        write_partial(partial, run, made, before_s + time.time() - start, {n: u for n, u in searched.items() if n not in made and u["done"]})

    def keep(rec: dict) -> None:
        made[rec["name"]] = rec
        save()

    def unit(name: str, i: int, res: dict) -> None:
        if unit_kept(res):  # searched to its end, or failed with a verdict: not searched again
            searched[name]["done"][str(i)] = {"unit": unit_label(plans[name][i]), "result": res}
            save()

    save()

    # A time limit's SIGTERM ends the run as Ctrl-C does, so multiprocessing stops its daemon workers
    # on the way out instead of leaving them searching on the GPU (the partial report is already written).
    signal.signal(signal.SIGTERM, _interrupted)
    try:
        new = {r["name"]: r for r in run_all(todo, opts, args.jobs, on_record=keep, done_units=done, on_unit=unit)}
    except KeyboardInterrupt as e:  # Ctrl-C or a time limit: what finished is kept, and how to go on is said
        print(
            f"sdpa-conformance mutants: interrupted ({e or 'Ctrl-C'}): {len(made)} of {len(everyone)} records kept in {partial}; "
            "the same options with --resume go on from there",
            file=sys.stderr,
        )
        return 130
    records = [
        kept[m.name] | {"resumed": True} if m.name in kept else new[m.name] | ({"resumed_units": len(done[m.name])} if done.get(m.name) else {})
        for m in everyone
    ]
    control_records, mutant_records = records[: len(controls)], records[len(controls) :]
    problem = run_problem(control_records, mutant_records)
    valid = invalidated if problem else dict  # an invalid run gives no rate: it would measure the suite's failure
    t = valid(tally(mutant_records))
    run.update(
        shares=split,  # processes per mutant searched by more than one at the start (run_all)
        wall_s=round(before_s + time.time() - start, 1),  # every call's, with --resume
        resumed=len(kept),
    )
    doc = {"run": run, "control": control_records[0], "controls": control_records, "mutants": mutant_records, "tally": t, "valid": problem is None}
    if len(v["families"]) > 1:  # each family's own rate too: one catalogue's power says nothing of the other's
        doc["tally_by_family"] = {f: valid(tally([r for r in mutant_records if r.get("family", DEFAULT_FAMILY) == f])) for f in v["families"]}
    js, md = write_reports(doc, args.report_dir)
    if problem:
        print(f"INVALID RUN: {problem}", file=sys.stderr)
        sys.stderr.flush()
    print(kill_rate_line(t, args.goal))
    for f, ft in (doc.get("tally_by_family") or {}).items():
        print(f"  {f}: {kill_rate_line(ft, args.goal)}")
    for verdict in NON_VERDICTS:
        names = [r["name"] for r in mutant_records if r["verdict"] == verdict]
        if names and verdict != "pristine_fails":  # those the INVALID line names
            why = NO_VERDICT_WHY.get(verdict, "no verdict, not counted")
            print(f"{len(names)} mutant(s) {verdict} ({why}; logs: {log_dir}): {', '.join(names)}", file=sys.stderr)
    print(f"{js}\n{md}")
    return exit_code(t, control_records, args.goal)


def parser() -> argparse.ArgumentParser:
    return add_arguments(argparse.ArgumentParser(prog="sdpa-conformance mutants", description=__doc__.split("\n\n")[0]))


if __name__ == "__main__":
    sys.exit(main(parser().parse_args()))
