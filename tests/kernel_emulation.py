"""A CPU emulation of the SM80 prefill kernels' arithmetic, for calibrating
and testing the error model (conformance/tolerances.py) without a GPU.

It follows the kernel's operations, not its code (site-packages
``cudnn/sdpa/fwd/kernels/sm80/prefill_f16.py``, ``f16``): scores from the
k16 tensor-core steps (``Arith.tc_bits``: the alignment window of a
truncating accumulator, or 0 for an ideal one that rounds each step to
nearest); the sign folded into S and the bias added as bias * fl32(1/|scale|);
KV tiles of 64 walked from the last to the first; the running max moved only
past RESCALE_LOG2; p = ex2(S*c - m) with c = fl32(|scale| log2 e); four lane
partial sums of 16 p each per tile in column order; P rounded to the I/O dtype
for the P@V steps; the butterfly; the sink lift; LSE = LN2 * (m + log2 l); O =
fl_io(O_acc * (1/l)). Every fp32 operation is a float64 computation rounded
to fp32 (exact for the products involved). ex2 / lg2 / rcp are correctly
rounded, then moved by ``Arith.*_ulps`` ulps (the hardware's approximations
are within 2 ulp: a biased emulation is the adversarial case).

``Plant`` holds deliberate bugs (the power tests and the precision mutants'
emulated twins). Rows with no visible key skip every tile (the kernel's
masked tiles leave such rows at O = 0, LSE = -inf / the sink).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Callable, Optional, Tuple

import torch

from ground.data import TORCH_DTYPES
from ground.tolerances import LANE_TERMS, MMA_K, RESCALE_LOG2, TILE_N
from reference import masks
from reference.attention import batch_as_seq, mask_args, seq_as_batch, sequence_spans

F32, F64 = torch.float32, torch.float64
LOG2E = math.log2(math.e)
LN2_F32 = float(torch.tensor(math.log(2.0), dtype=F32))
LOG2E_F32 = float(torch.tensor(LOG2E, dtype=F32))
FTZ = 2.0**-126


@dataclass(frozen=True)
class Arith:
    """How the emulated hardware rounds."""

    tc_bits: int = 0  # mma alignment window (24: A100, 25: H100); 0: exact step sum rounded to nearest
    ex2_ulps: int = 0  # ex2 results moved this many ulps (sign: direction)
    lg2_ulps: int = 0
    rcp_ulps: int = 0
    fma: bool = True  # S*c - m fused (one rounding) or not (two); RoPE's x_lo c - x_hi s likewise (the reference: two)


@dataclass(frozen=True)
class Plant:
    """Deliberate bugs in the emulated kernel (all off by default)."""

    scale_factor: float = 1.0  # c = fl32(|scale| log2 e) multiplied by this
    scale_io: bool = False  # c held in the I/O dtype
    ln2: float = LN2_F32  # the LSE's LN2 constant
    # (visibility (B,H,SQ,SKV), live kv lengths (B,), padding mask compiled in) -> keys to drop
    drop: Optional[Callable[[torch.Tensor, torch.Tensor, bool], torch.Tensor]] = None
    p_round: Optional[torch.dtype] = None  # P rounded through this dtype before the I/O dtype
    drift: float = 1.0  # p of the first walked tile scaled by this in rows spanning >= 2 tiles
    lse_log2: bool = False  # LSE written in log2 units
    row_sum_io: bool = False  # lane row sums rounded to the I/O dtype after every tile
    # Bugs the metamorphic relations must see (properties.metamorphic):
    kv_heads_repeated: bool = False  # Q head h reads KV head h % H_kv (repeat) instead of h // group
    kv_lens_of_batch0: bool = False  # dense: every batch entry masks with batch 0's seq_kv_len
    v_offset: float = 0.0  # V + offset before P@V (a zero-point slip: O no longer scales with V)
    # Sequences (dense: batch entries) after the first with at least this many keys read their
    # first key's V from the neighbour's last row (THD: the packed row before it; 0: off). K, the
    # row sum and LSE stay right: O moves by P_0 |v - v'|, inside the error model once the row is long.
    neighbour_v_min_keys: int = 0
    # Dense: KV heads after the first read their first key's V from the previous KV head's last row
    # (a head stride slip on a path only long rows take), in rows of at least this many keys (0: off).
    neighbour_head_v_min_keys: int = 0
    absolute_kv_tiles: bool = False  # THD: KV tiles anchored to the packed offset, not the sequence start
    nondeterministic: bool = False  # every other launch, LSE one fp32 ulp up (a reduction order that varies)
    # Schema-3 feature bugs (the power of the new facts' judging, tests/test_feature_power.py):
    sink_units_flipped: bool = False  # sinks read in the other unit than sink_natural says
    rope_interleaved: bool = False  # RoPE pairs (2i, 2i+1) instead of the half split (i, i + D/2)
    rope_q_only: bool = False  # K left unrotated
    lse_store_without_stats: bool = False  # a compiled-out LSE block that still stores
    sink_stride_ignored: bool = False  # sinks read at stride 1 whatever the buffer's stride
    lse_compact_store: bool = False  # THD LSE stored head-major compact whatever lse_stride says
    prefix_as_int32: bool = False  # cu_seqlens read as int32 words whatever their dtype


def f32(x: torch.Tensor) -> torch.Tensor:
    """Round to fp32 (to nearest), kept as float64."""
    return x.to(F32).to(F64)


def rz32(x: torch.Tensor) -> torch.Tensor:
    """Round to fp32 toward zero, kept as float64."""
    f = x.to(F32)
    over = f.to(F64).abs() > x.abs()
    return torch.where(over, torch.nextafter(f, torch.zeros_like(f)), f).to(F64)


def nudge(x: torch.Tensor, ulps: int) -> torch.Tensor:
    """fp32 values moved ``ulps`` ulps (toward +inf if positive), as float64."""
    f = x.to(F32)
    target = torch.full_like(f, math.inf if ulps > 0 else -math.inf)
    for _ in range(abs(ulps)):
        f = torch.where(torch.isfinite(f) & (f != 0), torch.nextafter(f, target), f)
    return f.to(F64)


def ex2(x: torch.Tensor, a: Arith) -> torch.Tensor:
    y = nudge(f32(torch.exp2(x)), a.ex2_ulps)
    return torch.where(y.abs() < FTZ, torch.zeros_like(y), y)  # .ftz


def lg2(x: torch.Tensor, a: Arith) -> torch.Tensor:
    return nudge(f32(torch.log2(x)), a.lg2_ulps)


def rcp(x: torch.Tensor, a: Arith) -> torch.Tensor:
    return nudge(f32(1.0 / x), a.rcp_ulps)


def mma_step(acc: torch.Tensor, a: torch.Tensor, b: torch.Tensor, tc_bits: int) -> torch.Tensor:
    """One k16 tensor-core step: acc (..., M, N) + a (..., M, K) @ b (..., K, N), fp32 result."""
    if tc_bits == 0:
        return f32(acc + torch.matmul(a, b))
    terms = torch.cat([acc[..., None], a[..., :, None, :] * b.transpose(-1, -2)[..., None, :, :]], -1)
    big = terms.abs().amax(-1, keepdim=True)
    _, e = torch.frexp(torch.where(big > 0, big, torch.ones_like(big)))  # big = f * 2^e, f in [0.5, 1)
    grid = torch.ldexp(torch.ones_like(big), (e - tc_bits).to(torch.int32))
    s = (torch.trunc(terms / grid) * grid).sum(-1)  # exact: every term on the grid, ~30 bits in all
    return rz32(torch.where(big[..., 0] > 0, s, torch.zeros_like(s)))


def emulate_attention(
    q,
    k,
    v,
    *,
    scale,
    causal=False,
    bottom_right=False,
    window_left=-1,
    window_right=-1,
    bias=None,
    sinks=None,
    q_lens=None,
    kv_lens=None,
    io_dtype=torch.float16,
    arith: Arith = Arith(),
    plant: Plant = Plant(),
    mask_padded: bool = True,
    lead: int = 0,
    sink_natural: bool = True,
):
    """Dense logical (B,H,S,D) inputs (as ``reference.attention``) -> O in the
    I/O dtype (B,Hq,SQ,Dv), LSE fp32 (B,Hq,SQ). ``mask_padded``: whether
    the kernel compiles the per-element padding mask (only ``Plant.drop``
    cares: the mutant it mirrors lives in that mask)."""
    b, h_q, s_q, d = q.shape
    h_kv, s_kv, d_v = k.shape[1], k.shape[2], v.shape[-1]
    g = h_q // h_kv
    from reference.attention import _lens

    n_q, n_kv = _lens(q_lens, b, s_q, "cpu"), _lens(kv_lens, b, s_kv, "cpu")
    q_live = torch.arange(s_q)[None, :] < n_q[:, None]
    kv_live = torch.arange(s_kv)[None, :] < n_kv[:, None]
    qz = torch.where(q_live[:, None, :, None], q.to(F64), 0.0)
    spread = (lambda x: x.repeat(1, g, 1, 1)) if plant.kv_heads_repeated else (lambda x: x.repeat_interleave(g, 1))
    kz = spread(torch.where(kv_live[:, None, :, None], k.to(F64), 0.0))
    vz = spread(torch.where(kv_live[:, None, :, None], v.to(F64) + plant.v_offset, 0.0))
    sign = (scale > 0) - (scale < 0)
    ks = abs(scale) if scale else 1.0
    c = f32(torch.tensor(ks * LOG2E, dtype=F64))
    if plant.scale_factor != 1.0:
        c = f32(c * plant.scale_factor)
    if plant.scale_io:
        c = c.to(io_dtype).to(F64)
    inv = f32(torch.tensor(1.0 / ks, dtype=F64))

    vis = masks.visibility(s_q, s_kv, n_q, n_kv, causal=causal, bottom_right=bottom_right, window_left=window_left, window_right=window_right).expand(
        b, h_q, s_q, s_kv
    )
    if plant.drop is not None:
        vis = vis & ~plant.drop(vis, n_kv, mask_padded)
    if lead:  # ``lead`` invisible zero keys in front: the tiles start ``lead`` keys earlier
        assert bias is None, "lead keys with a bias"
        kz, vz = (torch.cat([torch.zeros(x.shape[:2] + (lead, x.shape[-1]), dtype=F64), x], 2) for x in (kz, vz))
        vis = torch.cat([torch.zeros(vis.shape[:-1] + (lead,), dtype=torch.bool), vis], -1)
        s_kv += lead
    bias32 = None
    if bias is not None:
        bias32 = bias.to(F32).to(F64)
        bias32 = bias32[:1].expand(b, h_q, s_q, s_kv) if bias32.shape[0] == 1 else bias32  # the kernel reads batch 0; the suite's bias is [1, ...]

    n_tiles = -(-s_kv // TILE_N)
    m_run = torch.full((b, h_q, s_q), -math.inf, dtype=F64)
    lanes = torch.zeros((b, h_q, s_q, 4), dtype=F64)
    acc = torch.zeros((b, h_q, s_q, d_v), dtype=F64)
    tiles_seen = torch.zeros((b, h_q, s_q), dtype=torch.int64)
    row_tiles = torch.zeros((b, h_q, s_q), dtype=torch.int64)
    for t in range(n_tiles):
        row_tiles += vis[..., t * TILE_N : (t + 1) * TILE_N].any(-1)
    for t in reversed(range(n_tiles)):
        lo, hi = t * TILE_N, min(s_kv, (t + 1) * TILE_N)
        width = hi - lo
        vt = vis[..., lo:hi]
        active = vt.any(-1)
        if not bool(active.any()):
            continue
        # ---- S = q.k, k16 steps (columns past d are the envelope's zeros: exact no-ops)
        s = torch.zeros((b, h_q, s_q, width), dtype=F64)
        for c0 in range(0, d, MMA_K):
            s = mma_step(s, qz[..., c0 : c0 + MMA_K], kz[..., lo:hi, c0 : c0 + MMA_K].transpose(-1, -2), arith.tc_bits)
        s = s * sign
        if bias32 is not None:
            s = f32(s + f32(bias32[..., lo:hi] * inv))
        s = torch.where(vt, s, torch.full_like(s, -math.inf))
        # ---- online softmax
        m_iter = f32(s.amax(-1) * c)
        m_prev = m_run
        update = f32(m_iter - m_prev) > RESCALE_LOG2
        m_new = torch.where(active & update, m_iter, m_prev)
        alpha = torch.where(active, ex2(f32(m_prev - m_new), arith), torch.ones_like(m_prev))
        alpha = torch.where(torch.isnan(alpha), torch.ones_like(alpha), alpha)
        x = f32(s * c - m_new[..., None]) if arith.fma else f32(f32(s * c) - m_new[..., None])
        p = torch.where(vt, ex2(x, arith), torch.zeros_like(x))
        if plant.drift != 1.0:
            first = (tiles_seen == 0) & (row_tiles >= 2)
            p = torch.where(first[..., None], f32(p * plant.drift), p)
        tiles_seen += active
        pad = TILE_N - width
        pl = torch.cat([p, torch.zeros(p.shape[:-1] + (pad,), dtype=F64)], -1) if pad else p
        lane_p = pl.view(b, h_q, s_q, 8, 4, 2)  # (n_frag k, lane, column a/b)
        l_iter = torch.zeros_like(lanes)
        for kk in range(LANE_TERMS // 2):
            for sub in range(2):
                l_iter = f32(l_iter + lane_p[..., kk, :, sub])
        ph = p
        if plant.p_round is not None:
            ph = ph.to(plant.p_round).to(F64)
        ph = ph.to(io_dtype).to(F64)
        acc = torch.where(active[..., None], f32(acc * alpha[..., None]), acc)
        lanes = torch.where(active[..., None], f32(f32(lanes * alpha[..., None]) + l_iter), lanes)
        if plant.row_sum_io:
            lanes = torch.where(active[..., None], lanes.to(io_dtype).to(F64), lanes)
        for c0 in range(0, width, MMA_K):
            acc = mma_step(acc, ph[..., c0 : c0 + MMA_K], vz[..., lo + c0 : lo + min(width, c0 + MMA_K), :], arith.tc_bits)
        m_run = torch.where(active, m_new, m_run)
    l = f32(f32(lanes[..., 0] + lanes[..., 2]) + f32(lanes[..., 1] + lanes[..., 3]))
    if sinks is not None:
        # sink_natural: the kernel multiplies by fp32 log2(e); otherwise the buffer is base-2 already.
        s2 = sinks.to(F32).to(F64).reshape(1, h_q, 1)
        s2 = (f32(s2 * LOG2E_F32) if sink_natural != plant.sink_units_flipped else s2).expand_as(m_run)
        lift = torch.maximum(m_run, s2)
        os_ = ex2(f32(m_run - lift), arith)
        l = f32(f32(l * os_) + ex2(f32(s2 - lift), arith))
        acc = f32(acc * os_[..., None])
        m_run = lift
    lse = f32(plant.ln2 * f32(m_run + lg2(l, arith)))
    lse = torch.where(l > 0, lse, torch.full_like(lse, -math.inf))
    if plant.lse_log2:
        lse = f32(lse * LOG2E_F32)
    inv_l = torch.where(l > 0, rcp(torch.where(l > 0, l, torch.ones_like(l)), arith), torch.zeros_like(l))
    if q_lens is not None:
        row = q_live[:, None, :]
        lse = torch.where(row, lse, torch.full_like(lse, -math.inf))
        inv_l = torch.where(row, inv_l, torch.zeros_like(inv_l))
    o = f32(acc * inv_l[..., None]).to(io_dtype)
    return o, lse.to(F32)


def emulate_case(case, tensors, arith: Arith = Arith(), plant: Plant = Plant()) -> Tuple[torch.Tensor, torch.Tensor]:
    """(O, LSE) of the emulated kernel for a Case, in the layouts of
    ``ground.data.make_outputs`` (THD rows outside every sequence: 0)."""
    io = getattr(torch, case.dtype)
    sinks = tensors.sinks
    if sinks is not None and plant.sink_stride_ignored:
        sinks = sinks.as_strided(sinks.shape, (1,), sinks.storage_offset())
    common = dict(
        **mask_args(case),
        sinks=sinks,
        io_dtype=io,
        arith=arith,
        plant=plant,
        sink_natural=not case.sink_log2,
    )
    if not case.is_thd:  # is_even_mn (SQ % 128, SKV % 64) and seq_kv_lens decide the padding mask
        padded = bool(case.s_q % 128 or case.s_kv % TILE_N or case.seq_kv_lens is not None)
        kv_lens = tensors.seq_kv_lens
        if plant.kv_lens_of_batch0 and kv_lens is not None:
            kv_lens = kv_lens[:1].expand(case.batch)
        q, k, v = tensors.q, tensors.k, tensors.v
        if case.rope:  # rotated in shared memory in fp32, stored back in the I/O dtype (reference.attention.rotate)
            from reference.attention import rope_width

            w = rope_width(case)
            q, k = (
                _rope(q, tensors.rope, plant, w, arith),
                (torch.nn.functional.pad(k, (0, w - k.shape[-1])) if plant.rope_q_only else _rope(k, tensors.rope, plant, w, arith)),
            )
        if plant.neighbour_head_v_min_keys and case.s_kv >= plant.neighbour_head_v_min_keys:  # KV head j >= 1: first V from head j - 1
            v = v.clone()
            v[:, 1:, 0] = tensors.v[:, :-1, -1]
        if plant.neighbour_v_min_keys:  # batch entry b >= 1: its first key's V from entry b - 1's last row
            v = v.clone()
            for b, n in enumerate(case.kv_lengths()):
                if b and n >= plant.neighbour_v_min_keys:
                    v[b, :, 0] = tensors.v[b - 1, :, -1]
        return _noisy(emulate_attention(q, k, v, bias=tensors.bias, q_lens=tensors.seq_q_lens, kv_lens=kv_lens, mask_padded=padded, **common), plant)
    t_q, h_q, _ = tensors.q.shape
    o = torch.zeros((t_q, h_q, tensors.v.shape[-1]), dtype=io)
    lse = torch.zeros((h_q, t_q), dtype=F32)
    # The offsets as the kernel reads them: from the cu_seqlens buffers, in their dtype.
    read = (lambda t: t.view(torch.int32)[: t.shape[0]].tolist()) if plant.prefix_as_int32 else (lambda t: t.tolist())  # noqa: E731
    cu_q, cu_kv = read(tensors.cu_q), read(tensors.cu_kv)
    for s, q0, q1, k0, k1 in sequence_spans(cu_q, cu_kv, case.n_seq):
        v = tensors.v[k0:k1].clone()
        if plant.neighbour_v_min_keys and s > 0 and k1 - k0 >= plant.neighbour_v_min_keys:
            v[0] = tensors.v[k0 - 1]
        lead = k0 % TILE_N if plant.absolute_kv_tiles else 0
        os_, ls_ = emulate_attention(seq_as_batch(tensors.q[q0:q1]), seq_as_batch(tensors.k[k0:k1]), seq_as_batch(v), lead=lead, **common)
        o[q0:q1] = batch_as_seq(os_)
        lse[:, q0:q1] = ls_[0]
    return _noisy((o, lse), plant)


_LAUNCHES = [0]


def _noisy(out, plant: Plant):
    """``Plant.nondeterministic``: every other call, finite LSE one fp32 ulp up."""
    o, lse = out
    if plant.nondeterministic:
        _LAUNCHES[0] += 1
        if _LAUNCHES[0] % 2:
            lse = torch.where(torch.isfinite(lse), torch.nextafter(lse, torch.full_like(lse, math.inf)), lse)
    return o, lse


def fused_rotate(x, angles):
    """RoPE as an FFMA-contracting compiler may emit it: x_lo c - fl32(x_hi s)
    and x_hi c + fl32(x_lo s), one rounding each (x * c is exact in float64:
    11 or 8 bits times 24), then the I/O rounding; the table as rotate's."""
    d2 = x.shape[-1] // 2
    a = angles[: x.shape[-2], :d2].to(F32)
    c, s = torch.cos(a).to(F64), torch.sin(a).to(F64)
    lo, hi = x[..., :d2].to(F64), x[..., d2:].to(F64)
    out = torch.cat((f32(lo * c - f32(hi * s)), f32(hi * c + f32(lo * s))), dim=-1)
    return out.to(F32).to(x.dtype)


