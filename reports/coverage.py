"""Which facts the run exercised, counted over every begun example.

The axes list the values a complete run should reach even when none was
seen, so an empty cell or a zero row is a visible gap, not a missing line.
"""

from __future__ import annotations

from collections import Counter
from typing import Iterable, List

from conformance.ground.case import BIAS_DTYPES, DTYPES, LAYOUTS, MEMORY_ORDERS, Case
from conformance.ground.tables import FLAVOR_ENVELOPES, flavor_of as flavor

# Mask families a complete run reaches (Case.mask_name); others seen are appended.
MASKS = ("none", "causal", "causal_br", "swa", "swa_br", "causal+swa", "causal_br+swa", "causal+band", "causal_br+band")


def _padding(case: Case) -> List[str]:
    if case.is_thd:
        out = []
        if case.q_base or case.kv_base:
            out.append("thd: first offset > 0")
        if case.q_slack or case.kv_slack:
            out.append("thd: capacity slack")
        if 0 in case.q_lens or 0 in case.kv_lens:
            out.append("thd: empty sequence")
        return out or ["thd: tight"]
    q, kv = case.seq_q_lens is not None, case.seq_kv_lens is not None
    return ["dense: seq_q_lens + seq_kv_lens" if q and kv else "dense: seq_q_lens" if q else "dense: seq_kv_lens" if kv else "dense: none"]


def _facts(case: Case) -> dict:
    """fact -> list of values this case exercises."""
    fl = flavor(case.d_qk, case.d_v)
    exact = FLAVOR_ENVELOPES.get(fl) == (case.d_qk, case.d_v)
    if case.scale is None:
        scale = "default 1/sqrt(d)"
    else:
        scale = "negative" if case.scale < 0 else ("zero" if case.scale == 0 else "positive")
    return {
        "bias": [case.bias or "none"] + (["broadcast over batch"] if case.bias and case.bias_batch == 1 and case.n_seq > 1 else []),
        "sinks": ["yes" if case.sinks else "no"],
        "padding": _padding(case),
        "heads": ["MHA (h_q = h_kv)" if case.h_q == case.h_kv else "MQA (h_kv = 1)" if case.h_kv == 1 else "GQA"],
        "memory": ["thd packed" if case.is_thd else case.memory],
        "scale": [scale],
        "head dims": ["exact envelope" if exact else "padded into envelope"],
    }


FACT_VALUES = {
    "bias": ("none",) + BIAS_DTYPES + ("broadcast over batch",),
    "sinks": ("no", "yes"),
    "padding": ("dense: none", "dense: seq_q_lens", "dense: seq_kv_lens", "dense: seq_q_lens + seq_kv_lens", "thd: tight", "thd: first offset > 0", "thd: capacity slack", "thd: empty sequence"),
    "heads": ("MHA (h_q = h_kv)", "GQA", "MQA (h_kv = 1)"),
    "memory": MEMORY_ORDERS + ("thd packed",),
    "scale": ("default 1/sqrt(d)", "positive", "negative"),
    "head dims": ("exact envelope", "padded into envelope"),
}


def coverage(cases: Iterable[Case]) -> dict:
    """Counts of valid examples per (layout/mask) x (flavor/dtype) cell, per
    secondary fact, and of contract-violating examples per rule."""
    cells, facts, rules = Counter(), {k: Counter() for k in FACT_VALUES}, Counter()
    masks = list(MASKS)
    total = 0
    for case in cases:
        total += 1
        if case.violation is not None:
            rules[case.violation] += 1
            continue
        m = case.mask_name()
        if m not in masks:
            masks.append(m)
        cells[(f"{case.layout}/{m}", f"{flavor(case.d_qk, case.d_v)}/{case.dtype}")] += 1
        for fact, values in _facts(case).items():
            for v in values:
                facts[fact][v] += 1
    columns = [f"{name}/{dt}" for name in FLAVOR_ENVELOPES for dt in DTYPES]
    columns += sorted({c for _, c in cells} - set(columns))  # "none/..." (outside every envelope)
    rows = [f"{layout}/{m}" for layout in LAYOUTS for m in masks]
    return {
        "examples": total,
        "matrix": {"rows": rows, "columns": columns, "counts": [[cells[(r, c)] for c in columns] for r in rows]},
        "facts": {k: {v: facts[k][v] for v in list(FACT_VALUES[k]) + sorted(set(facts[k]) - set(FACT_VALUES[k]))} for k in FACT_VALUES},
        "contract_rules": dict(sorted(rules.items())),
        "gaps": sum(1 for row in ([cells[(r, c)] for c in columns] for r in rows) for n in row if n == 0),
    }
