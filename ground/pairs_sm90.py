"""Pair coverage of the sm90 family's compile-key factors (ground.pairs for
the sm80 family; the family is a stratum there and here).

The factors are the sm90 compile key, element by element (docs/sm90.md): the
TemplateParams fields the planner sets from Case facts and the arguments of
the template's ``compile()`` (prefill_d512_f16.py:1490-1503), each mapped to
the Case facts that set it (``KEY``). ``thd_varlen`` is the stratum (the
layout); under THD the dense-only elements are no factor (``DENSE_ONLY``:
S_q/S_kv are zeroed out of the key, the strides fixed by the packing, the
scheduler natural, no PackGQA, the THD length pointer always present).
Values are classes of the Case facts that change the element (the head dims
by their relation: the 512-column tile is one for every D). Infeasible pairs
are declared (``EXCLUSIONS``) with the contract row that refuses them
(ground.contracts.SM90_RULES) or the Case rule that makes them meaningless;
tests/test_pairs_sm90.py checks the table against config_sm90.TemplateParams
and compile()'s signature, and that every feasible pair has a Case the
kernels' planner takes and no excluded one does.
"""

from __future__ import annotations

from collections import Counter
from itertools import combinations
from typing import Any, Dict, FrozenSet, Iterable, List, Mapping, Optional, Tuple

from .case import Case
from .families import FAMILIES
from .pairs import OTHER, Exclusion, Factor, Pair, Value, _heads, _sign, text, window_factor  # the sm80 factors' classes, shared

FAMILY = FAMILIES["sm90"]
LAYOUTS = ("dense", "thd")


def _dims(c: Case) -> str:
    return "equal" if c.d_qk == c.d_v else "qk>v" if c.d_qk > c.d_v else "qk<v"


def _padding(c: Case, v: str) -> Case:
    lens = None if v == "absent" else {"seq_q_lens": (c.s_q,) * c.batch, "seq_kv_lens": (c.s_kv,) * c.batch}
    return c.replace(**(lens or {"seq_q_lens": None, "seq_kv_lens": None}))


def _bool(name: str) -> Tuple[Tuple[str, ...], Any, Any]:
    return ("no", "yes"), (lambda c: "yes" if getattr(c, name) else "no"), (lambda c, v: c.replace(**{name: v == "yes"}))


# compile-key element (TemplateParams field or compile() argument) -> its factor:
# (factor name, Case facts, values, of, realize). Several elements may share one factor.
_ROWS = (
    ("dtype", ("dtype_qkv",), ("dtype",), FAMILY.dtypes, lambda c: c.dtype, lambda c, v: c.replace(dtype=v)),
    ("causal", ("causal",), ("causal",), *_bool("causal")),
    ("window_left", ("window_left",), ("window_left",), *window_factor("window_left", 16)),
    ("window_right", ("window_right",), ("window_right",), *window_factor("window_right", 4)),
    ("bottom_right", ("bottom_right",), ("bottom_right",), *_bool("bottom_right")),
    ("has_lse", ("has_lse",), ("has_lse",), *_bool("has_lse")),
    ("lse_log2", ("stats_log2",), ("lse_log2",), *_bool("lse_log2")),
    ("lse_layout", ("lse_stride",), ("lse_layout",), ("compact", "padded", "token_major"), lambda c: c.lse_layout, lambda c, v: c.replace(lse_layout=v)),
    ("pack_gqa", ("pack_gqa",), ("pack_gqa",), *_bool("pack_gqa")),
    (
        "heads",
        ("qh_per_kh", "h_q", "h_kv"),
        ("h_q", "h_kv"),
        ("MHA", "GQA", "MQA"),
        _heads,
        lambda c, v: c.replace(**{"MHA": dict(h_q=2, h_kv=2), "GQA": dict(h_q=4, h_kv=2)}.get(v, dict(h_q=4, h_kv=1))),
    ),
    ("sched", ("sched_policy",), ("sched",), tuple(dict.fromkeys(("auto", *FAMILY.schedulers))), lambda c: c.sched, lambda c, v: c.replace(sched=v)),
    (
        "scale",
        ("scale_mode",),
        ("scale",),
        ("positive", "negative", "zero"),
        _sign,
        lambda c, v: c.replace(scale={"positive": None, "negative": -0.125}.get(v, 0.0)),
    ),
    (
        "padding",
        ("seq_q_lens_present", "seq_kv_lens_present"),
        ("seq_q_lens", "seq_kv_lens"),
        ("absent", "present"),
        lambda c: "absent" if c.seq_kv_lens is None else "present",
        _padding,
    ),
    ("sinks", ("has_sink",), ("sinks",), *_bool("sinks")),
    (
        "head_dims",
        ("d_qk", "d_v"),
        ("d_qk", "d_v"),
        ("equal", "qk>v", "qk<v"),
        _dims,
        lambda c, v: c.replace(**{"equal": dict(d_qk=64, d_v=64), "qk>v": dict(d_qk=192, d_v=128)}.get(v, dict(d_qk=40, d_v=72))),
    ),
    (
        "batch",
        ("b",),
        ("batch", "q_lens", "kv_lens"),
        ("one", "several"),
        lambda c: ("one" if len(c.q_lens) == 1 else "several") if c.is_thd else ("one" if c.batch == 1 else "several"),
        lambda c, v: (
            (c.replace(q_lens=(3,), kv_lens=(5,)) if v == "one" else c.replace(q_lens=(3, 6), kv_lens=(5, 2)))
            if c.is_thd
            else c.replace(
                batch=1 if v == "one" else 2, **{n: (getattr(c, n)[0],) * (1 if v == "one" else 2) for n in ("seq_q_lens", "seq_kv_lens") if getattr(c, n)}
            )
        ),
    ),
    (
        "lengths",
        ("s_q", "s_kv"),
        ("s_q", "s_kv"),
        ("equal", "q>kv", "q<kv"),
        lambda c: "equal" if c.s_q == c.s_kv else "q>kv" if c.s_q > c.s_kv else "q<kv",
        lambda c, v: c.replace(**{"equal": dict(s_q=64, s_kv=64), "q>kv": dict(s_q=65, s_kv=64)}.get(v, dict(s_q=64, s_kv=129))),
    ),
    (
        "memory",
        ("q_stride", "k_stride", "v_stride", "o_stride"),
        ("memory",),
        ("bshd", "bhsd", "bshd_padded"),
        lambda c: c.memory,
        lambda c, v: c.replace(memory=v),
    ),
)
# The stratum, and what the factors stand for: TemplateParams fields and compile() arguments no factor reads.
STRATUM = {"thd_varlen": "the layout: a stratum, not a factor"}
# Factors with no THD counterpart, and why (docs/sm90.md; prefill_d512_f16.py:1523-1524).
DENSE_ONLY = {
    "pack_gqa": "the planner declines THD PackGQA (contracts sm90_thd_pack_gqa)",
    "sched": "THD runs the natural scheduler only (contracts sm90_thd_scheduler)",
    "padding": "THD sets seq_kv_lens_present itself (its cu_seqlens); no padding-length arrays",
    "lengths": "compile() zeroes S_q/S_kv out of a THD key (prefill_d512_f16.py:1523-1524)",
    "memory": "the THD packing fixes the strides (batch stride 0)",
}
KEY: Dict[str, str] = {element: row[0] for row in _ROWS for element in row[1]}
_FACTORS: Dict[str, Factor] = {row[0]: Factor(row[0], row[2], tuple(row[3]), row[4], row[5], "") for row in _ROWS}
BASES = {"dense": Case(family="sm90"), "thd": Case(family="sm90", layout="thd", q_lens=(3,), kv_lens=(5,))}