def _rope(x, angles, plant: Plant, width: int, arith: Arith = Arith()):
    from reference.attention import rotate

    x = torch.nn.functional.pad(x, (0, width - x.shape[-1]))
    if not plant.rope_interleaved:
        return fused_rotate(x, angles) if arith.fma else rotate(x, angles)
    # The planted convention: pairs (2i, 2i+1), de-interleaved around the true rotation.
    d = x.shape[-1]
    order = torch.cat([torch.arange(0, d, 2), torch.arange(1, d, 2)])
    return rotate(x[..., order], angles)[..., torch.argsort(order)]


# ------------------------------------------------------------ drop plants
def drop_key(index: int, min_keys: int = 1):
    """Drop key ``index`` (counted from the row's first visible key) from every
    row with at least ``min_keys`` visible keys."""

    def drop(vis, n_kv, padded):
        order = torch.cumsum(vis.to(torch.int64), -1) - 1
        return vis & (order == index) & (vis.sum(-1, keepdim=True) >= min_keys)

    return drop


def drop_last_key_of_long_rows(vis, n_kv, padded):
    """The ``precision_long_row_drops_last_key`` mutant: with the padding mask
    compiled in, key eff_skv - 1 is masked when eff_skv > 2 tiles."""
    j = torch.arange(vis.shape[-1])
    n = n_kv.view(-1, 1, 1, 1)
    return vis & bool(padded) & (j == n - 1) & (n > 2 * TILE_N)


