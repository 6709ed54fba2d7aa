"""The error model: every numeric tolerance of the suite lives here.

A kernel output is accepted when, over the live elements,

    max |kernel - ref32|  <=  K * max |lowp - ref32|  +  FLOOR

- ``ref32`` is the fp32 reference on the same (already dtype-rounded) inputs.
- ``lowp`` is the same attention computed the way a straightforward framework
  would in the input dtype: scores and P@V products rounded to fp16/bf16,
  softmax in fp32 (``reference.attention(..., compute_dtype=<dtype>)``). Its
  error is what rounding to the I/O dtype alone costs on *this* data, so the
  bound scales with the case (long rows, large logits, bf16) instead of being
  one fixed number that is either too loose for easy cases or too tight for
  hard ones. This is the flash-attention rule ("at most k times the error of a
  same-dtype PyTorch run").
- K = 2 for O: the kernel rounds P to the I/O dtype before the P@V mma just
  like ``lowp`` does, and reorders the softmax (online rescaling, exp2), which
  may cost up to the same again; flash-attention uses the same factor for its
  forward output.
- K = 2 for LSE: the kernel keeps scores in fp32 (mma accumulators), so its
  LSE error is normally far below ``lowp``'s; 2 leaves the same room as O.
- FLOOR keeps the bound from collapsing to 0 where ``lowp`` happens to be
  exact (tiny rows, one key): one unit in the last place of the output dtype at
  the output's magnitude for O (the final rounding of O is unavoidable), and
  a few fp32 ulps of |LSE| plus the ln-rounding of the fp32 ``exp``/``log``
  for LSE.

A ratio ``error / bound`` is recorded for every check; the report plots its
distribution and the ``nightly`` profile steers Hypothesis toward high ratios
with ``target()``. Never raise K or FLOOR to make a failure go away: a real
discrepancy is a finding (see README, "Known findings").
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

# Machine epsilon (distance from 1.0 to the next value) of the output dtypes.
EPS = {"float16": 2.0**-10, "bfloat16": 2.0**-7, "float32": 2.0**-23}


@dataclass(frozen=True)
class Tolerance:
    k: float  # multiple of the same-dtype computation's error
    floor_ulps: float  # floor, in ulps of the output dtype at the output's magnitude
    floor_abs: float  # absolute floor (for quantities near 0)
    why: str


TOLERANCES = {
    "o": Tolerance(
        k=2.0,
        floor_ulps=1.0,
        floor_abs=0.0,
        why="P rounded to the I/O dtype before P@V (as in lowp) plus online-softmax reordering; 1 ulp: O's final rounding",
    ),
    "lse": Tolerance(
        k=2.0,
        floor_ulps=0.0,
        floor_abs=2e-5,
        why="fp32 scores in the kernel; lowp rounds scores to the I/O dtype, so 2x lowp is generous; 2e-5: exp2/log2 fast-math ulps",
    ),
}


def bound(kind: str, dtype: str, lowp_error: float, ref_amax: float) -> float:
    """The largest acceptable max-abs error of ``kind`` ('o' or 'lse')."""
    tol = TOLERANCES[kind]
    out_dtype = dtype if kind == "o" else "float32"
    floor = tol.floor_abs + tol.floor_ulps * EPS[out_dtype] * max(1.0, ref_amax)
    return tol.k * lowp_error + floor


def abs_diff(a: torch.Tensor, b: torch.Tensor, *, nan_equal: bool = False) -> torch.Tensor:
    """|a - b| in float64, elementwise: equal values (equal infinities too, the
    LSE -inf rows) count 0; NaN on one side (or both, unless ``nan_equal``)
    counts inf."""
    a, b = a.to(torch.float64), b.to(torch.float64)
    same = (a == b) | (torch.isnan(a) & torch.isnan(b)) if nan_equal else a == b
    diff = torch.where(same, torch.zeros_like(a), (a - b).abs())
    return torch.where(torch.isnan(diff), torch.full_like(diff, float("inf")), diff)


def max_abs_error(a: torch.Tensor, b: torch.Tensor, live: torch.Tensor) -> float:
    """max |a - b| over ``live`` elements (see abs_diff; NaN never matches)."""
    diff = abs_diff(a[live], b[live])
    return float(diff.max()) if diff.numel() else 0.0
