"""The reference against a naive float64 oracle and torch's math SDPA, its
precision modes, its poison rule, and proof that these checks have power."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from torch.nn.attention import SDPBackend, sdpa_kernel

from ground.case import BIAS_DTYPES, DTYPES, MEMORY_ORDERS, Case
from ground.data import make_inputs
from ground.tolerances import F64_REORDERED, FP32_REFERENCE_REL, LOWP_REFERENCE_REL, SAME_ARITHMETIC, max_abs_error
from reference import masks
from reference.attention import attention, reference_for_case
from tests.oracles import naive_attention, naive_for_case, visible

F64 = torch.float64
SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow])


# ------------------------------------------------------------------ strategy
@st.composite
def cases(draw, layouts=("dense", "thd"), sinks=(False, True)) -> Case:
    """Tiny Cases over every feature the reference models."""
    h_kv = draw(st.integers(1, 2))
    causal = draw(st.booleans())
    window_left = draw(st.sampled_from([-1, -1, 0, 1, 2, 4]))
    kw = dict(
        layout=draw(st.sampled_from(layouts)),
        dtype=draw(st.sampled_from(DTYPES)),
        h_kv=h_kv,
        h_q=h_kv * draw(st.sampled_from([1, 2, 3])),
        d_qk=draw(st.sampled_from([4, 8])),
        d_v=draw(st.sampled_from([4, 8])),
        causal=causal,
        window_left=window_left,
        window_right=draw(st.sampled_from([-1, 0, 1, 3])) if causal else -1,
        bottom_right=draw(st.booleans()) if (causal or window_left >= 0) else False,
        sinks=draw(st.sampled_from(sinks)),
        scale=draw(st.one_of(st.none(), st.sampled_from([0.0, -0.6, 2.5, -3.0]), st.floats(-4, 4, allow_nan=False, width=32))),
        memory=draw(st.sampled_from(MEMORY_ORDERS)),
        seed=draw(st.integers(0, 2**20)),
    )
    if kw["layout"] == "dense":
        b = draw(st.integers(1, 3))
        s_q, s_kv = draw(st.integers(1, 7)), draw(st.integers(1, 7))
        lens = lambda s: st.none() | st.lists(st.integers(0, s), min_size=b, max_size=b).map(tuple)  # noqa: E731
        kw.update(
            batch=b,
            s_q=s_q,
            s_kv=s_kv,
            seq_q_lens=draw(lens(s_q)),
            seq_kv_lens=draw(lens(s_kv)),
            bias=draw(st.sampled_from((None,) + BIAS_DTYPES)),
            bias_batch=draw(st.sampled_from([1, b])),
        )
    else:
        n = draw(st.integers(1, 3))
        lens = st.lists(st.integers(0, 6), min_size=n, max_size=n).map(tuple)
        kw.update(
            q_lens=draw(lens),
            kv_lens=draw(lens),
            q_base=draw(st.integers(0, 3)),
            kv_base=draw(st.integers(0, 3)),
            q_slack=draw(st.integers(0, 3)),
            kv_slack=draw(st.integers(0, 3)),
        )
    case = Case(**kw)
    assert case.structural_problem() is None, case.structural_problem()
    return case


def q_live_rows(case: Case, t) -> torch.Tensor:
    """Bool mask over LSE elements (dense (B,H,SQ), THD (H,T_q)) of live rows."""
    if case.is_thd:
        return t.q_live[None, :].expand(case.h_q, -1)
    return t.q_live[:, None, :].expand(-1, case.h_q, -1)


def assert_same(got, want, tol=F64_REORDERED):
    """Close in float64, NaN where NaN, equal infinities where infinite."""
    torch.testing.assert_close(got.to(F64), want.to(F64), rtol=tol, atol=tol, equal_nan=True)


# ------------------------------------------------------- against the oracle
# Edges pinned so every run has them: zero-length sequences on both sides, a
# non-zero first offset and slack (THD); an empty live batch and a band (dense).
THD_EDGE = Case(
    layout="thd",
    h_q=4,
    h_kv=2,
    d_qk=8,
    d_v=4,
    q_lens=(3, 0, 4, 2),
    kv_lens=(0, 2, 5, 6),
    q_base=2,
    kv_base=1,
    q_slack=2,
    kv_slack=1,
    causal=True,
    bottom_right=True,
    window_left=1,
    sinks=True,
    scale=-0.8,
    seed=5,
)
DENSE_EDGE = Case(
    batch=3,
    h_q=3,
    h_kv=1,
    d_qk=8,
    d_v=8,
    s_q=6,
    s_kv=4,
    seq_q_lens=(0, 6, 2),
    seq_kv_lens=(4, 0, 3),
    causal=True,
    window_right=2,
    bias="bfloat16",
    bias_batch=3,
    sinks=True,
    scale=0.0,
    memory="bshd_padded",
    seed=9,
)


@settings(max_examples=200, **SETTINGS)
@given(cases())
@example(THD_EDGE)
@example(DENSE_EDGE)
def test_matches_naive_oracle(case):
    t = make_inputs(case)  # poisoned: the reference must not read it
    o, lse = reference_for_case(case, t, compute_dtype=F64)
    o_n, lse_n = naive_for_case(case, t)
    assert o.dtype == lse.dtype == F64
    assert_same(o, o_n)
    assert_same(lse, lse_n)


@pytest.mark.parametrize("case", [THD_EDGE, DENSE_EDGE], ids=["thd", "dense"])
def test_lse_log2_is_the_natural_lse_in_base_2(case):
    """lse_log2 (TemplateParams.stats_log2): the same O, LSE * log2(e); -inf rows
    (padded / nothing visible) stay -inf and THD rows outside every sequence NaN."""
    t = make_inputs(case)
    o, lse = reference_for_case(case, t, compute_dtype=F64)
    o2, lse2 = reference_for_case(case.replace(lse_log2=True), t, compute_dtype=F64)
    assert_same(o2, o)
    assert_same(lse2, lse / math.log(2))
    assert torch.equal(torch.isinf(lse2), torch.isinf(lse)) and torch.equal(torch.isnan(lse2), torch.isnan(lse))
    assert bool((~torch.isfinite(lse)).any()) and bool(torch.isfinite(lse).any())  # both kinds of rows are there


def test_hard_numerics_match_oracle():
    """Huge logits of both signs (scale 300, bias +-1e4 in fp32, a dominant
    sink): the max-shifted logsumexp stays exact and finite."""
    g = torch.Generator().manual_seed(7)
    q, k, v = (torch.randn(1, 2, 5, 8, generator=g, dtype=F64) for _ in range(3))
    bias = torch.randn(1, 2, 5, 5, generator=g, dtype=F64) * 1e4
    sinks = torch.tensor([40.0, -40.0], dtype=F64) * 1e3
    for kw in (dict(scale=300.0), dict(scale=-300.0, bias=bias), dict(scale=0.0, bias=bias, sinks=sinks, causal=True)):
        o, lse = attention(q, k, v, compute_dtype=F64, **kw)
        o_n, lse_n = naive_attention(q, k, v, **kw)
        assert_same(o, o_n)
        assert_same(lse, lse_n)
        o32, lse32 = attention(q.float(), k.float(), v.float(), **{n: (x.float() if torch.is_tensor(x) else x) for n, x in kw.items()})
        assert torch.isfinite(o32).all() and torch.isfinite(lse32).all()


def test_conventions_of_empty_and_padded_rows():
    """Rows with no key: O 0, LSE -inf (sink: LSE = sink). Padded Q rows: O 0,
    LSE -inf even with sinks. Scale 0: the plain mean over visible keys."""
    q, k, v = (torch.randn(2, 2, 4, 8, dtype=F64) for _ in range(3))
    # BR causal with 2 live keys for 4 live rows: rows 0, 1 see nothing.
    o, lse = attention(q, k, v, scale=0.5, causal=True, bottom_right=True, kv_lens=[2, 2], compute_dtype=F64)
    assert (o[:, :, :2] == 0).all() and (lse[:, :, :2] == -math.inf).all() and torch.isfinite(lse[:, :, 2:]).all()
    sinks = torch.tensor([1.5, -2.0], dtype=F64)
    o, lse = attention(q, k, v, scale=0.5, causal=True, bottom_right=True, kv_lens=[2, 2], sinks=sinks, compute_dtype=F64)
    assert (o[:, :, :2] == 0).all() and (lse[:, :, :2] == sinks[None, :, None]).all()
    o, lse = attention(q, k, v, scale=0.5, sinks=sinks, q_lens=[1, 3], compute_dtype=F64)
    assert (o[0, :, 1:] == 0).all() and (o[1, :, 3:] == 0).all()
    assert (lse[0, :, 1:] == -math.inf).all() and (lse[1, :, 3:] == -math.inf).all() and torch.isfinite(lse[1, :, :3]).all()
    o, lse = attention(q, k, v, scale=0.0, kv_lens=[3, 1], compute_dtype=F64)
    torch.testing.assert_close(o[0], v[0, :, :3].mean(1, keepdim=True).expand(-1, 4, -1))
    torch.testing.assert_close(lse[0], torch.full((2, 4), math.log(3), dtype=F64))


# ------------------------------------------------ against torch's math SDPA
@settings(max_examples=100, **SETTINGS)
@given(cases(layouts=("dense",), sinks=(False,)))
@example(DENSE_EDGE.replace(sinks=False))
def test_matches_torch_math_sdpa(case):
    t = make_inputs(case, poison=False)  # SDPA multiplies masked V by 0: no NaN there
    b, s_q, s_kv, scale = case.batch, case.s_q, case.s_kv, case.softmax_scale
    n_q, n_kv = case.q_lengths(), case.kv_lengths()
    vis = torch.tensor(
        [
            [
                [
                    visible(
                        i,
                        j,
                        n_q[bi],
                        n_kv[bi],
                        causal=case.causal,
                        bottom_right=case.bottom_right,
                        window_left=case.window_left,
                        window_right=case.window_right,
                    )
                    for j in range(s_kv)
                ]
                for i in range(s_q)
            ]
            for bi in range(b)
        ]
    )[:, None]
    add = t.bias.to(F64) if t.bias is not None else torch.zeros((), dtype=F64)
    mask = torch.where(vis, add, -math.inf).expand(b, case.h_q, s_q, s_kv)
    # The math backend scales q and k by sqrt(scale): run negative scales as |scale| on -k.
    k = t.k.to(F64) if scale >= 0 else -t.k.to(F64)
    with sdpa_kernel(SDPBackend.MATH):
        want = F.scaled_dot_product_attention(t.q.to(F64), k, t.v.to(F64), attn_mask=mask, scale=abs(scale), enable_gqa=True)
    o, _ = reference_for_case(case, t, compute_dtype=F64)
    rows = (vis.any(-1) & t.q_live[:, None, :])[..., None]  # SDPA gives NaN on rows with no key
    rows = rows.expand(-1, case.h_q, -1, case.d_v)
    torch.testing.assert_close(o[rows], want[rows], rtol=F64_REORDERED, atol=F64_REORDERED)


# ---------------------------------------------------- precision modes
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "mask",
    [
        dict(),
        dict(causal=True, bottom_right=True, seq_q_lens=(40, 17), seq_kv_lens=(80, 33)),
        dict(window_left=20, bias="float32", bias_batch=2, sinks=True, scale=-0.4),
    ],
)
def test_fp32_close_to_fp64_and_lowp_worse(dtype, mask):
    case = Case(dtype=dtype, batch=2, h_q=4, h_kv=2, d_qk=64, d_v=64, s_q=48, s_kv=80, seed=11, **mask)
    t = make_inputs(case)
    o64, l64 = reference_for_case(case, t, compute_dtype=F64)
    o32, l32 = reference_for_case(case, t, compute_dtype=torch.float32)
    olo, llo = reference_for_case(case, t, compute_dtype=getattr(torch, dtype))
    assert o32.dtype == l32.dtype == olo.dtype == llo.dtype == torch.float32
    live = q_live_rows(case, t)
    o_amax = float(o64[live].abs().max())
    e32, elo = max_abs_error(o32, o64, live[..., None].expand_as(o64)), max_abs_error(olo, o64, live[..., None].expand_as(o64))
    l32e, lloe = max_abs_error(l32, l64, live), max_abs_error(llo, l64, live)
    l_amax = float(l64[live & torch.isfinite(l64)].abs().max())
    assert e32 <= FP32_REFERENCE_REL * o_amax and l32e <= FP32_REFERENCE_REL * max(1.0, l_amax)
    assert e32 < elo < LOWP_REFERENCE_REL * o_amax  # lowp: worse, yet still an attention
    assert l32e < lloe < LOWP_REFERENCE_REL * max(1.0, l_amax)


# ------------------------------------------------------------ poison rule
@settings(max_examples=60, **SETTINGS)
@given(cases(), st.sampled_from(["float32", "lowp"]))
@example(THD_EDGE, "lowp")
@example(DENSE_EDGE, "lowp")
def test_poison_never_reaches_live_rows(case, mode):
    cd = getattr(torch, case.dtype) if mode == "lowp" else torch.float32
    o, lse = reference_for_case(case, make_inputs(case, poison=True), compute_dtype=cd)
    o_clean, lse_clean = reference_for_case(case, make_inputs(case, poison=False), compute_dtype=cd)
    live = q_live_rows(case, make_inputs(case, poison=False))
    o_live = live[..., None].expand_as(o) if not case.is_thd else live.T[..., None].expand_as(o)
    assert torch.isfinite(o[o_live]).all()
    assert not torch.isnan(lse[live]).any() and not (lse[live] == math.inf).any()
    assert torch.equal(o[o_live], o_clean[o_live]) and torch.equal(lse[live], lse_clean[live])
    if case.is_thd:  # capacity outside every sequence has no reference value
        assert torch.isnan(o[~o_live]).all() and torch.isnan(lse[~live]).all()


# --------------------------------------------------- the tests have power
# Off-by-one mutants of the visibility predicate, each with a Case where it matters.
_band = masks.band
POWER_CASE = Case(
    batch=2,
    h_q=2,
    h_kv=1,
    d_qk=8,
    d_v=8,
    s_q=5,
    s_kv=7,
    seq_q_lens=(4, 5),
    seq_kv_lens=(6, 3),
    causal=True,
    bottom_right=True,
    window_left=2,
    window_right=1,
    bias="float16",
    sinks=True,
    seed=3,
)
MUTANTS = {
    # j <= i + br + right - 1: intersect with the causal bound of row i - 1 (no window).
    "causal diagonal one short": lambda i, j, n_q, n_kv, **kw: _band(i, j, n_q, n_kv, **kw) & _band(i - 1, j, n_q, n_kv, **{**kw, "window_left": -1}),
    "window one narrower": lambda i, j, n_q, n_kv, **kw: _band(i, j, n_q, n_kv, **{**kw, "window_left": kw["window_left"] - 1}),
    "right band ignored": lambda i, j, n_q, n_kv, **kw: _band(i, j, n_q, n_kv, **{**kw, "window_right": -1}),
    "bottom-right from physical lengths": lambda i, j, n_q, n_kv, **kw: _band(i, j, POWER_CASE.s_q, POWER_CASE.s_kv, **kw) & (j < n_kv),
}


@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_oracle_comparison_catches_mask_mutants(name, monkeypatch):
    t = make_inputs(POWER_CASE)
    want = naive_for_case(POWER_CASE, t)
    got = reference_for_case(POWER_CASE, t, compute_dtype=F64)
    for g, w in zip(got, want):
        assert_same(g, w)  # the unmutated reference passes on this case ...
    monkeypatch.setattr(masks, "band", MUTANTS[name])
    got = reference_for_case(POWER_CASE, t, compute_dtype=F64)
    with pytest.raises(AssertionError):  # ... and the mutant fails it
        for g, w in zip(got, want):
            assert_same(g, w)


# ------------------------------------------------------------ row chunking
def _model(case):
    from ground.tolerances import kernel_bounds

    return lambda it: kernel_bounds(it, case.dtype)


@settings(max_examples=60, **SETTINGS)
@given(cases(), st.integers(1, 40))
@example(DENSE_EDGE, 1)
@example(THD_EDGE, 1)
def test_row_chunks_equal_the_whole_call(case, chunk_elems):
    """The chunked reference (``chunk_elems`` (row, key) pairs per call, down
    to one row) gives the unchunked O, LSE and error-model bounds: every
    quantity, the mask and the padded-row override included, is per row."""
    t = make_inputs(case, poison=True)
    whole = reference_for_case(case, t, F64, extra=_model(case), chunk_elems=1 << 40)
    parts = reference_for_case(case, t, F64, extra=_model(case), chunk_elems=chunk_elems)
    for w, p in zip(whole[:2], parts[:2]):
        assert_same(p, w, tol=SAME_ARITHMETIC)
    assert whole[2].keys() == parts[2].keys()
    for name in whole[2]:
        assert_same(parts[2][name], whole[2][name], tol=SAME_ARITHMETIC)


def test_row_chunking_has_power(monkeypatch):
    """A chunked call that forgot its row offset (each chunk masked as if it
    began at row 0) differs: the equality above can fail."""
    case = DENSE_EDGE.replace(seq_q_lens=None, causal=True, window_right=-1)
    t = make_inputs(case, poison=True)
    whole = reference_for_case(case, t, F64, chunk_elems=1 << 40)
    real = masks.visibility
    monkeypatch.setattr(masks, "visibility", lambda *a, row0=0, **kw: real(*a, **kw))
    parts = reference_for_case(case, t, F64, chunk_elems=case.batch * case.h_q * case.s_kv)
    with pytest.raises(AssertionError):
        assert_same(parts[0], whole[0])
