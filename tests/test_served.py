"""A test draws only Cases its adapter serves (conformance.testgen.drawn,
Family.serve, Case.expressed): facts an adapter cannot express go to their
defaults (a projection, never a filter), the projection keeps every Case
valid and leaves what the adapter can express alone, and a parameter whose
fixed facts an adapter cannot express skips, naming the fact and adapter.

Seen with --adapter wrapper: test_padding_poison[dsv3-fp16-q] and [-kv]
errored with FailedHealthCheck filter_too_much (0 generated, 50 filtered):
every padded row of that stratum's pool carries a prepared-only fact, and
the property rejected each draw."""

from __future__ import annotations

from functools import partial

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.errors import FailedHealthCheck

from conformance import testgen
from ground.case import FACTS, Case
from ground.contracts import RULES, broken_rules
from ground.families import DEFAULT_FAMILY, family
from properties.common import served
from properties.matrix import FAMILIES, Family
from strategies import backward_cases, cases, violating_cases

FIXED = dict(derandomize=True, database=None, deadline=None, suppress_health_check=[HealthCheck.too_slow])
RESTRICTED = [name for name, f in FACTS.items() if f.adapters is not None]
POISON = FAMILIES["test_padding_poison"]


class StandIn:
    """An adapter as testgen sees it: its name."""

    def __init__(self, name: str):
        self.name = name


@pytest.fixture
def ci_profile(monkeypatch):
    """The ci profile's strategies (per-stratum geometry pools), as the wrapper's ci run drew them."""
    from hypothesis import settings as hs

    from strategies import load_profile
    from strategies.geometry import GEOMETRY_ENV

    monkeypatch.delenv(GEOMETRY_ENV, raising=False)
    previous = hs._current_profile
    load_profile("ci")
    try:
        yield
    finally:
        hs.load_profile(previous)


def _served_run(values, draw, n):
    """Run ``draw(data)`` -> Case through the real ``served`` (which rejects an
    unexpressible Case inside a test) under the wrapper, health checks on;
    returns (examples rejected, examples the property was handed)."""
    from hypothesis.errors import UnsatisfiedAssumption

    rejected, handed = [], []
    check = served(lambda case, adapter, **params: handed.append(case))

    @settings(max_examples=n, **{k: v for k, v in FIXED.items() if k != "suppress_health_check"})  # every health check on
    @given(st.data())
    def run(data):
        case = draw(data)
        try:
            check(case, StandIn("wrapper"))
        except UnsatisfiedAssumption:
            rejected.append(case)
            raise

    run()
    return len(rejected), handed


@pytest.mark.parametrize("padded", ["q", "kv"])
def test_padding_poison_under_the_wrapper_draws_without_filtering(ci_profile, padded):
    values = {"flavor": "dsv3", "dtype": "float16", "padded": padded}
    n = 25
    rejected, handed = _served_run(values, lambda data: testgen.drawn(POISON, values, data, StandIn("wrapper")), n)
    assert rejected == 0 and len(handed) == n  # nothing filtered, nothing rejected: n examples
    assert all(c.unexpressible("wrapper") is None for c in handed)
    assert any(c.seq_q_lens is not None for c in handed) == (padded == "q") and any(c.seq_kv_lens is not None for c in handed) == (padded == "kv")


def test_without_the_projection_the_same_draws_are_all_filtered(ci_profile):
    """The regression the projection fixes: the stratum's padded rows all carry
    a prepared-only fact, so drawing and rejecting fails Hypothesis' health check."""
    values = {"flavor": "dsv3", "dtype": "float16", "padded": "q"}
    with pytest.raises(FailedHealthCheck):
        _served_run(values, lambda data: POISON.apply(data.draw(POISON.strategy_for(values)), values), 25)


def test_projection_events_are_hypothesis_events(ci_profile, monkeypatch):
    seen = []
    monkeypatch.setattr(testgen, "event", seen.append)
    values = {"flavor": "dsv3", "dtype": "float16", "padded": "q"}
    _served_run(values, lambda data: testgen.drawn(POISON, values, data, StandIn("wrapper")), 10)
    assert seen and all(e.startswith("projected for the wrapper adapter: ") and e.split(": ")[1].split(" ")[0] in RESTRICTED for e in seen)


@settings(max_examples=150, **FIXED)
@given(st.one_of(cases(geometry="pool"), cases(geometry="free"), backward_cases(), violating_cases([r.name for r in RULES])))
def test_projection_leaves_prepared_draws_and_expressible_ones_unchanged(c):
    assert c.expressed("prepared") is c and c.unexpressed_facts("prepared") == ()
    assert c.expressed("config") is c  # not an adapter: expresses every fact
    if c.unexpressible("wrapper") is None:
        assert c.expressed("wrapper") is c


@settings(max_examples=150, **FIXED)
@given(st.data())
def test_the_prepared_adapter_is_served_the_drawn_case(data):
    values = {"flavor": data.draw(st.sampled_from(["dsv3", "gptoss"])), "dtype": "float16", "padded": data.draw(st.sampled_from(["q", "kv"]))}
    case = POISON.apply(data.draw(POISON.strategy_for(values)), values)
    got = POISON.serve(case, values, POISON.launches(values, StandIn("prepared")))
    assert got.case is case and got.projected == () and got.steered == ()


