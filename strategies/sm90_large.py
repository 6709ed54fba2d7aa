"""The sm90 family's large tier: dense batch entries past 2^31 elements.

The native Hopper host views every dense operand as (B, H, S, D) with a
64-bit batch stride (prepared_host.py ``bhsd``: ``stride=(bs, hs, ss, 1)``);
a stride computed in 32 bits wraps past 2^31 elements, and every element of
batch entry 1 is read at the wrapped address. Here K and V hold more than
2^31 elements per batch entry (one KV head of D 512 over S_kv = 2^22 + 128
keys: 8 GiB of K and of V per Case, 16 GiB in all), while Q and O stay small
(S_q 64), so the outputs, the reference and its error model stay cheap:
only a few keys per batch entry are live (``seq_kv_lens``), the rest is the
pad fill, built on the device (ground.data.dense_span_drawn) and cut off by
the reference (ground.data.live_key_extent).

Each row is a compile key (the planner compiles the dense S_q and S_kv in):
two rows, one per dtype. The runtime facts (seed, scale magnitude, padding
lengths) are drawn per example; batch entry 1 always has a live Q row and a
live key, so every example reads past 2^31.
"""

from __future__ import annotations

from typing import Optional, Sequence, Tuple

from hypothesis import strategies as st

from ground.case import DTYPES, Case

# K/V batch stride: S_kv * H_kv * D = (2^22 + 128) * 512 = 2^31 + 2^16 elements.
S_KV = (1 << 22) + 128
S_Q = 64
D = 512
# Live keys per batch entry: at most a few KV tiles (the reference computes
# these, rounded up to whole tiles, and no more).
KV_LIVE = 200
ROWS: Tuple[dict, ...] = (
    dict(family="sm90", dtype="float16", batch=2, h_q=1, h_kv=1, s_q=S_Q, s_kv=S_KV, d_qk=D, d_v=D, memory="bshd"),
    dict(family="sm90", dtype="bfloat16", batch=2, h_q=2, h_kv=1, s_q=S_Q, s_kv=S_KV, d_qk=D, d_v=D, memory="bshd", causal=True),
)
SCALES = (None, 0.5, 0.125)


def batch_stride(case: Case, operand: str) -> int:
    """Elements between batch entries of a dense ``operand`` ("q", "k", "v", "o") as the Case lays it out."""
    h, s, d = {
        "q": (case.h_q, case.s_q, case.d_qk),
        "o": (case.h_q, case.s_q, case.d_v),
        "k": (case.h_kv, case.s_kv, case.d_qk),
        "v": (case.h_kv, case.s_kv, case.d_v),
    }[operand]
    return h * s * d


def int32(x: int) -> int:
    """``x`` narrowed to a signed 32-bit integer (two's complement wrap)."""
    return (x + (1 << 31)) % (1 << 32) - (1 << 31)


@st.composite
def _case(draw, rows: Tuple[dict, ...]) -> Case:
    row = draw(st.sampled_from(rows))
    # Batch entry 1 (past 2^31) keeps a live row and a live key; batch entry 0 may have none.
    q_lens = (draw(st.integers(0, S_Q)), draw(st.integers(1, S_Q)))
    kv_lens = (draw(st.integers(0, KV_LIVE)), draw(st.integers(1, KV_LIVE)))
    return Case(
        **row,
        seq_q_lens=q_lens,
        seq_kv_lens=kv_lens,
        seed=draw(st.integers(0, 2**31 - 1)),
        scale=draw(st.sampled_from(SCALES)),
    )


def sm90_large_cases(dtypes: Optional[Sequence[str]] = None) -> st.SearchStrategy[Case]:
    """Cases of ``ROWS`` (of ``dtypes``, default both), runtime facts drawn."""
    rows = tuple(r for r in ROWS if r["dtype"] in tuple(dtypes or DTYPES))
    if not rows:
        raise ValueError(f"sm90 large tier: no row for dtypes {dtypes}")
    return _case(rows)
