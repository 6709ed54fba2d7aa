"""The sm90 family's pair coverage (ground.pairs_sm90): its factors are its
compile key (TemplateParams and compile()'s arguments), every feasible pair
has a Case the kernels' planner takes and no excluded pair has one, and the
strategies the sm90 tests draw reach every factor value (a planted value no
strategy reaches fails). CPU: the planner only, nothing compiled."""

import dataclasses
import functools
import inspect

import pytest

from conformance import pairs_sm90 as measured
from ground import pairs_sm90
from ground.pairs import Factor
from kernels.sm90.specialize import specialize
from strategies.sm90 import covering_rows, planner_takes

pytestmark = [pytest.mark.family("sm90"), pytest.mark.cpu_tier]


@functools.lru_cache(maxsize=None)
def planned(case) -> bool:
    try:
        specialize(case)
        return True
    except (ValueError, NotImplementedError):
        return False


def test_the_factors_are_the_compile_key():
    """Every TemplateParams field and compile() argument (but the target) is a factor's element or the stratum."""
    from cudnn.sdpa.fwd import config_sm90

    from kernels.sm90.adapter import template_module

    fields = {f.name for f in dataclasses.fields(config_sm90.TemplateParams)}
    params = specialize(pairs_sm90.BASES["dense"]).params
    arguments = set(inspect.signature(template_module(params).compile).parameters) - {"target"}
    assert set(pairs_sm90.KEY) | set(pairs_sm90.STRATUM) == fields | arguments


@pytest.mark.parametrize("layout", pairs_sm90.LAYOUTS)
def test_feasible_pairs_have_a_planned_case_and_excluded_ones_none(layout):
    lost = [pairs_sm90.text(p) for p in pairs_sm90.feasible(layout) if pairs_sm90.witness(layout, dict(p), planned) is None]
    wrong = [pairs_sm90.text(p) for p in pairs_sm90.excluded(layout) if pairs_sm90.witness(layout, dict(p), planned) is not None]
    assert not lost and not wrong, (lost, wrong)


@pytest.fixture(scope="module")
def ci():
    """The sm90 Cases the sm90 tests' strategies draw under the ci profile."""
    return [c for cases in measured.draws("ci").values() for c in cases]


def test_the_ci_draws_reach_every_factor_value_and_no_excluded_pair(ci):
    assert pairs_sm90.unreached(ci) == []
    m = pairs_sm90.coverage(ci)
    assert m["fwd"]["share"] >= 0.95 and all(not v["drawn_though_excluded"] for v in m["fwd"]["layouts"].values())


def test_a_planted_factor_value_no_strategy_reaches_fails(ci, monkeypatch):
    f = pairs_sm90._FACTORS["sched"]
    monkeypatch.setitem(pairs_sm90._FACTORS, "sched", Factor(f.name, f.facts, f.values + ("planted",), f.of, f.realize, f.default))
    assert pairs_sm90.unreached(ci) == ["dense: sched=planted"]


@pytest.mark.parametrize("layout", pairs_sm90.LAYOUTS)
def test_the_covering_rows_plan_and_make_every_feasible_pair_meet(layout):
    rows = covering_rows(layout)
    assert all(planned(c) for c in rows), [c.describe() for c in rows if not planned(c)]
    met = set().union(*(pairs_sm90.pairs_of(c) for c in rows))
    assert set(pairs_sm90.feasible(layout)) <= met and not met & set(pairs_sm90.excluded(layout))


def test_the_covering_design_fails_a_pair_no_valid_case_holds():
    """A planted over-strict validity (no causal Case) leaves causal=yes pairs with no row: the design says so."""
    with pytest.raises(ValueError, match="causal=yes"):
        pairs_sm90.covering_rows("dense", lambda c: planner_takes(c) and not c.causal)


@pytest.fixture(scope="module")
def launched():
    """The sm90 Cases the GPU tests draw under the ci profile (the CPU planner test's free draws left out)."""
    return [c for name, cases in measured.draws("ci").items() if name.startswith("test_sm90_") for c in cases]


def test_the_ci_draws_reach_every_coverage_label_the_family_can_exercise(launched):
    """Beyond the compile key: every coverage label (ground.coverage, runtime facts included: capacity, long THD
    sequences, zero lengths) but those the family declares unreachable, with the reason, is drawn by the tests
    that launch; none of those is drawn (a stale declaration fails), and each names a label the vocabulary has."""
    from ground.coverage import REQUIRED, labels
    from ground.families import FAMILIES, coverage_gaps

    seen = set().union(*(labels(c) for c in launched))
    unreachable = FAMILIES["sm90"].unreachable
    assert coverage_gaps("sm90", seen, REQUIRED) == ()
    assert sorted(seen & set(unreachable)) == [] and set(unreachable) <= REQUIRED
    assert all(why for why in unreachable.values())


def test_a_planted_coverage_label_no_strategy_reaches_fails(launched):
    from ground.coverage import REQUIRED, labels
    from ground.families import coverage_gaps

    seen = set().union(*(labels(c) for c in launched))
    assert coverage_gaps("sm90", seen, REQUIRED | {"thd lengths:planted"}) == ("thd lengths:planted",)
