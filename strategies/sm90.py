"""Valid Cases of the sm90 family (ground.families.FAMILIES["sm90"]): the
native Hopper D512 forward, within what its planner serves.

Every fact is bounded by construction (no ``.filter``/``assume``), every
unusual value sits behind a switch that shrinks to off, and the pools are
ordered simplest first, so a failing example shrinks to fp16, dense, batch 1,
one head, D 64, no mask, no features. The envelope, as the planner
(``SdpaFwdDslSm90.check_support``) and ``config_sm90.validate_params`` state it:

- head dims: multiples of 8 up to 512, D_QK != D_V allowed (a pool of pairs,
  or ``head_dims="free"``); fp16 / bf16.
- heads: H_kv dividing H_q; PackGQA (dense only) with a ratio dividing 64.
- masks: causal (bottom-right only with causal), a left window, a right band
  (causal only); a dense Case without padding lengths that aligns
  bottom-right or has a window keeps S_q <= S_kv (the planner declines the
  rest as not yet supported).
- dense padding: Q and KV lengths together or neither.
- THD: no first offsets (``absent`` in the family), the natural scheduler.
- no bias, RoPE, L2 budget, base-2 / strided / half sinks, int64 prefixes.

Each dense geometry is a compile (~2 s), so the shape pools are small: the
compile tier reuses what it compiled.

Half the draws (the switch shrinks to off) take a row of a pairwise covering
design instead (``covering_rows``: ground.pairs_sm90.covering_rows over the
family's compile-key factors, rows the planner takes), so every feasible
pair of factor values meets in some row (``sdpa-conformance pairs --family
sm90``); a row gets its data seed drawn.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Optional, Sequence, Tuple

from hypothesis import strategies as st

from ground.case import DTYPES, LSE_LAYOUTS, Case
from ground.families import FAMILIES
from ground.pairs_sm90 import covering_rows as _covering

from . import pools
from .features import length_lists, maybe, seed, thd_offset

FAMILY = FAMILIES["sm90"]
# (d_qk, d_v) pairs, simplest first: the everyday dims, the smallest, unequal
# pairs either way, the whole 512-column tile.
HEAD_DIM_PAIRS: Tuple[Tuple[int, int], ...] = ((64, 64), (128, 128), (8, 8), (192, 128), (256, 256), (40, 72), (512, 512), (512, 64))
LENGTHS = (1, 64, 65, 17, 128, 129)
BATCHES = (1, 2)
SCHEDULERS = FAMILY.schedulers


def _head_dims(draw, mode: str) -> Tuple[int, int]:
    if mode == "free":
        align, most = FAMILY.head_dims
        d = st.integers(1, most // align).map(lambda n: n * align)
        return draw(d), draw(d)
    return draw(st.sampled_from(HEAD_DIM_PAIRS))


def _heads(draw, pack: bool) -> Tuple[int, int]:
    """(h_q, h_kv): H_kv, then the ratio (one dividing the PackGQA tile when packed)."""
    h_kv = draw(st.sampled_from(pools.KV_HEADS))
    groups = [g for g in pools.GROUP_SIZES if g in FAMILY.pack_gqa_ratios()] if pack else list(pools.GROUP_SIZES)
    return h_kv * draw(st.sampled_from(groups)), h_kv


def _mask(draw, windows: bool) -> dict:
    causal = draw(st.booleans())
    window_left = draw(st.sampled_from(pools.WINDOWS)) if windows and draw(st.booleans()) else -1
    window_right = draw(st.sampled_from(pools.RIGHT_BANDS)) if windows and causal and draw(st.booleans()) else -1
    bottom_right = causal and draw(st.booleans())  # the planner aligns bottom-right only a causal band
    return dict(causal=causal, bottom_right=bottom_right, window_left=window_left, window_right=window_right)


def _scale(draw) -> Optional[float]:
    if not draw(st.booleans()):
        return None
    return draw(st.sampled_from(pools.NASTY_SCALES if draw(st.booleans()) else pools.SCALES))


def _options(draw, thd: bool) -> dict:
    """Stats, sinks, scheduler and scale: each behind a switch."""
    out = {}
    no_lse, log2, layout_on, layout = draw(st.booleans()), draw(st.booleans()), draw(st.booleans()), draw(st.sampled_from(LSE_LAYOUTS))
    if no_lse:
        out["has_lse"] = False
    else:
        out.update(lse_log2=log2, lse_layout=layout if layout_on else "compact")
    out["sinks"] = draw(st.booleans())
    sched_on, sched = draw(st.booleans()), draw(st.sampled_from(SCHEDULERS))
    if sched_on and not thd:
        out["sched"] = sched
    out["scale"] = _scale(draw)
    return out


def planner_takes(case: Case) -> bool:
    """The planner's refusal the factors' exclusions cannot state (three
    facts): an unpadded bottom-right or windowed dense Case keeps S_q <= S_kv
    (check_support, api_dsl.py:5282-5288). tests/test_pairs_sm90.py plans every row."""
    return case.is_thd or case.seq_kv_lens is not None or not (case.bottom_right or case.window_left >= 0) or case.s_q <= case.s_kv


@lru_cache(maxsize=None)
def covering_rows(layout: str) -> Tuple[Case, ...]:
    """The covering design's rows of ``layout`` (module doc)."""
    return _covering(layout, planner_takes)


