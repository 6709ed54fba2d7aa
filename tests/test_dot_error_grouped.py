"""ground.tolerances.dot_error computes what does not wait on the carried
error for every k16 step at once, reads the grids that do not wait on each
other in one call and its grids off the float64 exponent field (fewer GPU
launches per step): its bound must be the per-step, per-grid formula's bit
for bit (a NaN, where an fp32 product overflows, as any NaN). The per-grid
formula is kept here as the oracle, and both run on the q/k of drawn Cases
(through the float64 reference, as kernel_bounds sees them) and on
adversarial operands (zeros, subnormal and overflowing products, a head dim
that is not a multiple of the k16 step)."""

from __future__ import annotations

from unittest import mock

import pytest
import torch
from hypothesis import HealthCheck, given, settings

from ground import tolerances as T
from ground.data import make_inputs
from reference.attention import reference_for_case
from strategies import dense_cases, thd_cases


def _grid(m):
    _, e = torch.frexp(m)
    return torch.where(m > 0, torch.ldexp(torch.ones_like(m), (e - T.TC_WINDOW_BITS).to(torch.int32)), torch.zeros_like(m))


def _lost(a, grid):
    if a.shape[-1] == 0:
        return torch.zeros_like(grid)
    g = grid.to(a.dtype)[..., None]
    return torch.where(g > 0, torch.fmod(a, torch.where(g > 0, g, torch.ones_like(g))), a).to(grid.dtype).sum(-1)


