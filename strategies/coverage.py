"""Feature labels of a Case: what the strategies promise to exercise.

``labels(case)`` names the features one Case exercises; ``REQUIRED`` lists
every label a healthy run of the strategies must reach (tests/test_strategies
checks it; reports may tabulate the same labels).
"""

from __future__ import annotations

from typing import FrozenSet

from conformance.ground.case import BIAS_DTYPES, DTYPES, MEMORY_ORDERS, Case

from . import pools


def flavor_of(case: Case) -> str:
    """The flavor serving the Case's head dims, from the strategy tables."""
    for f, env in pools.FLAVOR_ENVELOPES.items():
        if (case.d_qk, case.d_v) == env or (case.d_qk, case.d_v) in pools.OFF_ENVELOPE_DIMS[f]:
            return f
    return "none"


def _order_labels(prefix: str, pairs) -> set:
    out = set()
    for q, kv in pairs:
        if q > kv:
            out.add(f"{prefix}:sq>skv")
        elif q < kv:
            out.add(f"{prefix}:sq<skv")
    return out


def labels(case: Case) -> FrozenSet[str]:
    out = {f"layout:{case.layout}", f"flavor:{flavor_of(case)}", f"dtype:{case.dtype}"}
    out.add("dims:on" if (case.d_qk, case.d_v) in pools.FLAVOR_ENVELOPES.values() else "dims:off")
    if case.h_q == case.h_kv:
        out.add("heads:mha")
    else:
        out.add("heads:mqa" if case.h_kv == 1 else "heads:gqa")
    out.update(f"mask:{part}" for part in case.mask_name().split("+"))
    if case.window_left >= 0 and case.causal:
        out.add("mask:swa+causal")
    pairs = list(zip(case.q_lens, case.kv_lens)) if case.is_thd else [(case.s_q, case.s_kv)]
    if case.causal:
        out |= _order_labels("causal_br" if case.bottom_right else "causal_tl", pairs)
    if case.bias:
        out.add(f"bias:{case.bias}")
    if case.sinks:
        out.add("sinks")
    if case.scale is None:
        out.add("scale:default")
    elif case.scale == 0:
        out.add("scale:zero")
    else:
        out.add("scale:negative" if case.scale < 0 else "scale:positive")
    if case.is_thd:
        lens = case.q_lens + case.kv_lens
        out |= {lab for lab, hit in (
            ("thd:zero_len", 0 in lens), ("thd:one_len", 1 in lens),
            ("thd:edge_len", any(n in pools.THD_EDGES for n in lens)), ("thd:long", any(n > 2 * pools.TILE_M for n in lens)),
            ("thd:base", case.q_base > 0 or case.kv_base > 0), ("thd:slack", case.q_slack > 0 or case.kv_slack > 0),
            ("thd:multi_seq", case.n_seq > 1),
        ) if hit}  # fmt: skip
    else:
        out.add(f"memory:{case.memory}")
        if case.batch > 1:
            out.add("batch:>1")
        if {case.s_q, case.s_kv} & (set(pools.EDGE_LENGTHS) - {1}):
            out.add("length:edge")
        for name, lens in (("q", case.seq_q_lens), ("kv", case.seq_kv_lens)):
            if lens is not None:
                out.add(f"padding:{name}")
                if 0 in lens:
                    out.add("padding:zero")
    return frozenset(out)


REQUIRED: FrozenSet[str] = frozenset(
    [f"layout:{x}" for x in ("dense", "thd")]
    + [f"flavor:{f}" for f in pools.FLAVORS]
    + ["dims:on", "dims:off"]
    + [f"dtype:{d}" for d in DTYPES]
    + ["heads:mha", "heads:gqa", "heads:mqa"]
    + [f"mask:{m}" for m in ("none", "causal", "causal_br", "swa", "swa_br", "band", "swa+causal")]
    + [f"{p}:{o}" for p in ("causal_tl", "causal_br") for o in ("sq>skv", "sq<skv")]
    + [f"bias:{d}" for d in BIAS_DTYPES]
    + ["sinks", "scale:default", "scale:positive", "scale:negative", "scale:zero"]
    + [f"memory:{m}" for m in MEMORY_ORDERS]
    + ["batch:>1", "length:edge", "padding:q", "padding:kv", "padding:zero"]
    + [f"thd:{x}" for x in ("zero_len", "one_len", "edge_len", "long", "base", "slack", "multi_seq")]
)