def factors(layout: str) -> Tuple[Factor, ...]:
    """The sm90 compile-key factors on ``layout`` (defaults: the base Case's values)."""
    base = BASES[layout]
    return tuple(Factor(f.name, f.facts, f.values, f.of, f.realize, f.of(base)) for f in _FACTORS.values() if layout == "dense" or f.name not in DENSE_ONLY)


_CAUSAL_ONLY = "a right band and a bottom-right alignment widen or align the causal diagonal: none without causal"
EXCLUSIONS: Tuple[Exclusion, ...] = (
    Exclusion((("window_right", ("on",)), ("causal", ("no",))), _CAUSAL_ONLY, "contracts sm90_window_right_without_causal (api_dsl.py:5198)"),
    Exclusion((("bottom_right", ("yes",)), ("causal", ("no",))), _CAUSAL_ONLY, "contracts sm90_bottom_right_without_causal (api_dsl.py:5199)"),
    Exclusion((("lse_layout", (OTHER,)), ("has_lse", ("no",))), "it describes the Stats output: only with has_lse", "Case._feature_rules lse_layout"),
    Exclusion((("lse_log2", ("yes",)), ("has_lse", ("no",))), "it describes the Stats output: only with has_lse", "Case._feature_rules lse_log2"),
)


def excluded(layout: str) -> Dict[Pair, Exclusion]:
    """pair -> the declared exclusion that keeps it from meeting on ``layout``."""
    fs = {f.name: f for f in factors(layout)}
    order = list(fs)
    out: Dict[Pair, Exclusion] = {}
    for e in EXCLUSIONS:
        if layout not in e.layouts or any(n not in fs for n, _ in e.when):
            continue
        a, b = fs[e.when[0][0]], fs[e.when[1][0]]
        for va in e.values(a, 0):
            for vb in e.values(b, 1):
                p = ((a.name, va), (b.name, vb)) if order.index(a.name) < order.index(b.name) else ((b.name, vb), (a.name, va))
                out.setdefault(p, e)
    return out


def universe(layout: str) -> List[Pair]:
    fs = factors(layout)
    return [((a.name, va), (b.name, vb)) for a, b in combinations(fs, 2) for va in a.values for vb in b.values]


def feasible(layout: str) -> List[Pair]:
    out = excluded(layout)
    return [p for p in universe(layout) if p not in out]


def values_of(case: Case) -> Tuple[Value, ...]:
    return tuple((f.name, f.of(case)) for f in factors(case.layout))