# The emulated twins of the catalogue's precision mutants (kernels/mutants.py),
# and the other planted errors of the power tests, by name.
TWINS = {
    "precision_row_sum_in_io_dtype": Plant(row_sum_io=True),
    "precision_ln2_four_digits": Plant(ln2=float(torch.tensor(0.6931, dtype=F32))),
    "precision_scale_in_io_dtype": Plant(scale_io=True),
    "precision_long_row_drops_last_key": Plant(drop=drop_last_key_of_long_rows),
}
PLANTS = {
    **TWINS,
    "scale_0.3%": Plant(scale_factor=1.003),
    "drift_1%_first_tile": Plant(drift=1.01),
    "p_through_e4m3": Plant(p_round=torch.float8_e4m3fn),
    "p_through_bf16": Plant(p_round=torch.bfloat16),
    "lse_log2_units": Plant(lse_log2=True),
}


# ---------------------------------------------------------------- adapter
class EmulatedAdapter:
    """A kernel adapter (``kernels.base.Adapter``) backed by the emulation, for
    running the numerics property on the CPU (tests only)."""

    name = "emulated"

    def __init__(self, arith: Arith = Arith(), plant: Plant = Plant()):
        self.arith, self.plant = arith, plant

    def run(self, case, inputs, outputs=None, *, initialize_outputs=True):
        from kernels.base import KernelResult

        # stats_log2 (Case.lse_log2): the kernel multiplies its natural LSE by fp32 log2(e);
        # a planted lse_log2 bug flips the units the Case asks for.
        plant = dataclasses.replace(self.plant, lse_log2=self.plant.lse_log2 != case.lse_log2)
        o, lse = emulate_case(case, inputs.to("cpu"), self.arith, plant)
        if outputs is not None and not case.has_lse:
            # No Stats output: O alone comes back; the caller's LSE buffer is untouched
            # (unless the planted bug stores anyway).
            if self.plant.lse_store_without_stats:
                outputs[1][...] = lse if not case.is_thd else lse.to(outputs[1].device)
            if case.is_thd:
                live = inputs.q_live.to(outputs[0].device)
                outputs[0][live] = o[live.cpu()].to(outputs[0].device)
                o = outputs[0]
            return KernelResult(o, outputs[1], notes={"adapter": "emulated", "arith": repr(self.arith)})
        if case.is_thd and outputs is not None:  # only the live rows are stored
            buf_o, buf_lse = outputs
            store = buf_lse
            if self.plant.lse_compact_store:  # the stores miss the layout; the caller reads its own
                store = buf_lse.as_strided(buf_lse.shape, (buf_lse.shape[1], 1), buf_lse.storage_offset())
            live = inputs.q_live.to(buf_o.device)
            buf_o[live] = o[live.cpu()].to(buf_o.device)
            store[:, live] = lse[:, live.cpu()].to(buf_lse.device)
            o, lse = buf_o, buf_lse
        return KernelResult(o, lse, notes={"adapter": "emulated", "arith": repr(self.arith)})

    def compile_only(self, case):
        from kernels.base import CompileDelta

        return CompileDelta()