@settings(max_examples=300, **FIXED)
@given(st.one_of(cases(geometry="pool"), cases(geometry="free"), backward_cases(), violating_cases([r.name for r in RULES])))
def test_a_projected_case_is_valid_and_expressible(c):
    from kernels.specialize import specialize

    p = c.expressed("wrapper")
    assert p.structural_problem() is None and p.unexpressible("wrapper") is None
    assert set(c.unexpressed_facts("wrapper")) == {n for n in FACTS if getattr(p, n) != getattr(c, n)} <= set(RESTRICTED)
    assert all(getattr(p, n) == FACTS[n].default for n in c.unexpressed_facts("wrapper"))
    assert broken_rules(p) == broken_rules(c)  # a valid Case stays valid, a violating one breaks the same rules
    if c.violation is None:
        specialize(p)  # the kernels' flavor pick and validate_params take it


def test_every_restricted_fact_projects_to_a_valid_case():
    """Each prepared-only fact alone, off its default on a Case where it means
    something, projects back to that Case."""
    base = Case(s_q=4, s_kv=4, sinks=True, sched="lpt_l2")
    for name in RESTRICTED:
        if name in family(DEFAULT_FAMILY).absent:  # means something in another family only: below
            continue
        f = FACTS[name]
        other = next(v for v in (f.choices or (not f.default,)) if v != f.default)
        c = base.replace(**{name: other}, **({"bias": "float32", "direction": "bwd", "sinks": False, "sched": "natural"} if name == "dbias_dtype" else {}))
        if name == "prefix_dtype" or (name == "sink_dtype" and other != "float32"):
            c = Case(layout="thd", q_lens=(2,), kv_lens=(2,), sinks=True, **{name: other})
        assert c.structural_problem() is None, (name, c.structural_problem())
        assert c.unexpressed_facts("wrapper") == (name,)
        assert c.expressed("wrapper") == c.replace(**{name: f.default})
    packed = Case(family="sm90", h_q=4, h_kv=1, pack_gqa=True)  # an sm90 fact projects back with its family
    assert packed.structural_problem() is None and packed.unexpressed_facts("wrapper") == ("family", "pack_gqa")
    assert packed.expressed("wrapper") == Case(h_q=4, h_kv=1)


# ------------------------------------------ the adapters an example launches
def test_the_entry_relation_is_served_to_both_entry_points():
    fam = FAMILIES["test_metamorphic_dense"]
    values = {"flavor": "gptoss", "dtype": "float16", "relation": "entry"}
    assert fam.launches(values, StandIn("prepared")) == ("prepared", "wrapper")
    assert fam.launches(dict(values, relation="determinism"), StandIn("prepared")) == ("prepared",)
    case = Case(s_q=4, s_kv=4, lse_log2=True)
    got = fam.serve(case, values, fam.launches(values, StandIn("prepared")))
    assert got.case == case.replace(lse_log2=False) and got.projected == (("wrapper", ("lse_log2",)),)
    rejects = FAMILIES["test_config_rejects"]
    assert rejects.launches({"rule": "flavor_unknown"}, None) == ()  # config: no adapter, every fact expressible
    assert FAMILIES["test_wrapper_rejects"].launches({"rule": "bias_batch_gt_1"}, StandIn("wrapper")) == ("wrapper",)


def test_no_parameter_of_the_matrix_is_unservable_today():
    for fam in FAMILIES.values():
        adapter = StandIn({"prepared_adapter": "prepared", "wrapper_adapter": "wrapper"}.get(fam.adapter, "wrapper")) if fam.adapter else None
        for values, pid in fam.parameters():
            assert fam.unservable(values, fam.launches(values, adapter)) is None, (fam.test, pid)


def test_a_parameter_that_demands_an_unexpressible_fact_skips_naming_it():
    """A compiled-in fact the wrapper has no argument for (compile_distinct's
    ``fact``), a strategy option or a fixed Case that sets one: a projection
    would drop the point of the test, so it skips with the reason."""
    fam = Family(
        "test_lse_log2_through_the_wrapper",
        "conformance/test_compile.py",
        "compile_distinct",
        "compile",
        ("compile",),
        (),
        partial(cases, layouts=("dense",)),
        params={"fact": "lse_log2"},
    )
    with pytest.raises(pytest.skip.Exception, match="the wrapper adapter .* cannot express the fact 'lse_log2'"):
        testgen.skip_unservable(fam, {}, fam.launches({}, StandIn("wrapper")))
    assert fam.unservable({}, ("prepared",)) is None
    option = Family("test_x", "conformance/test_numerics.py", "numerics", "numerics", (), (), partial(cases, lse_log2=True))
    assert "'lse_log2' (strategy option lse_log2=True)" in option.unservable({}, ("wrapper",))
    fixed = Family("test_y", "conformance/test_numerics.py", "numerics", None, (), (), case=lambda: Case(has_lse=False))
    assert "'has_lse' (its fixed Case)" in fixed.unservable({}, ("wrapper",))

    @settings(max_examples=5, database=None)
    @given(st.data())
    def run(data):
        testgen.drawn(fam, {}, data, StandIn("wrapper"))

    with pytest.raises(pytest.skip.Exception, match="lse_log2"):  # Hypothesis re-raises a skip at once
        run()