def pairs_of(case: Case) -> FrozenSet[Pair]:
    return frozenset(combinations(values_of(case), 2))


def witness(layout: str, wanted: Mapping[str, str], valid) -> Optional[Case]:
    """A Case on ``layout`` with the factor values ``wanted`` that ``valid``
    (a predicate: the kernels' planner in the test) takes, or None: the values
    wanted, then up to two other factors moved off their defaults."""
    fs = factors(layout)
    others = [(f.name, v) for f in fs if f.name not in wanted for v in f.values if v != f.default]
    for depth in range(3):
        for extra in combinations(others, depth):
            if len({n for n, _ in extra}) < depth:
                continue
            assignment = dict(wanted, **dict(extra))
            c = BASES[layout]
            try:
                for f in fs:
                    if f.name in assignment:
                        c = f.realize(c, assignment[f.name])
            except (TypeError, ValueError, KeyError):
                continue
            if all(f.of(c) == wanted[f.name] for f in fs if f.name in wanted) and c.structural_problem() is None and valid(c):
                return c
    return None


def unreached(cases: Iterable[Case]) -> List[str]:
    """``layout: factor=value`` of every factor value no sm90 Case of ``cases`` holds."""
    held = {(c.layout, v) for c in cases if c.family == FAMILY.name for v in values_of(c)}
    return [f"{layout}: {f.name}={v}" for layout in LAYOUTS for f in factors(layout) for v in f.values if (layout, (f.name, v)) not in held]


def realize(layout: str, assignment: Mapping[str, str]) -> Optional[Case]:
    """The base Case of ``layout`` given the factor values ``assignment`` (in
    factor order), or None where they do not hold together (a realized value
    lost, a Case rule broken)."""
    fs = factors(layout)
    c = BASES[layout]
    try:
        for f in fs:
            if f.name in assignment:
                c = f.realize(c, assignment[f.name])
    except (TypeError, ValueError, KeyError):
        return None
    held = all(f.of(c) == assignment[f.name] for f in fs if f.name in assignment)
    return c if held and c.structural_problem() is None and not (pairs_of(c) & set(excluded(layout))) else None


def covering_rows(layout: str, valid) -> Tuple[Case, ...]:
    """Cases of ``layout`` that ``valid`` (a predicate) takes and in which,
    together, every feasible pair meets: a deterministic greedy (AETG-style,
    as strategies/covering.py for the sm80 pools): each row starts from the
    first pair still missing, held by a valid Case (``witness``), then takes, factor by factor, the value that
    makes the most missing pairs meet with those chosen (ties: declaration
    order), the Case kept valid. Raises for a pair no valid row holds."""
    fs = factors(layout)
    missing = set(feasible(layout))
    rows: List[Case] = []
    while missing:
        start = next(p for p in feasible(layout) if p in missing)
        w = witness(layout, dict(start), valid)
        if w is None:
            raise ValueError(f"{layout}: no valid sm90 Case holds {text(start)}, yet it is not declared excluded (ground.pairs_sm90.EXCLUSIONS)")
        chosen = {f.name: v for f, (_, v) in zip(fs, values_of(w)) if f.name in dict(start) or v != f.default}  # the witness's moves
        for f in fs:
            if f.name in chosen:
                continue
            best, gain = None, -1
            for v in f.values:
                trial = realize(layout, {**chosen, f.name: v})
                if trial is None or not valid(trial):
                    continue
                n = sum(((f.name, v) in p) and all(chosen.get(name) == val for name, val in p if name != f.name) for p in missing)
                if n > gain:
                    best, gain = v, n
            if best is not None:
                chosen[f.name] = best
        row = realize(layout, chosen)
        missing -= pairs_of(row)
        rows.append(row)
    return tuple(rows)


def coverage(cases: Iterable[Case]) -> Dict[str, Any]:
    """The feasible sm90 pairs per layout, those ``cases`` (sm90 Cases) drew, the missing ones, the exclusions."""
    seen: Dict[str, set] = {x: set() for x in LAYOUTS}
    counted = Counter()
    for c in cases:
        if c.family != FAMILY.name or c.violation is not None:
            continue
        counted[c.layout] += 1
        seen[c.layout] |= pairs_of(c)
    per = {}
    for layout in LAYOUTS:
        want, out_of = feasible(layout), excluded(layout)
        drawn = [p for p in want if p in seen[layout]]
        per[layout] = {
            "examples": counted[layout],
            "factors": {f.name: list(f.values) for f in factors(layout)},
            "feasible": len(want),
            "drawn": len(drawn),
            "missing": [text(p) for p in want if p not in seen[layout]],
            "excluded": len(out_of),
            "excluded_by": dict(Counter(e.why for e in out_of.values())),
            "drawn_though_excluded": sorted(text(p) for p in seen[layout] if p in out_of),
        }
    n, d = sum(v["feasible"] for v in per.values()), sum(v["drawn"] for v in per.values())
    return {"fwd": {"feasible": n, "drawn": d, "share": d / n if n else None, "layouts": per}, "bwd": {"feasible": 0, "drawn": 0, "share": None, "layouts": {}}}
