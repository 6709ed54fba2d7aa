"""Valid dense Cases, and ``cases()``: dense or THD.

Draw order (shrinking follows it): flavor and head dims, dtype, heads, batch,
physical lengths, mask family, optional operands (bias, sinks), scale, memory
order, padding lengths, seed. "Valid" means ``kernels.specialize.specialize``
accepts the Case (the kernels' own flavor pick and ``validate_params``) and the
wrapper's contracts hold: bias is [1, H, SQ, SKV] in the I/O dtype or fp32, a
right band only with causal, bottom-right only with causal or a left window.
"""

from __future__ import annotations

from typing import Optional, Sequence

from hypothesis import strategies as st

from ground.case import MEMORY_ORDERS, Case

from . import features, pools
from .features import Common, maybe
from .varlen import thd_cases

DENSE_OPTIONS = ("bias", "bias_dtypes", "padding", "memory", "edges", "min_batch", "max_batch", "max_tokens")


def dense_cases(
    *,
    bias: Optional[bool] = None,
    bias_dtypes: Sequence[str] = ("input", "float32"),
    padding: Optional[bool] = None,
    memory: Sequence[str] = MEMORY_ORDERS,
    edges: bool = True,
    min_batch: int = 1,
    max_batch: int = max(pools.BATCHES),
    max_tokens: Optional[int] = None,
    geometry: Optional[str] = None,
    **common,
) -> st.SearchStrategy[Case]:
    """Valid dense Cases.

    bias/padding/``common`` switches: None draws, True forces, False forbids.
    bias_dtypes: "input" (the I/O dtype) and/or "float32".
    edges: allow tile-edge lengths (up to 257).
    min_batch/max_batch: bound the batch size.
    max_tokens: bound batch * s_q and batch * s_kv.
    geometry: "pool" (compile-key facts from the strata's pools, runtime facts
    free: strategies.geometry), "free", or "mixed" (either, drawn per
    example); None: $SDPA_GEOMETRY, else the loaded profile's (nightly
    mixed, others pool).
    Common options (both layouts): ``strategies.features.Common``, e.g.
    flavors, dtypes, off_envelope, causal, windows, sinks, scales, max_heads.
    """
    opts = Common(**common)
    bad = [m for m in memory if m not in MEMORY_ORDERS]
    if bad or not memory:
        raise ValueError(f"option 'memory': {bad or 'empty'} not in {MEMORY_ORDERS}")
    if not set(bias_dtypes) <= {"input", "float32"} or not bias_dtypes:
        raise ValueError(f"option 'bias_dtypes': {tuple(bias_dtypes)} must be drawn from ('input', 'float32')")
    if max_batch < 1 or (max_tokens is not None and max_tokens < 1):
        raise ValueError("options 'max_batch'/'max_tokens': must be >= 1")
    batches = [b for b in pools.BATCHES if min_batch <= b <= max_batch and (max_tokens is None or b <= max_tokens)]
    if not batches:
        raise ValueError(f"options 'min_batch'/'max_batch'/'max_tokens': no batch size of {pools.BATCHES} left")
    memory, bias_dtypes = tuple(memory), tuple(bias_dtypes)
    from . import geometry as geo

    mode = geo.mode(geometry)
    if mode != "free":
        dense = dict(
            bias=bias, bias_dtypes=bias_dtypes, padding=padding, memory=memory, edges=edges, min_batch=min_batch, max_batch=max_batch, max_tokens=max_tokens
        )
        free = lambda f, d: dense_cases(geometry="free", **dense, **{**common, "flavors": (f,), "dtypes": (d,)})  # noqa: E731
        pooled = geo.pooled_dense(opts, free, few=mode == "few", **dense)
        if mode in ("pool", "few"):
            return pooled

    @st.composite
    def draw_case(draw) -> Case:
        _, d_qk, d_v = features.head_dims(draw, opts)
        dtype = draw(st.sampled_from(opts.dtypes))
        h_q, h_kv = features.heads(draw, opts)
        batch = draw(st.sampled_from(batches))
        limit = max_tokens // batch if max_tokens is not None else 1 << 30
        s_q = features.length(draw, edges and draw(st.booleans()), limit)
        # Equal lengths first (shrinks there); else sq != skv either way.
        s_kv = s_q if not draw(st.booleans()) else features.length(draw, edges and draw(st.booleans()), limit)
        m = features.mask(draw, opts)
        bias_dtype = None
        if maybe(draw, bias):
            kind = draw(st.sampled_from(bias_dtypes))
            bias_dtype = dtype if kind == "input" else "float32"
        optional = features.options(draw, opts)
        order = draw(st.sampled_from(memory))
        seq_q_lens = _padding(draw, padding, batch, s_q)
        seq_kv_lens = _padding(draw, padding, batch, s_kv)
        return features.kernel_features(
            draw,
            Case(
                layout="dense",
                dtype=dtype,
                batch=batch,
                h_q=h_q,
                h_kv=h_kv,
                d_qk=d_qk,
                d_v=d_v,
                s_q=s_q,
                s_kv=s_kv,
                seq_q_lens=seq_q_lens,
                seq_kv_lens=seq_kv_lens,
                bias=bias_dtype,
                bias_batch=1,
                memory=order,
                seed=features.seed(draw),
                **m,
                **optional,
            ),
        )

    return draw_case() if mode == "free" else st.one_of(pooled, draw_case())  # mixed: the pools first (shrinking prefers them)


def _padding(draw, forced: Optional[bool], batch: int, physical: int):
    """Per-batch live lengths in [1, physical], or [0, physical] behind a boolean
    (padding lengths are runtime values: free, no compile)."""
    if not maybe(draw, forced):
        return None
    low = 0 if draw(st.booleans()) else 1
    return tuple(draw(st.lists(st.integers(low, physical), min_size=batch, max_size=batch)))


def cases(*, layouts: Sequence[str] = ("dense", "thd"), **options) -> st.SearchStrategy[Case]:
    """Valid Cases of either layout (dense first: shrinking prefers it).

    Options go to the layout that understands them; an option that forces a
    dense-only feature (bias=True, padding=True) leaves THD out."""
    from .varlen import THD_OPTIONS

    dense_only = {k: v for k, v in options.items() if k in DENSE_OPTIONS}
    thd_only = {k: v for k, v in options.items() if k in THD_OPTIONS and k not in DENSE_OPTIONS}
    common = {k: v for k, v in options.items() if k not in DENSE_OPTIONS and k not in THD_OPTIONS}
    shared = {k: v for k, v in options.items() if k in DENSE_OPTIONS and k in THD_OPTIONS}
    if options.get("bias") or options.get("padding"):
        layouts = tuple(x for x in layouts if x == "dense")
    parts = []
    if "dense" in layouts:
        parts.append(dense_cases(**dense_only, **common))
    if "thd" in layouts:
        parts.append(thd_cases(**thd_only, **shared, **common))
    if not parts:
        raise ValueError(f"option 'layouts': nothing left to draw from {tuple(layouts)} with {options}")
    return st.one_of(*parts)
