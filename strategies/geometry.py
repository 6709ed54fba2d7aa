"""Geometry pools: the compile-key facts of a Case come from a few geometries
per stratum, everything else is drawn freely per example.

Why. Each distinct compile key is a kernel compile (~1.5 s on CPU, ~2 s on an
H200), and a key is every fact the prepared entry points specialize on
(``kernels.prepared.compile_key``):

- dense: the shapes and strides of all nine operands (batch, heads, s_q,
  s_kv, head dims, memory order, bias presence and dtype, sinks presence,
  padding-length presence per side), the TemplateParams (flavor, dtype, mask
  family, score sign) and the window constexprs (left window and right band
  *sizes*);
- THD: (flavor, dtype, mask family, left window size, sinks, score sign, h,
  h_kv, sequence count, output-initialisation mode). Head dims below the
  envelope are staged to it and the right band is a launch argument: free.

Drawing all of those freely makes almost every example a new compile (ci
profile, before the pools: 954 distinct keys for 1,440 numerics+tails
examples). Here they come from a *geometry*: one row of a small per-stratum
pool (18 hand rows dense, 10 THD, plus the covering rows ``cover_rows`` computes: at
most 4 per stratum and layout by tests/test_pairs.py, today 1-2 each, 14 dense and 9 THD
in all). What is left -- the data seed, dense padding-length
values (zeros included), THD per-sequence lengths, first offsets and slack,
THD head dims and right band, the scale's magnitude within its compiled sign,
sink and bias values -- is drawn per example and never reaches a key, so a
compile buys many examples (tools/count_compile_keys.py measures it).

The derivation (``dense_pool``/``thd_pool``). ``DENSE_ROWS``/``THD_ROWS``
(``hand_dense_pool``/``hand_thd_pool``) are written by hand: every row combines several
features, and each stratum's pool holds every value of every axis at least
once -- mask families (none, causal, causal_br, swa, swa_br, swa+causal,
swa+causal_br, causal+band, causal_br+band), causal top-left and
bottom-right each with sq>skv and sq<skv, MHA/GQA/MQA, batch 1..3, on- and
off-envelope head dims (d_qk off, d_v off, both off), bias in the I/O dtype
and fp32, sinks, score sign +/-/0, the three memory orders, padding on Q, on
KV and on both. Rows name *classes*, not numbers: a length class (tiny,
small, equal at an edge, sq>skv, sq<skv, tile-aligned) and a dims class are
resolved per stratum by rotating through the class's values with the
stratum's index, and so are window and band sizes. So the 8 strata cover
different tile edges (63/64/65, 127/128/129, 191/192, 255/256/257 around
TILE_M=128 and TILE_N=64) and different window sizes, and every value of
``pools.WINDOWS``/``RIGHT_BANDS`` and of each length class appears in some
stratum. The dense-only test subsets are rows too: 5 rows per stratum are
``bshd_padded`` without padding (the tails test of pad columns), 4 pad both
sides (the padding-poison tests), so those tests share the numerics keys.
After them come the covering rows (``cover_rows``, strategies/covering.py):
the fewest rows that make every feasible pair of compile-key factor values
(ground/pairs.py) meet in some row of its layout, forward and backward.

Shrinking. Rows are ordered simplest first (row 0 is B=1 H=1 S=1x1, the
envelope, no feature) and a Case draws flavor, dtype, then the row index
(``sampled_from`` shrinks to index 0), then its runtime facts: a failure
shrinks to the smallest geometry *of its pool* that still fails, with
runtime facts minimal. The data seed picks a covering row instead of the
hand row drawn (``_covering``), so a covering row shrinks back to a hand row
with the seed. ``sdpa-conformance repro --shrink-geometry`` then
leaves the pool: it shrinks the case file's facts over free geometry
(``simpler`` below, driven by properties.shrink).

Modes. ``pool`` (the ``ci`` and ``dev`` profiles, and any profile not named
in ``PROFILE_MODES``), ``free`` (every shape fact drawn from the value pools
of ``strategies.pools``, a compile per example, the search that finds
geometries the pools lack), ``mixed`` (``nightly``: each example from the
pools or free, a drawn choice: the pools' covering design makes every
feasible pair meet, the free draws search beyond it) or ``few`` (``pr``: the
fewest hand rows holding every compile-key value of the pool, ``fewest``, plus
the covering rows). ``$SDPA_GEOMETRY`` (one of ``MODES``) overrides the
profile; a strategy's ``geometry=`` option overrides both. Options that
restrict a strategy filter the pool; a stratum whose pool they empty draws
free geometry instead (never the suite's own tests: tests/test_geometry.py).

A new compile-key fact of the Case (a new TemplateParams field the strategies
draw) rides on the rows, or pool mode loses its bound. A shape fact becomes
a column of the rows here. A feature (``fact(feature=True)``: no Stats
output, Stats layouts, schedulers and the L2 budget, RoPE, sink
units/dtype/stride, cu_seqlens dtype, and any feature declared later) adds
no row: it sits in the ``extra`` column of existing rows
(``FEATURE_DEFAULTS``, from the declarations), so the pools keep their key
count. ``features_of`` places the features the strategies draw by hand
(features.HAND_DRAWN); ``place_generic`` places every other one from its
declaration alone, each value on a few valid rows of every stratum.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from functools import lru_cache
from typing import Callable, Dict, Iterator, Optional, Sequence, Tuple

from hypothesis import strategies as st

from ground.case import FACTS, SCHEDULERS, Case, dependents, runtime_facts
from ground.contracts import broken_rules
from ground.tables import STRATA, flavor_of

from . import covering, features, pools

GEOMETRY_ENV = "SDPA_GEOMETRY"
MODES = ("pool", "free", "mixed", "few")
# Profiles whose strategies draw otherwise than from the pools alone: nightly
# draws each example from the pools (the covering design: every feasible pair
# of compile-key factor values meets) or from free geometry (the search for
# geometries the pools lack), a drawn choice that shrinks toward the pools;
# pr from the fewest hand rows that reach every compile-key factor value of
# the stratum's pool (``fewest``) and the covering rows: few compile keys, each
# reused by many examples (tests/test_pr_profile.py pins the budget).
PROFILE_MODES = {"nightly": "mixed", "pr": "few"}


def mode(requested: Optional[str] = None) -> str:
    """The geometry mode: ``requested``, else $SDPA_GEOMETRY, else the loaded
    Hypothesis profile's (``PROFILE_MODES``, default "pool")."""
    if requested is None:
        requested = os.environ.get(GEOMETRY_ENV) or None
        if requested is None:
            from hypothesis import settings

            return PROFILE_MODES.get(settings.get_current_profile_name(), "pool")
    if requested not in MODES:
        raise ValueError(f"option 'geometry' (or ${GEOMETRY_ENV}): {requested!r} is not one of {MODES}")
    return requested


