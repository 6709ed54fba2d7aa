"""Pair coverage of the compile-key factors (ground/pairs.py): the factors
follow the declarations, every infeasible pair is a declared exclusion with
its reason (and every declared one is refused), the pools make every
feasible pair meet in both directions, the free draws reach every feasible
value, and a fact or value declared with no strategy reaching it fails
(planted below). Derandomized draws, no example database.
"""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import HealthCheck, given, settings

from ground import case as declared
from ground import pairs
from ground.case import DIRECTIONS, LAYOUTS
from ground.tables import STRATA
from strategies import backward_cases, cases, covering, geometry
from strategies.directions import backward_views

FIXED = dict(derandomize=True, database=None, deadline=None, suppress_health_check=[HealthCheck.too_slow])
STRATA_OF = [(d, lay) for d in DIRECTIONS for lay in LAYOUTS]


# ------------------------------------------------------------- the factors
def test_compile_key_facts_follow_the_declared_roles():
    """The factors are the declared compile-key facts of the direction
    (case.compiled_facts: Fact.compiled and Fact.direction), the stratum
    aside, and the facts the sm80 family has no counterpart for
    (ground.families: pack_gqa); on THD only those its compile key reaches
    (TemplateParams, compile_thd_host): the right band, the dense shapes and
    strides are not."""
    from properties import COMPILED_FACTS

    for direction in DIRECTIONS:
        declared_facts = set(declared.compiled_facts(direction)) - set(pairs.STRATUM_FACTS) - set(pairs.PAIRS_FAMILY.absent)
        assert set(pairs.compiled_facts(direction, "dense")) == declared_facts
        thd = set(pairs.compiled_facts(direction, "thd"))
        assert thd < declared_facts and not thd & {"window_right", "batch", "s_q", "s_kv", "memory", "sink_layout", "bias_batch"}
        assert {"h_q", "q_lens", "window_left", "sinks"} <= thd
    assert not set(pairs.compiled_facts("bwd", "dense")) & set(declared.FORWARD_ONLY_FACTS)
    for fact, row in COMPILED_FACTS.items():  # every compile-key fact compile_distinct varies is a factor where it varies it
        assert fact in pairs.STRATUM_FACTS or all(fact in pairs.compiled_facts(d, layout) for d, layout in row.places), fact
    names = {f.name for f in pairs.factors("fwd", "dense")}
    assert {"dtype", "flavor", "heads", "batch", "lengths", "causal", "window_left", "bias", "sinks", "has_lse", "lse_layout", "sched", "scale"} <= names
    assert {"heads", "sequences", "prefix_dtype", "sink_dtype"} <= {f.name for f in pairs.factors("fwd", "thd")}
    assert {"deterministic", "dbias_dtype", "bias_batch"} <= {f.name for f in pairs.factors("bwd", "dense")}


def test_factor_values_read_back_what_they_realize():
    """Each feasible factor value set on the simplest Case reads back as that value."""
    for direction, layout in STRATA_OF:
        base = pairs.BASES[direction, layout]
        feasible = {v for p in pairs.feasible(direction, layout) for v in p}
        for f in pairs.factors(direction, layout):
            assert f.of(base) == f.default, (f.name, direction, layout)
            for v in f.values:
                if (f.name, v) in feasible:
                    assert f.of(f.realize(base, v)) == v, (f.name, v)


