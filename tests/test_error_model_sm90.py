"""The sm90 family's error model (``ground.tolerances.sm90_kernel_bounds``)
on the CPU, through the numerics property itself (``check_numerics`` on the
emulated sm90 kernel, tests/kernel_emulation_sm90.py):

- the arithmetic it charges is the installed template's (source lines);
- it is the model a Case of the family is judged by (``case.family``);
- soundness: the emulated kernel passes on drawn dense sm90 Cases, under an
  ideal and an adversarial arithmetic; the worst error/bound is printed
  (``-s``) and recorded in docs/error_model.md;
- not vacuous: errors planted a few ulps past the model, and a precision slip,
  fail it.
"""

from __future__ import annotations

import math
from dataclasses import replace
from unittest import mock

import pytest
import torch
from hypothesis import HealthCheck, given, settings

from ground import tolerances
from ground.case import Case
from ground.data import make_inputs
from ground.outcome import PropertyFailure
from properties import numerics as properties
from reference.attention import reference_for_case
from strategies.sm90 import sm90_cases
from tests.kernel_emulation import Arith
from tests.kernel_emulation_sm90 import EmulatedSm90Adapter, Sm90Plant

# ideal: exact k16 steps rounded once, correctly rounded ex2 / lg2 / rcp, S*c - anchor*c fused;
# adversarial: 24-bit truncating tensor cores, ex2 +2 ulp, lg2 -2 ulp, rcp +2 ulp, nothing fused.
ARITHS = {"ideal": Arith(), "adversarial": Arith(tc_bits=24, ex2_ulps=2, lg2_ulps=-2, rcp_ulps=2, fma=False)}
# Multiply-adds above which the truncating tensor-core emulation is too slow for the CPU suite:
# such draws keep the adversarial ex2 / lg2 / rcp and accumulate ideally.
TC_BUDGET = 1.5e6
EXAMPLES = 25


def numerics(case: Case, arith: Arith = Arith(), plant: Sm90Plant = Sm90Plant()):
    """("passed", ratios) or ("failed", the failure) of the numerics property on the emulated sm90 kernel."""
    with mock.patch.object(properties, "device", lambda: torch.device("cpu")):
        try:
            return "passed", properties.check_numerics(case, EmulatedSm90Adapter(arith, plant)).ratios
        except PropertyFailure as failure:
            return "failed", failure


def _source(target: str) -> str:
    from kernels.source import TARGETS, package_root

    return (package_root() / TARGETS[target]).read_text()


def test_model_structure_is_the_template():
    """What sm90_kernel_bounds charges is what prefill_d512_f16.py and _common_hopper.py do."""
    pf, ch = _source("sm90"), _source("sm90_common")
    for line in (
        "scale_log2 = scale * cutlass.Float32(LOG2_E)",  # c formed in the kernel from the fp32 scale: SM90_C_REL
        "scale_log2_wide = cutlass.Float64(scale) * cutlass.Float64(LOG2_E)",
        "exponents = (scores * scale_log2 - safe_current * scale_log2).vec",  # narrow: two products, a subtraction
        "x0 = cutlass.Float32((cutlass.Float64(s0) - cutlass.Float64(current)) * scale_log2_wide)",
        "old_exponent = (old - safe_current) * scale_log2",  # exactly 0 where the anchor does not move
        "total = zero if cutlass.const_expr(is_first_kv_tile) else row_sum[row_half] * old_scale",  # one running sum
        "total = total + p0 + p1",
        "p_pack = fp32_to_fp16(p0, p1, dtype=self.storage_dtype).bitcast(cutlass.Float32)",  # P rounded, the sum fp32
        'total = quad_reduce(softmax_params.partial_sum[row_half], "sum")',
        "lse_out = lse_out * cutlass.Float32(LOG2_E)",
    ):
        assert line in pf, f"the sm90 model assumes `{line}`"
    assert "if cutlass.const_expr(not is_first_kv_tile):\n                current = extremum(current, old)" in pf  # exact anchor
    for line in (
        "value = (anchor * scale_log2 + cute.math.log2(total, fastmath=True)) * cutlass.Float32(LN2)",
        "inv = cute.math.rcp(total, approx=True, ftz=True)",
        "mass = total * shrink + extra",
        "inv = shrink * cute.math.rcp(mass, approx=True, ftz=True)",
        "for k in cutlass.range_constexpr(32):",  # 32 k16 QK steps over the 512-column tile
    ):
        assert line in ch, f"the sm90 model assumes `{line}`"
    assert pf.count("total = total + p0 + p1") == 1 and tolerances.SM90_ADDS_PER_TILE == tolerances.LANE_TERMS