# ------------------------------------------------------------------ geometries
@dataclass(frozen=True)
class DenseGeometry:
    """The compile-key facts of a dense Case (dtype and flavor: the stratum)."""

    d_qk: int
    d_v: int
    batch: int
    h_q: int
    h_kv: int
    s_q: int
    s_kv: int
    causal: bool = False
    bottom_right: bool = False
    window_left: int = -1
    window_right: int = -1
    bias: Optional[str] = None  # "input" (the I/O dtype) | "float32" | None
    sinks: bool = False
    sign: int = 1  # the score sign compiled in: +1 (default or positive scale), -1, 0
    memory: str = "bshd"
    pad_q: bool = False
    pad_kv: bool = False
    lse_log2: bool = False  # TemplateParams.stats_log2: compiled in
    extra: Tuple[Tuple[str, object], ...] = ()  # schema-3 feature facts (features_of), all compile keys

    def case(self, dtype: str, **runtime) -> Case:
        """The Case of this geometry with runtime facts at their simplest
        (full padding lengths, the sign's simplest scale, seed 0) unless given."""
        facts = dict(
            layout="dense",
            dtype=dtype,
            batch=self.batch,
            h_q=self.h_q,
            h_kv=self.h_kv,
            d_qk=self.d_qk,
            d_v=self.d_v,
            s_q=self.s_q,
            s_kv=self.s_kv,
            causal=self.causal,
            bottom_right=self.bottom_right,
            window_left=self.window_left,
            window_right=self.window_right,
            bias=None if self.bias is None else (dtype if self.bias == "input" else "float32"),
            sinks=self.sinks,
            lse_log2=self.lse_log2,
            scale=SIMPLEST_SCALE[self.sign],
            memory=self.memory,
            seq_q_lens=(self.s_q,) * self.batch if self.pad_q else None,
            seq_kv_lens=(self.s_kv,) * self.batch if self.pad_kv else None,
            **dict(self.extra),
        )
        facts.update(runtime)
        return Case(**facts)


@dataclass(frozen=True)
class ThdGeometry:
    """The compile-key facts of a THD Case (dtype and flavor: the stratum)."""

    h_q: int
    h_kv: int
    n_seq: int
    causal: bool = False
    bottom_right: bool = False
    window_left: int = -1
    sinks: bool = False
    sign: int = 1
    lse_log2: bool = False
    extra: Tuple[Tuple[str, object], ...] = ()  # schema-3 feature facts (features_of)

    def case(self, flavor: str, dtype: str, **runtime) -> Case:
        d_qk, d_v = pools.FLAVOR_ENVELOPES[flavor]
        facts = dict(
            layout="thd",
            dtype=dtype,
            h_q=self.h_q,
            h_kv=self.h_kv,
            d_qk=d_qk,
            d_v=d_v,
            q_lens=(1,) * self.n_seq,
            kv_lens=(1,) * self.n_seq,
            causal=self.causal,
            bottom_right=self.bottom_right,
            window_left=self.window_left,
            sinks=self.sinks,
            lse_log2=self.lse_log2,
            scale=SIMPLEST_SCALE[self.sign],
            **dict(self.extra),
        )
        facts.update(runtime)
        return Case(**facts)


# Scales by compiled sign: the magnitude is a launch argument (kernel_scale).
POSITIVE_SCALES = tuple(s for s in pools.SCALES + pools.NASTY_SCALES if s > 0)
NEGATIVE_SCALES = tuple(s for s in pools.NASTY_SCALES if s < 0)
SIMPLEST_SCALE = {1: None, -1: NEGATIVE_SCALES[0], 0: 0.0}


# ------------------------------------------------------------------ the rows
# Length classes, (s_q, s_kv) from the strategies' length pools; a row's pair
# is CLASS[(stratum + row) % len(CLASS)].
LENGTHS: Dict[str, Tuple[Tuple[int, int], ...]] = {
    "tiny": ((1, 1),),
    "small": ((5, 16), (33, 2), (16, 33), (2, 5), (33, 33), (16, 1), (2, 2), (5, 33)),
    "equal": ((65, 65), (64, 64), (127, 127), (129, 129), (128, 128), (63, 63), (257, 257), (192, 192)),
    "q>kv": ((129, 63), (256, 65), (65, 1), (257, 128), (191, 127), (128, 64), (255, 129), (64, 63)),
    "q<kv": ((63, 257), (1, 129), (65, 192), (127, 255), (64, 128), (1, 65), (129, 256), (33, 64)),
    "aligned": ((128, 64), (256, 192), (128, 128), (256, 64), (128, 256), (256, 256), (128, 192), (256, 128)),
}
# Mask families: (causal, bottom_right, left window?, right band?); window and
# band sizes rotate through pools.WINDOWS / pools.RIGHT_BANDS.
MASKS = {
    "none": (False, False, False, False),
    "causal": (True, False, False, False),
    "causal_br": (True, True, False, False),
    "swa": (False, False, True, False),
    "swa_br": (False, True, True, False),
    "swa+causal": (True, False, True, False),
    "swa+causal_br": (True, True, True, False),
    "band": (True, False, False, True),
    "band_br": (True, True, False, True),
}
DIMS = ("on", "off_qk", "off_v", "off_both")

