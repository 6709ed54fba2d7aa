"""A naive float64 attention oracle, written apart from ``reference/``.

One query row at a time, one key at a time, in Python floats: an explicit
visibility predicate, an explicit sink term, and only live tokens ever read
(so NaN poison cannot reach it by construction). Tiny shapes only.
"""

from __future__ import annotations

import math
from typing import List, Optional, Sequence, Tuple

import torch

NEG_INF = float("-inf")


def visible(i: int, j: int, n_q: int, n_kv: int, *, causal: bool, bottom_right: bool, window_left: int, window_right: int) -> bool:
    """Key j visible to query row i (live lengths n_q, n_kv)?"""
    if j >= n_kv:
        return False
    diag = i + (n_kv - n_q if bottom_right else 0)
    if causal and j > diag + max(window_right, 0):
        return False
    if window_left >= 0 and j < diag - window_left:
        return False
    return True


def one_row(logits: List[float], values: List[List[float]], sink: Optional[float], d_v: int) -> Tuple[List[float], float]:
    """Softmax over the visible keys' logits (+ the sink in the denominator)."""
    terms = logits + ([sink] if sink is not None else [])
    if not terms or max(terms) == NEG_INF:
        return [0.0] * d_v, NEG_INF
    m = max(terms)
    lse = m + math.log(math.fsum(math.exp(t - m) for t in terms))
    weights = [math.exp(t - lse) for t in logits]
    return [math.fsum(w * vr[d] for w, vr in zip(weights, values)) for d in range(d_v)], lse


def _dot(a: Sequence[float], b: Sequence[float]) -> float:
    return math.fsum(x * y for x, y in zip(a, b))


def naive_attention(q, k, v, *, scale, causal=False, bottom_right=False, window_left=-1, window_right=-1, bias=None, sinks=None, q_lens=None, kv_lens=None):
    """Dense (B,H,S,D) tensors -> float64 O (B,Hq,SQ,Dv), LSE (B,Hq,SQ)."""
    b, h_q, s_q, _ = q.shape
    h_kv, s_kv, d_v = k.shape[1], k.shape[2], v.shape[3]
    g = h_q // h_kv
    Q, K, V = (x.double().tolist() for x in (q, k, v))
    BIAS = bias.double().tolist() if bias is not None else None
    SINK = sinks.double().tolist() if sinks is not None else None
    o = torch.zeros(b, h_q, s_q, d_v, dtype=torch.float64)
    lse = torch.full((b, h_q, s_q), NEG_INF, dtype=torch.float64)
    for bi in range(b):
        n_q = s_q if q_lens is None else int(q_lens[bi])
        n_kv = s_kv if kv_lens is None else int(kv_lens[bi])
        for h in range(h_q):
            kvh = h // g
            for i in range(n_q):  # rows past n_q stay O = 0, LSE = -inf
                logits, values = [], []
                for j in range(s_kv):
                    if not visible(i, j, n_q, n_kv, causal=causal, bottom_right=bottom_right, window_left=window_left, window_right=window_right):
                        continue
                    x = scale * _dot(Q[bi][h][i], K[bi][kvh][j])
                    if BIAS is not None:
                        x += BIAS[bi if len(BIAS) > 1 else 0][h if len(BIAS[0]) > 1 else 0][i][j]
                    logits.append(x)
                    values.append(V[bi][kvh][j])
                row, l = one_row(logits, values, SINK[h] if SINK is not None else None, d_v)
                o[bi, h, i] = torch.tensor(row, dtype=torch.float64)
                lse[bi, h, i] = l
    return o, lse


def naive_for_case(case, tensors):
    """float64 (O, LSE) of a Case in the make_outputs layouts. THD is walked
    over the packed rows directly (rows outside every sequence: NaN)."""
    mask = dict(causal=case.causal, bottom_right=case.bottom_right, window_left=case.window_left, window_right=case.window_right)
    if not case.is_thd:
        return naive_attention(
            tensors.q,
            tensors.k,
            tensors.v,
            scale=case.softmax_scale,
            bias=tensors.bias,
            sinks=tensors.sinks,
            q_lens=case.seq_q_lens,
            kv_lens=case.seq_kv_lens,
            **mask,
        )
    g = case.h_q // case.h_kv
    Q, K, V = (x.double().tolist() for x in (tensors.q, tensors.k, tensors.v))
    SINK = tensors.sinks.double().tolist() if tensors.sinks is not None else None
    o = torch.full((case.t_q, case.h_q, case.d_v), float("nan"), dtype=torch.float64)
    lse = torch.full((case.h_q, case.t_q), float("nan"), dtype=torch.float64)
    cu_q, cu_kv = case.cu_seqlens("q"), case.cu_seqlens("kv")
    for s in range(case.n_seq):
        n_q, n_kv = cu_q[s + 1] - cu_q[s], cu_kv[s + 1] - cu_kv[s]
        for h in range(case.h_q):
            for i in range(n_q):
                t = cu_q[s] + i
                keys = [j for j in range(n_kv) if visible(i, j, n_q, n_kv, **mask)]
                logits = [case.softmax_scale * _dot(Q[t][h], K[cu_kv[s] + j][h // g]) for j in keys]
                values = [V[cu_kv[s] + j][h // g] for j in keys]
                row, l = one_row(logits, values, SINK[h] if SINK is not None else None, case.d_v)
                o[t, h] = torch.tensor(row, dtype=torch.float64)
                lse[h, t] = l
    return o, lse
