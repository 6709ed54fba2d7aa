"""The error model: every numeric tolerance of the suite lives here.

A kernel output is judged against the float64 reference on the same
(already dtype-rounded) inputs, element by element for O and row by row for
LSE, under a bound computed from those inputs alone (never from the kernel
output) by following the kernel's own arithmetic (site-packages
``cudnn/sdpa/fwd/kernels/sm80/prefill_f16.py``, ``f16`` below; the d=256
template ``prefill_d256_f16.py`` repeats the same arithmetic line for line):

- S = q.k on the tensor cores: fp16/bf16 operands, exact products, fp32
  accumulation one m16n8k16 mma (16 products) at a time (f16:1030-1038).
- The sign of the scale folded into S, the bias added as bias * (1/|scale|)
  in fp32 (f16:1015-1018, 1094-1102); the scale enters as c = |scale| *
  log2(e) rounded to fp32 (the host passes ``scale * log2(e)``), multiplied
  into the tile max and into every score inside the exponent (f16:1183, 1251).
- Online softmax over KV tiles of 64 keys walked from the LAST tile to the
  first (f16:887-888), with a running max that only moves when a tile's max
  exceeds it by more than RESCALE_LOG2 = 8 (log2 units, f16:1202-1220): the
  rescale factor alpha and every p are ``ex2.approx`` (fastmath, f16:1225,
  1255); each lane sums its 16 p values of a tile in fp32, in column order,
  into its own partial row sum (f16:1259-1260, 1277-1278); the 4 lane
  partials meet in a 2-step butterfly after the loop (f16:1329-1331).
- P is rounded to the I/O dtype (cvt.rn, f16:1261-1262) for the P@V mma, but
  the row sum adds the UNROUNDED fp32 p: the P rounding does not cancel in the
  normalization, its error is sum_j P_j eps_j v_j.
- O = fp32 accumulator * (1 / row_sum), rounded once to the I/O dtype
  (f16:1470-1506). LSE = LN2 * (row_max + log2(row_sum)) in fp32 (f16:1386).
- Sinks: sink * log2(e) in fp32, the max lifted to it, O and row_sum scaled by
  os = ex2(row_max - lifted), the sink term ex2(sink - lifted) added to the
  row sum only (f16:1343-1364).

``kernel_bounds`` turns this into first-order error bounds (each term below
names the operation it charges), with every operation's worst case from its
documented accuracy:

O, per element (b, h, row, d), with P_j the reference weights:
    |O_k - O| <= (1+u) * [ u * sum_j P_j |v_jd|                  P rounded to the I/O dtype
                           + tiny * sum_{j subnormal} |v_jd| / L  fp16 P below 2^-14 (absolute rounding)
                           + sum_j P_j rho_j |v_jd - O_d| + P_s rho_s |O_d|   logit / ex2 errors (rho_j below)
                           + sum_j P_j |v_jd| (TC * steps_j + U32 * rescales_j)  P@V mma accumulation
                           + kappa |O_d| + FTZ_ABS * (...)]        row sum, 1/l, scaling; flush to zero
                 + u |O_d| + tiny                                 the one final rounding
LSE, per row:
    |LSE_k - LSE| <= sum_j P_j (rho_j + alpha_j + U32 * depth_j) + sink terms
                     + ln2 * LG2 * max(1, log2 L + lag)           log2 of the row sum
                     + (2 U32 + LN2_F32_REL) |LSE|                row_max + log2(l), * LN2
where rho_j (natural-log units) charges key j's logit: the tensor-core
accumulation of q.k (``dot_error``: each product's bits below the alignment
grid, per k16 step, times |scale|), the fp32 roundings of c, of S*c, of the
bias add and of the max subtraction, and ex2's 2 ulps; alpha_j the rescales
that may happen after key j's tile; depth_j the fp32 adds key j's p goes
through in the row sum; lag how far the kernel's final running max sits below
the key max (the threshold walk replayed on the reference logits; 8 after a
decision too close to call). Second-order terms are covered by SECOND_ORDER.
``judge.within_model`` fails any element over its bound, and fails outright
when the model itself is not finite.

The sm90 family (the native Hopper D512 forward) runs another arithmetic:
``sm90_kernel_bounds`` below, chosen by the Case's family (``bounds_for``).

A ratio ``error / bound`` (worst element) is recorded for every check; the
report plots its distribution per quantity and dtype, and the ``nightly``
profile steers Hypothesis toward high ratios with ``target()``. Never raise a
constant to make a failure go away: a real discrepancy is a finding (see
README, "Known findings"). The legacy rule (``legacy_bound``: 2x the error of
a same-dtype framework run) is kept only to document what the model changed
(tests/test_error_model.py, tools/calibrate_error_model.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Dict, Optional, Tuple

import torch

from .phases import timed

# ---------------------------------------------------------------- constants
# fp32 unit roundoff: every FADD/FMUL/FFMA of the kernel rounds to nearest.
U32 = 2.0**-24
# Unit roundoff of the I/O dtypes: cvt.rn.{f16,bf16}x2.f32 rounds P
# (f16:1261-1262) and O (f16:1505-1506) to nearest.
IO_UNIT = {"float16": 2.0**-11, "bfloat16": 2.0**-8}
# Largest absolute rounding error below the normal range (half the smallest
# subnormal spacing): fp16 2^-24 / 2, bf16 2^-133 / 2.
IO_TINY = {"float16": 2.0**-25, "bfloat16": 2.0**-134}
# log2 of the smallest normal of the I/O dtype: a p below it at its own tile's
# scale is rounded with absolute error IO_TINY (fp16 only in practice: bf16
# shares fp32's range and ex2.approx.ftz flushes p < 2^-126 to 0 anyway).
IO_NORMAL_LOG2 = {"float16": -14.0, "bfloat16": -126.0}
# ex2.approx.ftz.f32 (cute.math.exp2(fastmath=True), f16:1225, 1255, 1354-1357):
# at most 2 ulp (CUDA C Programming Guide, exp2f / the PTX ex2.approx entry).
EX2_REL = 2.0**-22
# Flush to zero: ex2.approx.ftz and the fast-math fp32 multiplies flush results
# below 2^-126 to 0, an ABSOLUTE error < 2^-126 per flushed value: a p (weight
# <= |v| in O), a rescale factor alpha / os (losing an accumulator of at most
# 2^8 * sum |p v|, p <= 2^8), an accumulator step, the final O_acc * (1/l).
FTZ_ABS = 2.0**-126
# log2 of the row sum (f16:1386): lg2.approx.f32 is within 2^-22 absolute on
# [0.5, 2] and 2 ulp elsewhere (CUDA C Programming Guide, __log2f); the libdevice
# log2f, if the DSL picks it, is tighter.
LG2_ABS = 2.0**-22
# 1 / row_sum (f16:1473): div.full / div.approx are within 2 ulp.
RCP_REL = 2.0**-22
# One m16n8k16 mma with fp32 accumulation (f16:1036, 1300): the tensor cores
# take the products exactly, align them and the accumulator C to the largest
# magnitude in a window of >= 24 bits (24 on A100, 25 on H100) and truncate the
# bits that fall out (round toward zero), then truncate the normalized sum to
# fp32 (Fasi, Higham, Mikaitis, Pranesh 2021, "Numerical behavior of NVIDIA
# tensor cores"; Khattak, Mikaitis 2025, "Accurate models of NVIDIA tensor
# cores"). A term therefore loses exactly its bits below the alignment grid,
# 2^(floor(log2 max) - TC_WINDOW_BITS + 1): the remainder |t| mod grid, never
# more at a finer grid (grids are powers of two) nor when rounding instead of
# truncating. Whether the 16 products go in one pass or in two passes of 8 is
# not documented: dot_error charges the larger of the two. The products are
# exact data, so their remainders are computed; the accumulator's is charged a
# whole grid step, each pass result one fp32 ulp.
TC_WINDOW_BITS = 24
F64_MANTISSA_BITS = 52  # _grid reads the float64 exponent field above them
F64_EXPONENT_FIELD = 0x7FF << F64_MANTISSA_BITS
GRID_SCALE = 2.0 ** -(TC_WINDOW_BITS - 1)  # a pass's grid: 2^-23 of its largest magnitude's power of two
TC_HALF = 8  # products per pass in the two-pass structure
# The P@V mma (O's accumulator) is charged more simply: each step's magnitudes
# bounded by the running sum of |p v| (no cancellation assumed), 2 x (9 terms +
# 1 normalization) grid steps of 2^-23 per k16 step.
TC_GRID = 2.0**-23
TC_K16_ULPS = 20.0
# Kernel structure (config_sm80 *_CFG: TILE_N = 64 for every flavor; mma K = 16).
TILE_N = 64
MMA_K = 16
# p values one lane adds into its tile partial, in column order (QK_N_FRAGS=8 x 2).
LANE_TERMS = 16
# The 4 lane partials of a row meet in 2 butterfly adds (f16:1329-1331).
BUTTERFLY_ADDS = 2
# The running max moves only when a tile max exceeds it by more than 8 (log2
# units, f16:1202): it lags the true max by at most 8, so every p <= 2^8 and
# the kernel's row sum l lies in [L, 2^8 L] (L: the reference's, >= 1).
RESCALE_LOG2 = 8.0
LN2 = math.log(2.0)
LOG2E = math.log2(math.e)
# The fp32 constants the kernel multiplies by: LN2 (f16:1371) and log2(e) for
# the sink (f16:1347); their own rounding, relative.
LN2_F32_REL = abs(float(torch.tensor(LN2, dtype=torch.float32)) - LN2) / LN2
LOG2E_F32_REL = abs(float(torch.tensor(LOG2E, dtype=torch.float32)) - LOG2E) / LOG2E
# Products of two first-order terms (u * rho, rho^2, ...): < 2^-7 * 2^-8 of the
# bound (u <= 2^-8, every other relative term far below 2^-7); 2^-16 covers them.
SECOND_ORDER = 1.0 + 2.0**-16
# The float64 reference itself: n <= 2^13 terms of 2^-53 each.
REF64_REL = 2.0**-40
# RoPE (has_rope): the kernel rotates Q and K rows in shared memory, o = x_lo c -
# x_hi s and x_hi c + x_lo s in fp32 from an fp32 (cos, sin) table, and rounds o
# to the I/O dtype for the tensor cores (frost/tile_dsl/rope.py). The reference
# (reference.attention.rotate) does the same arithmetic unfused; the kernel's
# fp32 value may still differ: an FFMA contraction rounds one product less (u
# of the product sum each for the two products and the add), and the wrapper's
# table comes from another trig (kernels/sm80/rope_table.py, cute.math.cos/sin),
# allowed 2 ulps (4u) on each of c and s. So the kernel's fp32 value lies
# within ROPE_FP32_REL * (|x_lo c| + |x_hi s|) of the exact rotation of the
# reference's table, and where that interval straddles a rounding boundary of
# the I/O dtype the kernel's operand may be the neighbouring I/O value:
# ``rotation_unsure`` gives that distance per element (0 almost everywhere),
# ``kernel_bounds`` charges it on every score (q.k with both operands off).
# Seen on the H200 (fp16, RoPE rows past one KV tile): LSE 2-5x over a model
# without it, 1-11 rows per case.
ROPE_FP32_REL = 8 * U32
# Threshold decisions of the replayed walk (and the fp16 subnormal cut) closer
# than this, relative, plus the logits' own error bound, count as undecided: the
# kernel decides on fp32 values (relative error far below 2^-16 here).
RECORD_MARGIN = 2.0**-10


# Metamorphic V scaling (properties.metamorphic, relation
# "v_pow2"): V * 2^k leaves every operation of the kernel exact up to a power
# of two (products, the fp32 P@V accumulation whose alignment grid follows the
# largest term, acc * 1/l), so O scales exactly wherever the I/O dtype rounds
# O as a normal number. Where O is subnormal in the I/O dtype (fp16: |O| <
# 2^-14) the first launch rounds to the subnormal grid and the second to the
# normal grid: 2^-k of the second, rounded to the subnormal grid again, may
# differ from the first by this many subnormal ulps (double rounding), never more.
# A rounded O of exactly the smallest normal may come from a subnormal value
# rounded up (seen on the H200: fp16 -6.10054e-5, a midpoint, rounded to -2^-14
# while the second launch kept -0.249878 = -6.10054e-5 * 2^12), so |O| <= tiny
# is judged this way too.
SUBNORMAL_RESCALE_ULPS = 1


def subnormal_rescale(first_o: torch.Tensor, where: torch.Tensor, io_dtype: torch.dtype) -> Tuple[torch.Tensor, torch.Tensor]:
    """(mask, bound) of v_pow2's O elements judged by the double rounding
    above instead of bit for bit: those of ``where`` whose first-launch value
    lies at or below the I/O dtype's smallest normal, each within
    SUBNORMAL_RESCALE_ULPS subnormal spacings (tiny * eps)."""
    tiny = torch.finfo(io_dtype).tiny
    mask = where & (first_o.double().abs() <= tiny)
    return mask, torch.full(first_o.shape, SUBNORMAL_RESCALE_ULPS * tiny * torch.finfo(io_dtype).eps, dtype=torch.float64, device=first_o.device)


def lse_log2_bound(bound: torch.Tensor, lse2: torch.Tensor) -> torch.Tensor:
    """The LSE bound in base-2 units (``lse_log2``): the natural-units bound
    scales by log2(e), and the kernel's one extra fp32 multiply of its natural
    LSE by log2(e) (prefill_f16.py:1405-1408) adds at most one rounding,
    U32 |LSE2| (non-finite rows: none)."""
    finite = torch.where(torch.isfinite(lse2), lse2.abs(), torch.zeros_like(lse2))
    return bound * LOG2E + U32 * finite


@dataclass(frozen=True)
class Quantity:
    layout: str  # what the bound is per
    why: str


# One entry per compared quantity (the terms themselves: kernel_bounds).
TOLERANCES = {
    "o": Quantity(
        "per element",
        "P rounded to the I/O dtype before P@V while the row sum keeps the fp32 p (u * sum P|v|), the one final "
        "rounding of O (u |O|), plus the fp32 terms: logit and ex2 errors, tensor-core accumulation, row sum and 1/l",
    ),
    "lse": Quantity(
        "per row",
        "fp32 throughout: logit errors (tensor-core q.k, scale, bias, max subtraction), ex2 / lg2 fast-math ulps, "
        "the row sum's adds, the final add and LN2 multiply",
    ),
}


# ------------------------------------------------------------- the model
def _mm(w: torch.Tensor, x: torch.Tensor, group: int) -> torch.Tensor:
    """sum_j w[b,h,i,j] x[b,h//group,j,:] (GQA without copies, as the reference)."""
    b, h, s_q, s_kv = w.shape
    h_kv = x.shape[1]
    return torch.matmul(w.reshape(b, h_kv, group * s_q, s_kv), x).view(b, h, s_q, x.shape[-1])


def _rowsum(x: torch.Tensor) -> torch.Tensor:
    return x.sum(-1) if x.shape[-1] else torch.zeros(x.shape[:-1], dtype=x.dtype, device=x.device)


def _per_tile(x: torch.Tensor, width: int, fill, reduce) -> torch.Tensor:
    """(..., SKV) -> (..., ceil(SKV/width)) reduced over each group of ``width`` keys."""
    s_kv = x.shape[-1]
    n = -(-s_kv // width)
    pad = n * width - s_kv
    if pad:
        x = torch.cat([x, torch.full(x.shape[:-1] + (pad,), fill, dtype=x.dtype, device=x.device)], -1)
    return reduce(x.view(*x.shape[:-1], n, width))


def _grid(m: torch.Tensor) -> torch.Tensor:
    """The alignment grid of a pass whose largest magnitude is ``m`` (float64,
    >= 0; also one fp32 ulp of ``m``): 2^(floor(log2 m) - 23), read off the
    float64 exponent field (two launches where frexp and ldexp take seven:
    on a GPU the model's cost is its launches and bytes); 0 where m == 0, and
    where the grid would fall below the normal float64 range (m < 2^-999, far
    below any product of two fp16/bf16 values): a grid of 0 charges whole
    terms (``_lost``), more than any grid. m 2^-23 is exact, or subnormal
    (exponent field 0) exactly where the grid falls below the normal range;
    its exponent field alone (sign and mantissa masked off) is the grid; inf
    where m is not finite (an fp32 product past its range, whose remainder,
    and so the bound, is NaN whatever the grid)."""
    return ((m * GRID_SCALE).view(torch.int64) & F64_EXPONENT_FIELD).view(torch.float64)


def _lost(a: torch.Tensor, grid: torch.Tensor) -> torch.Tensor:
    """Sum over the last axis of |t| mod grid: the bits of each term below the
    grid (``a`` fp32, exact; the sum in float64); ``grid`` is shaped like
    ``a`` without its last axis."""
    if a.shape[-1] == 0:
        return torch.zeros_like(grid)
    g = grid.to(a.dtype)  # 0 when it underflows fp32: then the whole term counts (fmod(t, inf) = t)
    g = torch.where(g > 0, g, math.inf)[..., None]
    return torch.fmod(a, g).sum(-1, dtype=grid.dtype)  # fmod is exact


def _amax(a: torch.Tensor) -> torch.Tensor:
    return a.amax(-1) if a.shape[-1] else torch.zeros(a.shape[:-1], dtype=a.dtype, device=a.device)


def _logit_spread(it, w: torch.Tensor, z0: torch.Tensor, vis: torch.Tensor) -> torch.Tensor:
    """O's share of the per-key logit / ex2 errors (``w`` = P_j rho_j):
    sum_j w_j |v_j - O|, centred on the largest key so one-hot rows stay tight."""
    g, o, s_kv = it.group, it.o, z0.shape[-1]
    if not s_kv:
        return torch.zeros_like(o)
    abs_v, abs_o = it.v.abs(), o.abs()
    star = z0.masked_fill(~vis, -math.inf).argmax(-1, keepdim=True)
    w_star = torch.gather(w, -1, star)
    v_star = torch.gather(it.v.repeat_interleave(g, 1), 2, star.expand(-1, -1, -1, 1).clamp(max=s_kv - 1).expand(-1, -1, -1, o.shape[-1]))
    return (_mm(w, abs_v, g) - w_star * v_star.abs()).clamp(min=0) + (_rowsum(w)[..., None] - w_star) * abs_o + w_star * (v_star - o).abs()


def _pv_accumulation(it, p: torch.Tensor, vis: torch.Tensor, rescales_after) -> torch.Tensor:
    """The P@V mma accumulation, tiles of TILE_N walked from the last, k16
    steps in column order within a tile: every step of the row from key j's
    on carries j's term (TC_K16_ULPS grid steps), and every rescale of the
    accumulator after j's tile one fp32 rounding (``rescales_after``, per key)."""
    s_kv, dev, f64 = vis.shape[-1], vis.device, p.dtype
    if not s_kv:
        return torch.zeros_like(it.o)
    steps, n_tiles = -(-s_kv // MMA_K), -(-s_kv // TILE_N)
    step_vis = _per_tile(vis, MMA_K, False, lambda x: x.any(-1))  # (..., steps)
    per_tile_steps = TILE_N // MMA_K
    sid = torch.arange(steps, device=dev)
    walk = (n_tiles - 1 - sid // per_tile_steps) * per_tile_steps + sid % per_tile_steps  # walk position
    order = torch.argsort(walk)
    walked = step_vis[..., order].to(f64)
    from_here = torch.flip(torch.cumsum(torch.flip(walked, [-1]), -1), [-1])  # steps at or after, in walk order
    step_weight = from_here[..., torch.argsort(order)][..., torch.arange(s_kv, device=dev) // MMA_K]
    return _mm(p * (TC_K16_ULPS * TC_GRID * step_weight + U32 * rescales_after), it.v.abs(), it.group)


def _p_rounding(it, dtype: str, p, vis, gap, z0, m_k0) -> torch.Tensor:
    """P rounded to the I/O dtype for P@V while the row sum keeps the fp32 p:
    u sum_j P_j |v_jd|; fp16 p that may be subnormal at its tile's scale
    (2^(log2e (z - key max)) < 2^-14, a superset while the running max is at
    most the key max) are rounded with absolute error IO_TINY."""
    u, tiny, g = IO_UNIT[dtype], IO_TINY[dtype], it.group
    abs_v = it.v.abs()
    t_p = u * _mm(p, abs_v, g)
    if dtype == "float16":
        sub = vis & (gap * LOG2E > -IO_NORMAL_LOG2[dtype] - RECORD_MARGIN * (1 + z0.abs() + m_k0.abs()[..., None]))
        l_keys = _rowsum(torch.exp(-gap) * vis)
        t_p = t_p + tiny * _mm(sub.to(p.dtype), abs_v, g) / l_keys.clamp(min=1.0)[..., None]
    return t_p


# Products per block of rows, every k16 step's at once (fp32: 128 MiB): bounds dot_error's memory.
ROW_BLOCK = 1 << 25


def rotation_unsure(lo: torch.Tensor, hi: torch.Tensor, c: torch.Tensor, s: torch.Tensor, io_dtype: torch.dtype) -> torch.Tensor:
    """Per element of a RoPE rotation (halves ``lo``/``hi`` of the I/O-dtype
    row, fp32 table ``c``/``s``, laid out as ``reference.attention.rotate``
    returns it), float64: how far the kernel's I/O-dtype operand may sit from
    the reference's, |round(v + d) - round(v - d)| with v the exact rotation
    and d = ROPE_FP32_REL * (its product magnitudes) (rounding is monotone, so
    every fp32 value within d rounds in between; rounding via fp32 keeps that)."""
    lo, hi, c, s = (t.to(torch.float64) for t in (lo, hi, c, s))
    v = torch.cat((lo * c - hi * s, hi * c + lo * s), dim=-1)
    d = ROPE_FP32_REL * torch.cat(((lo * c).abs() + (hi * s).abs(), (hi * c).abs() + (lo * s).abs()), dim=-1)
    io = lambda x: x.to(torch.float32).to(io_dtype).to(torch.float64)  # noqa: E731
    return io(v + d) - io(v - d)


def operand_error(q: torch.Tensor, k: torch.Tensor, q_unsure: Optional[torch.Tensor], k_unsure: Optional[torch.Tensor], group: int) -> torch.Tensor:
    """Bound on |q_k.k_k - q.k| (raw score units, every (row, key)) when the
    kernel's operands q_k, k_k may sit ``q_unsure``/``k_unsure`` from q, k:
    aq.|k| + |q|.ak + aq.ak."""
    b, h_kv, s_kv, d = k.shape
    aq = torch.zeros_like(q) if q_unsure is None else q_unsure
    ak = torch.zeros_like(k) if k_unsure is None else k_unsure
    qg, ag = q.reshape(b, h_kv, -1, d).abs(), aq.reshape(b, h_kv, -1, d)
    t = ag @ (k.abs() + ak).transpose(-1, -2) + qg @ ak.transpose(-1, -2)
    return t.view(q.shape[0], q.shape[1], q.shape[2], s_kv)


def _key_spans(vis: torch.Tensor, shape: tuple, block: int) -> list:
    """Per block of ``block`` rows of ``dot_error``'s (B, Hkv, rows, SKV)
    ``shape``: the keys [k0, k1) from the first any of its rows sees to the
    last (k0 >= k1: none), from ``vis`` (B,H,SQ,SKV); one host read."""
    s_kv = shape[-1]
    seen = _per_tile(vis.reshape(shape).any(1).any(0).T, block, False, lambda x: x.any(-1)).T  # (blocks, SKV)
    idx = torch.arange(s_kv, device=vis.device)
    ends = torch.stack((torch.where(seen, idx, s_kv).amin(-1), torch.where(seen, idx + 1, 0).amax(-1)), -1)
    return [tuple(e) for e in ends.tolist()]


def dot_error(q: torch.Tensor, k: torch.Tensor, group: int, vis: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Bound on |fl_TC(q.k) - q.k| (raw score units) for every (row, key),
    step by k16 step, E accumulating the bound so far (which also coarsens
    every magnitude the grids are read from, so a grid is never finer than
    the kernel's). Per step, with C, C' = C + the first 8 products, D = C' +
    the last 8, p the products and ulp(x) = _grid(x):
    one pass   sum_16 rem(|p|, G) + G + ulp(|D|),  G = grid(max(|C|, |p|))
    two passes sum_8 rem(|p|, Ga) + Ga + ulp(|C'|) + sum_8 rem(|p|, Gb) + Gb + ulp(|D|),
               Ga = grid(max(|C|, |p_1..8|)), Gb = grid(max(|C'|, |p_9..16|)).
    A step whose products are all 0 (the envelope's zero columns) is exact.

    Only E carries from one step to the next, so the partial sums C' and D
    of every step (float64 matmuls of each half step, accumulated in order by
    one cumsum), the products and their pass maxima are computed for all
    steps at once, and Ga and G, which wait
    on nothing but C, are read in one call and carried together (the
    ``pair`` axis: the first pass of 8 products, then the one pass of 16).

    ``vis`` (B,H,SQ,SKV), optional: the (row, key) pairs the caller reads.
    When the rows take more than one block, each block computes only the
    keys between the first and the last its rows see (``_key_spans``; the
    others' bounds are 0). A causal or windowed mask and the padded rows of
    a THD bucket leave many of a long call's pairs unread (about half under
    a causal mask), and every k16 step's launches cost bytes per pair."""
    b, h_kv, s_kv, d = k.shape
    qg = q.reshape(b, h_kv, -1, d)
    rows = qg.shape[2]
    out = torch.zeros((b, h_kv, rows, s_kv), dtype=q.dtype, device=q.device)
    steps = -(-d // MMA_K)
    if not (rows and s_kv and steps):
        return out.view(q.shape[0], q.shape[1], q.shape[2], s_kv)
    if steps * MMA_K > d:  # zero columns: zero products, which no term charges
        qg, k = (torch.nn.functional.pad(x, (0, steps * MMA_K - d)) for x in (qg, k))
    halves = lambda x: x.unflatten(-1, (2 * steps, TC_HALF)).transpose(-2, -3)  # noqa: E731  (..., n, D) -> (..., half steps, n, 8)
    k_halves = halves(k).transpose(-1, -2)
    k32 = k.abs().to(torch.float32).unflatten(-1, (steps, MMA_K))  # (b, h, keys, steps, 16)
    block = max(1, ROW_BLOCK // max(1, s_kv * steps * MMA_K))
    spans = _key_spans(vis, (b, h_kv, rows, s_kv), block) if vis is not None and rows > block else None
    for i, r0 in enumerate(range(0, rows, block)):
        k0, k1 = (0, s_kv) if spans is None else spans[i]
        if k0 >= k1:
            continue
        qb = qg[:, :, r0 : r0 + block]
        # sums[:, :, 2s] = C' (C + the first 8 products of step s), sums[:, :, 2s + 1] = D
        sums = torch.cumsum(torch.matmul(halves(qb), k_halves[..., k0:k1]), 2)
        mags = sums.abs()
        c_term = (sums[:, :, 1::2] != 0).to(q.dtype)  # C != 0: the accumulator is exact before the first step
        q32 = qb.abs().to(torch.float32).unflatten(-1, (steps, MMA_K))
        # |products| of every step, (b, h, rows, keys, steps, 16): fp16 x fp16 (22 bits) and bf16 x bf16
        # (16 bits) are exact in fp32, and so are their remainders against a power-of-two grid; with the
        # largest product of each pass of 8 (m1, m2), their max (m12) and the pair (m1, m12) that Ga and G
        # are read from, for every step at once: none of them waits on E
        prods = q32[..., :, None, :, :] * k32[:, :, None, k0:k1]
        m1s, m2s = prods.unflatten(-1, (2, TC_HALF)).amax(-1).to(q.dtype).unbind(-1)
        m12s = torch.maximum(m1s, m2s)
        pairs, charged = torch.stack((m1s, m12s)), m12s > 0
        err = torch.zeros(qb.shape[:3] + (k1 - k0,), dtype=q.dtype, device=q.device)
        for s in range(steps):
            a, m2 = prods[..., s, :], m2s[..., s]
            c = mags[:, :, 2 * s - 1] + err if s else err  # |C| + E
            pair = _grid(torch.maximum(c, pairs[..., s]))  # (Ga, G)
            r = torch.stack((_lost(a[..., :TC_HALF], pair[0]), _lost(a, pair[1])))
            if s:  # + the grid step of a nonzero C (0 or 1 times the grid: exact, so one fused launch)
                r = r.addcmul(c_term[:, :, s - 1], pair)
            ends = mags[:, :, 2 * s : 2 * s + 2].movedim(2, 0) + err  # (|C'|, |D|) + E
            r = r + _grid(ends + r)  # + ulp(|C'|), + ulp(|D|)
            ea, one = r
            gb = _grid(torch.maximum(ends[0] + ea, m2))
            rb = _lost(a[..., TC_HALF:], gb) + gb
            two = ea + rb + _grid(ends[1] + ea + rb)
            err = err + torch.where(charged[..., s], torch.maximum(one, two), 0.0)
        out[:, :, r0 : r0 + block, k0:k1] = err
    return out.view(q.shape[0], q.shape[1], q.shape[2], s_kv)


def _k16_steps(it, s_kv: int):
    """The k16 steps of P@V the kernel takes per row: over SKV keys, or per
    batch entry over the keys it walks (``Internals.walked``: THD sequences
    padded to one call), shaped (B, 1, 1, 1)."""
    if it.walked is None:
        return -(-s_kv // MMA_K)
    return (-(-it.walked // MMA_K)).to(it.o.dtype).view(-1, 1, 1, 1)


def _row_facts(z: torch.Tensor):
    """What both kernels' bounds read off the scaled logits ``z`` (B,H,SQ,SKV),
    -inf where masked: (vis, zero, visible keys per row, has_key, z0 (masked
    keys 0: their P is 0), m_k0 (the row's key max; rows with no key: 0, any
    finite value), gap (>= 0: how far each key lies below the max))."""
    b, h, s_q, s_kv = z.shape
    dev, f64 = z.device, z.dtype
    vis = torch.isfinite(z)
    zero = torch.zeros((), dtype=f64, device=dev)
    visible = vis.sum(-1)
    has_key = visible > 0
    z0 = torch.where(vis, z, zero)
    m_k = z.amax(-1) if s_kv else torch.full((b, h, s_q), -math.inf, dtype=f64, device=dev)
    m_k0 = torch.where(has_key, m_k, zero)
    gap = torch.where(vis, m_k0[..., None] - z0, zero)
    return vis, zero, visible, has_key, z0, m_k0, gap


def _walk_facts(vis: torch.Tensor, f64: torch.dtype):
    """The KV-tile walk both templates share (TILE_N-key tiles, walked from the
    last down): each key's tile, the tile count, each key's add depth within its
    lane's tile partial, which tiles hold a key of the row, how many such tiles
    the walk visits AFTER tile t (t' < t), and a -inf scalar."""
    s_kv, dev = vis.shape[-1], vis.device
    j = torch.arange(s_kv, device=dev)
    cc = j % TILE_N
    lane_depth = (LANE_TERMS - (2 * (cc // 8) + cc % 2)).to(f64)
    tile_vis = _per_tile(vis, TILE_N, False, lambda x: x.any(-1)) if s_kv else vis[..., :0]
    tiles_after = torch.cumsum(tile_vis.to(f64), -1) - tile_vis.to(f64)
    neg_inf = torch.full((), -math.inf, dtype=f64, device=dev)
    return j // TILE_N, (-(-s_kv // TILE_N) if s_kv else 0), lane_depth, tile_vis, tiles_after, neg_inf


def _walked_before(tile_max: torch.Tensor) -> torch.Tensor:
    """(..., T) -> per tile t, the largest tile max of the tiles the walk
    visits before it (t' > t; -inf: none)."""
    if not tile_max.shape[-1]:
        return tile_max
    after = torch.flip(torch.cummax(torch.flip(tile_max, [-1]), -1).values, [-1])
    return torch.cat([after[..., 1:], torch.full_like(after[..., :1], -math.inf)], -1)


@timed("bounds")
def kernel_bounds(it, dtype: str, *, parts: bool = False) -> Dict[str, torch.Tensor]:
    """Bounds on |kernel - reference| from one float64 reference call's
    ``reference.attention.Internals``: ``o`` (B,H,SQ,Dv) per element,
    ``lse`` (B,H,SQ) per row, and ``visible`` (B,H,SQ) keys per row (rows with
    none take contract values, judged exactly). Rows past the q lengths and
    rows with no key get meaningless (possibly non-finite) bounds. ``parts``
    adds each term family of both bounds (``o:<term>``, ``lse:<term>``) for
    diagnostics (tools/calibrate_error_model.py)."""
    u, tiny = IO_UNIT[dtype], IO_TINY[dtype]
    z, p, g = it.logits, it.p, it.group
    b, h, s_q, s_kv = z.shape
    f64 = z.dtype
    vis, zero, visible, has_key, z0, m_k0, gap = _row_facts(z)
    has_sink = it.sink is not None
    has_bias = it.bias is not None

    # ---- logit error bound per key, natural-log units, but for the max subtraction (below)
    ks = abs(it.scale)
    dot = torch.where(vis, ks * dot_error(it.q, it.k, g, vis), zero) if ks else torch.zeros_like(z0)
    if ks and (it.q_unsure is not None or it.k_unsure is not None):  # RoPE's operands (ROPE_FP32_REL)
        dot = dot + torch.where(vis, ks * operand_error(it.q, it.k, it.q_unsure, it.k_unsure, g), zero)
    dz = dot + U32 * ((2 + has_bias) * z0.abs())
    if has_bias:
        dz = dz + 2 * U32 * torch.where(vis, it.bias.expand_as(z0).abs(), zero)

    # ---- the kernel's walk: tiles from the last down, the running max moved past RESCALE_LOG2
    tile, n_tiles, lane_depth, tile_vis, tiles_after, neg_inf = _walk_facts(vis, f64)
    tile_max = _per_tile(torch.where(vis, z, neg_inf), TILE_N, -math.inf, lambda x: x.amax(-1)) if s_kv else z[..., :0]
    # Replayed on the reference logits (log2 units); a threshold decision closer than the
    # kernel's own error to the threshold is ambiguous: from there on, the walk is unknown.
    y_tile = tile_max * LOG2E
    dz_max = _amax(dz) if s_kv else torch.zeros_like(m_k0)
    # What the walk reads that does not wait on it, for every tile at once: the max of the
    # tiles walked before tile t (x -> x log2(e) is monotone, so it commutes with the max);
    # whether t starts the walk (``first``: the running max, -inf until then, takes its max)
    # or continues it (``started``: a finite running max); the slack's terms but the running
    # max's, each scaled by RECORD_MARGIN apart (a power of two: the same float as the scaled sum)
    prev = _walked_before(tile_max)
    y_before = prev * LOG2E
    seen = torch.isfinite(prev)
    started, first = tile_vis & seen, tile_vis & ~seen
    abs_y = y_tile.abs().nan_to_num(0, 0, 0)
    margin_y, margin_at = RECORD_MARGIN * (1 + abs_y), RECORD_MARGIN * abs_y
    slack_dz = 2 * LOG2E * dz_max
    run = torch.full_like(m_k0, -math.inf)
    margin_run = torch.zeros_like(m_k0)  # RECORD_MARGIN |run| (0 while run is -inf)
    lost = torch.zeros_like(has_key)  # an ambiguous decision was taken
    maybe = []  # per tile, walked from the last: a rescale may happen at this tile
    for t in reversed(range(n_tiles)):
        yt, st = y_tile[..., t], started[..., t]
        diff = yt - run  # read only where started
        slack = slack_dz + (margin_y[..., t] + margin_run)
        near = st & ((diff - RESCALE_LOG2).abs() <= slack)
        further = st & (diff > RESCALE_LOG2)
        move = first[..., t] | further
        record = st & (yt > y_before[..., t] - slack)  # a new maximum: all that is known once lost
        maybe.append(torch.where(lost, record, further | near))
        lost = lost | near
        run = torch.where(move, yt, run)
        margin_run = torch.where(move, margin_at[..., t], margin_run)
    maybe = torch.stack(maybe[::-1], -1) if n_tiles else torch.zeros_like(tile_vis)
    lag_log2 = torch.where(lost | ~has_key, torch.full_like(run, RESCALE_LOG2), (m_k0 * LOG2E - run).clamp(0, RESCALE_LOG2))
    lag = lag_log2 * LN2  # how far the kernel's final running max sits below the key max, natural units
    # x = S*c - m: -x <= gap (m never passes the key max) and x <= 8 (log2 units: m lags
    # the max walked so far by at most that); its rounding joins the logit error
    dz = dz + U32 * torch.where(vis, gap + RESCALE_LOG2 * LN2, zero)
    # a rescale costs ex2 on alpha, its argument's rounding (|m_old - m_new| <= (tile max - prev) + lag)
    # and the O / row-sum multiplications by alpha
    jump = torch.where(maybe, (tile_max - prev).nan_to_num(0, 0, 0), zero).clamp(min=0)
    cost = torch.where(maybe, EX2_REL + 3 * U32 + U32 * (jump + RESCALE_LOG2 * LN2), zero)
    rescales_after = torch.cumsum(maybe.to(f64), -1) - maybe.to(f64)  # in tiles walked after t
    alpha_after = torch.cumsum(cost, -1) - cost
    per_key = lambda t: t[..., tile] if s_kv else t[..., :0]  # noqa: E731  (..., T) -> (..., SKV)
    depth = lane_depth + 1 + per_key(tiles_after) + BUTTERFLY_ADDS + per_key(rescales_after) + (2 if has_sink else 0)

    ex2_ln = -math.log1p(-EX2_REL)
    rho = torch.where(vis, dz + ex2_ln, zero)

    # ---- the sink (denominator only)
    p_s = it.sink_p
    rho_s = rho_os = torch.zeros_like(p_s)
    if has_sink:
        sig = it.sink.expand_as(p_s)
        m_all = torch.where(torch.isfinite(it.m), it.m, sig)
        # sink * log2e (constant and product), ex2, and its argument sink - lifted max (<= m_all - sink)
        rho_s = sig.abs() * (LOG2E_F32_REL + U32) + ex2_ln + U32 * (m_all - sig).clamp(min=0)
        # os = ex2(m_f - lifted): |m_f - lifted| <= (sink - key max) + the final lag
        rho_os = ex2_ln + U32 * (torch.where(has_key, (sig - m_k0).clamp(min=0), zero) + lag)

    # ---- LSE
    lse = it.lse
    abs_lse = torch.where(torch.isfinite(lse), lse.abs(), zero)
    lse_terms = {
        "dot": _rowsum(p * dot),  # tensor-core q.k (and RoPE operands that may round the other way), times |scale|
        "logit": _rowsum(p * (rho - dot)),  # fp32 roundings of c, S*c, bias, max subtraction; ex2
        "rescale": _rowsum(p * per_key(alpha_after)),
        "sum": _rowsum(p * U32 * depth),
        "sink": p_s * rho_s + (1 - p_s) * rho_os + U32 if has_sink else torch.zeros_like(p_s),
        # |log2 l| <= log2 L + lag (the kernel's l is relative to its lagging max); 2^-22 absolute up to 1
        "lg2": LN2 * LG2_ABS * torch.clamp(torch.log2(it.l.clamp(min=1.0)) + lag_log2, min=1.0),
        "final": (2 * U32 + LN2_F32_REL) * abs_lse + REF64_REL * (1 + abs_lse + _rowsum(p * z0.abs())) + FTZ_ABS * visible,
    }
    lse_bound = SECOND_ORDER * sum(lse_terms.values())

    # ---- O
    abs_v = it.v.abs()
    o = it.o
    abs_o = o.abs()
    a1 = _mm(p, abs_v, g)
    t_p = _p_rounding(it, dtype, p, vis, gap, z0, m_k0)
    # logit / ex2 errors: sum_j P_j rho_j |v_j - O|, centred on the largest key so one-hot rows stay tight
    t_rho = _logit_spread(it, p * rho, z0, vis) + (p_s * rho_s)[..., None] * abs_o
    steps = _k16_steps(it, s_kv)
    t_acc = _pv_accumulation(it, p, vis, per_key(rescales_after) if s_kv else None)
    kappa = U32 * _rowsum(p * depth) + RCP_REL + U32
    if has_sink:
        kappa = kappa + U32 + p_s * rho_os  # O_acc * os; os's ex2 error survives with weight P_s
    # flush to zero: each p (<= |v| in O), each k16 step and O_acc / l (< 1 each), and each alpha / os that
    # may flush an accumulator of at most 2^8 sum |v| (p <= 2^8)
    accumulators = 1 + 2.0**RESCALE_LOG2 * (has_sink + _rowsum(maybe.to(f64)))
    t_ftz = FTZ_ABS * (1 + steps + accumulators[..., None] * _mm(vis.to(f64), abs_v, g))
    o_terms = {"p_round": t_p, "logit": t_rho, "accumulate": t_acc, "normalize": kappa[..., None] * abs_o + REF64_REL * a1, "ftz": t_ftz}
    return _bounds(o_terms, abs_o, u, tiny, lse_bound, lse_terms, visible.to(f64), parts)


def _bounds(o_terms: dict, abs_o, u: float, tiny, lse_bound, lse_terms: dict, visible, parts: bool) -> dict:
    """A forward model's result from its terms: O's bound is the terms carried through the final rounding to
    the I/O dtype (u |O| + tiny) and the second-order margin; ``parts`` adds each term under its own name."""
    o_bound = SECOND_ORDER * ((1 + u) * sum(o_terms.values()) + u * abs_o + tiny)
    out = {"o": o_bound, "lse": lse_bound, "visible": visible}
    if parts:
        out.update({f"o:{k}": v for k, v in o_terms.items()}, **{"o:final": u * abs_o + tiny})
        out.update({f"lse:{k}": v for k, v in lse_terms.items()})
    return out


# ------------------------------------------------------------ the sm90 family
# The native Hopper D512 forward (site-packages cudnn/sdpa/fwd/kernels/sm90/
# prefill_d512_f16.py, ``pf``; _common_hopper.py, ``ch``; docs/error_model.md,
# "The sm90 family") runs another arithmetic than the SM80 templates:
# - S = q.k: 32 wgmma m64n64k16 steps over the 512-column tile, fp32 C
#   (ch:63-79); columns past D_QK are zero-filled, their steps exact: dot_error
#   as for SM80 (k16 steps, the 24-bit window is conservative for Hopper).
# - c = fl32(fl32(scale) * fl32(log2 e)) in the kernel (pf:920): the host takes
#   the natural, signed fp32 scale (prepared_host.py:32), so c carries three
#   relative errors where SM80's host-side float64 product carries one.
# - The anchor is the EXACT running extremum of the raw fp32 scores (max for a
#   positive scale, min for a negative one: the largest logit either way,
#   pf:531-536): no lazy threshold, no lag, every p <= 1 and l in [1, L].
# - Narrow exponent x = S*c - anchor*c (pf:575): two products and a
#   subtraction; the wide path (every negative scale, a positive one near fp32
#   overflow) x = fl32((S - anchor) * f64(scale_fp32) log2 e) (pf:559-571) has
#   one rounding and the scale's (pf:568): the narrow charge dominates it term by term.
#   A zero scale scores every key 0 (pf:507-508): x = 0, dot = 0.
# - alpha = ex2((old - anchor) * c) where the anchor moved (pf:573, 580); the
#   argument is exactly 0 where it did not, and ex2.approx(+-0) = 1 (the kernel
#   relies on it, pf:503-505): a tile costs a rescale only where its max may
#   reach the running max.
# - One running fp32 row sum per lane across ALL tiles: total = total * alpha
#   + p0 + p1 + ... over the lane's 16 columns (pf:586-595), the 4 lanes
#   meeting in 2 butterfly adds at the end (ch:112-125, pf:1034): key j goes
#   through its tile's remaining adds plus LANE_TERMS adds per later tile.
# - P rounded (cvt.rn, pf:598) for P@V (4 wgmma m64n256k16 steps per tile,
#   ch:82-97), the row sum keeping fp32 p, O *= alpha before each PV (pf:666, 713).
# - Finalization (ch:152-171): inv = rcp.approx(total); LSE = (anchor*c +
#   lg2(total)) * fl32(LN2) (narrow) or fl32(anchor*scale + lg2(total)*ln2) in
#   FP64 (wide); O = fl_io(acc * inv) (pf:739, 750). Sinks (ch:176-195): in
#   FP64 peak = anchor*scale, one ex2 of fl32(|sink - peak| log2 e) scaling the
#   smaller side, mass = total*shrink + extra, inv = shrink*rcp(mass), LSE =
#   fl32(top + lg2(mass)*ln2). Stats in log2 units: LSE * fl32(log2 e) at the
#   store (pf:1099-1100), as SM80.
# The constants each charge names are SM80's (EX2_REL, LG2_ABS, RCP_REL,
# FTZ_ABS, the tensor-core ones): the same PTX instructions (sm90_notes).
# c = fl32(fl32(scale) fl32(log2 e)): the scale's fp32 rounding, the constant's, the product's.
SM90_C_REL = 2 * U32 + LOG2E_F32_REL
# The fp32 scale the FP64 paths multiply by (pf:921; ch:170, 183): its rounding, relative.
SM90_SCALE_REL = U32
# Per later tile: LANE_TERMS adds into the lane's running sum (pf:595).
SM90_ADDS_PER_TILE = LANE_TERMS
# Sinks: mass = total * shrink + extra, two fp32 roundings (ch:193).
SM90_SINK_MASS_OPS = 2


@timed("bounds")
def sm90_kernel_bounds(it, dtype: str, *, parts: bool = False) -> Dict[str, torch.Tensor]:
    """``kernel_bounds`` for the sm90 family's arithmetic (the block above):
    same inputs, same outputs. Where it differs from SM80's: no lag and no
    threshold replay (p <= 1, accumulators <= sum |v|); c's three roundings
    charged on each key's gap and on the LSE's anchor term; the row-sum depth
    LANE_TERMS per later tile; rescales only at tiles whose max may reach the
    running max; the FP64 sink finalization; no bias or RoPE (absent facts)."""
    u, tiny = IO_UNIT[dtype], IO_TINY[dtype]
    z, p, g = it.logits, it.p, it.group
    b, h, s_q, s_kv = z.shape
    f64 = z.dtype
    vis, zero, visible, has_key, z0, m_k0, gap = _row_facts(z)  # m_k0: the anchor's logit (scale * the raw extremum)
    has_sink = it.sink is not None
    ks = abs(it.scale)
    ex2_ln = -math.log1p(-EX2_REL)

    # ---- per key: q.k (times |scale|), S*c and anchor*c (U32 each), their difference (U32 gap), c (gap)
    dot = torch.where(vis, ks * dot_error(it.q, it.k, g, vis), zero) if ks else torch.zeros_like(z0)
    dz = dot + torch.where(vis, U32 * (z0.abs() + m_k0.abs()[..., None]) + (U32 + SM90_C_REL) * gap, zero)
    rho = torch.where(vis, dz + ex2_ln, zero)

    # ---- the walk: tiles from the last down; a rescale where the tile max may reach the running max
    tile, n_tiles, lane_depth, tile_vis, tiles_after, neg_inf = _walk_facts(vis, f64)
    tile_max = _per_tile(torch.where(vis, z, neg_inf), TILE_N, -math.inf, lambda x: x.amax(-1)) if s_kv else z[..., :0]
    prev = _walked_before(tile_max)
    started = tile_vis & torch.isfinite(prev)
    dz_max = _amax(dz)[..., None]
    slack = 2 * dz_max + RECORD_MARGIN * (1 + tile_max.abs().nan_to_num(0, 0, 0) + prev.abs().nan_to_num(0, 0, 0))
    maybe = started & (tile_max >= prev - slack)  # the kernel's tile max may reach (ties: equal) its running max
    jump = torch.where(maybe, (tile_max - prev).nan_to_num(0, 0, 0).clamp(min=0) + 2 * dz_max, zero)
    # alpha: ex2, its argument (the fp32 difference, the product, c), the O and row-sum multiplies
    cost = torch.where(maybe, EX2_REL + 2 * U32 + (2 * U32 + SM90_C_REL) * jump, zero)
    rescales_after = torch.cumsum(maybe.to(f64), -1) - maybe.to(f64)
    alpha_after = torch.cumsum(cost, -1) - cost
    per_key = lambda t: t[..., tile] if s_kv else t[..., :0]  # noqa: E731
    depth = lane_depth + SM90_ADDS_PER_TILE * per_key(tiles_after) + per_key(rescales_after) + BUTTERFLY_ADDS + SM90_SINK_MASS_OPS * has_sink

    # ---- the sink: its weight against the keys' (one ex2 of an fp32 argument, the peak's scale rounding)
    p_s = it.sink_p
    rho_s = torch.zeros_like(p_s)
    if has_sink:
        sig = it.sink.expand_as(p_s)
        rho_s = ex2_ln + U32 * torch.where(has_key, (sig - m_k0).abs(), zero) + SM90_SCALE_REL * m_k0.abs()

    # ---- LSE
    lse = it.lse
    abs_lse = torch.where(torch.isfinite(lse), lse.abs(), zero)
    l_top = it.l.clamp(min=1.0) + has_sink  # the kernel's total or mass, relative to its anchor or the sink
    # anchor*c (U32), c (SM90_C_REL) on the anchor term; + lg2, * fl32(LN2) (2 U32 + its constant) on
    # |anchor term| + log l >= |LSE|; the FP64 paths charge less (the scale's rounding, one fp32 rounding)
    top = m_k0.abs() + torch.log(l_top)
    lse_terms = {
        "dot": _rowsum(p * dot),
        "logit": _rowsum(p * (rho - dot)),
        "rescale": _rowsum(p * per_key(alpha_after)),
        "sum": _rowsum(p * U32 * depth),
        "sink": rho_s if has_sink else torch.zeros_like(p_s),
        "lg2": LN2 * LG2_ABS * torch.clamp(torch.log2(l_top), min=1.0),
        "final": (3 * U32 + SM90_C_REL + LN2_F32_REL) * top + REF64_REL * (1 + abs_lse + _rowsum(p * z0.abs())) + FTZ_ABS * visible,
    }
    lse_bound = SECOND_ORDER * sum(lse_terms.values())

    # ---- O
    abs_v, o = it.v.abs(), it.o
    abs_o = o.abs()
    t_p = _p_rounding(it, dtype, p, vis, gap, z0, m_k0)
    t_rho = _logit_spread(it, p * rho, z0, vis) + (p_s * rho_s)[..., None] * abs_o
    t_acc = _pv_accumulation(it, p, vis, per_key(rescales_after) if s_kv else None)
    steps = _k16_steps(it, s_kv)
    # the row sum's adds, rcp, acc * inv; with sinks shrink * rcp
    kappa = U32 * _rowsum(p * depth) + RCP_REL + U32 + U32 * has_sink
    # flush to zero: each p, each k16 step, acc * inv; an alpha or a sink shrink flushing an accumulator <= sum |v|
    accumulators = 1 + has_sink + _rowsum(maybe.to(f64))
    t_ftz = FTZ_ABS * (1 + steps + accumulators[..., None] * _mm(vis.to(f64), abs_v, g))
    o_terms = {"p_round": t_p, "logit": t_rho, "accumulate": t_acc, "normalize": kappa[..., None] * abs_o + REF64_REL * _mm(p, abs_v, g), "ftz": t_ftz}
    return _bounds(o_terms, abs_o, u, tiny, lse_bound, lse_terms, visible.to(f64), parts)


# Each kernel family's forward model (a function of this module, by name: a
# test may replace it), by the Case's ``family`` fact (ground.families).
FAMILY_BOUNDS = {"sm80": "kernel_bounds", "sm90": "sm90_kernel_bounds"}


def bounds_for(family: str):
    """The forward error model of a kernel family (``FAMILY_BOUNDS``)."""
    try:
        return globals()[FAMILY_BOUNDS[family]]
    except KeyError:
        raise ValueError(f"kernel family {family!r}: no error model (known: {', '.join(FAMILY_BOUNDS)})") from None


# -------------------------------------------------------- the legacy rule
@dataclass(frozen=True)
class LegacyTolerance:
    k: float  # multiple of the same-dtype computation's error
    floor_ulps: float  # floor, in ulps of the output dtype at the output's magnitude
    floor_abs: float  # absolute floor (for quantities near 0)


# Machine epsilon (distance from 1.0 to the next value) of the output dtypes.
EPS = {"float16": 2.0**-10, "bfloat16": 2.0**-7, "float32": 2.0**-23}
LEGACY = {"o": LegacyTolerance(2.0, 1.0, 0.0), "lse": LegacyTolerance(2.0, 0.0, 2e-5)}


def legacy_bound(kind: str, dtype: str, lowp_error: float, ref_amax: float) -> float:
    """The rule this model replaced: max|kernel - ref32| over all live elements
    <= K * max|lowp - ref32| + floor (lowp: ``reference.attention`` in the I/O
    dtype). Kept to document what the new model catches that it did not."""
    tol = LEGACY[kind]
    out_dtype = dtype if kind == "o" else "float32"
    floor = tol.floor_abs + tol.floor_ulps * EPS[out_dtype] * max(1.0, ref_amax)
    return tol.k * lowp_error + floor


# ------------------------------------------------------------------ helpers
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


# ------------------------------------------------------------ the backward
# The SM80 backward (site-packages cudnn/sdpa/bwd/kernels/sm80/bprop_f16.py,
# ``b16``; the d=64 kernel bprop_d64_f16.py runs the same arithmetic on other
# tiles) recomputes P from the O and LSE it is handed and forms, per cell:
#   S = K.Q^T             tensor-core mma, fp32 accumulation (b16:19, 818)
#   P = ex2(S*c + bias*log2e - LSE*log2e)   fp32, ex2.approx.ftz (b16:840-861)
#   dV += round_io(P)^T dO                  P rounded for the mma (b16:913-916)
#   dP = V.dO^T            tensor-core mma, fp32
#   D  = rowsum(dO * O)    fp32 products of the I/O values (_do_dot_kernel)
#   dS' = (dP - D) * P     fp32 (b16:947-955); dBias += dS' by atom.global.add.f32
#                          into a zeroed fp32 workspace accumulator (b16:956-977,
#                          1337-1345; zeroed at prepared_host.py:316-318, cast to
#                          the dBias dtype, fp32 or the I/O one, by _copy_aux,
#                          prepared_host.py:171-184, 417, 524), which flushes
#                          subnormal inputs and results to zero (PTX ISA, atom)
#   dS = round_io(scale * dS')              for the dK and dQ mmas (b16:979-1000)
#   dK += dS^T Q, dQ += dS K                fp32 accumulators; dQ across KV tiles by
#                                           fp32 atomics (order free unless deterministic)
#   outputs rounded once to the I/O dtype; GQA dK/dV: each q head's partial
#   rounded to the I/O dtype, summed in fp32 over the group, rounded again
#   (_dkv_reduce_kernel, b16:1660-1668); dSink -= ex2((sink - LSE)*log2e) * D
#   in fp32 (b16:1538-1543), dBias copied to its dtype.
# backward_bounds charges each operation its worst case, first order, from the
# inputs alone: Q, K, V, dO, the handed O and LSE (their distance from the
# exact forward, ``o_err``/``lse_err``, is an input fact: the reference's own
# rounding, or the forward kernel's error when O/LSE come from the kernel).
# Tensor-core accumulation is charged like O's P@V (TC_K16_ULPS grid steps of
# TC_GRID per k16 step on the running sum of |terms|); atomics and fp32 sums
# one U32 per add on the sum of |terms|.
BWD_FP32_OPS = 4.0  # fp32 roundings in the exponent argument: S*c, bias*log2e, the two adds/subtractions
# dBias flush to zero, per cell and atomic add, absolute: atom.global.add.f32
# (b16:1342) flushes a subnormal addend (the fp32 dS' of a cell, |dS'| < 2^-126)
# and a subnormal sum to zero (PTX ISA, atom: "atom.add.f32 ... flushes subnormal
# inputs and results to sign-preserving zero"), and dP - D (b16:952-955) may be
# flushed before its product with P <= 1 + its error: (2 + P + P_err) FTZ_ABS.
# Seen on the H200: dBias 0 where the exact dS' is ~1e-39 (scale 8, tiny P).
DBIAS_FTZ_TERMS = 2.0
# dQ flush to zero, per element and KV tile, absolute: dQ accumulates across the
# KV tiles by atomicAdd into an fp32 workspace (b16:24, 30, 216; the deterministic
# relay adds the same way, b16:48-53), and atom/red.add.f32 flush a subnormal
# addend and a subnormal sum to zero (PTX ISA): 2 FTZ_ABS per tile. Seen on the
# H200: dQ 0 where the exact dQ is 9.6e-39 (bf16, scale 8, sinks).
DQ_FTZ_TERMS = 2.0


def dbias_flush(p: torch.Tensor, p_err: torch.Tensor, vis: torch.Tensor) -> torch.Tensor:
    """What one atomic add of a cell's dS' into dBias may lose to flush to zero."""
    return (DBIAS_FTZ_TERMS + p + p_err) * FTZ_ABS * vis


def _k16(n: int) -> float:
    """Tensor-core accumulation of an n-term dot product: TC_K16_ULPS grid steps per k16 step."""
    return TC_K16_ULPS * TC_GRID * max(1, -(-n // MMA_K))


def handed_error(given: Optional[torch.Tensor], exact: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """|given - exact| of an O or LSE the backward is handed, on ``rows`` (0
    elsewhere: the kernel gates those rows); equal infinities count 0, any
    other non-finite difference inf (the model then fails as broken)."""
    if given is None:
        return torch.zeros_like(exact)
    g, e = given.to(exact.dtype), exact
    same = (g == e) | (torch.isnan(g) & torch.isnan(e))
    err = torch.where(same, torch.zeros_like(e), (g - e).abs())
    err = torch.where(torch.isnan(err), torch.full_like(err, math.inf), err)
    return torch.where(rows, err, torch.zeros_like(err))


@timed("bounds")
def backward_bounds(
    it,
    grads: Dict[str, torch.Tensor],
    dtype: str,
    *,
    o_given: Optional[torch.Tensor] = None,
    lse_given: Optional[torch.Tensor] = None,
    dbias_dtype: str = "float32",
) -> Dict[str, torch.Tensor]:
    """Bounds on |grad_kernel - grad| for one dense attention call (float64
    ``Internals`` ``it`` and the closed-form ``grads`` of
    reference.backward.gradients), shaped like each gradient. ``o_given``
    (B,H,SQ,Dv) and ``lse_given`` (B,H,SQ, natural units) are the O and LSE
    the backward is handed: their distance from the exact forward is charged
    (None: exact)."""
    u, tiny = IO_UNIT[dtype], IO_TINY[dtype]
    rows = it.q_live[:, None, :]
    o_err = handed_error(o_given, it.o, rows[..., None].expand_as(it.o))
    lse_err = handed_error(lse_given, it.lse, rows.expand_as(it.lse))
    g = it.group
    scale = abs(it.scale)
    p, dp, d, ds, do = grads["p"], grads["dp"], grads["d"], grads["ds"], grads["do"]
    live = it.q_live[:, None, :, None].to(p.dtype)
    vis = torch.isfinite(it.logits).to(p.dtype) * live  # cells the kernel computes a P for
    q, k, v = it.q, it.k.repeat_interleave(g, 1), it.v.repeat_interleave(g, 1)
    s_q, s_kv, d_qk, d_v = q.shape[2], k.shape[2], q.shape[3], v.shape[3]
    o = it.o * live
    lse = torch.where(torch.isfinite(it.lse), it.lse, torch.zeros_like(it.lse)) * live[..., 0]
    # P: the S mma, the exponent's fp32 roundings, the handed LSE's error, ex2's ulps; FTZ absolute.
    raw = (q.abs() @ k.abs().transpose(-1, -2)) * _k16(d_qk)
    bias = it.bias.abs() if it.bias is not None else torch.zeros_like(p)
    arg = scale * (q @ k.transpose(-1, -2)).abs() + bias + lse[..., None]
    rho = scale * raw + lse_err[..., None] + BWD_FP32_OPS * U32 * arg + EX2_REL
    dp_rel = torch.expm1(rho) * vis  # |P_k - P| <= P * dp_rel + FTZ_ABS
    p_err = p * dp_rel + FTZ_ABS * vis
    # D = dO . O: the handed O's error, fp32 products and adds.
    d_err = (do.abs() * o_err).sum(-1) + (d_v + 1) * U32 * (do.abs() * o.abs()).sum(-1)
    # dP: tensor-core V.dO^T.
    dp_err = (do.abs() @ v.abs().transpose(-1, -2)) * _k16(d_v) * vis
    # dS' = (dP - D) * P in fp32: its error is also dBias's per cell (its flush to
    # zero is charged once, in dbias_flush; dS feeding dK/dQ is rounded to the I/O
    # dtype, whose absolute floor `tiny` dwarfs 2^-126).
    dsp_err = p_err * (dp - d[..., None]).abs() + (p + p_err) * (dp_err + d_err[..., None]) + 2 * U32 * ds.abs()
    # dS = round_io(scale * dS'): a fp32 multiply, then the I/O rounding (absolute below the normal range).
    ds_abs = scale * ds.abs()
    ds_err = scale * dsp_err + (u + U32) * ds_abs + tiny * vis
    ds_mag = ds_abs + ds_err
    # P rounded to the I/O dtype for dV (absolute below the normal range).
    pr_err = p_err + u * (p + p_err) + tiny * vis
    # dV, dK: per q head (fp32 accumulation over the Q tiles), rounded; GQA: group sum, rounded again.
    dv_h = pr_err.transpose(-1, -2) @ do.abs() + _k16(s_q) * ((p + pr_err).transpose(-1, -2) @ do.abs())
    dk_h = ds_err.transpose(-1, -2) @ q.abs() + _k16(s_q) * (ds_mag.transpose(-1, -2) @ q.abs())
    per_head_v = (p.transpose(-1, -2) @ do).abs()
    per_head_k = scale * (ds.transpose(-1, -2) @ q).abs()

    def folded(err_h, mag_h, exact):
        b, h, n, dd = err_h.shape
        err = err_h.view(b, h // g, g, n, dd).sum(2)
        if g > 1:  # each partial rounded to the I/O dtype (absolute `tiny` below its normal range), then g fp32 adds
            err = err + (u + g * U32) * (mag_h + err_h).view(b, h // g, g, n, dd).sum(2) + g * tiny
        return err + u * (exact.abs() + err) + tiny

    out = {"dv": folded(dv_h, per_head_v, grads["dv"]), "dk": folded(dk_h, per_head_k, grads["dk"])}
    # dQ: the dS K mma per KV tile, fp32 atomics across the KV tiles, one rounding.
    kv_tiles = -(-s_kv // TILE_N)
    dq_err = ds_err @ k.abs() + (_k16(s_kv) + (kv_tiles + 1) * U32) * (ds_mag @ k.abs()) + DQ_FTZ_TERMS * kv_tiles * FTZ_ABS
    out["dq"] = dq_err + u * (grads["dq"].abs() + dq_err) + tiny
    if "dbias" in grads:
        # One atomic add per cell and batch entry; each may flush (DBIAS_FTZ_TERMS).
        cell_err = dsp_err + dbias_flush(p, p_err, vis)
        if grads["dbias"].shape[0] == 1:  # one bias for every batch entry: fp32 atomics over the batch
            db_err = cell_err.sum(0, keepdim=True) + p.shape[0] * U32 * ds.abs().sum(0, keepdim=True)
        else:
            db_err = cell_err
        out["dbias"] = db_err + IO_UNIT.get(dbias_dtype, U32) * (grads["dbias"].abs() + db_err) + (IO_TINY.get(dbias_dtype, 0.0))
    if "dsink" in grads:
        sp = grads["sink_p"]
        sink = it.sink.abs() if it.sink is not None else torch.zeros_like(lse)
        rho_s = lse_err + BWD_FP32_OPS * U32 * (sink + lse.abs()) + EX2_REL
        term = sp * d.abs()
        term_err = sp * torch.expm1(rho_s) * (d.abs() + d_err) + sp * d_err + U32 * term + FTZ_ABS * live[..., 0]
        n_terms = p.shape[0] * s_q
        out["dsink"] = term_err.sum((0, 2)) + n_terms * U32 * (term + term_err).sum((0, 2))
    return {name: x * SECOND_ORDER for name, x in out.items()}


TOLERANCES.update(
    {
        "dq": Quantity(
            "per element",
            "dS' from the recomputed P (logit, handed-LSE and ex2 errors), dP and D in fp32; dS = scale dS' rounded to "
            "the I/O dtype; the dS K mma per KV tile, fp32 atomics across tiles (each may flush a subnormal addend or sum); one final rounding",
        ),
        "dk": Quantity(
            "per element",
            "as dQ with Q for K, accumulated over the Q tiles; GQA: each q head's partial rounded (absolutely below the normal range), summed, rounded again",
        ),
        "dv": Quantity("per element", "P rounded to the I/O dtype for the P^T dO mma; GQA partials rounded, summed, rounded again"),
        "dbias": Quantity(
            "per element",
            "the fp32 dS' per cell (no scale, no I/O rounding), fp32 atomics over a broadcast bias' batch, "
            "each flushing a subnormal addend or sum to zero (atom.add.f32), one rounding to the dBias dtype",
        ),
        "dsink": Quantity("per head", "exp2((sink - LSE) log2e) D per row in fp32 with the handed LSE's error, summed over rows and batch"),
    }
)


# ------------------------------------------------------------------ the reference against its oracles
# How closely the float64 reference must agree with the independent computations that check it
# (tests/test_reference.py, tests/test_backward_reference.py). Not a kernel's bound: float64 against
# float64. Two float64 attentions that order their sums differently differ by ~1e-16 times a few
# thousand terms; a wrong mask, scale or head fold moves O by 1e-3 or more. The gaps between are wide
# on purpose: a tolerance here can be missed only by a real disagreement.
F64_REORDERED = 1e-9  # abs and rel: float64 computations whose sums run in another order (an oracle, another batching)
SAME_ARITHMETIC = 1e-12  # abs and rel: the same per-row arithmetic run in other row chunks (only the row grouping moves)
AUTOGRAD_AGREEMENT = (1e-10, 1e-12)  # (rel, abs): the closed-form backward against float64 autograd of an independent forward
# The float32 reference within this fraction of |O|max (|LSE|max, at least 1) of the float64 one: float32's
# 2^-24 rounding times the few hundred terms of a row's sums, with an order of magnitude to spare.
FP32_REFERENCE_REL = 1e-5
# A low-precision reference is worse than float32, yet still attention: within this fraction of |O|max.
LOWP_REFERENCE_REL = 0.1