# fmt: off
# Dense rows, simplest first. Columns: batch, (h_q, h_kv), length class, mask,
# bias, sinks, sign, memory, padding (None/"q"/"kv"/"both"), dims class.
# T: a tails row (bshd_padded, no padding); P: a padding-poison row (both sides).
# Every mask family sits on two rows and every other value on two or more: a
# test's examples do not always reach every row (Hypothesis' draws clump), and
# a feature should not hang on one row. Two of the four P rows carry a bias:
# the tests that draw P rows only (padding poison, the backward's tails) judge
# dead bias cells and dBias under padding there (with none, 3 of 160 ci
# backward tails draws had a bias, and the dBias leaks under padding went
# unseen until a 10x search).
DENSE_ROWS = (
    (1, (1, 1), "tiny",    "none",          None,      False,  1, "bshd",        None,   "on"),        # 0 minimal
    (1, (1, 1), "small",   "causal",        None,      False,  1, "bshd_padded", None,   "on"),        # 1 T
    (2, (2, 1), "equal",   "swa",           None,      False,  1, "bhsd",        None,   "on"),        # 2
    (2, (1, 1), "small",   "none",          None,      False,  1, "bshd",        "both", "on"),        # 3 P
    (2, (2, 2), "q>kv",    "causal",        "input",   False,  1, "bshd",        None,   "on"),        # 4
    (1, (4, 2), "q<kv",    "swa+causal",    None,      True,  -1, "bshd_padded", None,   "off_qk"),    # 5 T
    (2, (2, 1), "q>kv",    "causal_br",     "float32", False,  1, "bhsd",        None,   "on"),        # 6
    (2, (2, 2), "q<kv",    "causal_br",     "input",   False,  1, "bshd",        "both", "on"),        # 7 P
    (1, (3, 1), "aligned", "swa",           None,      True,   1, "bshd",        "q",    "off_v"),     # 8
    (1, (1, 1), "q<kv",    "swa_br",        "input",   False,  0, "bshd_padded", None,   "on"),        # 9 T
    (3, (2, 1), "equal",   "swa+causal",    None,      False, -1, "bhsd",        "both", "off_both"),  # 10 P
    (1, (8, 2), "q>kv",    "band",          "float32", True,   1, "bshd_padded", None,   "on"),        # 11 T
    (2, (4, 2), "aligned", "swa_br",        "input",   True,   0, "bshd",        None,   "off_qk"),    # 12
    (1, (6, 2), "q<kv",    "band_br",       None,      False,  1, "bhsd",        "kv",   "on"),        # 13
    (1, (4, 1), "small",   "swa+causal_br", "float32", False, -1, "bshd_padded", None,   "off_v"),     # 14 T
    (2, (2, 1), "q>kv",    "swa+causal_br", "float32", True,   1, "bshd",        "both", "on"),        # 15 P
    (3, (4, 2), "q<kv",    "band",          "input",   False,  1, "bshd",        "q",    "off_both"),  # 16 L2 split: l2_split_lengths
    (2, (8, 2), "q>kv",    "band_br",       None,      True,  -1, "bhsd",        "kv",   "off_v"),     # 17
)
# THD rows, simplest first: (h_q, h_kv), sequence count, mask, sinks, sign.
# Right bands are launch arguments: drawn per example on the causal rows.
THD_ROWS = (
    ((1, 1), 1, "none",          False,  1),  # 0 minimal
    ((2, 1), 2, "causal",        False,  1),  # 1
    ((2, 2), 1, "causal_br",     True,   1),  # 2
    ((4, 2), 3, "swa",           False, -1),  # 3
    ((3, 1), 2, "swa_br",        True,   0),  # 4
    ((4, 1), 4, "swa+causal_br", False,  1),  # 5
    ((8, 2), 4, "causal",        True,  -1),  # 6
    ((6, 2), 3, "none",          True,   1),  # 7
    ((2, 1), 3, "swa+causal",    False,  0),  # 8
    ((4, 2), 2, "causal_br",     False, -1),  # 9
)
# fmt: on


def _dims(flavor: str, kind: str, i: int) -> Tuple[int, int]:
    env = pools.FLAVOR_ENVELOPES[flavor]
    if kind == "on":
        return env
    off = pools.OFF_ENVELOPE_DIMS[flavor]
    pick = {
        "off_qk": [p for p in off if p[0] != env[0] and p[1] == env[1]],
        "off_v": [p for p in off if p[0] == env[0] and p[1] != env[1]],
        "off_both": [p for p in off if p[0] != env[0] and p[1] != env[1]],
    }[kind]
    return pick[(i * 7) % len(pick)]  # a stride of 7 spreads the picks over the list


def _stratum(flavor: str, dtype: str) -> int:
    return STRATA.index((flavor, dtype))


def _mask(name: str, i: int) -> dict:
    causal, br, window, band = MASKS[name]
    return dict(
        causal=causal,
        bottom_right=br,
        window_left=pools.WINDOWS[i % len(pools.WINDOWS)] if window else -1,
        window_right=pools.RIGHT_BANDS[i % len(pools.RIGHT_BANDS)] if band else -1,
    )


def _lse_log2(s: int, r: int) -> bool:
    """Base-2 Stats (a compile key) on every third row, rotating with the
    stratum ``s``: never on a stratum's first (simplest) row ``r = 0``, so
    shrinking leaves it."""
    return r > 0 and (s + r) % 3 == 2


# Dense rows that LPT-L2 at 1 MiB splits into L2 blocks with a partial last
# block, in every stratum (row 16: B=3, H_kv=2, so 6 (batch, kv head) groups).
# The kernel sizes a block as active_groups = 1 MiB // (S_kv * (D_QK + D_V) * 2)
# groups of the *envelope* dims, clamped to the group count (prefill_f16.py
# SCHED_LPT_L2), so a row's own lengths decide: S_kv in (2^20/(5*g), 2^20/(4*g)]
# bytes-per-key g gives 4 groups per block, blocks of 4 and 2; S_q past one
# TILE_M gives each group two q tiles, the only way a block's decode (rank over
# groups x heads) can go wrong (one q tile: every rank is row 0).
L2_SPLIT_ROWS = (16,)
L2_SPLIT_MIB = 1
L2_SPLIT_GROUPS_PER_BLOCK = 4
L2_SPLIT_SQ = (129, 192)  # > TILE_M = 128 (config_sm80.py: every flavor), < every split S_kv