def per_grid_dot_error(q, k, group):
    """dot_error as it read each grid on its own (the oracle)."""
    b, h_kv, s_kv, d = k.shape
    qg = q.reshape(b, h_kv, -1, d)
    rows = qg.shape[2]
    out = torch.zeros(qg.shape[:3] + (s_kv,), dtype=q.dtype, device=q.device)
    kt = k.transpose(-1, -2)
    block = max(1, T.ROW_BLOCK // max(1, s_kv * T.MMA_K))
    k32 = kt.abs().to(torch.float32)
    for r0 in range(0, rows, block):
        qb = qg[:, :, r0 : r0 + block]
        q32 = qb.abs().to(torch.float32)
        err = torch.zeros(qb.shape[:3] + (s_kv,), dtype=q.dtype, device=q.device)
        acc = torch.zeros_like(err)
        for c0 in range(0, d, T.MMA_K):
            c1 = min(d, c0 + T.TC_HALF)
            a = q32[..., c0 : c0 + T.MMA_K][..., :, None, :] * k32[..., c0 : c0 + T.MMA_K, :].transpose(-1, -2)[..., None, :, :]
            a1, a2 = a[..., : c1 - c0], a[..., c1 - c0 :]
            mid = acc + torch.matmul(qb[..., c0:c1], kt[..., c0:c1, :])
            end = mid + torch.matmul(qb[..., c1 : c0 + T.MMA_K], kt[..., c1 : c0 + T.MMA_K, :])
            m1, m2 = T._amax(a1).to(q.dtype), T._amax(a2).to(q.dtype)
            c = acc.abs() + err
            c_term = (acc != 0).to(q.dtype)
            g1 = _grid(torch.maximum(c, torch.maximum(m1, m2)))
            r1 = _lost(a, g1) + c_term * g1
            one = r1 + _grid(end.abs() + err + r1)
            ga = _grid(torch.maximum(c, m1))
            ra = _lost(a1, ga) + c_term * ga
            ea = ra + _grid(mid.abs() + err + ra)
            gb = _grid(torch.maximum(mid.abs() + err + ea, m2))
            rb = _lost(a2, gb) + gb
            two = ea + rb + _grid(end.abs() + err + ea + rb)
            live = torch.maximum(m1, m2) > 0
            err = err + torch.where(live, torch.maximum(one, two), torch.zeros_like(one))
            acc = end
        out[:, :, r0 : r0 + block] = err
    return out.view(q.shape[0], q.shape[1], q.shape[2], s_kv)


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bit for bit, every NaN one value (its payload is the platform's)."""
    if a.shape != b.shape or a.dtype != b.dtype or not torch.equal(a.isnan(), b.isnan()):
        return False
    return torch.equal(a.nan_to_num(0.0).view(torch.int64), b.nan_to_num(0.0).view(torch.int64))


def _agree_on(case, masked: bool) -> None:
    """dot_error against the oracle on the Case's q/k; ``masked``: given the pairs the Case reads, in blocks of
    a few rows (``SMALL_BLOCK``), so that each block computes only the keys from the first any of its rows
    reads to the last: on every read pair, the oracle's bound bit for bit."""
    seen = []
    reference_for_case(case, make_inputs(case, "cpu"), torch.float64, extra=lambda it: seen.append(it) or {})
    assert seen, "the Case made no error-model call: nothing to compare"
    with mock.patch.object(T, "ROW_BLOCK", SMALL_BLOCK if masked else T.ROW_BLOCK):
        for it in seen:
            vis = torch.isfinite(it.logits) if masked else None
            got, want = T.dot_error(it.q, it.k, it.group, vis), per_grid_dot_error(it.q, it.k, it.group)
            if masked:  # unread pairs: not computed, so not compared
                got, want = torch.where(vis, got, 0.0), torch.where(vis, want, 0.0)
            assert same_bits(got, want)


SMALL_BLOCK = 1 << 12  # a few rows per block, so the drawn Cases take many
MASKED = pytest.mark.parametrize("masked", [False, True], ids=["every pair", "read pairs"])


SETTINGS = dict(max_examples=15, deadline=None, database=None, derandomize=True, suppress_health_check=list(HealthCheck))


@MASKED
@settings(**SETTINGS)
@given(case=dense_cases(max_tokens=160, max_heads=4))
def test_grouped_grids_agree_bit_for_bit_dense(masked, case):
    _agree_on(case, masked)


@MASKED
@settings(**SETTINGS)
@given(case=thd_cases(max_tokens=300, max_heads=2, zeros=False))  # no empty sequences: a Case without a Q row bounds nothing
def test_grouped_grids_agree_bit_for_bit_thd(masked, case):
    _agree_on(case, masked)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("d", [8, 40, 64, 72])
def test_grouped_grids_agree_bit_for_bit_on_adversarial_operands(dtype, d):
    gen = torch.Generator().manual_seed(d)
    q = torch.randn(2, 4, 9, d, generator=gen).to(dtype)
    k = torch.randn(2, 2, 11, d, generator=gen).to(dtype)
    q[0, 0, 0] = 0  # a zero row: its steps are exact
    k[0, 0, :, : d // 2] = 0  # zero halves of a step
    tiny, huge = torch.finfo(dtype).tiny / 8, torch.finfo(dtype).max
    q[1, 1, 2] = tiny  # subnormal operands
    k[1, 1, 3] = tiny
    q[0, 3, 4, :8] = huge  # fp32 products past fp32's range (bfloat16) or at its top
    k[0, 1, 5, :8] = huge
    q64, k64 = q.to(torch.float64), k.to(torch.float64)
    assert same_bits(T.dot_error(q64, k64, 2), per_grid_dot_error(q64, k64, 2))


def test_a_windowed_block_computes_only_the_keys_its_rows_read():
    gen = torch.Generator().manual_seed(0)
    q, k = (torch.randn(1, h, 64, 32, generator=gen).to(torch.float16).to(torch.float64) for h in (2, 1))
    band = torch.ones(64, 64, dtype=torch.bool).tril().triu(-16)  # causal, 16 keys to the left: a window
    vis = band.expand(1, 2, 64, 64)  # GQA 2:1
    with mock.patch.object(T, "ROW_BLOCK", 64 * 2 * T.MMA_K * 8):  # 8 rows per block
        spans = T._key_spans(vis, (1, 1, 128, 64), 8)
        got = T.dot_error(q, k, 2, vis)
        want = per_grid_dot_error(q, k, 2)
    # rows are (head, query) in head order: each head's block j reads keys 8j - 16 to 8j + 7
    assert spans == [(max(0, 8 * (i % 8) - 16), 8 * (i % 8 + 1)) for i in range(16)]
    assert same_bits(torch.where(vis, got, 0.0), torch.where(vis, want, 0.0))
    key, ends = torch.arange(64), torch.tensor(spans).repeat_interleave(8, 0).view(1, 2, 64, 2, 1)
    computed = (key >= ends[..., 0, :]) & (key < ends[..., 1, :])
    assert not got[~computed].any() and want[~computed].all()  # keys outside a block's span: not computed
