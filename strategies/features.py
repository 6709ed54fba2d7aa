"""Feature draws shared by the dense and THD strategies.

Each helper takes Hypothesis' ``draw`` and returns plain facts. Structure is
drawn before values and every dependent value is bounded by construction
(never ``.filter``/``assume``), and every unusual value sits behind a boolean
that shrinks to False, so a failing example shrinks to batch 1, one head,
length 1, on-envelope gptoss, no features.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence, Tuple

from hypothesis import strategies as st

from ground.case import AUTO, DTYPES, FACTS, LSE_LAYOUTS, PREFIX_DTYPES, SCHEDULERS, SINK_DTYPES, SINK_LAYOUTS, Case, Fact
from ground.contracts import broken_rules
from ground.tables import flavor_of

from . import pools


@dataclass(frozen=True)
class Common:
    """Options every layout understands (validated once, at strategy build)."""

    flavors: Tuple[str, ...] = pools.FLAVORS
    dtypes: Tuple[str, ...] = DTYPES
    off_envelope: Optional[bool] = None  # None: either; True/False: force
    causal: Optional[bool] = None
    windows: bool = True  # sliding windows and right bands allowed
    sinks: Optional[bool] = None
    lse_log2: Optional[bool] = None  # LSE in base-2 units
    scales: bool = True  # False: always the default scale (None)
    max_heads: int = max(pools.KV_HEADS) * max(pools.GROUP_SIZES)

    def __post_init__(self):
        bad = [f for f in self.flavors if f not in pools.FLAVOR_ENVELOPES]
        if bad or not self.flavors:
            raise ValueError(f"option 'flavors': {bad or 'empty'} not in {pools.FLAVORS}")
        bad = [d for d in self.dtypes if d not in DTYPES]
        if bad or not self.dtypes:
            raise ValueError(f"option 'dtypes': {bad or 'empty'} not in {DTYPES}")
        if self.max_heads < 1:
            raise ValueError(f"option 'max_heads': must be >= 1, got {self.max_heads}")


def maybe(draw, forced: Optional[bool]) -> bool:
    """A feature switch: forced when the option says so, else a boolean draw."""
    return forced if forced is not None else draw(st.booleans())


def head_dims(draw, opts: Common) -> Tuple[str, int, int]:
    """Flavor first, then on-envelope (its exact dims) or off-envelope (smaller
    dims that the flavor pick still sends to this flavor)."""
    flavor = draw(st.sampled_from(opts.flavors))
    if maybe(draw, opts.off_envelope):
        d_qk, d_v = draw(st.sampled_from(pools.OFF_ENVELOPE_DIMS[flavor]))
    else:
        d_qk, d_v = pools.FLAVOR_ENVELOPES[flavor]
    return flavor, d_qk, d_v


def heads(draw, opts: Common) -> Tuple[int, int]:
    """(h_q, h_kv): h_kv then a group size, so h_kv divides h_q by construction
    (group 1: MHA; h_kv 1 with group > 1: MQA; otherwise GQA)."""
    kv = [h for h in pools.KV_HEADS if h <= opts.max_heads]
    h_kv = draw(st.sampled_from(kv))
    groups = [g for g in pools.GROUP_SIZES if h_kv * g <= opts.max_heads]
    return h_kv * draw(st.sampled_from(groups)), h_kv


def mask(draw, opts: Common) -> dict:
    """Mask family: causal, left window, right band (causal only), then the
    bottom-right alignment (only where something aligns: causal or a window)."""
    causal = maybe(draw, opts.causal)
    window_left = window_right = -1
    if opts.windows and draw(st.booleans()):
        window_left = draw(st.sampled_from(pools.WINDOWS))
    if opts.windows and causal and draw(st.booleans()):
        window_right = draw(st.sampled_from(pools.RIGHT_BANDS))
    bottom_right = (causal or window_left >= 0) and draw(st.booleans())
    return dict(causal=causal, bottom_right=bottom_right, window_left=window_left, window_right=window_right)


def options(draw, opts: Common) -> dict:
    """The optional facts every layout draws alike, after its shape, mask and
    layout-only operands: LSE units, sinks, the scale (a new fact both layouts
    take is drawn here, behind ``maybe`` so it shrinks away, with a ``Common``
    option)."""
    return dict(lse_log2=maybe(draw, opts.lse_log2), sinks=maybe(draw, opts.sinks), scale=scale(draw, opts))


# The feature facts (``fact(feature=True)``) whose draws are written by hand in
# this package, with the rules between them (the sink facts ride on sinks, an
# L2 budget on an L2 scheduler, base-2 Stats keep a Stats output), and whose
# pool rows strategies.geometry writes by hand. Any other feature fact is
# drawn by ``generic`` and placed on the pool rows by geometry.place_generic,
# from its declaration alone (a feature without a coverage axis of its own is
# not drawn: coverage asks nothing of it).
HAND_DRAWN = (
    "bias",
    "sinks",
    "lse_log2",
    "has_lse",
    "lse_layout",
    "sched",
    "sched_l2_mib",
    "rope",
    "sink_log2",
    "sink_dtype",
    "sink_layout",
    "prefix_dtype",
    "deterministic",
)


def generic_features(direction: str) -> Tuple[Fact, ...]:
    """The feature facts of ``direction`` drawn from their declaration alone
    (not ``HAND_DRAWN``; with a coverage axis of their own, so coverage asks
    for their values): for "fwd" those a forward Case takes, for "bwd" the
    backward-only ones (the others come with the forward draw)."""
    fits = (lambda f: "fwd" in f.direction) if direction == "fwd" else (lambda f: f.direction == ("bwd",))
    return tuple(f for f in FACTS.values() if f.feature and fits(f) and f.name not in HAND_DRAWN and f.coverage == AUTO and f.other_values())


def generic(draw, case: Case, facts: Sequence[Fact]) -> Case:
    """``case`` with each of ``facts`` drawn behind a switch that shrinks to
    off: a boolean, then one of its non-default values (``Fact.other_values``),
    both drawn whatever the case (one shape: a simpler case never draws
    more); kept where the Case stays valid (its feature rules and contract
    rules), else the fact keeps its default. No facts, no draws."""
    for f in facts:
        on, value = draw(st.booleans()), draw(st.sampled_from(f.other_values()))
        if on:
            changed = case.replace(**{f.name: value})
            if changed.structural_problem() is None and broken_rules(changed) == broken_rules(case):
                case = changed
    return case


def kernel_features(draw, case: Case) -> Case:
    """``case`` with the schema-3 feature facts drawn where they mean
    something (Case._feature_rules), each behind a boolean that shrinks to
    its default: LSE output and layout, sink units/dtype/layout, scheduler
    and L2 budget (dense), RoPE (dense, envelope dims, no padding), cu_seqlens
    dtype (THD). The draws have one shape whatever the case (a simpler case
    never draws more), so shrinking still reaches the simplest facts. The
    free draws use it; the pools place the same values
    (strategies.geometry.features_of). Then every other feature fact a
    forward Case takes (``generic_features``), from its declaration."""
    no_lse, layout_on, layout = draw(st.booleans()), draw(st.booleans()), draw(st.sampled_from(LSE_LAYOUTS))
    sink_on, sink_log2, sink_layout, sink_dtype = (
        draw(st.booleans()),
        draw(st.booleans()),
        draw(st.sampled_from(SINK_LAYOUTS)),
        draw(st.sampled_from(SINK_DTYPES)),
    )
    prefix_on, prefix = draw(st.booleans()), draw(st.sampled_from(PREFIX_DTYPES))
    sched_on, sched, l2_on = draw(st.booleans()), draw(st.sampled_from(SCHEDULERS)), draw(st.booleans())
    rope = draw(st.booleans())
    out = {}
    if no_lse and not case.lse_log2:
        out["has_lse"] = False
    elif layout_on:
        out["lse_layout"] = layout
    if case.sinks and sink_on:
        out.update(sink_log2=sink_log2, sink_layout=sink_layout)
        if case.is_thd:
            out["sink_dtype"] = sink_dtype
    if case.is_thd:
        if prefix_on:
            out["prefix_dtype"] = prefix
    else:
        if sched_on:
            out["sched"] = sched
            if sched in ("lpt_l2", "auto") and l2_on:
                out["sched_l2_mib"] = 1
        on_envelope = pools.FLAVOR_ENVELOPES.get(flavor_of(case.d_qk, case.d_v)) == (case.d_qk, case.d_v)
        if rope and on_envelope and case.seq_q_lens is None and case.seq_kv_lens is None:
            out["rope"] = True
    return generic(draw, case.replace(**out), generic_features("fwd"))


def scale(draw, opts: Common) -> Optional[float]:
    """None (the kernels' default) unless drawn; nasty values (0, negative,
    huge, tiny) behind a second boolean."""
    if not opts.scales or not draw(st.booleans()):
        return None
    if draw(st.booleans()):
        return draw(st.sampled_from(pools.NASTY_SCALES))
    return draw(st.sampled_from(pools.SCALES))


def seed(draw) -> int:
    return draw(st.integers(0, 2**16 - 1))


def length(draw, edges: bool, limit: int, small: Sequence[int] = pools.SMALL_LENGTHS) -> int:
    """One physical length from a pool, at most ``limit`` (>= 1)."""
    pool = pools.EDGE_LENGTHS if edges else small
    return draw(st.sampled_from([n for n in pool if n <= limit] or [1]))


# ------------------------------------------------------------------ THD runtime draws
# Shared by the free THD draw (varlen.thd_cases) and the pooled one (geometry.pooled_thd).
def _thd_length(zeros: bool) -> st.SearchStrategy[int]:
    """One sequence's length; kinds simplest first (one_of shrinks to the first)."""
    kinds = [st.sampled_from(pools.THD_SMALL), st.just(1)]
    if zeros:
        kinds.append(st.just(0))
    kinds += [st.sampled_from(pools.THD_EDGES), st.sampled_from(pools.THD_LONG)]
    return st.one_of(*kinds)


def length_lists(draw, max_seqs: int, max_tokens: int, zeros: bool = True, min_seqs: int = 1) -> Tuple[Tuple[int, ...], Tuple[int, ...]]:
    """(q_lens, kv_lens) of min_seqs..max_seqs sequences; each list sums to <= max_tokens.
    One list of (q, kv) pairs, not a drawn count, so shrinking deletes whole
    sequences; a sequence's KV length equals its Q length unless drawn apart."""
    pairs = draw(st.lists(st.tuples(_thd_length(zeros), st.one_of(st.none(), _thd_length(zeros))), min_size=min_seqs, max_size=max_seqs))
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


def thd_offset(draw, forced: Optional[bool]) -> int:
    """A THD first offset or capacity slack in tokens: 0, or (behind a switch) one of ``pools.THD_OFFSETS``."""
    return draw(st.sampled_from(pools.THD_OFFSETS)) if maybe(draw, forced) else 0