def _rows(layout: str, dtypes, head_dims: str, windows: bool, pack_gqa: Optional[bool]) -> Tuple[Case, ...]:
    """The rows within the strategy's options (a fixed list: nothing drawn is filtered)."""

    def fits(c: Case) -> bool:
        free = head_dims == "free" or (c.d_qk, c.d_v) in HEAD_DIM_PAIRS
        band = windows or (c.window_left < 0 and c.window_right < 0)
        return c.dtype in dtypes and free and band and (pack_gqa is None or c.pack_gqa == pack_gqa)

    return tuple(c for c in covering_rows(layout) if fits(c))


def sm90_cases(
    *,
    layouts: Sequence[str] = ("dense", "thd"),
    dtypes: Sequence[str] = DTYPES,
    head_dims: str = "pool",
    windows: bool = True,
    pack_gqa: Optional[bool] = None,
    max_tokens: int = 512,
    max_seqs: int = pools.THD_MAX_SEQS,
) -> st.SearchStrategy[Case]:
    """Valid sm90 Cases (``family="sm90"``).

    layouts: "dense" and/or "thd". dtypes: of ``ground.case.DTYPES``.
    head_dims: "pool" (``HEAD_DIM_PAIRS``: compiles recur) or "free" (any
    multiples of 8 up to 512). windows: left windows and right bands.
    pack_gqa: None draws it (dense), True forces it (dense only), False
    forbids it. max_tokens / max_seqs: THD live tokens per side, sequences."""
    layouts, dtypes = tuple(layouts), tuple(dtypes)
    if not layouts or set(layouts) - {"dense", "thd"}:
        raise ValueError(f"option 'layouts': {layouts} not within ('dense', 'thd')")
    if not dtypes or set(dtypes) - set(FAMILY.dtypes):
        raise ValueError(f"option 'dtypes': {dtypes} not within {FAMILY.dtypes}")
    if head_dims not in ("pool", "free"):
        raise ValueError(f"option 'head_dims': {head_dims!r} is not 'pool' or 'free'")
    if pack_gqa and layouts != ("dense",):
        raise ValueError("option 'pack_gqa=True': dense only (the planner declines THD PackGQA), pass layouts=('dense',)")

    @st.composite
    def draw_case(draw) -> Case:
        dtype = draw(st.sampled_from(dtypes))
        layout = draw(st.sampled_from(layouts))
        thd = layout == "thd"
        d_qk, d_v = _head_dims(draw, head_dims)
        pack = not thd and maybe(draw, pack_gqa) if pack_gqa is not False else False
        h_q, h_kv = _heads(draw, pack)
        m = _mask(draw, windows)
        facts = dict(family=FAMILY.name, layout=layout, dtype=dtype, d_qk=d_qk, d_v=d_v, h_q=h_q, h_kv=h_kv, pack_gqa=pack, **m)
        if thd:
            q_lens, kv_lens = length_lists(draw, max_seqs, max_tokens)
            facts.update(q_lens=q_lens, kv_lens=kv_lens, q_slack=thd_offset(draw, None), kv_slack=thd_offset(draw, None))
        else:
            batch = draw(st.sampled_from(BATCHES))
            s_a, s_b = draw(st.sampled_from(LENGTHS)), draw(st.sampled_from(LENGTHS))
            memory = draw(st.sampled_from(("bshd", "bhsd", "bshd_padded")))
            padded = draw(st.booleans())
            # Unpadded bottom-right or windowed graphs need S_q <= S_kv (check_support, api_dsl.py:5282-5288).
            ordered = not padded and (m["bottom_right"] or m["window_left"] >= 0)
            s_q, s_kv = (min(s_a, s_b), max(s_a, s_b)) if ordered else (s_a, s_b)
            facts.update(batch=batch, s_q=s_q, s_kv=s_kv, memory=memory)
            if padded:  # both or neither (api_dsl.py:5195); any live length in [0, S]
                lens = lambda s: draw(st.lists(st.integers(0, s), min_size=batch, max_size=batch).map(tuple))  # noqa: E731
                facts.update(seq_q_lens=lens(s_q), seq_kv_lens=lens(s_kv))
        facts.update(_options(draw, thd))
        case = Case(seed=seed(draw), **facts)
        # Drawn last, so the free Case stays the simplest example (shrinking shortens the choices).
        rows = _rows(layout, dtypes, head_dims, windows, pack_gqa)
        return draw(st.sampled_from(rows)).replace(seed=case.seed) if rows and draw(st.booleans()) else case

    return draw_case()