# ------------------------------------------------------------ the backward
@dataclass(frozen=True)
class BwdPlant:
    """Deliberate backward bugs for the backward properties' power tests."""

    gqa_one_head: bool = False  # dK/dV of a kv head from its first q head only (no group sum)
    mask_off: bool = False  # the causal/window mask not applied when P is recomputed
    ds_unscaled: bool = False  # dS = dS' (the softmax scale not applied to dQ/dK)
    dsink_log2: bool = False  # dSink in log2 units (times log2 e)
    dsink_exp2_natural: bool = False  # the sink weight as ex2(sink - LSE): the natural-log argument without its log2 e factor
    dbias_batch0: bool = False  # a broadcast bias' gradient from batch entry 0 only
    dbias_per_batch: bool = False  # a broadcast bias' gradient not reduced over the batch (each entry overwrites: the last one wins)
    dbias_io: bool = False  # dBias rounded to the I/O dtype before it is stored (one I/O ulp off an fp32 dBias)
    dbias_p_io: bool = False  # dBias (dS') formed from P rounded to the I/O dtype (dV's operand) instead of the fp32 sP
    dbias_from_ds: bool = False  # dBias = round_io(scale dS') / scale: dQ/dK's rounded dS unscaled
    dbias_scaled: bool = False  # dBias = scale dS' (the softmax scale applied)
    dq_relay_drop: bool = False  # dQ misses the last KV tile's contribution (a relay that stops early)
    noisy: bool = False  # each launch perturbs dQ by one ulp somewhere (a non-deterministic reduction)
    # Tails (properties.backward_tails):
    reads_padded_kv: bool = False  # dense K/V rows past seq_kv_len enter dP and dQ as handed, masked only by P = 0 (b16:378, 385)
    padded_q_rows_unwritten: bool = False  # dense dQ rows past seq_q_len never stored (the caller's bytes stay)
    pad_columns_written: bool = False  # the gradient stores cover the whole row pitch (bshd_padded pad columns zeroed)