# --------------------------------------------------------------- feasibility
@pytest.mark.parametrize("direction,layout", STRATA_OF)
def test_infeasible_pairs_are_declared_and_declared_ones_are_refused(direction, layout):
    """An undeclared pair has a valid Case holding it (ground.pairs.witness),
    which the kernels' own validators accept (forward: kernels.specialize, the
    flavor pick and validate_params); a declared exclusion that is not the
    suite's choice (``policy``) has none: no silent hole, no stale entry."""
    from kernels.specialize import specialize

    excluded = pairs.excluded(direction, layout)
    fs = pairs.factors(direction, layout)
    alone = {(f.name, v): pairs.witness(direction, layout, {f.name: v}) is not None for f in fs for v in f.values}
    holes, stale = [], []
    for p in pairs.universe(direction, layout):
        w = pairs.witness(direction, layout, dict(p)) if alone[p[0]] and alone[p[1]] else None
        if w is None and p not in excluded:
            holes.append(pairs.text(p))
        elif w is not None and p in excluded and not excluded[p].policy:
            stale.append(f"{pairs.text(p)}: {excluded[p].why} (witness {w.describe()})")
        if w is not None and direction == "fwd":
            specialize(w)
    assert holes == [], "pairs no valid Case holds: declare them in ground.pairs.EXCLUSIONS with the reason"
    assert stale == [], "declared excluded, yet a valid Case holds them"


def test_every_exclusion_names_factors_and_values_and_says_why():
    known = {f.name: f for d, lay in STRATA_OF for f in pairs.factors(d, lay)}
    for e in pairs.EXCLUSIONS:
        assert 1 <= len(e.when) <= 2 and e.reason and e.source, e
        for name, values in e.when:
            assert name in known, e
            assert values == (pairs.OTHER,) or set(values) <= set(known[name].values), e


def test_an_adapter_excludes_what_it_cannot_express():
    """The wrapper runs draw prepared-only facts at their defaults (Fact.adapters): not a gap."""
    wrapper = pairs.excluded("fwd", "dense", "wrapper")
    assert (("lse_log2", "yes"), ("has_lse", "yes")) in wrapper and (("causal", "yes"), ("sinks", "yes")) not in wrapper
    assert len(pairs.feasible("fwd", "dense", "wrapper")) < len(pairs.feasible("fwd", "dense", "prepared"))


# ------------------------------------------------------------------ reaching
def _pool_cases():
    """Every pool row's Case (runtime facts at their simplest: they are no
    factor) and, for the backward, each mapped as strategies.backward maps
    it (deterministic or not, a per-batch bias or not: drawn booleans)."""
    fwd = [c for f, d in STRATA for c in [g.case(d) for g in geometry.dense_pool(f, d)] + [g.case(f, d) for g in geometry.thd_pool(f, d)]]
    return fwd + [v for c in fwd for v in backward_views(c)]


def _missing(cov) -> dict:
    return {f"{d} {lay}": v["missing"] for d in DIRECTIONS for lay, v in cov[d]["layouts"].items() if v["missing"]}


def check_pools_meet_every_pair():
    missing = _missing(pairs.coverage(_pool_cases()))
    assert missing == {}, f"feasible pairs no pool row holds: {missing}"


def check_free_draws_reach_every_value(examples: int = 600):
    """Every feasible factor value (one that some feasible pair holds) is
    drawn by the free strategies (nightly's geometry), forward and backward."""
    seen = set()

    @settings(max_examples=examples, **FIXED)
    @given(cases(geometry="free"), backward_cases(geometry="free"))
    def draw(fwd, bwd):
        seen.update((c.direction, c.layout, v) for c in (fwd, bwd) for v in pairs.values_of(c))

    draw()
    missing = []
    for direction, layout in STRATA_OF:
        wanted = {v for p in pairs.feasible(direction, layout) for v in p}
        missing += [f"{direction} {layout} {n}={v}" for n, v in sorted(wanted) if (direction, layout, (n, v)) not in seen]
    assert missing == [], f"feasible values the free strategies never draw: {missing}"


def test_the_pools_make_every_feasible_pair_meet():
    """The pools are a pairwise covering design: the hand rows and the rows
    strategies.covering adds make every feasible pair meet, forward and
    backward (the backward's Cases are the forward rows mapped)."""
    check_pools_meet_every_pair()


def test_the_free_draws_reach_every_feasible_value():
    check_free_draws_reach_every_value()


