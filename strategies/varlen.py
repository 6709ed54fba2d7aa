"""Valid THD (packed varlen) Cases and their per-sequence length lists.

A THD Case has no bias and no dense padding lengths (the wrapper declines
both on cum_seqlen calls); sinks are allowed. Lengths are runtime values, so
they are drawn freely; the sequence count is a compile key and comes from
1..THD_MAX_SEQS. Total live tokens are bounded by construction: each length is
clamped to what is left of ``max_tokens``.
"""

from __future__ import annotations

from typing import Optional, Tuple

from hypothesis import strategies as st

from ground.case import Case

from . import features, pools
from .features import Common, maybe

THD_OPTIONS = ("max_tokens", "max_seqs", "zeros", "offsets")


def _length(zeros: bool) -> st.SearchStrategy[int]:
    """One sequence's length; kinds simplest first (one_of shrinks to the first)."""
    kinds = [st.sampled_from(pools.THD_SMALL), st.just(1)]
    if zeros:
        kinds.append(st.just(0))
    kinds += [st.sampled_from(pools.THD_EDGES), st.sampled_from(pools.THD_LONG)]
    return st.one_of(*kinds)


def length_lists(
    draw, max_seqs: int, max_tokens: int, zeros: bool = True, min_seqs: int = 1
) -> Tuple[Tuple[int, ...], Tuple[int, ...]]:
    """(q_lens, kv_lens) of min_seqs..max_seqs sequences; each list sums to <= max_tokens.
    One list of (q, kv) pairs, not a drawn count, so shrinking deletes whole
    sequences; a sequence's KV length equals its Q length unless drawn apart."""
    pairs = draw(st.lists(st.tuples(_length(zeros), st.one_of(st.none(), _length(zeros))), min_size=min_seqs, max_size=max_seqs))
    q_lens, kv_lens, q_left, kv_left = [], [], max_tokens, max_tokens
    for q, kv in pairs:
        # Clamp to what is left of the budget; without zeros, stop instead
        # of clamping to 0 (the first sequence always fits: max_tokens >= 1).
        q, kv = min(q, q_left), min(q if kv is None else kv, kv_left)
        if not zeros and 0 in (q, kv):
            break
        q_lens.append(q)
        kv_lens.append(kv)
        q_left, kv_left = q_left - q, kv_left - kv
    return tuple(q_lens), tuple(kv_lens)


def _offset(draw, forced: Optional[bool]) -> int:
    return draw(st.sampled_from(pools.THD_OFFSETS)) if maybe(draw, forced) else 0


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
    geometry: "pool" or "free" (see ``dense_cases``; THD pools fix heads,
    sequence count, mask family, left window, sinks and the score sign).
    Common options (both layouts): ``strategies.features.Common``, e.g.
    flavors, dtypes, off_envelope, causal, windows, sinks, scales, max_heads.
    """
    opts = Common(**common)
    if max_tokens < 1 or max_seqs < 1:
        raise ValueError("options 'max_tokens'/'max_seqs': must be >= 1")
    from . import geometry as geo

    if geo.mode(geometry) == "pool":
        return geo.pooled_thd(opts, max_tokens=max_tokens, max_seqs=max_seqs, zeros=zeros, offsets=offsets)

    @st.composite
    def draw_case(draw) -> Case:
        _, d_qk, d_v = features.head_dims(draw, opts)
        dtype = draw(st.sampled_from(opts.dtypes))
        h_q, h_kv = features.heads(draw, opts)
        q_lens, kv_lens = length_lists(draw, max_seqs, max_tokens, zeros)
        m = features.mask(draw, opts)
        optional = features.options(draw, opts)
        q_base, kv_base = _offset(draw, offsets), _offset(draw, offsets)
        q_slack, kv_slack = _offset(draw, offsets), _offset(draw, offsets)
        return features.kernel_features(draw, Case(
            layout="thd", dtype=dtype, h_q=h_q, h_kv=h_kv, d_qk=d_qk, d_v=d_v, q_lens=q_lens, kv_lens=kv_lens,
            q_base=q_base, kv_base=kv_base, q_slack=q_slack, kv_slack=kv_slack,
            seed=features.seed(draw), **m, **optional,
        ))  # fmt: skip

    return draw_case()