def l2_split_lengths(flavor: str, s: int) -> Tuple[int, int]:
    """(s_q, s_kv) of an L2 split row in stratum ``s``: the largest S_kv whose
    block holds L2_SPLIT_GROUPS_PER_BLOCK groups (fp16 strata), one key less on
    bf16 strata (an unaligned tile edge), and a q length past one q tile."""
    d_qk, d_v = pools.FLAVOR_ENVELOPES[flavor]
    s_kv = (L2_SPLIT_MIB << 20) // (L2_SPLIT_GROUPS_PER_BLOCK * (d_qk + d_v) * 2) - s % 2
    return L2_SPLIT_SQ[s // 2 % 2], s_kv


DENSE_SINK_ROWS = tuple(r for r, row in enumerate(DENSE_ROWS) if row[5])
THD_SINK_ROWS = tuple(r for r, row in enumerate(THD_ROWS) if row[3])
DENSE_PLAIN_ROWS = tuple(r for r in range(1, len(DENSE_ROWS)) if r not in DENSE_SINK_ROWS + L2_SPLIT_ROWS)
THD_PLAIN_ROWS = tuple(r for r in range(1, len(THD_ROWS)) if r not in THD_SINK_ROWS)


def features_of(layout: str, s: int, r: int, *, rope_ok: bool = False, rope_long: bool = False) -> Tuple[Tuple[str, object], ...]:
    """The schema-3 feature facts of pool row ``r`` of stratum ``s`` (rows
    keep their count: these facts ride on existing rows, no new compile key
    per value). Facts only the prepared entry points take (``Fact.adapters``:
    no Stats output, LSE layouts, sink units/dtype/layout, cu_seqlens dtype,
    the L2 budget) sit together on a few rows per pool, rotating with the
    stratum, so that ``--adapter=wrapper`` runs still serve most rows; the
    scheduler and RoPE (both adapters) rotate over every row, and RoPE also
    sits on ``rope_long``, the stratum's first and last rows with a scale past one KV tile (its K
    positions matter only there: a tile-local position is right below TILE_N
    keys). Each stratum's
    pool holds every value (tests/test_geometry.py). Row 0 keeps every
    default (shrinking leaves them)."""
    out = {}
    if r == 0:
        return ()
    if layout == "dense":
        sinks, plain = DENSE_SINK_ROWS, DENSE_PLAIN_ROWS
        out["sched"] = "lpt_l2" if r in L2_SPLIT_ROWS else SCHEDULERS[(s + r) % 4]
        if r in L2_SPLIT_ROWS:
            out["sched_l2_mib"] = L2_SPLIT_MIB
        if rope_ok and ((s + r) % 3 == 1 or rope_long):
            out["rope"] = True
    else:
        sinks, plain = THD_SINK_ROWS, THD_PLAIN_ROWS
    # Rows already prepared-only (base-2 Stats, _lse_log2) carry the sink and
    # layout facts first; a row without Stats must not be one (lse_log2 needs an LSE).
    rot = lambda rows: sorted(rows, key=lambda x: (not _lse_log2(s, x), (rows.index(x) - s) % len(rows)))  # noqa: E731
    order = rot(sinks)
    plain = [x for x in plain if not _lse_log2(s, x)]
    # The sink rows in ``order``: base-2 sinks, stride 2 and 0, fp16/bf16 sinks,
    # padded and token-major Stats, int64 cu_seqlens; THD puts each value on two
    # rows (a test's draws clump: a value on one row may go unseen in a stratum).
    sink_rows = {
        0: dict(sink_log2=True, sink_layout="strided", lse_layout="padded", sink_dtype="float16"),
        1: dict(sink_layout="broadcast", lse_layout="token_major", sink_dtype="bfloat16"),
        2: dict(sink_log2=True, sink_layout="broadcast", lse_layout="padded", sink_dtype="bfloat16"),
        3: dict(sink_layout="strided", lse_layout="token_major", sink_dtype="float16"),
    }
    # Dense keeps two sink rows for the wrapper (which takes none of these facts).
    if r in order and order.index(r) in sink_rows and (layout == "thd" or order.index(r) < 2):
        out.update(sink_rows[order.index(r)])
        if layout == "thd":
            out["prefix_dtype"] = "int64"
        else:
            out.pop("sink_dtype")
    elif r in (plain[s % len(plain)], plain[(s + len(plain) // 2) % len(plain)] if layout == "dense" else None):
        out["has_lse"] = False  # no Stats output at all
    return tuple(sorted((k, v) for k, v in out.items() if FEATURE_DEFAULTS[k] != v))


def _columns() -> frozenset:
    """The facts the geometries' own fields name (``DenseGeometry``/``ThdGeometry``)."""
    return frozenset(f.name for g in (DenseGeometry, ThdGeometry) for f in dataclasses.fields(g)) & set(FACTS)


# The ``extra`` column's facts and their defaults, from their declarations: every
# feature a forward Case takes (``fact(feature=True)``) that is no column of its own.
FEATURE_DEFAULTS = {f.name: f.default for f in FACTS.values() if f.feature and "fwd" in f.direction and f.name not in _columns()}


def extra_of(case: Case) -> Tuple[Tuple[str, object], ...]:
    """The ``extra`` column (schema-3 feature facts off their defaults) of the row ``case`` was drawn from."""
    return tuple(sorted((k, getattr(case, k)) for k, v in FEATURE_DEFAULTS.items() if getattr(case, k) != v))


@lru_cache(maxsize=None)
def hand_dense_pool(flavor: str, dtype: str) -> Tuple[DenseGeometry, ...]:
    """The stratum's hand-written dense rows, simplest first (see the module doc)."""
    s = _stratum(flavor, dtype)
    out = []
    shapes = [l2_split_lengths(flavor, s) if r in L2_SPLIT_ROWS else LENGTHS[row[2]][(s + r) % len(LENGTHS[row[2]])] for r, row in enumerate(DENSE_ROWS)]
    rope_ok = [pad is None and dims == "on" for *_, pad, dims in DENSE_ROWS]
    # RoPE's K positions matter past the first KV tile only, and only with a scale (sign 0 rows run
    # scale 0: q.k, rotated or not, never reaches a logit): the first and the last such rows always
    # carry it. (The H200, 2026-12-03: a tile-local-position mutant fails numerics on every such row
    # but the scale-0 ones, and survived 320 numerics_dense draws while they were 9 of 144 rows.)
    reach = [r for r in range(1, len(DENSE_ROWS)) if rope_ok[r] and shapes[r][1] > pools.TILE_N and DENSE_ROWS[r][6] != 0]
    long_rope = {reach[0], reach[-1]} if reach else set()
    for r, (batch, (h_q, h_kv), length, mask, bias, sinks, sign, memory, pad, dims) in enumerate(DENSE_ROWS):
        s_q, s_kv = shapes[r]
        d_qk, d_v = _dims(flavor, dims, s + r)
        extra = features_of("dense", s, r, rope_ok=rope_ok[r], rope_long=r in long_rope)
        out.append(
            DenseGeometry(
                d_qk=d_qk,
                d_v=d_v,
                batch=batch,
                h_q=h_q,
                h_kv=h_kv,
                s_q=s_q,
                s_kv=s_kv,
                bias=bias,
                sinks=sinks,
                sign=sign,
                memory=memory,
                pad_q=pad in ("q", "both"),
                pad_kv=pad in ("kv", "both"),
                lse_log2=_lse_log2(s, r),
                extra=extra,
                **_mask(mask, s + r),
            )
        )
    return place_generic(out, s, lambda g: g.case(dtype))


@lru_cache(maxsize=None)
def hand_thd_pool(flavor: str, dtype: str) -> Tuple[ThdGeometry, ...]:
    """The stratum's hand-written THD rows, simplest first."""
    s = _stratum(flavor, dtype)
    out = []
    for r, ((h_q, h_kv), n_seq, mask, sinks, sign) in enumerate(THD_ROWS):
        m = _mask(mask, s + r)
        extra = features_of("thd", s, r)
        out.append(ThdGeometry(h_q, h_kv, n_seq, m["causal"], m["bottom_right"], m["window_left"], sinks, sign, _lse_log2(s, r), extra))
    return place_generic(out, s, lambda g: g.case(flavor, dtype))


# Rows of a pool that carry each value of a generically placed feature.
GENERIC_ROWS = 2


def place_generic(rows: list, s: int, case_of: Callable) -> tuple:
    """``rows`` (a stratum's pool, simplest first) with each value of every
    feature fact drawn from its declaration (features.generic_features) placed
    in the ``extra`` column of ``GENERIC_ROWS`` rows, from a start that rotates
    with the stratum ``s``, where the row's Case stays valid (its feature and
    contract rules) and distinct. Row 0 keeps every default. No such facts,
    the rows as they are."""
    rows = list(rows)
    n = len(rows)
    for k, f in enumerate(features.generic_features("fwd")):
        for j, value in enumerate(f.other_values()):
            placed = 0
            for i in range(n - 1):
                r = 1 + (s + 3 * k + 5 * j + i) % (n - 1)
                extra = dict(rows[r].extra)
                if f.name in extra:
                    continue
                g = dataclasses.replace(rows[r], extra=tuple(sorted({**extra, f.name: value}.items())))
                c = case_of(g)
                if c.structural_problem() is None and not broken_rules(c) and g not in rows:
                    rows[r] = g
                    placed += 1
                    if placed == GENERIC_ROWS:
                        break
    return tuple(rows)


# ------------------------------------------------------------- covering rows
# The pools are a pairwise covering design over the compile-key factors
# (ground.pairs): the hand rows above, then per stratum the rows
# strategies.covering adds until every feasible pair of factor values meets
# in some row, forward and backward (tests/test_pairs.py). The covering fixes a
# row's factor values (a class, for a shape: batch one or several, MHA/GQA/MQA,
# which length is longer); here each class gets its shape, rotating with the
# stratum and the row: heads up to 8:1 (GQA 16/2, MQA 8/1), tile-edge lengths,
# the sequence count, window and band sizes.
COVER_BATCHES = {"one": (1,), "several": (2, 3)}
COVER_HEADS = {"MHA": ((2, 2), (1, 1), (4, 4)), "GQA": ((16, 2), (4, 2), (6, 2)), "MQA": ((8, 1), (4, 1), (3, 1))}
COVER_LENGTHS = {"equal": LENGTHS["equal"], "q>kv": LENGTHS["q>kv"], "q<kv": LENGTHS["q<kv"]}
COVER_SEQS = {"one": (1,), "several": (2, 3, 4)}


@lru_cache(maxsize=None)
def dense_pool(flavor: str, dtype: str) -> Tuple[DenseGeometry, ...]:
    """The stratum's dense geometries: the hand rows (simplest first), then its covering rows."""
    return hand_dense_pool(flavor, dtype) + cover_rows("dense")[flavor, dtype]


@lru_cache(maxsize=None)
def thd_pool(flavor: str, dtype: str) -> Tuple[ThdGeometry, ...]:
    """The stratum's THD geometries: the hand rows (simplest first), then its covering rows."""
    return hand_thd_pool(flavor, dtype) + cover_rows("thd")[flavor, dtype]


@lru_cache(maxsize=None)
def cover_rows(layout: str) -> Dict[Tuple[str, str], tuple]:
    """(flavor, dtype) -> the covering rows of ``layout`` (strategies.covering), as geometries."""
    hand = {(f, d): hand_dense_pool(f, d) if layout == "dense" else hand_thd_pool(f, d) for f, d in STRATA}
    seeds = [g.case(d) if layout == "dense" else g.case(f, d) for (f, d), rows in hand.items() for g in rows]
    out = {}
    for (f, d), cases in covering.complete(layout, STRATA, seeds).items():
        s, rows = _stratum(f, d), list(hand[f, d])
        for c in cases:
            g = _cover_geometry(c, s, len(rows), rows)
            rows.append(g)
        out[f, d] = tuple(rows[len(hand[f, d]) :])
    return out


def _cover_geometry(c: Case, s: int, r: int, taken: list):
    """The geometry of covering row ``c`` as row ``r`` of stratum ``s``: its
    factor values kept, its shapes rotated within their classes (the next
    rotation where the row would repeat one of ``taken``)."""
    sign = (c.softmax_scale > 0) - (c.softmax_scale < 0)
    heads = COVER_HEADS["MHA" if c.h_q == c.h_kv else "MQA" if c.h_kv == 1 else "GQA"]
    for k in range(12):
        i = s + r + k
        h_q, h_kv = heads[i % len(heads)]
        window_left = pools.WINDOWS[i % len(pools.WINDOWS)] if c.window_left >= 0 else -1
        if c.is_thd:
            seqs = COVER_SEQS["one" if c.n_seq == 1 else "several"]
            g = ThdGeometry(h_q, h_kv, seqs[i % len(seqs)], c.causal, c.bottom_right, window_left, c.sinks, sign, c.lse_log2, extra_of(c))
        else:
            batches = COVER_BATCHES["one" if c.batch == 1 else "several"]
            lengths = COVER_LENGTHS["equal" if c.s_q == c.s_kv else "q>kv" if c.s_q > c.s_kv else "q<kv"]
            s_q, s_kv = lengths[i % len(lengths)]
            g = DenseGeometry(
                d_qk=c.d_qk,
                d_v=c.d_v,
                batch=batches[i % len(batches)],
                h_q=h_q,
                h_kv=h_kv,
                s_q=s_q,
                s_kv=s_kv,
                causal=c.causal,
                bottom_right=c.bottom_right,
                window_left=window_left,
                window_right=pools.RIGHT_BANDS[i % len(pools.RIGHT_BANDS)] if c.window_right >= 0 else -1,
                bias=None if c.bias is None else "input" if c.bias == c.dtype else c.bias,
                sinks=c.sinks,
                sign=sign,
                memory=c.memory,
                pad_q=c.seq_q_lens is not None,
                pad_kv=c.seq_kv_lens is not None,
                lse_log2=c.lse_log2,
                extra=extra_of(c),
            )
        if g not in taken:
            return g
    raise ValueError(f"covering row {c.describe()}: every shape rotation repeats a row of its pool")


# ------------------------------------------------------------- option filters
def dense_allowed(
    g: DenseGeometry, flavor: str, opts: features.Common, *, bias, bias_dtypes, padding, memory, edges, max_batch, max_tokens, min_batch: int = 1
) -> bool:
    """Whether ``g`` honours a dense strategy's options (the free draw's rules)."""
    env = pools.FLAVOR_ENVELOPES[flavor]
    tokens = max_tokens if max_tokens is not None else 1 << 30
    checks = (
        opts.off_envelope is None or opts.off_envelope == ((g.d_qk, g.d_v) != env),
        opts.causal is None or opts.causal == g.causal,
        opts.windows or (g.window_left < 0 and g.window_right < 0),
        opts.sinks is None or bool(opts.sinks) == g.sinks,
        opts.lse_log2 is None or bool(opts.lse_log2) == g.lse_log2,
        opts.scales or g.sign == 1,
        g.h_q <= opts.max_heads,
        (g.bias is None and not bias) or (g.bias is not None and bias is not False and g.bias in bias_dtypes),
        padding is None or (g.pad_q and g.pad_kv) == padding and (g.pad_q or g.pad_kv) == padding,
        g.memory in memory,
        edges or (g.s_q in pools.SMALL_LENGTHS and g.s_kv in pools.SMALL_LENGTHS),
        min_batch <= g.batch <= max_batch and g.batch * max(g.s_q, g.s_kv) <= tokens,
    )
    return all(checks)


def thd_allowed(g: ThdGeometry, opts: features.Common, *, max_seqs: int) -> bool:
    checks = (
        opts.causal is None or opts.causal == g.causal,
        opts.windows or g.window_left < 0,
        opts.sinks is None or bool(opts.sinks) == g.sinks,
        opts.lse_log2 is None or bool(opts.lse_log2) == g.lse_log2,
        opts.scales or g.sign == 1,
        g.h_q <= opts.max_heads,
        g.n_seq <= max_seqs,
    )
    return all(checks)


# ------------------------------------------------------------------ drawing
# The runtime draws after the row index have one shape whatever the row (the
# same choices in the same order, unused ones discarded): lowering the index
# then never lengthens the example, so Hypothesis' shrinker can move a failure
# to a smaller row that still fails. Of a fixed-size draw a row uses the *last*
# entries (per-batch padding lengths, THD sequences): shrinking pushes the
# unusual values to the end of a sequence, where a smaller row still sees them.
LENGTH_CHOICES = max(pools.EDGE_LENGTHS + pools.SMALL_LENGTHS) + 1
MAX_BATCH = max(pools.BATCHES)


def scale(draw, sign: int, opts: features.Common) -> Optional[float]:
    """A scale of the compiled ``sign``: the default (None) or, behind a
    boolean, one of the positive scales; a negative one; or 0."""
    return _scale_of(_scale_draws(draw, opts), sign)


def _scale_draws(draw, opts: features.Common) -> Tuple[bool, int]:
    custom = bool(opts.scales and draw(st.booleans()))
    return custom, draw(st.integers(0, len(POSITIVE_SCALES) * len(NEGATIVE_SCALES) - 1)) if custom else 0


def _scale_of(drawn: Tuple[bool, int], sign: int) -> Optional[float]:
    custom, pick = drawn
    if sign > 0:
        return POSITIVE_SCALES[pick % len(POSITIVE_SCALES)] if custom else None
    return NEGATIVE_SCALES[pick % len(NEGATIVE_SCALES)] if sign < 0 else 0.0


def padding(draw, on: bool, batch: int, physical: int) -> Optional[Tuple[int, ...]]:
    """Live lengths per batch entry in [1, physical], or [0, physical] behind a
    boolean (the free draw's rule), for a geometry with this padding operand."""
    return _padding_of(_padding_draws(draw), on, batch, physical)


def _padding_draws(draw) -> Tuple[int, Tuple[int, ...]]:
    return 0 if draw(st.booleans()) else 1, draw(st.tuples(*[st.integers(0, LENGTH_CHOICES - 1)] * MAX_BATCH))


def _padding_of(drawn: Tuple[int, Tuple[int, ...]], on: bool, batch: int, physical: int) -> Optional[Tuple[int, ...]]:
    low, raw = drawn
    return tuple(low + v % (physical - low + 1) for v in raw[MAX_BATCH - batch :]) if on else None


def _split(rows: tuple, hand: int) -> Tuple[tuple, tuple]:
    """A stratum's allowed rows as (the rows an example draws first, the
    covering rows its last draw may take instead): the hand rows and the
    covering rows; the covering rows alone first where the options leave no
    hand row (``hand``: the stratum's hand row count)."""
    first, more = rows[:hand], rows[hand:]
    return (first, more) if first else (more, ())


def _covering(g, first: tuple, more: tuple, seed: int):
    """The row an example runs: ``g``, drawn from ``first``, or a covering
    row, picked by the example's data seed (``seed`` modulo the row count:
    every row about equally likely). No draw of its own, so the hand rows'
    draws are what they were without covering rows, and a failure on a
    covering row shrinks with the seed (toward 0: the hand row ``g``)."""
    j = seed % (len(first) + len(more))
    return more[j - len(first)] if j >= len(first) else g


def fewest(rows: tuple, case_of: Callable, values_of: Optional[Callable] = None) -> tuple:
    """The fewest of ``rows`` (a greedy set cover, ties to the simpler row)
    whose Cases hold every compile-key factor value (``values_of``, default
    ground.pairs': the sm80 family's) some row holds: each template branch
    and shape class the pool reaches, reached once. Kept in pool order, so
    the simplest row stays first (shrinking)."""
    if values_of is None:
        from ground.pairs import values_of

    held = [set(values_of(case_of(g))) for g in rows]
    missing, kept = set().union(*held) if held else set(), set()
    while missing:
        best = max(range(len(rows)), key=lambda i: (len(held[i] & missing), -i))
        kept.add(best)
        missing -= held[best]
    return tuple(g for i, g in enumerate(rows) if i in kept)


def _strata(opts: features.Common):
    return [(f, d) for f in opts.flavors for d in opts.dtypes]


def _few(table: dict, case_of: Callable) -> dict:
    """``table`` with each stratum's hand rows cut to ``fewest`` (the covering rows kept)."""
    return {(f, d): (fewest(first, lambda g: case_of(g, f, d)), more) if first else (first, more) for (f, d), (first, more) in table.items()}


def _draw_stratum(draw, opts: features.Common, table: dict) -> tuple:
    """(flavor, dtype, its (first, more) pool rows): the stratum drawn first, so a row index shrinks within it."""
    flavor = draw(st.sampled_from(opts.flavors))
    dtype = draw(st.sampled_from(opts.dtypes))
    return flavor, dtype, table[(flavor, dtype)]


# The pooled strategies' draws, decorated once at import: st.composite reads
# a function's source each time it decorates one (some 2 ms), which a
# definition nested in pooled_dense / pooled_thd paid on every example.
@st.composite
def _pooled_dense_case(draw, opts: features.Common, table: dict, fallback: dict) -> Case:
    """One pooled dense Case (pooled_dense's strategy)."""
    flavor, dtype, (first, more) = _draw_stratum(draw, opts, table)
    if not first:
        return draw(fallback[(flavor, dtype)])
    g = draw(st.sampled_from(first))
    seq_q, seq_kv, sc, seed = _padding_draws(draw), _padding_draws(draw), _scale_draws(draw, opts), features.seed(draw)
    g = _covering(g, first, more, seed)
    return g.case(
        dtype,
        seq_q_lens=_padding_of(seq_q, g.pad_q, g.batch, g.s_q),
        seq_kv_lens=_padding_of(seq_kv, g.pad_kv, g.batch, g.s_kv),
        scale=_scale_of(sc, g.sign),
        seed=seed,
    )


@st.composite
def _pooled_thd_case(draw, opts: features.Common, table: dict, fallback: dict, max_tokens: int, max_seqs: int, zeros: bool, offsets: Optional[bool]) -> Case:
    """One pooled THD Case (pooled_thd's strategy)."""
    flavor, dtype, (first, more) = _draw_stratum(draw, opts, table)
    if not first:
        return draw(fallback[(flavor, dtype)])
    g = draw(st.sampled_from(first))
    _, d_qk, d_v = features.head_dims(draw, dataclasses.replace(opts, flavors=(flavor,)))
    n = min(max_seqs, pools.THD_MAX_SEQS)  # as many pairs as the largest row, the last n_seq kept
    lens = features.length_lists(draw, n, max_tokens, zeros, min_seqs=n)
    band = draw(st.sampled_from(pools.RIGHT_BANDS)) if opts.windows and draw(st.booleans()) else -1
    sc = _scale_draws(draw, opts)
    q_base, kv_base = features.thd_offset(draw, offsets), features.thd_offset(draw, offsets)
    q_slack, kv_slack = features.thd_offset(draw, offsets), features.thd_offset(draw, offsets)
    seed = features.seed(draw)
    g = _covering(g, first, more, seed)
    return g.case(
        flavor,
        dtype,
        d_qk=d_qk,
        d_v=d_v,
        q_lens=lens[0][-g.n_seq :],
        kv_lens=lens[1][-g.n_seq :],
        window_right=band if g.causal else -1,
        scale=_scale_of(sc, g.sign),
        q_base=q_base,
        kv_base=kv_base,
        q_slack=q_slack,
        kv_slack=kv_slack,
        seed=seed,
    )


def pooled_dense(opts: features.Common, free: Callable[[str, str], st.SearchStrategy[Case]], *, few: bool = False, **options) -> st.SearchStrategy[Case]:
    """Dense Cases whose compile-key facts come from the strata's pools
    (``options``: dense_cases' own, see ``dense_allowed``); ``free(flavor,
    dtype)`` serves a stratum whose pool the options empty; ``few``: the
    hand rows cut to ``fewest``."""
    table = {(f, d): _split(tuple(g for g in dense_pool(f, d) if dense_allowed(g, f, opts, **options)), len(hand_dense_pool(f, d))) for f, d in _strata(opts)}
    table = _few(table, lambda g, f, d: g.case(d)) if few else table
    fallback = {k: free(*k) for k, (first, _) in table.items() if not first}
    return _pooled_dense_case(opts, table, fallback)


def pooled_thd(
    opts: features.Common,
    free: Callable[[str, str], st.SearchStrategy[Case]],
    *,
    max_tokens: int,
    max_seqs: int,
    zeros: bool,
    offsets: Optional[bool],
    few: bool = False,
) -> st.SearchStrategy[Case]:
    """THD Cases whose compile-key facts come from the strata's pools; head
    dims, lengths, offsets, the right band and the scale's magnitude free.
    ``free(flavor, dtype)`` serves a stratum whose pool the options empty
    (varlen.thd_cases' free draw); ``few``: the hand rows cut to ``fewest``."""
    table = {(f, d): _split(tuple(g for g in thd_pool(f, d) if thd_allowed(g, opts, max_seqs=max_seqs)), len(hand_thd_pool(f, d))) for f, d in _strata(opts)}
    table = _few(table, lambda g, f, d: g.case(f, d)) if few else table
    # every THD row of a stratum is excluded only by options no test uses
    fallback = {k: free(*k) for k, (first, _) in table.items() if not first}
    return _pooled_thd_case(opts, table, fallback, max_tokens, max_seqs, zeros, offsets)


# ----------------------------------------------------------- leaving the pool
def _smaller(value: int, ladder: Sequence[int]) -> list:
    return [n for n in sorted(set(ladder)) if n < value]


def simpler(case: Case) -> Iterator[Case]:
    """Cases one step simpler than ``case``, biggest steps first, over free
    geometry (any value of the strategies' value pools, and any smaller
    length); each is well formed and breaks no contract rule (the caller still
    asks the kernels' validators: ``kernels.specialize``). ``sdpa-conformance
    repro --shrink-geometry`` keeps the first that still fails and asks again,
    until none does: a greedy shrink of the facts, blind to the pools a run
    drew from (properties.shrink)."""
    from ground.contracts import broken_rules

    seen = {case}
    for cand in _candidates(case):
        if cand not in seen and cand.structural_problem() is None and not broken_rules(cand):
            seen.add(cand)
            yield cand


def _candidates(c: Case) -> Iterator[Case]:
    env = pools.FLAVOR_ENVELOPES
    # Features off (``fact(feature=True)`` a forward Case takes, in declaration
    # order), each to its simplest value with the facts that describe it
    # (``needs``: the sink facts go with sinks). The backward-only features
    # stay as the case file has them: they pick the variant of the pass the
    # failing property judges.
    for f in FACTS.values():
        if f.feature and "fwd" in f.direction and getattr(c, f.name) != f.simplest:
            yield c.replace(**{f.name: f.simplest}, **{d: FACTS[d].simplest for d in dependents(f.name)})
    if c.window_right >= 0:
        yield c.replace(window_right=-1)
    if c.window_left >= 0:
        yield c.replace(window_left=-1, bottom_right=c.bottom_right and c.causal)
    if c.causal:
        yield c.replace(causal=False, window_right=-1, bottom_right=c.bottom_right and c.window_left >= 0)
    if c.bottom_right:
        yield c.replace(bottom_right=False)
    if c.is_thd:
        yield from _thd_candidates(c)
    else:
        for name in ("seq_q_lens", "seq_kv_lens"):
            if getattr(c, name) is not None:
                yield c.replace(**{name: None})
        if c.batch > 1:
            yield from (_rebatch(c, b) for b in range(1, c.batch))
        if c.memory != "bshd":
            yield c.replace(memory="bshd")
        for s in _smaller(c.s_q, (1,) + pools.EDGE_LENGTHS + pools.SMALL_LENGTHS + (c.s_q - 1,)):
            yield _relength(c, s_q=s)
        for s in _smaller(c.s_kv, (1,) + pools.EDGE_LENGTHS + pools.SMALL_LENGTHS + (c.s_kv - 1,)):
            yield _relength(c, s_kv=s)
    # Heads: MHA with one head first, then fewer groups / KV heads.
    if c.h_q > 1:
        yield c.replace(h_q=1, h_kv=1)
        for h_kv in range(1, c.h_kv + 1):
            for group in range(1, c.h_q // c.h_kv + 1):
                if h_kv * group < c.h_q:
                    yield c.replace(h_q=h_kv * group, h_kv=h_kv)
    # Head dims: an envelope is simpler than any off-envelope pair, a smaller
    # flavor simpler than a larger one; then smaller off-envelope pairs.
    flavor = flavor_of(c.d_qk, c.d_v)
    smaller = list(env)[: list(env).index(flavor) + 1] if flavor in env else list(env)
    on = (c.d_qk, c.d_v) == env.get(flavor)
    for f in smaller:
        if env[f] != (c.d_qk, c.d_v) and (not on or f != flavor):
            yield c.replace(d_qk=env[f][0], d_v=env[f][1])
    if not on:
        for dq, dv in sorted({p for f in smaller for p in pools.OFF_ENVELOPE_DIMS[f]}):
            if dq <= c.d_qk and dv <= c.d_v and (dq, dv) != (c.d_qk, c.d_v):
                yield c.replace(d_qk=dq, d_v=dv)
    # Windows and bands: smaller sizes.
    for w in _smaller(c.window_left, pools.WINDOWS):
        yield c.replace(window_left=w)
    for w in _smaller(c.window_right, pools.RIGHT_BANDS):
        yield c.replace(window_right=w)
    # Runtime facts last: the scale (sign kept first), the dtype, the seed.
    if c.scale is not None:
        yield c.replace(scale=None)
        if c.scale != SIMPLEST_SCALE[(c.scale > 0) - (c.scale < 0)]:
            yield c.replace(scale=SIMPLEST_SCALE[(c.scale > 0) - (c.scale < 0)])
    if c.dtype != "float16":
        yield c.replace(dtype="float16", bias="float16" if c.bias == c.dtype else c.bias)
    for name in runtime_facts():  # the seed, and any runtime fact (``fact(compiled=False)``) not yet simplest
        if getattr(c, name) != FACTS[name].simplest:
            yield c.replace(**{name: FACTS[name].simplest})


def _rebatch(c: Case, b: int) -> Case:
    cut = lambda lens: None if lens is None else tuple(lens[:b])  # noqa: E731
    return c.replace(batch=b, seq_q_lens=cut(c.seq_q_lens), seq_kv_lens=cut(c.seq_kv_lens))


def _relength(c: Case, **lengths) -> Case:
    c = c.replace(**lengths)
    clip = lambda lens, n: None if lens is None else tuple(min(x, n) for x in lens)  # noqa: E731
    return c.replace(seq_q_lens=clip(c.seq_q_lens, c.s_q), seq_kv_lens=clip(c.seq_kv_lens, c.s_kv))


def _thd_candidates(c: Case) -> Iterator[Case]:
    if c.n_seq > 1:  # drop one sequence (each in turn)
        for i in range(c.n_seq):
            yield c.replace(q_lens=c.q_lens[:i] + c.q_lens[i + 1 :], kv_lens=c.kv_lens[:i] + c.kv_lens[i + 1 :])
    for name in ("q_base", "kv_base", "q_slack", "kv_slack"):
        if getattr(c, name):
            yield c.replace(**{name: 0})
    for name in ("q_lens", "kv_lens"):
        lens = getattr(c, name)
        for i, n in enumerate(lens):
            for m in _smaller(n, (0, 1) + pools.THD_SMALL + pools.THD_EDGES + pools.THD_LONG + (n - 1,)):
                yield c.replace(**{name: lens[:i] + (m,) + lens[i + 1 :]})
