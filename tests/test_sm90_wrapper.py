"""The sm90 family's public wrapper (kernels.sm90.wrapper) on the CPU: the
wrapper itself runs on meta tensors until it asks for its plan, and that plan
is the compile entry's (kernels.sm90.specialize) for every dense Case drawn
within what it can express; planted argument faults are caught; what it
cannot express is refused with the reason; its plan compiles for sm_90a.
The wrapper's launch and the copy of its outputs wait for a Hopper GPU
(docs/sm90.md)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, find, given, settings

from ground.case import Case
from ground.outcome import Unsupported
from kernels.sm90 import wrapper as wrapper_module
from kernels.sm90.adapter import Sm90Adapter
from kernels.sm90.specialize import specialize
from kernels.sm90.wrapper import CANNOT, Sm90WrapperAdapter, expressible
from strategies.sm90 import sm90_cases

pytestmark = pytest.mark.family("sm90")
FIXED = dict(derandomize=True, database=None, deadline=None, suppress_health_check=[HealthCheck.too_slow])
WRAPPER_CASES = sm90_cases(layouts=("dense",)).map(expressible)
# The layouts the wrapper allocates its own outputs in: with them the whole compile key must agree.
OWN_OUTPUTS = dict(memory="bshd", lse_layout="compact")


def cross_problems(case: Case) -> list:
    """Where the wrapper's plan of ``case`` differs from the compile entry's:
    TemplateParams, geometry, Q/K/V strides and scale always; the whole
    compile key where the Case's O/Stats are laid out as the wrapper's own."""
    got, want = Sm90WrapperAdapter().specialize(case), specialize(case)
    out = [
        f"{f}: {getattr(got, f)!r} != {getattr(want, f)!r}"
        for f in ("params", "batch", "h_q", "h_kv", "s_q", "s_kv", "d_qk", "d_v", "scale")
        if getattr(got, f) != getattr(want, f)
    ]
    if got.strides[:3] != want.strides[:3]:
        out.append(f"Q/K/V strides {got.strides[:3]} != {want.strides[:3]}")
    if all(getattr(case, k) == v for k, v in OWN_OUTPUTS.items()) and got.key != want.key:
        out.append(f"compile key {got.key} != {want.key}")
    return out


@settings(max_examples=40, **FIXED)
@given(case=WRAPPER_CASES)
def test_the_wrapper_plans_what_the_compile_entry_plans(case):
    assert cross_problems(case) == []


def test_own_output_layouts_compare_whole_keys():
    """The whole-key branch is reached: the plain Case is laid out as the wrapper's outputs."""
    case = expressible(Case(family="sm90", s_q=64, s_kv=128, h_q=4, h_kv=2, causal=True))
    assert Sm90WrapperAdapter().specialize(case).key == specialize(case).key


PLANTS = {
    "alignment dropped": dict(causal_bottom_right=False),
    "window dropped": dict(window_size_left=None),
    "scale dropped": dict(scale_softmax=None),
}


@pytest.mark.parametrize("plant", sorted(PLANTS))
def test_a_planted_argument_fault_is_caught(plant, monkeypatch):
    """The cross-adapter check can fail: the wrapper handed a wrong argument plans differently for some drawn Case."""
    real = wrapper_module.wrapper_call

    def planted(case, x):
        args, kwargs = real(case, x)
        return args, {**kwargs, **PLANTS[plant]}

    monkeypatch.setattr(wrapper_module, "wrapper_call", planted)
    found = find(WRAPPER_CASES, lambda c: cross_problems(c) != [], settings=settings(max_examples=300, **FIXED))
    assert cross_problems(found)


REFUSED = {
    "layout": Case(family="sm90", layout="thd", q_lens=(5, 3), kv_lens=(4, 9)),
    "has_lse": Case(family="sm90", s_q=64, s_kv=64, has_lse=False),
    "lse_log2": Case(family="sm90", s_q=64, s_kv=64, lse_log2=True),
    "pack_gqa": Case(family="sm90", s_q=64, s_kv=64, h_q=4, h_kv=1, pack_gqa=True),
    "window_right": Case(family="sm90", s_q=64, s_kv=64, causal=True, window_right=8),
    "sched": Case(family="sm90", s_q=64, s_kv=64, causal=True, sched="natural"),  # auto picks an LPT order here
}


def test_every_refusal_row_has_a_case():
    assert set(REFUSED) == {fact for fact, _, _ in CANNOT} | {"sched"}


@pytest.mark.parametrize("fact", sorted(REFUSED))
def test_what_the_wrapper_cannot_express_is_refused_with_its_reason(fact):
    case = REFUSED[fact]
    specialize(case)  # the compile entry plans it
    with pytest.raises(Unsupported, match=f"'{fact}'") as refused:
        Sm90WrapperAdapter().plan(case)
    assert refused.value.scope == "adapter"
    if not case.is_thd:
        Sm90WrapperAdapter().plan(expressible(case))  # and the bounded Case is served


def test_a_scheduler_the_auto_pick_chooses_is_served():
    """'natural' on a Case without a band is the planner's own pick: not refused."""
    case = Case(family="sm90", s_q=64, s_kv=64, sched="natural")
    assert Sm90WrapperAdapter().specialize(case).params == specialize(case).params


@pytest.mark.compile
def test_the_wrapper_plan_compiles_the_compile_entry_artifact(tmp_path, monkeypatch):
    """One sm_90a compile through the wrapper's plan; the compile entry then asks the cache for the same artifact."""
    monkeypatch.setenv("CUDNN_FRONTEND_COMPILED_CACHE", str(tmp_path / "compiled"))
    case = Case(family="sm90", s_q=136, s_kv=72, h_q=3, h_kv=1, sinks=True, sched="auto")
    first = Sm90WrapperAdapter().compile_only(case)
    assert first.misses == 1 and first.compiled
    again = Sm90Adapter().compile_only(case)
    assert again.misses == 0 and again.memo_hits == 1
