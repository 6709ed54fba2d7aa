"""One mutant's searches (the mutant harness): each kind's Hypothesis
search per stratum, or per part of a stratum's (a unit), its planned example count, the record a
mutant's units merge into, and ``run_mutant`` (every unit in this process)."""

from __future__ import annotations

import math
import time
import unittest
import zlib
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

from conformance.kill.catalogue import CAP_S, CONTROLS, adapter_for
from conformance.kill.failures import KILLS, failure_verdict
from conformance.kill.kinds import KIND_NAMES, Kind, case_size, change_line, check_property, flavors_for, searched
from conformance.kill.replay import pristine_failure
from ground.case import Case
from kernels.mutants import Mutant


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


# A stratum's search of more than PART_EXAMPLES examples is made as parts of
# at most that many, each a Hypothesis search of its own seed: a long run's
# units then each fit one job with a time limit (--resume keeps
# whole units) and spread over its processes. No ci, pr or dev count reaches
# it (tests/test_kill_split.py), so their searches stay one part each.
PART_EXAMPLES = 100


class Unit(NamedTuple):
    """One Hypothesis search of a mutant: ``kind`` in ``stratum`` (None: the
    family has no stratum axis), part ``part`` of the stratum's ``parts``."""

    kind: Kind
    stratum: Optional[Tuple[str, str]]
    part: int = 0
    parts: int = 1


def unit_planned(profile: str, unit: Unit, scale: float = 1.0) -> int:
    """The examples ``unit`` draws: its part of its stratum's ``planned_examples`` (the first parts one more where it does not divide)."""
    total = planned_examples(profile, unit.kind, scale)
    return total // unit.parts + (unit.part < total % unit.parts)


def _settings(profile: str, examples: int):
    from hypothesis import HealthCheck, Verbosity, settings

    return settings(
        settings.get_profile(profile),
        max_examples=examples,
        database=None,
        deadline=None,
        report_multiple_bugs=False,
        suppress_health_check=list(HealthCheck),
        verbosity=Verbosity.quiet,
    )


@dataclass
class _Search:
    examples: int = 0  # checked before the first failure (drawn)
    planned: int = 0  # the count the search was to draw (unit_planned)
    shrinks: int = 0  # checked after it (Hypothesis shrinking)
    excused: int = 0  # xfailed observations: every failed check excused by a known finding
    cut: bool = False  # the cap stopped it before Hypothesis ended it by its count
    shrink_capped: bool = False  # the cap or max_shrinks, not Hypothesis' own limits, ended shrinking
    first: Optional[tuple] = None  # (case, failure, seconds since the mutant started)
    last: Optional[tuple] = None  # the shrunk one: Hypothesis replays it last


def search(
    unit: Unit,
    adapter,
    flavors,
    *,
    profile: str,
    until: float,
    t0: float,
    check=check_property,
    scale: float = 1.0,
    max_shrinks: Optional[int] = None,
) -> _Search:
    """One Hypothesis search, ``unit``: its kind in its stratum (one (flavor,
    dtype), as one pytest test; None: over ``flavors``), its part of it;
    ``unit_planned`` draws, unless a failure is seen (then Hypothesis shrinks it, within its own
    count limits and the cap: the failure found so far is kept) or the clock
    passes ``until``, the safety cap (then the search is ``cut``: it checks
    nothing more). ``max_shrinks``: the shrink candidates a failure found may
    check (None: Hypothesis' own limits); past it, or past the cap, shrinking
    checks nothing more (``shrink_capped``), and the smallest failure so far stands."""
    from hypothesis import given, reject, seed, target
    from hypothesis import strategies as st
    from hypothesis.control import current_build_context
    from hypothesis.errors import UnsatisfiedAssumption
    from hypothesis.internal.conjecture import engine

    from properties import recorder

    recorder.set_test(None)  # a search starts as a test does: no failure of an earlier search turns its refusals into rejections
    kind, stratum, part = unit.kind, unit.stratum, unit.part
    state = _Search(planned=unit_planned(profile, unit, scale))
    if time.perf_counter() > until:  # past the cap: skip, do not draw a single example
        state.cut = True
        return state
    with _geometry_of(profile):
        strategy = kind.strategy(flavors, adapter=adapter) if stratum is None else kind.strategy((stratum[0],), (stratum[1],), adapter=adapter)

    # A derandomized profile seeds a search from its function, the same for every
    # stratum (pytest's parameters of one test draw different sequences): each
    # stratum's search gets a seed of its own, fixed by the kind and stratum, and
    # each later part of it one fixed by its index too (the first part's is the stratum's).
    label = kind.name + (f"[{stratum[0]}-{stratum[1]}]" if stratum else "") + (f"#part{part}" if part else "")
    salt = seed(zlib.crc32(label.encode())) if stratum or part else (lambda f: f)

    @salt
    @_settings(profile, state.planned)
    @given(data=st.data())
    def probe(data):
        drawn, case = data.draw(strategy, label="case")  # always: a draw-less example confuses Hypothesis
        if state.first is None and time.perf_counter() > until:
            state.cut = True
            return
        spent = time.perf_counter() > until or (max_shrinks is not None and state.shrinks >= max_shrinks)
        if state.first is not None and spent and not current_build_context().is_final:
            # Past the cap or the shrink count with a failure found (shrinking it, or the generate phase's target
            # optimiser ending its climb): nothing more is checked; Hypothesis' last replay of the failure still runs.
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
    max_shrinks: Optional[int] = None,
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
    flavors = flavors_for(mutant)
    _search_kinds(
        rec,
        chosen,
        adapter,
        flavors,
        profile=profile,
        deadline=t0 + budget_s,
        t0=t0,
        check=check,
        scale=examples_scale,
        confirm=confirm,
        max_shrinks=max_shrinks,
    )
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


