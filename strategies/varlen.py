"""Valid THD (packed varlen) Cases and their per-sequence length lists.

A THD Case has no bias and no dense padding lengths (the wrapper declines
both on cum_seqlen calls); sinks are allowed. Lengths are runtime values, so
they are drawn freely; the sequence count is a compile key and comes from
1..THD_MAX_SEQS. Total live tokens are bounded by construction: each length is
clamped to what is left of ``max_tokens``.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

from hypothesis import strategies as st

from ground.case import Case

from . import features, pools
from . import geometry as geo
from .features import Common, length_lists, thd_offset

THD_OPTIONS = ("max_tokens", "max_seqs", "zeros", "offsets")


def thd_cases(
    *,
    max_tokens: int = 2048,
    max_seqs: int = pools.THD_MAX_SEQS,
    zeros: bool = True,
    offsets: Optional[bool] = None,
    geometry: Optional[str] = None,
    **common,
) -> st.SearchStrategy[Case]:
    """Valid THD Cases.

    max_tokens: bound on live Q tokens and on live KV tokens (each list's sum).
    max_seqs: sequence count drawn from 1..max_seqs.
    zeros: allow zero-length sequences.
    offsets: non-zero first offsets (q_base/kv_base) and capacity slack
    (q_slack/kv_slack): None draws each, True forces all, False forbids.
    geometry: "pool", "free" or "mixed" (see ``dense_cases``; THD pools fix heads,
    sequence count, mask family, left window, sinks and the score sign).
    Common options (both layouts): ``strategies.features.Common``, e.g.
    flavors, dtypes, off_envelope, causal, windows, sinks, scales, max_heads.
    """
    opts = Common(**common)
    if max_tokens < 1 or max_seqs < 1:
        raise ValueError("options 'max_tokens'/'max_seqs': must be >= 1")
    mode = geo.mode(geometry)
    if mode != "free":
        thd = dict(max_tokens=max_tokens, max_seqs=max_seqs, zeros=zeros, offsets=offsets)
        free = lambda f, d: thd_cases(geometry="free", **thd, **{**dataclasses.asdict(opts), "flavors": (f,), "dtypes": (d,)})  # noqa: E731
        pooled = geo.pooled_thd(opts, free, few=mode == "few", **thd)
        if mode in ("pool", "few"):
            return pooled

    @st.composite
    def draw_case(draw) -> Case:
        _, d_qk, d_v = features.head_dims(draw, opts)
        dtype = draw(st.sampled_from(opts.dtypes))
        h_q, h_kv = features.heads(draw, opts)
        q_lens, kv_lens = length_lists(draw, max_seqs, max_tokens, zeros)
        m = features.mask(draw, opts)
        optional = features.options(draw, opts)
        q_base, kv_base = thd_offset(draw, offsets), thd_offset(draw, offsets)
        q_slack, kv_slack = thd_offset(draw, offsets), thd_offset(draw, offsets)
        return features.kernel_features(
            draw,
            Case(
                layout="thd",
                dtype=dtype,
                h_q=h_q,
                h_kv=h_kv,
                d_qk=d_qk,
                d_v=d_v,
                q_lens=q_lens,
                kv_lens=kv_lens,
                q_base=q_base,
                kv_base=kv_base,
                q_slack=q_slack,
                kv_slack=kv_slack,
                seed=features.seed(draw),
                **m,
                **optional,
            ),
        )

    return draw_case() if mode == "free" else st.one_of(pooled, draw_case())  # mixed: the pools first (shrinking prefers them)
