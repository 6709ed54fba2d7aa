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

Each dense geometry is a compile (the shape is a ``compile()`` argument:
~2 s on the CPU, 6-14 s under 16 concurrent compiles on a GPU host), so the
geometry mode (``strategies.geometry.mode``: the profile's) decides where
the compile-key facts come from:

- ``pool`` (``ci``, ``dev``): always a row of a pairwise
  covering design (``covering_rows``: ground.pairs_sm90.covering_rows over the
  family's compile-key factors, rows the planner takes), so every feasible
  pair of factor values meets in some row (``sdpa-conformance pairs --family
  sm90``) and a run compiles at most the rows; the runtime facts of the row
  are drawn (``_runtime``: the data seed, the scale's magnitude, dense
  padding-length values, THD K/V lengths up to the row's longest and the
  K/V capacity, THD Q lengths permuted): facts the compile key leaves out
  (properties.compile_cache_sm90 judges exactly that).
- ``few`` (``pr``): a row of ``few_rows``, the fewest rows that hold every
  factor value some row holds, and the reach rows (``REACH_ROWS``, below).
- ``mixed`` (``nightly``): a row half the time (the switch shrinks to the
  free draw), free geometry otherwise.
- ``free``: free geometry, a compile per example.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Optional, Sequence, Tuple

from hypothesis import strategies as st

from ground.case import DTYPES, LSE_LAYOUTS, Case
from ground.families import FAMILIES, sm90_q_total_is_runtime
from ground.pairs_sm90 import covering_rows as _covering
from ground.pairs_sm90 import values_of

from . import geometry as geo
from . import pools
from .features import length_lists, maybe, seed, thd_offset

FAMILY = FAMILIES["sm90"]
# (d_qk, d_v) pairs, simplest first: the everyday dims, the smallest, unequal
# pairs either way, the whole 512-column tile.
HEAD_DIM_PAIRS: Tuple[Tuple[int, int], ...] = ((64, 64), (128, 128), (8, 8), (192, 128), (256, 256), (40, 72), (512, 512), (512, 64))
LENGTHS = (1, 64, 65, 17, 128, 129)
BATCHES = (1, 2)
SCHEDULERS = FAMILY.schedulers
# Scale magnitudes a row's scale takes (its sign is compiled), everyday first.
MAGNITUDES = tuple(dict.fromkeys(abs(s) for s in pools.SCALES + pools.NASTY_SCALES if s))


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


def mask_of(case: Case) -> Tuple[bool, bool, bool, bool]:
    """The masking a Case compiles: causal, a left window, a right band, bottom-right alignment."""
    return (case.causal, case.window_left >= 0, case.window_right > 0, case.bottom_right)


def planner_takes(case: Case) -> bool:
    """The planner's refusal the factors' exclusions cannot state (three
    facts): an unpadded bottom-right or windowed dense Case keeps S_q <= S_kv
    (check_support, api_dsl.py:5282-5288). tests/test_pairs_sm90.py plans every row."""
    return case.is_thd or case.seq_kv_lens is not None or not (case.bottom_right or case.window_left >= 0) or case.s_q <= case.s_kv


@lru_cache(maxsize=None)
def covering_rows(layout: str) -> Tuple[Case, ...]:
    """The covering design's rows of ``layout`` (module doc)."""
    return _covering(layout, planner_takes)


# Hand rows before the covering rows, simplest first: a pooled draw shrinks to
# row 0, the plain dense (or THD) Case, then the plain causal and padded ones.
# The last of each layout reach what the covering rows (small, mostly one
# sequence) seldom do: Q lengths past S_kv (S_q > S_kv, padded: the Q length's
# clamp is S_q), a PackGQA group of 4 under a causal mask and the LPT_L2
# scheduler (a packed row is token row // 4: the mask must see the token, not
# the row; the grid counts packed head tiles, H_q / 4, over several Q tiles and
# batch entries: a decode by H_q repeats some tiles and skips others) and several
# sequences whose Q and K/V origins differ, past a tile edge (each sequence's
# K/V read from its own cu_seqlens_kv origin). A pooled draw takes one of these
# (REACH_ROWS) one time in four: drawn among ~35 rows, a row was missed by a
# 40-draw search often enough that bugs only these rows reach survived; at one
# in four, 20 random 40-draw searches missed none (the ci pair share stays
# 96.7%).
HAND_ROWS = {
    "dense": (
        Case(family=FAMILY.name),
        Case(family=FAMILY.name, causal=True),
        Case(family=FAMILY.name, s_q=64, s_kv=64, seq_q_lens=(40,), seq_kv_lens=(40,)),
        Case(family=FAMILY.name, batch=2, s_q=129, s_kv=64, seq_q_lens=(129, 100), seq_kv_lens=(64, 30)),
        Case(family=FAMILY.name, batch=2, s_q=128, s_kv=128, h_q=8, h_kv=2, pack_gqa=True, causal=True, sched="lpt_l2"),
    ),
    "thd": (
        Case(family=FAMILY.name, layout="thd", q_lens=(1,), kv_lens=(1,)),
        Case(family=FAMILY.name, layout="thd", q_lens=(1,), kv_lens=(1,), causal=True),
        # Q capacity past the last sequence under head-major Stats (the Q total compiled there, so a row's own):
        # the O and Stats capacity the THD tails judge.
        Case(family=FAMILY.name, layout="thd", q_lens=(5, 70, 9), kv_lens=(12, 3, 80), h_q=2, h_kv=1, q_slack=7),
        # A long sequence (five 64-row Q tiles, ending on a tile edge; five K/V tiles) beside a short one: Q tile
        # indices past 1 within a sequence and a K/V walk of several tiles from a sequence origin, which the
        # covering rows never hold (the Q lengths are only permuted at runtime: the edge stays).
        Case(family=FAMILY.name, layout="thd", q_lens=(320, 2), kv_lens=(40, 290)),
    ),
}


# The hand rows after the simplest ones: what the covering rows seldom reach (above).
REACH_ROWS = {"dense": HAND_ROWS["dense"][3:], "thd": HAND_ROWS["thd"][2:]}


def pool_rows(layout: str) -> Tuple[Case, ...]:
    """The rows a pooled draw takes: the hand rows, then the covering design's."""
    return HAND_ROWS[layout] + covering_rows(layout)


@lru_cache(maxsize=None)
def few_rows(layout: str) -> Tuple[Case, ...]:
    """The rows geometry mode ``few`` (the pr profile) draws, in pool order:
    the fewest pooled rows that hold every compile-key factor value some row
    holds (``geometry.fewest`` over ground.pairs_sm90's values), and the reach
    rows. A dense row is a compile of seconds under load (module doc), so pr
    pays a handful per layout, not the pool's ~30."""
    rows = pool_rows(layout)
    kept = set(geo.fewest(rows, lambda c: c, values_of)) | set(REACH_ROWS[layout])
    return tuple(c for c in rows if c in kept)


def _rows(layout: str, dtypes, head_dims: str, windows: bool, pack_gqa: Optional[bool], among: Optional[Tuple[Case, ...]] = None) -> Tuple[Case, ...]:
    """The rows (of ``among``, default every pooled row) within the strategy's
    options (a fixed list: nothing drawn is filtered)."""

    def fits(c: Case) -> bool:
        free = head_dims == "free" or (c.d_qk, c.d_v) in HEAD_DIM_PAIRS
        band = windows or (c.window_left < 0 and c.window_right < 0)
        return c.dtype in dtypes and free and band and (pack_gqa is None or c.pack_gqa == pack_gqa)

    return tuple(c for c in (pool_rows(layout) if among is None else among) if fits(c))


def _kv_lengths(draw, n: int, longest: int) -> Tuple[int, ...]:
    """``n`` K/V lengths of at most ``longest``, one of them ``longest`` (a drawn place)."""
    lens = draw(st.lists(st.integers(0, longest), min_size=n, max_size=n))
    lens[draw(st.integers(0, n - 1))] = longest
    return tuple(lens)


def _runtime(draw, row: Case) -> Case:
    """``row`` with its runtime facts drawn (module doc): its compile key kept."""
    facts = {"seed": seed(draw)}
    if row.softmax_scale != 0 and draw(st.booleans()):  # scale_mode is the sign: the magnitude is runtime
        facts["scale"] = math.copysign(draw(st.sampled_from(MAGNITUDES)), row.softmax_scale)
    if row.is_thd:
        # The Q total can be a stride (head-major Stats), and the planner declares the longest
        # sequence of each side as S_q / S_kv, dropping a window at or past S_q + S_kv
        # (api_dsl.py:5266-5270): the Q lengths are permuted, the K/V lengths keep their longest.
        facts["q_lens"] = tuple(draw(st.permutations(row.q_lens)))
        facts["kv_lens"] = _kv_lengths(draw, len(row.kv_lens), max(row.kv_lens))
        facts["kv_slack"] = thd_offset(draw, None)
        if sm90_q_total_is_runtime(row):  # Q capacity past the last sequence: the rows the THD tails judge
            facts["q_slack"] = thd_offset(draw, None)
    elif row.seq_q_lens is not None:
        # Each entry any length, or the whole declared length (an unpadded entry: past S_kv where S_q > S_kv).
        length = lambda s: st.one_of(st.integers(0, s), st.just(s))  # noqa: E731
        lens = lambda s: tuple(draw(st.lists(length(s), min_size=row.batch, max_size=row.batch)))  # noqa: E731
        facts.update(seq_q_lens=lens(row.s_q), seq_kv_lens=lens(row.s_kv))
    return row.replace(**facts)


def _moves(row: Case) -> bool:
    """Whether a row has runtime lengths a replay can move across sequences
    (properties.launch.replay_variant): dense padded with batch > 1, THD with
    several sequences."""
    return row.n_seq > 1 if row.is_thd else row.batch > 1 and row.seq_q_lens is not None


def replay_cases(layout: str) -> st.SearchStrategy[Case]:
    """Cases for the launch properties (graph replay, launch hygiene): the
    pooled rows of ``layout`` whose lengths a replay can move (``_moves``),
    their runtime facts drawn (``_runtime``). A fixed list of rows: nothing
    drawn is filtered, and every compile is a row's."""
    rows = tuple(r for r in pool_rows(layout) if _moves(r))
    if not rows:
        raise ValueError(f"layout {layout!r}: no pooled sm90 row with lengths to move")

    @st.composite
    def draw_replay(draw) -> Case:
        return _runtime(draw, draw(st.sampled_from(rows)))

    return draw_replay()


def sm90_cases(
    *,
    layouts: Sequence[str] = ("dense", "thd"),
    dtypes: Sequence[str] = DTYPES,
    head_dims: str = "pool",
    windows: bool = True,
    pack_gqa: Optional[bool] = None,
    max_tokens: int = 512,
    max_seqs: int = pools.THD_MAX_SEQS,
    geometry: Optional[str] = None,
) -> st.SearchStrategy[Case]:
    """Valid sm90 Cases (``family="sm90"``).

    layouts: "dense" and/or "thd". dtypes: of ``ground.case.DTYPES``.
    head_dims: "pool" (``HEAD_DIM_PAIRS``: compiles recur) or "free" (any
    multiples of 8 up to 512). windows: left windows and right bands.
    pack_gqa: None draws it (dense), True forces it (dense only), False
    forbids it. max_tokens / max_seqs: THD live tokens per side, sequences.
    geometry: the geometry mode (module doc; default the profile's, and
    "free" with ``head_dims="free"``, which no row holds)."""
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
        return Case(seed=seed(draw), **facts)

    @st.composite
    def draw_row(draw) -> Case:
        layout = draw(st.sampled_from(layouts))
        reach = _rows(layout, dtypes, head_dims, windows, pack_gqa, REACH_ROWS[layout])
        rows = _rows(layout, dtypes, head_dims, windows, pack_gqa, few_rows(layout) if mode == "few" else None)
        # The reach rows one draw in four, every row otherwise (the switch shrinks to every row, row 0 first).
        pick = reach if reach and draw(st.integers(0, 3)) == 3 else rows
        if not pick:
            return draw(draw_case())
        # Every other draw structure first: the mask (a compile-time choice of the kernel's masking
        # code), then a row holding it. Uniform over rows alone, a mask few rows hold (a left window:
        # 4 of 30 dense rows) was missed by whole 40-draw searches; by mask alone, the many unmasked
        # rows (and the pairs only they hold) were drawn less. Row 0's mask comes first: either way
        # shrinks to row 0.
        if draw(st.booleans()):
            mask = draw(st.sampled_from(tuple(dict.fromkeys(map(mask_of, pick)))))
            pick = tuple(r for r in pick if mask_of(r) == mask)
        return _runtime(draw, draw(st.sampled_from(pick)))

    mode = geo.mode(geometry or ("free" if head_dims == "free" else None))
    if mode in ("pool", "few"):
        return draw_row()
    if mode == "mixed":  # the free draw first: the choice shrinks to it
        return st.one_of(draw_case(), draw_row())
    return draw_case()