def test_covering_rows_are_few_and_follow_the_hand_rows():
    for f, d in STRATA:
        hand, pool = geometry.hand_dense_pool(f, d), geometry.dense_pool(f, d)
        assert pool[: len(hand)] == hand and 0 < len(pool) - len(hand) <= 4
        hand, pool = geometry.hand_thd_pool(f, d), geometry.thd_pool(f, d)
        assert pool[: len(hand)] == hand and len(pool) - len(hand) <= 4


def test_covering_is_deterministic():
    seeds = [g.case(d) for f, d in STRATA for g in geometry.hand_dense_pool(f, d)]
    assert covering.complete("dense", STRATA, seeds) == covering.complete("dense", STRATA, seeds)


def test_ordinary_tiers_reach_gqa_8_to_1():
    ratios = {c.h_q // c.h_kv for c in _pool_cases()}
    assert 8 in ratios


# ------------------------------------------------------------------ planted
def _plant_fact(monkeypatch):
    """A new compile-key bool fact, declared (FACTS; compiled, both passes:
    the declared roles' defaults), that no strategy draws."""
    _pool_cases()  # the pools as the strategies built them before the declaration changed
    monkeypatch.setitem(declared.FACTS, "planted", declared.Fact("planted", bool, False, "a planted compile-key fact"))


def test_a_planted_fact_no_strategy_draws_fails(monkeypatch):
    _plant_fact(monkeypatch)
    assert "planted" in {f.name for f in pairs.factors("fwd", "dense")}
    with pytest.raises(AssertionError, match="planted=yes"):
        check_pools_meet_every_pair()
    with pytest.raises(AssertionError, match="planted=yes"):
        check_free_draws_reach_every_value(examples=30)


def test_a_planted_value_no_strategy_draws_fails(monkeypatch):
    """A new choice of a declared fact: the strategies that draw that fact by
    hand never draw it, so its pairs are unreached (the pools computed before
    the declaration changed, the free draws always)."""
    _pool_cases()  # the pools as the strategies built them before the declaration changed
    fact = declared.FACTS["sink_layout"]
    monkeypatch.setitem(declared.FACTS, "sink_layout", dataclasses.replace(fact, choices=fact.choices + ("planted",)))
    assert "planted" in {f.name: f for f in pairs.factors("fwd", "dense")}["sink_layout"].values
    with pytest.raises(AssertionError, match="sink_layout=planted"):
        check_pools_meet_every_pair()
    with pytest.raises(AssertionError, match="sink_layout=planted"):
        check_free_draws_reach_every_value(examples=30)


# ------------------------------------------------------------------ the report
def test_the_report_shows_the_pair_table():
    """Every run's report: feasible, drawn and missing pairs per direction and
    layout, the missing ones listed, the declared exclusions with reasons."""
    from ground.case import Case
    from reports import coverage, render

    cases = [Case(), Case(causal=True, sinks=True), Case(layout="thd", q_lens=(1, 2), kv_lens=(2, 1)), Case().replace(direction="bwd", deterministic=True)]
    cov = coverage.coverage(cases + [Case(violation="head_dim_qk_over_256", d_qk=264)], adapter="prepared")
    p = cov["pairs"]
    assert p["fwd"]["layouts"]["dense"]["examples"] == 2 and p["bwd"]["layouts"]["dense"]["examples"] == 1
    assert pairs.text((("causal", "yes"), ("sinks", "yes"))) not in p["fwd"]["layouts"]["dense"]["missing"]
    assert pairs.text((("causal", "yes"), ("rope", "yes"))) in p["fwd"]["layouts"]["dense"]["missing"]
    assert 0 < p["fwd"]["drawn"] < p["fwd"]["feasible"] == len(pairs.feasible("fwd", "dense", "prepared")) + len(pairs.feasible("fwd", "thd", "prepared"))
    md = render.to_markdown(render._pairs({"coverage": cov}), None)
    first = p["fwd"]["layouts"]["dense"]["missing"][0]
    assert "## Pair coverage of the compile-key factors" in md and "missing pairs, fwd dense" in md and first in md and "more (report.json)" in md
    assert "declared exclusions" in md and "a right band widens the causal diagonal" in md