def emulate_backward(case, inputs, o, lse, do, plant: BwdPlant = BwdPlant(), launch: int = 0):
    """The SM80 backward's arithmetic on the CPU: P recomputed in fp32 from the
    handed LSE, rounded to the I/O dtype for dV; dP, D, dS' in fp32; dS =
    scale dS' rounded to the I/O dtype for dK/dQ; fp32 accumulation; GQA
    partials rounded per q head, summed, rounded; dBias fp32; dSink fp32.
    Returns the gradients in the suite's layouts: dense (B, H, S, D); THD
    packed (T, H, D), each sequence as a batch of one (``_emulate_thd``)."""
    if case.is_thd:
        return _emulate_thd(case, inputs, o, lse, do, plant, launch)
    return _emulate_dense(case, inputs, o, lse, do, plant, launch)


def _emulate_thd(case, inputs, o, lse, do, plant: BwdPlant, launch: int):
    """The THD backward per sequence, as the kernel's CTAs see one: its tokens
    from the cu_seqlens offsets, a batch of one with no padding; dSink summed
    over the sequences (fp32 atomics, any order). Rows outside every sequence
    come back 0 (never judged); a sequence with no Q row leaves its keys' dK/dV 0."""
    from types import SimpleNamespace

    io = TORCH_DTYPES[case.dtype]
    cu_q, cu_kv = case.cu_seqlens("q"), case.cu_seqlens("kv")
    out = {
        "dq": torch.zeros((case.t_q, case.h_q, case.d_qk), dtype=io),
        "dk": torch.zeros((case.t_kv, case.h_kv, case.d_qk), dtype=io),
        "dv": torch.zeros((case.t_kv, case.h_kv, case.d_v), dtype=io),
    }
    if inputs.sinks is not None:
        out["dsink"] = torch.zeros((case.h_q,), dtype=torch.float32)
    for _, q0, q1, k0, k1 in sequence_spans(cu_q, cu_kv, case.n_seq):
        one = SimpleNamespace(
            q=seq_as_batch(inputs.q[q0:q1]),
            k=seq_as_batch(inputs.k[k0:k1]),
            v=seq_as_batch(inputs.v[k0:k1]),
            bias=None,
            sinks=inputs.sinks,
            seq_q_lens=None,
            seq_kv_lens=None,
        )
        got = _emulate_dense(case, one, seq_as_batch(o[q0:q1]), lse[:, q0:q1].unsqueeze(0), seq_as_batch(do[q0:q1]), plant, launch)
        out["dq"][q0:q1] = batch_as_seq(got["dq"])
        out["dk"][k0:k1], out["dv"][k0:k1] = batch_as_seq(got["dk"]), batch_as_seq(got["dv"])
        if "dsink" in got:
            out["dsink"] += got["dsink"]
    return out


