"""The backward reference (reference/backward.py, closed form on the forward's
float64 internals) against float64 autograd of an independent, row-by-row
forward written here from the mask rules (masks.py's docstring, not its code),
on small shapes covering every feature the SM80 backward serves; and the
conventions for rows with no visible key and padded rows."""

from __future__ import annotations

import math

import pytest
import torch

from ground.case import Case
from ground.data import FINITE_PAD, make_grad_output, make_inputs
from ground.tolerances import AUTOGRAD_AGREEMENT
from reference.backward import backward_for_case

F64 = torch.float64


def _visible(i, n_q, n_kv, c: Case):
    """Keys row i of a sequence with live lengths (n_q, n_kv) sees, by the stated rules."""
    j = torch.arange(n_kv)
    vis = torch.ones(n_kv, dtype=torch.bool)
    shift = n_kv - n_q if c.bottom_right else 0
    if c.causal:
        vis &= j <= i + shift + max(c.window_right, 0)
    if c.window_left >= 0:
        vis &= j >= i + shift - c.window_left
    return vis


def _row_forward(q, k, v, bias_row, sink, c: Case, i, n_q, n_kv):
    """O of one row (float64, differentiable): softmax over visible keys plus the sink."""
    vis = _visible(i, n_q, n_kv, c)
    logits = c.softmax_scale * (k[:n_kv] @ q)
    if bias_row is not None:
        logits = logits + bias_row[:n_kv]
    logits = torch.where(vis, logits, torch.full_like(logits, -math.inf))
    parts = [logits] + ([sink.reshape(1)] if sink is not None else [])
    allz = torch.cat(parts)
    if not torch.isfinite(allz).any():
        return torch.zeros(v.shape[-1], dtype=F64)
    w = torch.softmax(allz, 0)[:n_kv]
    return w @ v[:n_kv]


