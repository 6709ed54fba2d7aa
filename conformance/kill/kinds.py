"""The mutant harness' property searches: one ``Kind`` per value of the
source and property axes of a test matrix family that names a kind
(properties.matrix), then the sm90 family's (conformance.kill_sm90); which of
them a mutant is searched by, over which flavors."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import List, Optional, Sequence, Tuple

from conformance.kill.catalogue import CONTROL, FAMILY_FLAVORS, LARGE_BUDGET
from conformance.kill_sm90 import SM90_KINDS
from ground.case import Case
from ground.families import DEFAULT_FAMILY
from kernels.mutants import Mutant
from properties.matrix import BACKWARD as BACKWARD_MODULE  # the backward's families: searched by backward mutants only
from properties.matrix import MATRIX, PARAM, SOURCE, STRATUM, TRANSFORM, Family, in_profile, stratum_of


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


def check_property(kind: Kind, case: Case, adapter):
    """The property the pytest test of ``kind`` calls."""
    return kind.check(case, adapter)


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