def test_the_case_family_selects_the_model():
    """check_numerics judges an sm90 Case by sm90_kernel_bounds and an sm80 one by
    kernel_bounds: a broken sm90 model fails the first (non-finite) and not the second."""
    sm90 = Case(family="sm90", s_q=64, s_kv=64, seed=1)
    assert tolerances.bounds_for("sm90") is tolerances.sm90_kernel_bounds and tolerances.bounds_for("sm80") is tolerances.kernel_bounds
    with pytest.raises(ValueError, match="no error model"):
        tolerances.bounds_for("sm70")
    real = tolerances.sm90_kernel_bounds
    with mock.patch.object(tolerances, "sm90_kernel_bounds", lambda it, dtype: {**real(it, dtype), "o": real(it, dtype)["o"] * math.nan}):
        verdict, got = numerics(sm90)
        assert verdict == "failed" and "non-finite" in got.summary
        assert numerics(replace(sm90, family="sm80"))[0] == "passed"


@pytest.mark.parametrize("arith_name", sorted(ARITHS))
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_bound_holds_on_drawn_cases(dtype, arith_name):
    """The emulated sm90 kernel passes the numerics property on drawn dense sm90
    Cases (a fixed derandomized draw); its worst error/bound per quantity is printed."""
    worst = {"o": 0.0, "lse": 0.0}

    @settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True, suppress_health_check=list(HealthCheck))
    @given(sm90_cases(layouts=("dense",), dtypes=(dtype,)))
    def check(case):
        arith = ARITHS[arith_name]
        if arith.tc_bits and case.batch * case.h_q * case.s_q * case.s_kv * (case.d_qk + case.d_v) > TC_BUDGET:
            arith = replace(arith, tc_bits=0)
        verdict, got = numerics(case, arith)
        assert verdict == "passed", got.summary if verdict == "failed" else got
        assert ("lse" in got) == case.has_lse
        for quantity, ratio in got.items():
            assert 0 <= ratio <= 1
            worst[quantity] = max(worst[quantity], ratio)

    check()
    print(f"sm90 {dtype} {arith_name}: worst error/bound o={worst['o']:.3g} lse={worst['lse']:.3g}")
    assert worst["o"] > 0.1 and worst["lse"] > 0.01  # the draws exercised the bound (not all exact outputs)


@pytest.mark.parametrize("extra", [{}, {"sinks": True}, {"scale": -0.125}, {"scale": 0.0}], ids=["positive", "sinks", "negative", "zero"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_bound_holds_on_long_rows(dtype, extra):
    """2048 keys (32 tiles: the row sum's longest chains in the suite's CPU
    tier) under ex2 / lg2 / rcp off by 2 ulp the wrong way, every scale path."""
    case = Case(family="sm90", dtype=dtype, s_q=64, s_kv=2048, seed=7, **extra)
    verdict, got = numerics(case, replace(ARITHS["adversarial"], tc_bits=0))
    assert verdict == "passed", got.summary if verdict == "failed" else got
    assert all(0 < r <= 1 for r in got.values())


# Pinned Cases for the power checks: one and three KV tiles, both dtypes, sinks and a negative scale.
PINNED = [
    Case(family="sm90", dtype=dtype, s_q=s, s_kv=s, h_q=2, h_kv=1, seed=5, **extra)
    for dtype in ("float16", "bfloat16")
    for s, extra in ((64, {}), (129, {"causal": True, "bottom_right": True}), (65, {"sinks": True, "scale": -0.125}))
]


def _bound_ulps(case: Case):
    """(median O bound, max LSE bound) in ulps of the reference rounded to the output dtype, judged rows."""
    inputs = make_inputs(case, torch.device("cpu"))
    o, lse, model = reference_for_case(case, inputs, torch.float64, extra=lambda it: tolerances.sm90_kernel_bounds(it, case.dtype))
    io = getattr(torch, case.dtype)

    def ulp(x, dt):
        x = x.to(dt)
        return (torch.nextafter(x, torch.full_like(x, math.inf)).double() - x.double()).abs()

    return float((model["o"] / ulp(o, io)).median()), float((model["lse"] / ulp(lse, torch.float32)).max())


@pytest.mark.parametrize("case", PINNED, ids=lambda c: c.describe())
def test_planted_ulps_past_the_model_fail(case):
    """O moved (median bound + 3) I/O ulps and LSE (largest bound + 3) fp32 ulps
    away from zero fail the model; the correct emulation passes the same Case."""
    assert numerics(case)[0] == "passed"
    o_ulps, lse_ulps = _bound_ulps(case)
    for plant in (Sm90Plant(o_ulps=math.ceil(o_ulps) + 3), Sm90Plant(lse_ulps=math.ceil(lse_ulps) + 3)):
        verdict, got = numerics(case, plant=plant)
        assert verdict == "failed", f"{plant}: passed with ratios {got}"
    print(f"{case.describe()}: O bound ~{o_ulps:.1f} I/O ulps (median), LSE bound <= {lse_ulps:.1f} fp32 ulps")


@pytest.mark.parametrize("case", [c for c in PINNED if c.scale is None], ids=lambda c: c.describe())
def test_precision_slip_fails_the_model(case):
    """c = scale log2 e held in the I/O dtype (a precision slip the sm90 model's
    three-rounding c must not absorb) fails it (the narrow path: a positive scale)."""
    verdict, got = numerics(case, plant=Sm90Plant(c_in_io=True))
    assert verdict == "failed", got