def _emulate_dense(case, inputs, o, lse, do, plant: BwdPlant, launch: int):
    """``emulate_backward`` of a dense Case (or of one THD sequence as a batch of one)."""
    from reference.attention import attention

    io = TORCH_DTYPES[case.dtype]
    f32 = torch.float32
    mask = dict(
        causal=case.causal and not plant.mask_off,
        bottom_right=case.bottom_right,
        window_left=-1 if plant.mask_off else case.window_left,
        window_right=case.window_right,
    )
    _, _, it = attention(
        inputs.q,
        inputs.k,
        inputs.v,
        scale=case.softmax_scale,
        bias=inputs.bias,
        sinks=inputs.sinks,
        q_lens=inputs.seq_q_lens,
        kv_lens=inputs.seq_kv_lens,
        compute_dtype=torch.float64,
        internals=True,
        **mask,
    )
    g = it.group
    lse32 = lse.to(f32)
    live = it.q_live[:, None, :, None] & torch.isfinite(lse32)[..., None]
    vis = torch.isfinite(it.logits) & live
    logits = torch.where(vis, it.logits, torch.zeros_like(it.logits)).to(f32)
    p = torch.where(vis, torch.exp(logits - torch.where(torch.isfinite(lse32), lse32, 0.0)[..., None]), torch.zeros((), dtype=f32))
    p = _ftz(p)  # ex2.approx.ftz (b16:858-861)
    dof = torch.where(it.q_live[:, None, :, None], do.to(f32), 0.0)
    of = torch.where(it.q_live[:, None, :, None], o.to(f32), 0.0)
    # The reference's operands hold 0 in dead rows: the kernel's zero-filled loads (b16:586, 600, 703, 721).
    kk, vv = (inputs.k, inputs.v) if plant.reads_padded_kv else (it.k, it.v)
    q, k, v = it.q.to(io).to(f32), kk.to(io).to(f32).repeat_interleave(g, 1), vv.to(io).to(f32).repeat_interleave(g, 1)
    dp = dof @ v.transpose(-1, -2)
    d = (dof * of).sum(-1)
    dsp = (dp - d[..., None]) * p
    scale = 1.0 if plant.ds_unscaled else case.softmax_scale
    ds = (scale * dsp).to(io).to(f32)
    dv_h = p.to(io).to(f32).transpose(-1, -2) @ dof
    dk_h = ds.transpose(-1, -2) @ q
    if plant.dq_relay_drop and ds.shape[-1] > 64:
        ds = ds.clone()
        ds[..., 64 * ((ds.shape[-1] - 1) // 64) :] = 0
    dq = (ds @ k).to(io)
    if plant.noisy and launch == 1:
        dq = dq.clone()
        dq.view(-1).view(torch.int16)[0] ^= 1  # one ulp of one element

    def fold(x):
        b, h, s, dd = x.shape
        if g == 1:
            return x.to(io)
        parts = x.to(io).to(f32).view(b, h // g, g, s, dd)
        return (parts[:, :, 0] if plant.gqa_one_head else parts.sum(2)).to(io)

    out = {"dq": dq, "dk": fold(dk_h), "dv": fold(dv_h)}
    if inputs.bias is not None:
        out["dbias"] = _dbias(case, dsp, p, dp, d, plant)
    if inputs.sinks is not None:
        sink = inputs.sinks.to(f32).view(1, -1, 1)
        row = it.q_live[:, None, :] & torch.isfinite(lse32)
        weight = torch.exp2 if plant.dsink_exp2_natural else torch.exp
        term = torch.where(row, weight(sink - torch.where(torch.isfinite(lse32), lse32, 0.0)) * d, torch.zeros((), dtype=f32))
        out["dsink"] = -term.sum((0, 2)) * (1.4426950408889634 if plant.dsink_log2 else 1.0)
    return out


def _dbias(case, dsp, p, dp, d, plant: BwdPlant):
    """dBias as bprop_f16.py forms it: the fp32 dS' = (dP - D) * P of each cell
    from the fp32 P in sP (b16:947-955: the UNSCALED dS', bias adds after the
    scale), atom.global.add.f32 into the fp32 workspace accumulator (b16:956-977;
    a broadcast bias has batch stride 0, so the batch reduces there,
    b16:399-403), zeroed first and cast once to the dBias buffer's dtype by
    _copy_aux (prepared_host.py:171-184, 316-318, 417, 524; the caller's copy_ here).
    The plants are the conventions a kernel could get wrong instead."""
    io = TORCH_DTYPES[case.dtype]
    if plant.dbias_p_io:
        dsp = (dp - d[..., None]) * p.to(io).to(torch.float32)
    if plant.dbias_from_ds:
        dsp = (case.softmax_scale * dsp).to(io).to(torch.float32) / case.softmax_scale
    if plant.dbias_scaled:
        dsp = case.softmax_scale * dsp
    dsp = _ftz(dsp)  # atom.add.f32 flushes a subnormal addend ...
    if case.bias_batch == 1 and not (plant.dbias_batch0 or plant.dbias_per_batch):
        db = torch.zeros_like(dsp[:1])
        for b in range(dsp.shape[0]):  # one atomic add per batch entry (in some order), ...
            db = _ftz(db + dsp[b : b + 1])  # ... and a subnormal sum
    elif case.bias_batch == 1:
        db = dsp[:1] if plant.dbias_batch0 else dsp[-1:]
    else:
        db = dsp
    return db.to(io).to(torch.float32) if plant.dbias_io else db


def _ftz(x: torch.Tensor) -> torch.Tensor:
    """Flush to zero (sign-preserving) below fp32's normal range."""
    return torch.where(x.abs() < 2.0**-126, x * 0.0, x)


class EmulatedBackward(EmulatedAdapter):
    """EmulatedAdapter with a backward (dense and THD Cases), for the backward properties on the CPU."""

    supports = frozenset({"caller-outputs"})  # no THD host: no "no-init", no "thd-addressing"

    def __init__(self, arith: Arith = Arith(), plant: Plant = Plant(), bwd: BwdPlant = BwdPlant()):
        super().__init__(arith, plant)
        self.bwd, self.launches = bwd, 0

    def backward(self, case, inputs, o, lse, do, grads=None, *, initialize_outputs=True):
        from ground.data import body_storage
        from kernels.base import KernelResult

        got = emulate_backward(case, inputs.to("cpu"), o.cpu(), lse.cpu(), do.cpu(), self.bwd, self.launches)
        self.launches += 1
        if grads is not None:  # write into the caller's buffers, as the prepared entry does
            for name, t in got.items():
                if self.bwd.pad_columns_written and name in ("dq", "dk", "dv"):
                    body_storage(grads[name]).zero_()
                if self.bwd.padded_q_rows_unwritten and name == "dq":
                    live = inputs.q_live.to(t.device)[:, None, :, None].expand(t.shape)
                    grads[name][live] = t[live].to(grads[name].dtype)
                    continue
                grads[name].copy_(t)
            got = {name: grads[name] for name in got}
        return KernelResult(o, lse, notes={"adapter": "emulated", "direction": "bwd"}, grads=got)
