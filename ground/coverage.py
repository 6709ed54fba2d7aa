"""The coverage vocabulary: which features a Case exercises, and which a
complete run must reach. One vocabulary for the strategies' coverage test
(tests/test_strategies.py: every value of ``REQUIRED`` is drawn) and the
report's coverage tables (reports/coverage.py: an unexercised value is a gap).

An ``Axis`` names a feature, the values a complete run reaches and how to read
them off one valid Case. Axes come from the fact declarations
(``ground.case.FACTS``): a fact declared with ``coverage=AUTO``
(the default) gets an axis of its own from its domain (bool: no/yes; the
declared choices), so a new bool or choice fact is covered with no edit here;
a fact that names axes (``coverage=("mask",)``) is shown by the derived axes
below, which read features that no single fact holds (heads: MHA/GQA/MQA).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Dict, FrozenSet, Iterable, Tuple

from .case import AUTO, BACKWARD_FACTS, BIAS_DTYPES, FACTS, LAYOUTS, MEMORY_ORDERS, Case, Fact
from .tables import DTYPES, FLAVOR_ENVELOPES, FLAVORS, TILE_M, TILE_N, flavor_of


@dataclass(frozen=True)
class Axis:
    name: str
    values: Tuple[str, ...]  # what a complete run reaches, in report order
    of: Callable[[Case], Iterable[str]]  # the values one valid Case exercises (possibly none)
    doc: str


def on_tile_edge(n: int) -> bool:
    """A length within one token of a K/V tile boundary (TILE_M is a multiple of TILE_N)."""
    return n > 1 and n % TILE_N in (TILE_N - 1, 0, 1)


def _heads(c: Case):
    return ["MHA (h_q = h_kv)" if c.h_q == c.h_kv else "MQA (h_kv = 1)" if c.h_kv == 1 else "GQA"]


def _mask(c: Case):
    out = c.mask_name().split("+")
    return out + (["causal+swa"] if c.causal and c.window_left >= 0 else [])


def _alignment(c: Case):
    if not c.causal:
        return []
    corner = "bottom-right" if c.bottom_right else "top-left"
    pairs = list(zip(c.q_lens, c.kv_lens)) if c.is_thd else [(c.s_q, c.s_kv)]
    return sorted({f"{corner}, s_q {'>' if q > kv else '<'} s_kv" for q, kv in pairs if q != kv})


def _bias(c: Case):
    if not c.bias:
        return ["none"]
    return [c.bias] + (["broadcast over batch"] if c.bias_batch == 1 and c.n_seq > 1 else [])


def _scale(c: Case):
    if c.scale is None:
        return ["default 1/sqrt(d)"]
    return ["zero" if c.scale == 0 else "negative" if c.scale < 0 else "positive"]


def _padding(c: Case):
    if c.is_thd:
        out = [
            x
            for x, hit in (("thd: first offset > 0", c.q_base or c.kv_base), ("thd: Q capacity slack", c.q_slack), ("thd: K/V capacity slack", c.kv_slack))
            if hit
        ]
        return out or ["thd: tight"]
    q, kv = c.seq_q_lens is not None, c.seq_kv_lens is not None
    out = ["dense: seq_q_lens + seq_kv_lens" if q and kv else "dense: seq_q_lens" if q else "dense: seq_kv_lens" if kv else "dense: none"]
    if 0 in (c.seq_q_lens or ()) + (c.seq_kv_lens or ()):
        out.append("dense: a zero length")
    return out


def _thd_lengths(c: Case):
    if not c.is_thd:
        return []
    lens = c.q_lens + c.kv_lens
    return [
        x
        for x, hit in (
            ("a zero length", 0 in lens),
            ("a length of 1", 1 in lens),
            ("a tile-edge length", any(map(on_tile_edge, lens))),
            ("a long sequence (> 2 Q tiles)", any(n > 2 * TILE_M for n in lens)),
            ("several sequences", c.n_seq > 1),
        )
        if hit
    ]


_DENSE = lambda f: lambda c: [] if c.is_thd else f(c)  # noqa: E731  (an axis of dense Cases only)

# Axes that no single fact holds (Fact.coverage names them).
DERIVED: Tuple[Axis, ...] = (
    Axis("flavor", FLAVORS, lambda c: [flavor_of(c.d_qk, c.d_v)], "the SM80 flavor serving the head dims (the kernels' pick)"),
    Axis(
        "head dims",
        ("exact envelope", "padded into envelope"),
        lambda c: ["exact envelope" if FLAVOR_ENVELOPES.get(flavor_of(c.d_qk, c.d_v)) == (c.d_qk, c.d_v) else "padded into envelope"],
        "head dims equal to the flavor envelope, or smaller and padded into it",
    ),
    Axis("heads", ("MHA (h_q = h_kv)", "GQA", "MQA (h_kv = 1)"), _heads, "head grouping"),
    Axis(
        "mask",
        ("none", "causal", "causal_br", "swa", "swa_br", "band", "causal+swa"),
        _mask,
        "mask parts (Case.mask_name split at '+'), and a causal mask with a left window",
    ),
    Axis(
        "causal alignment",
        tuple(f"{corner}, s_q {o} s_kv" for corner in ("top-left", "bottom-right") for o in (">", "<")),
        _alignment,
        "causal diagonal corner with unequal Q and K/V lengths (THD: per sequence)",
    ),
    Axis("bias", ("none",) + BIAS_DTYPES + ("broadcast over batch",), _bias, "bias dtype, and one bias serving several batch entries"),
    Axis("scale", ("default 1/sqrt(d)", "positive", "negative", "zero"), _scale, "softmax scale"),
    Axis("memory", MEMORY_ORDERS + ("thd packed",), lambda c: ["thd packed" if c.is_thd else c.memory], "storage order of Q/K/V/O"),
    Axis("dense batch", ("1", "> 1"), _DENSE(lambda c: ["1" if c.batch == 1 else "> 1"]), "dense batch size"),
    Axis(
        "dense lengths",
        ("off tile edge", "tile edge"),
        _DENSE(lambda c: ["tile edge" if on_tile_edge(c.s_q) or on_tile_edge(c.s_kv) else "off tile edge"]),
        "dense physical lengths within one token of a tile boundary",
    ),
    Axis(
        "padding",
        (
            "dense: none",
            "dense: seq_q_lens",
            "dense: seq_kv_lens",
            "dense: seq_q_lens + seq_kv_lens",
            "dense: a zero length",
            "thd: tight",
            "thd: first offset > 0",
            "thd: Q capacity slack",
            "thd: K/V capacity slack",
        ),
        _padding,
        "dense padding-length operands; THD first offsets and capacity slack past the last sequence (Q: the output "
        "capacity the tails judge; K/V: storage a last tile may overhang)",
    ),
    Axis(
        "thd lengths",
        ("a zero length", "a length of 1", "a tile-edge length", "a long sequence (> 2 Q tiles)", "several sequences"),
        _thd_lengths,
        "THD per-sequence lengths",
    ),
)


def _auto(f: Fact) -> Axis:
    """The axis of a fact declared with coverage=AUTO: its bool or choice domain."""
    if f.type is bool:
        return Axis(f.name, ("no", "yes"), lambda c: ["yes" if getattr(c, f.name) else "no"], f.doc)
    if f.choices is None:
        raise TypeError(f"Case fact {f.name!r}: coverage=AUTO needs a bool or declared choices; name derived axes instead (coverage=(...))")
    return Axis(f.name, tuple(map(str, f.choices)), lambda c: [str(getattr(c, f.name))], f.doc)


def _axes() -> Tuple[Axis, ...]:
    """Every axis, in the order the facts declare them (first mention wins)."""
    derived = {a.name: a for a in DERIVED}
    out: Dict[str, Axis] = {}
    for f in FACTS.values():
        if f.coverage == AUTO:
            out[f.name] = _auto(f)
        else:
            for name in f.coverage or ():
                if name not in derived:
                    raise KeyError(f"Case fact {f.name!r}: coverage axis {name!r} is not declared in ground.coverage.DERIVED")
                out.setdefault(name, derived[name])
    unused = set(derived) - set(out)
    if unused:
        raise KeyError(f"coverage axes {sorted(unused)} show no fact (no Fact.coverage names them)")
    return tuple(out.values())


AXES: Tuple[Axis, ...] = _axes()


def exercised(case: Case) -> Dict[str, Tuple[str, ...]]:
    """axis -> the values one valid Case exercises."""
    return {a.name: tuple(a.of(case)) for a in AXES}


def labels(case: Case) -> FrozenSet[str]:
    """ "axis:value" labels of one valid Case."""
    return frozenset(f"{axis}:{v}" for axis, values in exercised(case).items() for v in values)


# The non-default values of the backward-only facts: the backward strategies
# (strategies.backward) reach them, the forward ones never do.
BACKWARD_ONLY: FrozenSet[str] = frozenset(f"{name}:{v}" for a in AXES for name in BACKWARD_FACTS if a.name == name for v in a.values[1:])
# Every label a healthy run of the (forward) strategies reaches (tests/test_strategies.py).
REQUIRED: FrozenSet[str] = frozenset(f"{a.name}:{v}" for a in AXES for v in a.values) - BACKWARD_ONLY
# What the backward strategies reach on top (tests/test_backward.py).
BACKWARD_REQUIRED: FrozenSet[str] = BACKWARD_ONLY

# The report's matrix: layout/mask family (rows) x flavor/dtype (columns). Mask
# families a complete run reaches (Case.mask_name); others seen are appended.
MASK_FAMILIES = ("none", "causal", "causal_br", "swa", "swa_br", "causal+swa", "causal_br+swa", "causal+band", "causal_br+band")
MATRIX_COLUMNS = tuple(f"{name}/{dt}" for name in FLAVORS for dt in DTYPES)
MATRIX_LAYOUTS = LAYOUTS


def matrix_cell(case: Case) -> Tuple[str, str]:
    return f"{case.layout}/{case.mask_name()}", f"{flavor_of(case.d_qk, case.d_v)}/{case.dtype}"
