"""A CPU emulation of the sm90 family's forward arithmetic (the native Hopper
D512 template), for checking its error model (``ground.tolerances.
sm90_kernel_bounds``) without a GPU. Dense Cases only.

It follows the template's operations (site-packages
``cudnn/sdpa/fwd/kernels/sm90/prefill_d512_f16.py``, ``pf``;
``_common_hopper.py``, ``ch``), not its code: S from k16 tensor-core steps
(``Arith.tc_bits`` as in tests/kernel_emulation.py); a zero scale scores every
visible key 0; KV tiles of 64 walked from the last; the exact running
extremum of the raw scores (max for scale >= 0, min for scale < 0); the
narrow exponent S*c - anchor*c with c = fl32(fl32(scale) fl32(log2 e)), or
the wide one fl32((S - anchor) * f64(scale) log2 e) for a negative scale;
alpha = ex2 of the anchor's move; four lanes each keeping ONE running fp32
sum across all tiles (total * alpha, then its 16 p in column order); P rounded
to the I/O dtype for P@V; O *= alpha before each P@V; the 2-step butterfly;
the FP64 finalization (with or without sinks); O = fl_io(acc * inv); Stats
times fl32(log2 e) in log2 units. ex2 / lg2 / rcp: correctly rounded, then
moved ``Arith.*_ulps`` ulps, flushed below 2^-126.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ground.tolerances import LANE_TERMS, MMA_K, TILE_N
from reference import masks
from tests.kernel_emulation import F32, F64, Arith, f32, lg2, mma_step, rcp
from tests.kernel_emulation import ex2 as _ex2

LOG2E = math.log2(math.e)
LOG2E_F32 = float(torch.tensor(LOG2E, dtype=F32))
LN2 = math.log(2.0)
LN2_F32 = float(torch.tensor(LN2, dtype=F32))


@dataclass(frozen=True)
class Sm90Plant:
    """Deliberate errors (all off by default): the power of the sm90 bound."""

    o_ulps: int = 0  # O moved this many I/O ulps (away from zero) on every nonzero element
    lse_ulps: int = 0  # LSE moved this many fp32 ulps up on every finite row
    c_in_io: bool = False  # c held in the I/O dtype (a precision slip)
    # Tails (stores into the caller's buffers, ``EmulatedSm90Adapter(store=True)``):
    reads_dead_kv: bool = False  # K/V rows past seq_kv_len enter P@V as stored (P = 0 times the NaN poison)
    pad_columns_written: bool = False  # the O store covers the whole row pitch (bshd_padded pad columns zeroed)


def ex2(x: torch.Tensor, a: Arith) -> torch.Tensor:
    """ex2.approx.ftz: 1 exactly at +-0 (what the model assumes and the
    kernel relies on, pf:503-505), else within ``a.ex2_ulps``."""
    return torch.where(x == 0, torch.ones_like(x), _ex2(x, a))


def _quad_sum(lanes: torch.Tensor) -> torch.Tensor:
    """The butterfly (offsets 1 then 2, ch:112-125): (l0 + l1) + (l2 + l3)."""
    return f32(f32(lanes[..., 0] + lanes[..., 1]) + f32(lanes[..., 2] + lanes[..., 3]))


def _finalize(anchor, scale32, c, total, sink, a: Arith):
    """(inv, LSE natural) of normalize_row / normalize_sink_row (ch:152-195)."""
    live = total > 0
    safe = torch.where(live, total, torch.ones_like(total))
    if sink is None:
        inv = rcp(safe, a)
        if scale32 > 0:
            lse = f32(f32(f32(anchor * c) + lg2(safe, a)) * LN2_F32)
        elif scale32 == 0:
            lse = f32(lg2(safe, a) * LN2_F32)
        else:
            lse = f32(anchor * scale32 + lg2(safe, a) * LN2)
        return torch.where(live, inv, torch.zeros_like(inv)), torch.where(live, lse, torch.full_like(lse, -math.inf))
    peak = torch.zeros_like(anchor) if scale32 == 0 else anchor * scale32
    peak = torch.where(live, peak, torch.zeros_like(peak))
    up = peak >= sink
    arg = f32(torch.where(up, sink - peak, peak - sink) * LOG2E).clamp(min=-1024.0)
    e = ex2(arg, a)
    extra, shrink = torch.where(up, e, torch.ones_like(e)), torch.where(up, torch.ones_like(e), e)
    mass = f32(f32(total * shrink) + extra)
    inv = f32(shrink * rcp(mass, a))
    lse = f32(torch.where(up, peak, sink) + lg2(mass, a) * LN2)
    return torch.where(live, inv, torch.zeros_like(inv)), torch.where(live, lse, sink.expand_as(lse))


def emulate_sm90(case, tensors, arith: Arith = Arith(), plant: Sm90Plant = Sm90Plant()):
    """(O in the I/O dtype (B,Hq,SQ,Dv), LSE fp32 (B,Hq,SQ)) of the emulated
    sm90 kernel for a dense Case on ``tensors`` (ground.data.make_inputs)."""
    if case.is_thd:
        raise ValueError("the sm90 emulation runs dense Cases only")
    io = getattr(torch, case.dtype)
    q, k, v = tensors.q.to(F64), tensors.k.to(F64), tensors.v.to(F64)
    b, h_q, s_q, d = q.shape
    h_kv, s_kv, d_v = k.shape[1], k.shape[2], v.shape[-1]
    g = h_q // h_kv
    from reference.attention import _lens

    n_q, n_kv = _lens(tensors.seq_q_lens, b, s_q, "cpu"), _lens(tensors.seq_kv_lens, b, s_kv, "cpu")
    q_live = torch.arange(s_q)[None, :] < n_q[:, None]
    kv_live = torch.arange(s_kv)[None, :] < n_kv[:, None]
    qz = torch.where(q_live[:, None, :, None], q, 0.0)
    kz = torch.where(kv_live[:, None, :, None], k, 0.0).repeat_interleave(g, 1)
    vz = (v if plant.reads_dead_kv else torch.where(kv_live[:, None, :, None], v, 0.0)).repeat_interleave(g, 1)
    scale32 = float(torch.tensor(case.softmax_scale, dtype=F32))
    c = f32(torch.tensor(scale32 * LOG2E_F32, dtype=F64))  # pf:920
    if plant.c_in_io:
        c = c.to(io).to(F64)
    c_wide = scale32 * LOG2E  # pf:921
    sign = (scale32 > 0) - (scale32 < 0)
    vis = masks.visibility(
        s_q, s_kv, n_q, n_kv, causal=case.causal, bottom_right=case.bottom_right, window_left=case.window_left, window_right=case.window_right
    ).expand(b, h_q, s_q, s_kv)
    n_tiles = -(-s_kv // TILE_N)
    anchor = torch.full((b, h_q, s_q), math.nan, dtype=F64)  # nan: not yet alive
    lanes = torch.zeros((b, h_q, s_q, 4), dtype=F64)
    acc = torch.zeros((b, h_q, s_q, d_v), dtype=F64)
    for t in reversed(range(n_tiles)):
        lo, hi = t * TILE_N, min(s_kv, (t + 1) * TILE_N)
        vt = vis[..., lo:hi]
        active = vt.any(-1)
        if not bool(active.any()):
            continue
        s = torch.zeros((b, h_q, s_q, hi - lo), dtype=F64)
        for c0 in range(0, d, MMA_K):
            s = mma_step(s, qz[..., c0 : c0 + MMA_K], kz[..., lo:hi, c0 : c0 + MMA_K].transpose(-1, -2), arith.tc_bits)
        if sign == 0:
            s = torch.zeros_like(s)  # pf:507-508
        # the exact extremum of the raw scores, history included (pf:531-536): max, or min for scale < 0
        way = -1.0 if sign < 0 else 1.0
        old = anchor
        first = torch.isnan(old)
        ext = (s * way).masked_fill(~vt, -math.inf).amax(-1)
        cur = torch.where(first, ext, torch.maximum(ext, old * way)) * way
        if sign < 0:  # wide (pf:560-571)
            x = f32((s - cur[..., None]) * c_wide)
            old_x = f32((old - cur) * c_wide)
        else:  # narrow (pf:573-575)
            sc = s * c if arith.fma else f32(s * c)  # ptxas may contract S*c - (anchor*c) into an FFMA
            x = f32(sc - f32(cur[..., None] * c))
            old_x = f32(f32(old - cur) * c)
        alpha = torch.where(first, torch.ones_like(cur), ex2(torch.nan_to_num(old_x), arith))
        p = torch.where(vt, ex2(torch.where(vt, x, torch.zeros_like(x)), arith), torch.zeros_like(x))
        upd = active
        pad = TILE_N - (hi - lo)
        pl = torch.cat([p, torch.zeros(p.shape[:-1] + (pad,), dtype=F64)], -1) if pad else p
        lane_p = pl.view(b, h_q, s_q, 8, 4, 2)  # (n_frag k, lane, column a/b)
        total = f32(lanes * alpha[..., None])  # pf:586: history first
        for kk in range(LANE_TERMS // 2):
            for sub in range(2):
                total = f32(total + lane_p[..., kk, :, sub])
        lanes = torch.where(upd[..., None], total, lanes)
        acc = torch.where(upd[..., None], f32(acc * alpha[..., None]), acc)  # O rescaled before P@V (pf:666)
        ph = p.to(io).to(F64)  # pf:598
        for c0 in range(0, hi - lo, MMA_K):
            acc = torch.where(upd[..., None], mma_step(acc, ph[..., c0 : c0 + MMA_K], vz[..., lo + c0 : lo + min(hi - lo, c0 + MMA_K), :], arith.tc_bits), acc)
        anchor = torch.where(upd, cur, anchor)
    total = _quad_sum(lanes)
    sink = tensors.sinks.to(F32).to(F64).view(1, h_q, 1) if tensors.sinks is not None else None
    inv, lse = _finalize(torch.nan_to_num(anchor), scale32, c, total, sink, arith)
    row = q_live[:, None, :]
    lse = torch.where(row, lse, torch.full_like(lse, -math.inf))  # trimmed rows (pf:1039-1041)
    inv = torch.where(row, inv, torch.zeros_like(inv))
    o = f32(acc * inv[..., None]).to(io)
    if case.lse_log2:
        lse = f32(lse * LOG2E_F32)  # pf:1099-1100
    lse = lse.to(F32)
    if plant.o_ulps:
        o = _ulps(o, plant.o_ulps)
    if plant.lse_ulps:
        lse = _ulps(lse, plant.lse_ulps)
    return o, lse


def _ulps(x: torch.Tensor, n: int) -> torch.Tensor:
    """Finite nonzero elements moved ``n`` ulps away from zero (in their own dtype)."""
    for _ in range(n):
        x = torch.where(torch.isfinite(x) & (x != 0), torch.nextafter(x, torch.sign(x) * math.inf), x)
    return x


class EmulatedSm90Adapter:
    """An sm90 adapter backed by the emulation (``Sm90Adapter.run``'s
    signature), for running the numerics property on the CPU (tests only)."""

    name = "emulated-sm90"

    def __init__(self, arith: Arith = Arith(), plant: Sm90Plant = Sm90Plant(), *, store: bool = False):
        self.arith, self.plant, self.store = arith, plant, store

    def run(self, case, inputs, outputs=None, *, initialize_outputs=True):
        """``store``: O and LSE written into the caller's buffers (their views),
        as the kernel's TMA / Stats stores do; else returned as new tensors."""
        from ground.data import body_storage
        from kernels.base import KernelResult

        o, lse = emulate_sm90(case, inputs.to("cpu"), self.arith, self.plant)
        notes = {"adapter": self.name, "arith": repr(self.arith)}
        if outputs is None:
            return KernelResult(o, lse, notes=notes)
        if not self.store:
            return KernelResult(o, lse if case.has_lse else outputs[1], notes=notes)  # no Stats: the LSE buffer untouched
        buf_o, buf_lse = outputs
        if self.plant.pad_columns_written:
            body_storage(buf_o).zero_()
        buf_o.copy_(o)
        if case.has_lse:
            buf_lse.copy_(lse)
        handed = {"q": inputs.q, "k": inputs.k, "v": inputs.v, "o": buf_o, **({"lse": buf_lse} if case.has_lse else {})}
        return KernelResult(buf_o, buf_lse, notes=notes, handed=handed)


