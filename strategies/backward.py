"""Backward Cases: the forward's facts (the same pools and free draws), made
backward (``direction="bwd"``) with the backward-only facts drawn.

A forward Case the SM80 backward does not serve is mapped onto the nearest
one it does (``to_backward``; never filtered): the backward takes a natural-log LSE
(its kernels read Stats as natural, bprop_f16.py:840 multiplies by log2 e),
so ``lse_log2`` is dropped; the scale is kept positive (the backward folds
no sign: its behaviour for negative and zero scales is not yet judged, see
docs); a bias is fp32 or the I/O dtype (prepared_sm80.build_spec); d_v is
cut to d_qk where it is wider (SdpaBwdDslSm80.check_support); THD gets one
slack token on a side with no capacity (the adapters bind real rows); the
forward-only kernel features (``case.FORWARD_ONLY_FACTS``) take their
defaults. A deterministic THD draw may stretch its longest sequence
(``contended``: the dQ relay's race needs KV tiles that contend). One draw
in ``D64_ODDS`` of a dense gptoss stratum takes a geometry of the
backward's dedicated d=64 kernel, which the forward pools rarely reach
(``D64_GEOMETRIES``).
"""

from __future__ import annotations

from typing import Optional, Sequence

from hypothesis import strategies as st

from ground.case import DTYPES, INPUT_SOURCES, Case

from . import features, pools
from .directions import to_backward
from .facts import cases
from .geometry import DenseGeometry
from .geometry import scale as drawn_scale

# The backward's dedicated d=64 kernel (bprop_d64_f16.py) serves only plain dense MHA calls of whole
# tiles (cudnn/sdpa/bwd/api_dsl.py:776-794: d 64/64, h_q == h_kv, S_q % 64 = S_kv % 128 = 0; no mask,
# bias, sinks, lengths or RoPE; not deterministic). The forward pools reach it about once in 100-200
# gptoss backward draws (a few examples per run), so one draw in D64_ODDS takes one of these: backward compile keys of
# their own, the forward pools untouched. Shrinking leaves them (the branch draw shrinks to 0).
D64_GEOMETRIES = (
    DenseGeometry(d_qk=64, d_v=64, batch=1, h_q=2, h_kv=2, s_q=128, s_kv=128),
    DenseGeometry(d_qk=64, d_v=64, batch=2, h_q=1, h_kv=1, s_q=192, s_kv=256),
)
D64_ODDS = 6
D64_FLAVOR = "gptoss"

# deterministic=True orders the fp32 dQ atomics of a q tile across the KV tiles that visit it (bprop_f16.py's
# relay). A relay that stops ordering them shows only when three or more KV tiles add into one q tile (two adds onto
# 0 commute) and their arrival order differs between the two launches. Measured on 300 ci draws (llama fp16):
# deterministic dense draws had at most 3 visitors per q tile (dense lengths are compile keys, so the pools stay
# short), THD ones 4+ in 16 of 110; bwd_dq_relay_no_acquire survived 92 dense examples on the H200 and was killed
# at S_kv = 1024. THD lengths are runtime values, so a drawn boolean (False first: it shrinks away) stretches the
# longest sequence of a deterministic THD draw to CONTENDED tokens on both sides at no compile.
CONTENDED = max(pools.THD_LONG)  # 1000 tokens: 16 KV tiles of 64 visit its last q tile (top-left causal included)


def contended(c: Case, stretch: bool) -> Case:
    """``c`` with its longest THD sequence stretched to ``CONTENDED`` Q and K/V
    tokens where ``stretch`` and ``c`` is a deterministic THD backward Case
    (the relay's race needs KV tiles that contend); otherwise ``c``."""
    if not (stretch and c.is_thd and c.deterministic):
        return c
    i = max(range(len(c.kv_lens)), key=lambda n: (c.kv_lens[n], c.q_lens[n]))
    grow = lambda lens: tuple(max(n, CONTENDED) if k == i else n for k, n in enumerate(lens))  # noqa: E731
    return c.replace(q_lens=grow(c.q_lens), kv_lens=grow(c.kv_lens))


def backward_cases(
    *, layouts: Sequence[str] = ("dense", "thd"), deterministic: Optional[bool] = None, inputs_from: Optional[str] = None, **options
) -> st.SearchStrategy[Case]:
    """Valid backward Cases over ``layouts``; ``deterministic``/``inputs_from``
    fixed or drawn; ``options`` as ``strategies.cases`` (flavors=, dtypes=, ...)."""
    det = st.booleans() if deterministic is None else st.just(deterministic)
    src = st.sampled_from(INPUT_SOURCES) if inputs_from is None else st.just(inputs_from)
    mapped = st.builds(to_backward, cases(layouts=layouts, **options), det, src, st.booleans())  # the bias batch: broadcast first
    if "thd" in layouts:
        mapped = st.builds(contended, mapped, st.booleans())
    restricted = set(options) - {"flavors", "dtypes", "geometry"}  # an option that asks for a feature: no d=64 draws
    if "dense" not in layouts or deterministic or restricted or D64_FLAVOR not in options.get("flavors", pools.FLAVORS):
        return with_generic(mapped)
    dtypes = tuple(options.get("dtypes", DTYPES))
    opts = features.Common(flavors=(D64_FLAVOR,), dtypes=dtypes)  # the runtime facts as the pools draw them

    @st.composite
    def with_d64(draw) -> Case:
        if draw(st.integers(0, D64_ODDS - 1)) < D64_ODDS - 1:
            return draw(mapped)
        g = draw(st.sampled_from(D64_GEOMETRIES))
        dtype = draw(st.sampled_from(dtypes))
        return to_backward(g.case(dtype, scale=drawn_scale(draw, g.sign, opts), seed=features.seed(draw)), False, draw(src))

    return with_generic(with_d64())


def with_generic(cases_: st.SearchStrategy[Case]) -> st.SearchStrategy[Case]:
    """``cases_`` with every backward-only feature fact drawn from its
    declaration (features.generic_features("bwd"): those no code here draws by
    hand) after the Case; ``cases_`` itself when there is none."""
    facts = features.generic_features("bwd")
    if not facts:
        return cases_

    @st.composite
    def drawn(draw) -> Case:
        return features.generic(draw, draw(cases_), facts)

    return drawn()


def based_thd_backward_cases(**options) -> st.SearchStrategy[Case]:
    """Deterministic THD backward Cases whose cu_seqlens_q starts past token 0
    (q_base >= 1 by construction: a drawn base kept, 0 moved to 1), for the
    backward_addressing property; ``options`` as ``backward_cases``."""
    return backward_cases(layouts=("thd",), deterministic=True, inputs_from="reference", **options).map(lambda c: c if c.q_base else c.replace(q_base=1))