def search_units(chosen, flavors, profile: str, scale: float = 1.0) -> List[Unit]:
    """The searches of a mutant, in the order one process makes them: each
    kind of ``chosen`` in order, each of its strata the profile runs (a kind
    whose test the profile does not run has none: properties.matrix.PROFILE_TESTS),
    each part of it (PART_EXAMPLES). A unit is one Hypothesis search, its
    count, seed and settings its own (``search``): the unit a mutant's
    searches are split by over processes."""
    units = []
    for kind in chosen:
        parts = -(-planned_examples(profile, kind, scale) // PART_EXAMPLES)
        units += [Unit(kind, stratum, part, parts) for stratum in profile_strata(kind, flavors, profile) for part in range(parts)]
    return units


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
        res["failure"] = failure_fields(verdict, _summary(failure), s.first[2], case, s.first[0], failing if judged and failing != case else None)
        # The verdict is the shrunk failure's; the first one's is kept beside it, so a first failure of
        # another kind (the machine's, or a flake) shows in the record instead of vanishing in the shrink.
        res["failure"].update(first_verdict=failure_verdict(s.first[1]), first_summary=_summary(s.first[1]))
        if verdict in KILLS and confirm is not None:
            pristine = confirm(list(dict.fromkeys((case, s.first[0]))))
            if pristine is not None:
                unknown = pristine.get("unknown")
                res["failure"].update(verdict="harness_error" if unknown else "pristine_fails", pristine=pristine, mutant_verdict=verdict)
    return res


def _summary(failure: BaseException) -> str:
    from ground.outcome import PropertyFailure

    return failure.summary if isinstance(failure, PropertyFailure) else f"{type(failure).__name__}: {str(failure)[:300]}"


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


def planned_by_kind(units, profile: str, scale: float = 1.0) -> Dict[str, int]:
    """Each kind's planned examples over ``units``: its units' counts
    (``unit_planned``; a stratum's parts add up to its count) summed, in the units' order."""
    out: Dict[str, int] = {}
    for u in units:
        out[u.kind.name] = out.get(u.kind.name, 0) + unit_planned(profile, u, scale)
    return out


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
    planned = planned_by_kind(units, profile, scale)
    for kind in dict.fromkeys(u.kind for u in units):
        mine = [i for i, u in enumerate(units) if u.kind is kind]
        done = [results[i] for i in mine if end is None or i <= end]
        if not done:
            break
        cut = any(r["cut"] for r in done)
        failure = next((r["failure"] for r in done if r["failure"]), None)
        rec["kinds"].append(
            {
                "name": kind.name,
                "examples": sum(r["examples"] for r in done),
                "planned": planned[kind.name],
                "shrinks": sum(r["shrinks"] for r in done),
                "excused": sum(r["excused"] for r in done),
                "cut": cut,
                "short": any(short(r) for r in done),
                "strata": len({units[i].stratum for i in mine}),
                "searches": len(mine),
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


def _search_kinds(rec: dict, chosen, adapter, flavors, *, profile, deadline, t0, check, scale: float = 1.0, confirm=None, max_shrinks=None) -> None:
    """Search each kind in order, every stratum its planned count, until one
    fails or the clock passes ``deadline`` (the cap: the kinds and strata
    left are recorded as cut, with nothing drawn). A unit whose failure is
    ``infra`` (out of memory) is searched once more. Fills ``rec`` with the
    verdict (``merge_units``). ``confirm(kind)``: the kill confirmation of
    ``unit_result`` for a unit of ``kind``."""
    units, results = search_units(chosen, flavors, profile, scale), {}
    for i, u in enumerate(units):
        for _ in range(2):
            now = time.perf_counter()
            one = search(u, adapter, flavors, profile=profile, until=deadline, t0=t0, check=check, scale=scale, max_shrinks=max_shrinks)
            results[i] = unit_result(one, time.perf_counter() - now, confirm and confirm(u.kind))
            if (results[i]["failure"] or {}).get("verdict") != "infra":
                break
        if one.first is not None:
            break
    merge_units(rec, units, results, profile=profile, scale=scale)