class ReferenceSm90Thd:
    """A stand-in for the sm90 compile entry on THD Cases (the emulation runs
    dense Cases only): the float64 reference rounded into the caller's
    buffers, stored as the SM90 THD host stores (live rows only: nothing
    outside a sequence, the Stats pitch left alone) and noted as its one
    output mode (``Sm90Adapter``: THD_INIT). ``plant``: a deliberate fault,
    a store outside the live rows (``o_capacity``, ``stats_capacity``,
    ``stats_pitch``: the tails') or a result that depends on where a sequence
    sits in the pack (``by_position``: sequence j's O and LSE moved by j
    steps, as a per-sequence term read at the wrong index would)."""

    name = "reference-sm90-thd"

    def __init__(self, plant: str = ""):
        self.plant = plant

    def run(self, case, inputs, outputs=None, *, initialize_outputs=True):
        from ground.data import body_storage, make_outputs
        from kernels.base import KernelResult
        from kernels.sm90.adapter import THD_INIT
        from reference.attention import reference_for_case

        o, lse = outputs if outputs is not None else make_outputs(case, inputs.q.device)
        ref_o, ref_lse = reference_for_case(case, inputs, torch.float64)[:2]
        if self.plant == "by_position":
            cu = case.cu_seqlens("q")
            for j, (start, end) in enumerate(zip(cu[:-1], cu[1:])):
                ref_o[start:end] += j * 2.0**-7
                ref_lse[:, start:end] += j * 2.0**-7
        live = inputs.q_live
        o[live] = ref_o[live].to(o.dtype)
        if case.has_lse:
            lse[:, live] = ref_lse[:, live].to(lse.dtype)
        if self.plant == "o_capacity":  # the last tile's O store runs past cu_q[n_seq]
            o[~live] = 0
        elif self.plant == "stats_capacity" and case.has_lse:  # a Stats row stored past q_output_limit
            lse[:, ~live] = -math.inf
        elif self.plant == "stats_pitch" and case.has_lse:  # the Stats stores cover the whole head pitch
            body_storage(lse).zero_()
            lse[:, live] = ref_lse[:, live].to(lse.dtype)
        handed = {"q": inputs.q, "k": inputs.k, "v": inputs.v, "o": o, **({"lse": lse} if case.has_lse else {})}
        return KernelResult(o, lse, notes={"adapter": self.name, "initialize_outputs": THD_INIT}, handed=handed)