def _autograd(c: Case, t, do):
    """dq, dk, dv, dbias, dsink by autograd of sum(O * dO) over live rows."""
    leaf = lambda x: None if x is None else x.detach().to(F64).clone().requires_grad_(True)  # noqa: E731
    q, k, v, bias, sinks = leaf(t.q), leaf(t.k), leaf(t.v), leaf(t.bias), leaf(t.sinks)
    g = c.h_q // c.h_kv
    loss = torch.zeros((), dtype=F64)
    dof = do.to(F64)
    if c.is_thd:
        cq, ck = c.cu_seqlens("q"), c.cu_seqlens("kv")
        for s in range(c.n_seq):
            n_q, n_kv = c.q_lens[s], c.kv_lens[s]
            for h in range(c.h_q):
                for i in range(n_q):
                    o = _row_forward(
                        q[cq[s] + i, h],
                        k[ck[s] : ck[s] + n_kv, h // g],
                        v[ck[s] : ck[s] + n_kv, h // g],
                        None,
                        None if sinks is None else sinks[h],
                        c,
                        i,
                        n_q,
                        n_kv,
                    )
                    loss = loss + (o * dof[cq[s] + i, h]).sum()
    else:
        for b in range(c.batch):
            n_q, n_kv = c.q_lengths()[b], c.kv_lengths()[b]
            for h in range(c.h_q):
                for i in range(n_q):
                    brow = None if bias is None else bias[b if c.bias_batch > 1 else 0, h, i]
                    o = _row_forward(q[b, h, i], k[b, h // g], v[b, h // g], brow, None if sinks is None else sinks[h], c, i, n_q, n_kv)
                    loss = loss + (o * dof[b, h, i]).sum()
    leaves = dict(dq=q, dk=k, dv=v, dbias=bias, dsink=sinks)
    names = [n for n, x in leaves.items() if x is not None]
    got = torch.autograd.grad(loss, [leaves[n] for n in names], allow_unused=True) if loss.requires_grad else [None] * len(names)
    return {n: torch.zeros_like(leaves[n]) if gx is None else gx for n, gx in zip(names, got)}


def _dense(**kw):
    return Case(direction="bwd", d_qk=16, d_v=8, seed=3, **kw)


CASES = [
    _dense(s_q=5, s_kv=7),
    _dense(s_q=6, s_kv=4, causal=True),
    _dense(s_q=4, s_kv=9, causal=True, bottom_right=True, h_q=4, h_kv=2),
    _dense(s_q=7, s_kv=7, window_left=2, causal=True, window_right=1, h_q=3, h_kv=1),
    _dense(s_q=6, s_kv=8, window_left=1, bottom_right=True),
    _dense(batch=2, s_q=5, s_kv=6, seq_q_lens=(3, 0), seq_kv_lens=(6, 2), causal=True, bottom_right=True),
    _dense(batch=2, s_q=4, s_kv=5, bias="float32", bias_batch=1, h_q=2, h_kv=1),
    _dense(batch=2, s_q=4, s_kv=5, bias="float16", bias_batch=2, seq_kv_lens=(5, 3)),
    _dense(batch=2, s_q=5, s_kv=3, sinks=True, causal=True, h_q=2, h_kv=2, scale=0.7),
    _dense(s_q=3, s_kv=6, sinks=True, window_left=0, scale=0.0, bias="float32"),
    Case(
        direction="bwd",
        layout="thd",
        d_qk=16,
        d_v=16,
        h_q=4,
        h_kv=2,
        q_lens=(3, 0, 5),
        kv_lens=(4, 2, 0),
        q_base=2,
        kv_slack=3,
        causal=True,
        bottom_right=True,
        sinks=True,
        seed=5,
    ),
    Case(direction="bwd", layout="thd", d_qk=16, d_v=8, q_lens=(4, 2), kv_lens=(6, 3), window_left=1, seed=6),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.describe())
def test_closed_form_matches_float64_autograd_of_an_independent_forward(case):
    t = make_inputs(case, poison=True, pad_fill=FINITE_PAD)
    do = make_grad_output(case, poison=True, pad_fill=FINITE_PAD)
    ref = backward_for_case(case, t, do)
    want = _autograd(case, t, do)
    assert set(ref) == set(want)
    for name, x in want.items():
        got = ref[name]
        if case.is_thd and name != "dsink":  # capacity rows outside every sequence: NaN in the reference, 0 by autograd
            live = t.q_live if name == "dq" else t.kv_live
            got, x = got[live], x[live]
        assert torch.allclose(got, x, rtol=AUTOGRAD_AGREEMENT[0], atol=AUTOGRAD_AGREEMENT[1]), (name, (got - x).abs().max())


def test_rows_without_a_visible_key_and_padded_rows_have_zero_gradients():
    # Row 0 sees nothing with a right-aligned window of 0 when s_q > s_kv; batch 1's Q rows past 2 are padded.
    c = _dense(batch=2, s_q=6, s_kv=3, causal=True, bottom_right=True, seq_q_lens=(6, 2), sinks=True)
    t = make_inputs(c, poison=True, pad_fill=FINITE_PAD)
    ref = backward_for_case(c, t, make_grad_output(c, poison=True, pad_fill=FINITE_PAD))
    # Batch 0: bottom-right causal with 6 rows over 3 keys: rows 0-2 see no key (j <= i - 3).
    assert (ref["dq"][0, :, :3] == 0).all() and (ref["dq"][0, :, 3:] != 0).any()
    assert (ref["dq"][1, :, 2:] == 0).all()  # padded rows: P gated to 0
    assert torch.isfinite(ref["dsink"]).all()


def test_a_wrong_group_sum_is_caught_by_the_comparison():
    """Power: the cross-check is tight enough to see a GQA fold that takes one head only."""
    c = CASES[2]
    t = make_inputs(c, poison=True, pad_fill=FINITE_PAD)
    do = make_grad_output(c, poison=True, pad_fill=FINITE_PAD)
    ref = backward_for_case(c, t, do)
    want = _autograd(c, t, do)
    import reference.backward as rb

    real = rb._group_sum
    try:
        rb._group_sum = lambda x, g: x.view(x.shape[0], x.shape[1] // g, g, *x.shape[2:])[:, :, 0]
        bad = backward_for_case(c, t, do)
    finally:
        rb._group_sum = real
    assert torch.allclose(ref["dk"], want["dk"], rtol=AUTOGRAD_AGREEMENT[0], atol=AUTOGRAD_AGREEMENT[1])
    assert not torch.allclose(bad["dk"], want["dk"], rtol=1e-3, atol=1e-6)
