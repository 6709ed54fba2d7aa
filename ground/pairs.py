"""Pair coverage of the compile-key factors: which pairs of compile-key fact
values a run must make meet, which cannot meet (declared, with the reason),
and which pairs a set of Cases made meet.

Bugs live in combinations: most faults need one or two factors to meet. A
*factor* is a compile-key fact of a direction and layout stratum
(``compiled_facts``, from the declared roles: ``case.compiled_facts``) with the values that change the specialization: a bool
fact's no/yes, a choice fact's choices, and for a numeric or optional fact
the classes of ``CLASSES`` (window off/on, the head-dim flavor, the score
sign, a bias in the I/O dtype or fp32, ...). Every pair of values of two
factors of one (direction, layout) is a *pair*; a pair is *feasible* unless
an entry of ``EXCLUSIONS`` (data: the values, the reason, and whether a
validator refuses it or the suite chose not to draw it) or an adapter's
declared limits (``Fact.adapters``) exclude it. An infeasible pair is never
a silent hole: tests/test_pairs.py finds, with the Case's own rules and the
contract table (``witness``; the kernels' validators through
kernels.specialize in the test), that every undeclared pair has a valid Case
and every declared one none (policy entries aside).

``coverage(cases)`` counts the feasible pairs a set of Cases drew, per
direction and layout: the report of every run (reports/coverage.py) and
``sdpa-conformance pairs`` (the profile's strategies drawn on the CPU).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from itertools import combinations
from typing import Any, Callable, Dict, FrozenSet, Iterable, List, Mapping, Optional, Tuple

from . import case as declared
from .case import DIRECTIONS, LAYOUTS, Case
from .contracts import broken_rules
from .families import DEFAULT_FAMILY, FAMILIES
from .tables import FLAVOR_ENVELOPES, FLAVORS, flavor_of

# ------------------------------------------------------------ compile-key facts
# Not factors: the stratum itself (the layout, TemplateParams.thd_varlen; the
# pass; the kernel family). The pairs are the sm80 family's (the one the
# properties run): the facts it has no counterpart for (ground.families) are
# no factor of it.
STRATUM_FACTS = ("layout", "direction", "family")
PAIRS_FAMILY = FAMILIES[DEFAULT_FAMILY]
# A THD kernel's compile key is its TemplateParams and compile_thd_host's
# arguments (a dense kernel's is its whole geometry: every compiled fact): a
# fact that reaches neither (``Fact.kernel``; a fact naming no kernel entry at
# all, as the backward's own, counts for both layouts) is a runtime or
# meaningless value in THD (the right band, the dense shapes).
THD_SOURCES = ("TemplateParams", "compile_thd_host")


def compiled_facts(direction: str, layout: str) -> Tuple[str, ...]:
    """The compile-key facts of a ``direction`` kernel on ``layout``, in
    declaration order: ``case.compiled_facts(direction)`` (``Fact.compiled``
    and ``Fact.direction``), less the stratum and the facts the sm80 family has
    no counterpart for, and for THD those its compile key reaches (``THD_SOURCES``)."""
    out = []
    for name in declared.compiled_facts(direction):
        f = declared.FACTS[name]
        if name in STRATUM_FACTS or name in PAIRS_FAMILY.absent:
            continue
        if layout == "thd" and f.kernel and not any(k.split(".")[0] in THD_SOURCES for k in f.kernel):
            continue
        out.append(name)
    return tuple(out)


# ------------------------------------------------------------------ factors
@dataclass(frozen=True)
class Factor:
    """One compile-key factor: its values (strings), the value a Case holds
    (``of``), and how to give a Case a value (``realize``)."""

    name: str
    facts: Tuple[str, ...]
    values: Tuple[str, ...]
    of: Callable[[Case], str]
    realize: Callable[[Case, str], Case]
    default: str  # the value of a Case with the facts at their defaults


def window_factor(name: str, width: int) -> Tuple[Tuple[str, ...], Callable[[Case], str], Callable[[Case, str], Case]]:
    """A band fact as a factor: (values, of, realize), "on" realized as ``width``."""
    return ("off", "on"), (lambda c: "on" if getattr(c, name) >= 0 else "off"), (lambda c, v: c.replace(**{name: width if v == "on" else -1}))


def _sign(c: Case) -> str:
    s = c.softmax_scale
    return "positive" if s > 0 else "negative" if s < 0 else "zero"


def _heads(c: Case) -> str:
    return "MHA" if c.h_q == c.h_kv else "MQA" if c.h_kv == 1 else "GQA"


def _per_batch(c: Case) -> Case:
    """``c`` with a bias of its own per batch entry: a bias (fp32 unless it has
    one) over two batch entries or more (padding lengths per entry)."""
    b = max(c.batch, 2)
    lens = {n: getattr(c, n)[:1] * b for n in ("seq_q_lens", "seq_kv_lens") if getattr(c, n) is not None}
    return c.replace(batch=b, bias=c.bias or "float32", bias_batch=b, **lens)


def _lens(name: str, physical: str):
    return (
        ("absent", "present"),
        lambda c: "absent" if getattr(c, name) is None else "present",
        lambda c, v: c.replace(**{name: None if v == "absent" else (getattr(c, physical),) * c.batch}),
    )


# Numeric and optional facts: (factor name, the facts it reads, values, of, realize).
# The classes are those that change the specialization; the values within a
# class (a window's size, the scale's magnitude, the lengths) are runtime or
# shape facts drawn freely.
_CLASS_ROWS = (
    (
        "flavor",
        ("d_qk", "d_v"),
        FLAVORS,
        lambda c: flavor_of(c.d_qk, c.d_v),
        lambda c, v: c.replace(d_qk=FLAVOR_ENVELOPES[v][0], d_v=FLAVOR_ENVELOPES[v][1]),
    ),
    (
        "heads",
        ("h_q", "h_kv"),
        ("MHA", "GQA", "MQA"),
        _heads,
        lambda c, v: c.replace(**{"MHA": dict(h_q=2, h_kv=2), "GQA": dict(h_q=4, h_kv=2)}.get(v, dict(h_q=4, h_kv=1))),
    ),
    ("batch", ("batch",), ("one", "several"), lambda c: "one" if c.batch == 1 else "several", lambda c, v: c.replace(batch=1 if v == "one" else 2)),
    (
        "lengths",
        ("s_q", "s_kv"),
        ("equal", "q>kv", "q<kv"),
        lambda c: "equal" if c.s_q == c.s_kv else "q>kv" if c.s_q > c.s_kv else "q<kv",
        lambda c, v: c.replace(**{"equal": dict(s_q=16, s_kv=16), "q>kv": dict(s_q=33, s_kv=16)}.get(v, dict(s_q=16, s_kv=33))),
    ),
    (
        "sequences",
        ("q_lens", "kv_lens"),
        ("one", "several"),
        lambda c: "several" if c.is_thd and len(c.q_lens) > 1 else "one",
        lambda c, v: c if not c.is_thd else c.replace(q_lens=(1,), kv_lens=(1,)) if v == "one" else c.replace(q_lens=(2, 1), kv_lens=(1, 2)),
    ),
    ("window_left", ("window_left",), *window_factor("window_left", 16)),
    ("window_right", ("window_right",), *window_factor("window_right", 5)),
    ("seq_q_lens", ("seq_q_lens",), *_lens("seq_q_lens", "s_q")),
    ("seq_kv_lens", ("seq_kv_lens",), *_lens("seq_kv_lens", "s_kv")),
    (
        "bias_batch",
        ("bias_batch",),
        ("broadcast", "per batch"),
        lambda c: "per batch" if c.bias is not None and c.bias_batch > 1 else "broadcast",
        lambda c, v: c.replace(bias_batch=1) if v == "broadcast" else _per_batch(c),
    ),
    (
        "bias",
        ("bias",),
        ("none", "io", "float32"),
        lambda c: "none" if c.bias is None else "float32" if c.bias == "float32" else "io" if c.bias == c.dtype else c.bias,
        lambda c, v: c.replace(bias={"none": None, "io": c.dtype}.get(v, v)),
    ),
    ("scale", ("scale",), ("positive", "negative", "zero"), _sign, lambda c, v: c.replace(scale={"positive": None, "negative": -0.125}.get(v, 0.0))),
)
CLASSES: Dict[str, tuple] = {fact: row for row in _CLASS_ROWS for fact in row[1]}


def _plain(name: str) -> Factor:
    """The factor of a bool or choice fact, from its declaration."""
    f = declared.FACTS[name]
    if f.type is bool:
        return Factor(
            name,
            (name,),
            ("no", "yes"),
            lambda c: "yes" if getattr(c, name, f.default) else "no",
            lambda c, v: c.replace(**{name: v == "yes"}),
            "no" if not f.default else "yes",
        )
    if f.choices is None:
        raise TypeError(f"compile-key fact {name!r}: neither a bool nor declared choices; give its value classes in ground.pairs.CLASSES")
    by_text = {str(x): x for x in f.choices}
    return Factor(name, (name,), tuple(by_text), lambda c: str(getattr(c, name, f.default)), lambda c, v: c.replace(**{name: by_text[v]}), str(f.default))


def _key(direction: str, layout: str) -> tuple:
    """What the factors and exclusions are a function of: the declarations
    (facts, exclusions), so a planted fact or value is seen."""
    return (direction, layout, tuple(declared.FACTS.items()), EXCLUSIONS)


def factors(direction: str, layout: str) -> Tuple[Factor, ...]:
    """The factors of ``direction`` on ``layout`` (one per compile-key fact,
    or per class row of ``CLASSES`` that reads several), in declaration order."""
    return _factors(_key(direction, layout))


@lru_cache(maxsize=None)
def _factors(key) -> Tuple[Factor, ...]:
    direction, layout = key[:2]
    base = BASES[direction, layout]
    out: Dict[str, Factor] = {}
    for name in compiled_facts(direction, layout):
        if name in CLASSES:
            fname, facts, values, of, realize = CLASSES[name]
            out.setdefault(fname, Factor(fname, facts, tuple(values), of, realize, of(base)))
        elif name not in out:
            out[name] = _plain(name)
    return tuple(out.values())


# The simplest valid Case of each (direction, layout): what a witness starts from.
_DENSE, _THD = Case(), Case(layout="thd", q_lens=(1,), kv_lens=(1,))
BASES: Dict[Tuple[str, str], Case] = {
    ("fwd", "dense"): _DENSE,
    ("fwd", "thd"): _THD,
    ("bwd", "dense"): _DENSE.replace(direction="bwd"),
    ("bwd", "thd"): _THD.replace(direction="bwd"),
}

Value = Tuple[str, str]  # (factor, value)
Pair = Tuple[Value, Value]  # in factor order


# ------------------------------------------------------------------ exclusions
OTHER = "<not default>"  # an Exclusion condition's value list: every value of the factor but its default


@dataclass(frozen=True)
class Exclusion:
    """Factor values that cannot meet, and why. ``when``: one condition
    (factor, values) excludes those values outright (every pair holding
    one); two exclude each pair holding a value of each. ``policy``: the
    suite does not draw it on purpose (no validator refuses it; the reason
    says why); otherwise a validator refuses it (tests/test_pairs.py checks
    that no valid Case holds it). ``source`` names the refusal."""

    when: Tuple[Tuple[str, Tuple[str, ...]], ...]
    reason: str
    source: str
    directions: Tuple[str, ...] = DIRECTIONS
    layouts: Tuple[str, ...] = LAYOUTS
    policy: bool = False

    @property
    def why(self) -> str:
        return f"{self.reason} ({self.source})"

    def values(self, factor: Factor, i: int) -> Tuple[str, ...]:
        vals = self.when[i][1]
        return tuple(v for v in factor.values if v != factor.default) if vals == (OTHER,) else vals


_SINKS_ONLY = "it describes the sink buffer: only with sinks"
_LSE_ONLY = "it describes the Stats output: only with an LSE output (has_lse)"
_DENSE_ONLY = "THD carries lengths in cu_seqlens and has no such operand (the varlen host is dense-free)"
EXCLUSIONS: Tuple[Exclusion, ...] = (
    # ---- meaningless combinations (Case._feature_rules: a fact outside its domain keeps its default)
    Exclusion((("sink_log2", (OTHER,)), ("sinks", ("no",))), _SINKS_ONLY, "Case._feature_rules sink_log2"),
    Exclusion((("sink_layout", (OTHER,)), ("sinks", ("no",))), _SINKS_ONLY, "Case._feature_rules sink_layout"),
    Exclusion((("sink_dtype", (OTHER,)), ("sinks", ("no",))), _SINKS_ONLY, "Case._feature_rules sink_dtype"),
    Exclusion((("lse_layout", (OTHER,)), ("has_lse", ("no",))), _LSE_ONLY, "Case._feature_rules lse_layout"),
    Exclusion((("lse_log2", (OTHER,)), ("has_lse", ("no",))), _LSE_ONLY, "Case._feature_rules lse_log2"),
    Exclusion(
        (("sched_l2_mib", (OTHER,)), ("sched", ("natural", "lpt"))),
        "the L2 budget sizes the blocks of an L2 scheduler: only with lpt_l2 or auto",
        "Case._feature_rules sched_l2_mib",
    ),
    Exclusion(
        (("dbias_dtype", (OTHER,)), ("bias", ("none",))),
        "it describes the dBias buffer: only with a bias",
        "Case._feature_rules dbias_dtype",
        directions=("bwd",),
    ),
    # ---- refused by the kernels (contract table, validate_params)
    Exclusion(
        (("window_right", ("on",)), ("causal", ("no",))),
        "a right band widens the causal diagonal: none without causal",
        "contracts window_right_without_causal (api_dsl.py:7293)",
    ),
    Exclusion(
        (("rope", ("yes",)), ("seq_q_lens", ("present",))),
        "api_dsl refuses RoPE with padding lengths",
        "Case._feature_rules rope",
    ),
    Exclusion(
        (("rope", ("yes",)), ("seq_kv_lens", ("present",))),
        "api_dsl refuses RoPE with padding lengths",
        "Case._feature_rules rope",
    ),
    # ---- THD: dense-only features
    Exclusion((("rope", (OTHER,)),), "compile_thd_host has no RoPE operand", "config_sm80.validate_params (contracts thd_rope)", layouts=("thd",)),
    Exclusion((("bias", (OTHER,)),), "varlen has no single [1,H,SQ,SKV] bias", "contracts thd_bias (config_sm80.py:147)", layouts=("thd",)),
    Exclusion((("seq_q_lens", (OTHER,)),), _DENSE_ONLY, "contracts thd_seq_q_lens (config_sm80.py:147)", layouts=("thd",)),
    Exclusion((("seq_kv_lens", (OTHER,)),), _DENSE_ONLY, "contracts thd_seq_kv_lens (config_sm80.py:147)", layouts=("thd",)),
    Exclusion(
        (("sched", (OTHER,)),), "the varlen grid is 3-D: the natural scheduler only", "Case._feature_rules sched (contracts thd_scheduler)", layouts=("thd",)
    ),
    Exclusion(
        (("sched_l2_mib", (OTHER,)),),
        "the L2 budget sizes the blocks of an L2 scheduler: THD has the natural one only",
        "Case._feature_rules sched_l2_mib",
        layouts=("thd",),
    ),
    Exclusion(
        (("sink_dtype", (OTHER,)),),
        "dense hosts take float32 sinks only (prepared_host types)",
        "Case._feature_rules sink_dtype",
        layouts=("dense",),
    ),
    Exclusion((("prefix_dtype", (OTHER,)),), "cu_seqlens are THD's: dense has none", "Case._feature_rules prefix_dtype", layouts=("dense",)),
    Exclusion(
        (("sequences", (OTHER,)),),
        "a dense Case holds no sequence list (q_lens/kv_lens are THD facts; its batch is a factor of its own)",
        "ground.case q_lens, kv_lens",
        layouts=("dense",),
    ),
    Exclusion(
        (("bias_batch", (OTHER,)), ("bias", ("none",))),
        "it describes the bias: only with one",
        "ground.case bias_batch (needs bias)",
        layouts=("dense",),
    ),
    Exclusion(
        (("bias_batch", (OTHER,)), ("batch", ("one",))),
        "a bias per batch entry over one entry is the broadcast one",
        "ground.case bias_batch",
        layouts=("dense",),
    ),
    Exclusion(
        (("bias_batch", (OTHER,)),),
        "the forward applies one [1,H,SQ,SKV] bias to every batch entry",
        "contracts bias_batch_gt_1",
        directions=("fwd",),
        layouts=("dense",),
    ),
    # ---- the backward: what the suite does not draw there (strategies.backward.to_backward)
    Exclusion(
        (("lse_log2", (OTHER,)),),
        "the backward reads natural-log Stats (bprop_f16.py:840 multiplies by log2 e) and has no stats_log2: to_backward drops it",
        "strategies.backward.to_backward",
        directions=("bwd",),
        policy=True,
    ),
    Exclusion(
        (("scale", ("negative", "zero")),),
        "the backward folds no score sign; its negative and zero scales are not judged yet (docs/backward.md): to_backward keeps the scale positive",
        "strategies.backward.to_backward",
        directions=("bwd",),
        policy=True,
    ),
    Exclusion(
        (("dbias_dtype", (OTHER,)),),
        "not drawn: the 1.32.0 compile key omits the dBias dtype (known finding bwd-compile-key-omits-dbias-dtype); compile_distinct and the CPU tests judge it",
        "known_findings.toml bwd-compile-key-omits-dbias-dtype",
        directions=("bwd",),
        policy=True,
    ),
)


def _fact_adapters(factor: Factor, adapter: Optional[str]) -> Optional[Exclusion]:
    """The exclusion of ``factor``'s non-default values on ``adapter`` when a
    fact it reads is one the adapter cannot express (Fact.adapters), or None."""
    if adapter is None:
        return None
    for name in factor.facts:
        f = declared.FACTS.get(name)
        if f is not None and f.adapters is not None and adapter not in f.adapters:
            why = f"the {adapter} adapter cannot express {name}: a run on it draws the default"
            return Exclusion(((factor.name, (OTHER,)),), why, f"Fact.adapters of {name}: {', '.join(f.adapters)} only", policy=True)
    return None


def excluded(direction: str, layout: str, adapter: Optional[str] = None) -> Dict[Pair, Exclusion]:
    """pair -> the declared exclusion that keeps it from meeting on
    ``direction`` and ``layout`` (and, with ``adapter``, what that adapter
    cannot express): a value excluded outright first, then the pair's own."""
    return _excluded(_key(direction, layout), adapter)


@lru_cache(maxsize=None)
def _excluded(key, adapter: Optional[str]) -> Dict[Pair, Exclusion]:
    direction, layout = key[:2]
    fs = {f.name: f for f in factors(direction, layout)}
    order = list(fs)
    values: Dict[Value, Exclusion] = {}
    pairs: Dict[Pair, Exclusion] = {}
    for f in fs.values():
        e = _fact_adapters(f, adapter)
        if e:
            values.update({(f.name, v): e for v in e.values(f, 0)})
    for e in EXCLUSIONS:
        if direction not in e.directions or layout not in e.layouts or any(name not in fs for name, _ in e.when):
            continue
        if len(e.when) == 1:
            f = fs[e.when[0][0]]
            for v in e.values(f, 0):
                values.setdefault((f.name, v), e)
            continue
        a, b = fs[e.when[0][0]], fs[e.when[1][0]]
        for va in e.values(a, 0):
            for vb in e.values(b, 1):
                key2 = ((a.name, va), (b.name, vb)) if order.index(a.name) < order.index(b.name) else ((b.name, vb), (a.name, va))
                pairs.setdefault(key2, e)
    out = {}
    for p in universe(direction, layout):
        e = values.get(p[0]) or values.get(p[1]) or pairs.get(p)
        if e:
            out[p] = e
    return out


def universe(direction: str, layout: str) -> List[Pair]:
    """Every pair of values of two factors of ``direction`` on ``layout``."""
    fs = factors(direction, layout)
    return [((a.name, va), (b.name, vb)) for a, b in combinations(fs, 2) for va in a.values for vb in b.values]


def feasible(direction: str, layout: str, adapter: Optional[str] = None) -> List[Pair]:
    """The pairs a complete run of ``direction`` on ``layout`` makes meet."""
    out = excluded(direction, layout, adapter)
    return [p for p in universe(direction, layout) if p not in out]


# ------------------------------------------------------------------ witnesses
# Forward contract rules the backward does not have: it takes a per-batch
# bias [B, H, SQ, SKV] and reduces dBias over B only for the broadcast one
# (strategies.backward.to_backward; cudnn/sdpa/bwd/prepared_sm80.py:56-63).
BACKWARD_SERVES = ("bias_batch_gt_1",)


def valid(case: Case) -> bool:
    """A Case the suite calls valid: its facts well formed and meaningful
    (Case.structural_problem) and no contract rule broken (ground.contracts;
    a backward Case: none but those the backward serves, ``BACKWARD_SERVES``)."""
    broken = set(broken_rules(case)) - (set(BACKWARD_SERVES) if case.is_bwd else set())
    return case.structural_problem() is None and not broken


def witness(direction: str, layout: str, wanted: Mapping[str, str]) -> Optional[Case]:
    """A valid Case of ``direction`` on ``layout`` holding the factor values
    ``wanted`` (factor -> value), or None when none is found: the values
    wanted, then up to two other factors moved off their defaults (enough
    for every requirement a value has: a bottom-right alignment needs causal
    or a window, the L2 budget an L2 scheduler, ...)."""
    fs = factors(direction, layout)
    names = [f.name for f in fs]
    base = BASES[direction, layout]
    if any(name not in names for name in wanted):
        return None
    others = [(f.name, v) for f in fs if f.name not in wanted for v in f.values if v != f.default]

    def build(extra) -> Optional[Case]:
        assignment = dict(wanted, **dict(extra))
        c = base
        try:  # a value no Case can hold (a fact the Case lacks, a value of no class) is no witness
            for f in fs:
                if f.name in assignment:
                    c = f.realize(c, assignment[f.name])
            return c if all(f.of(c) == wanted[f.name] for f in fs if f.name in wanted) and valid(c) else None
        except (AttributeError, TypeError, KeyError, ValueError):
            return None

    try:  # a value that cannot be set at all (a fact the Case lacks) has no witness, whatever else moves
        for f in fs:
            if f.name in wanted:
                f.realize(base, wanted[f.name])
    except (AttributeError, TypeError, KeyError, ValueError):
        return None
    for depth in range(3):
        for extra in combinations(others, depth):
            if len({n for n, _ in extra}) < depth:
                continue
            c = build(extra)
            if c is not None:
                return c
    return None


# ------------------------------------------------------------------ measuring
def values_of(case: Case) -> Tuple[Value, ...]:
    """(factor, value) of every factor of ``case``'s direction and layout."""
    return tuple((f.name, f.of(case)) for f in factors(case.direction, case.layout))


def pairs_of(case: Case) -> FrozenSet[Pair]:
    """The pairs ``case`` makes meet."""
    return frozenset(combinations(values_of(case), 2))


def text(p: Pair) -> str:
    return f"{p[0][0]}={p[0][1]} x {p[1][0]}={p[1][1]}"


def coverage(cases: Iterable[Case], adapter: Optional[str] = None) -> Dict[str, Any]:
    """Per direction: per layout the feasible pairs, those drawn, the missing
    ones and the declared exclusions; valid Cases only (violations skipped).
    ``adapter``: the entry point the Cases ran on (its unexpressible values
    are excluded), None: every value."""
    seen: Dict[Tuple[str, str], set] = {k: set() for k in BASES}
    counted: Dict[Tuple[str, str], int] = {k: 0 for k in BASES}
    for c in cases:
        # The SM80 factors; another family's Cases count in its own table (ground.pairs_sm90).
        if c.violation is not None or (c.direction, c.layout) not in seen or c.family != DEFAULT_FAMILY:
            continue
        counted[c.direction, c.layout] += 1
        seen[c.direction, c.layout] |= pairs_of(c)
    out: Dict[str, Any] = {}
    for direction in DIRECTIONS:
        per = {}
        for layout in LAYOUTS:
            want = feasible(direction, layout, adapter)
            out_of = excluded(direction, layout, adapter)
            drawn = [p for p in want if p in seen[direction, layout]]
            per[layout] = {
                "examples": counted[direction, layout],
                "factors": {f.name: list(f.values) for f in factors(direction, layout)},
                "feasible": len(want),
                "drawn": len(drawn),
                "missing": [text(p) for p in want if p not in seen[direction, layout]],
                "excluded": len(out_of),
                "excluded_by": dict(Counter(e.why for e in out_of.values())),
                "drawn_though_excluded": sorted(text(p) for p in seen[direction, layout] if p in out_of),
            }
        feasible_n = sum(v["feasible"] for v in per.values())
        drawn_n = sum(v["drawn"] for v in per.values())
        out[direction] = {"feasible": feasible_n, "drawn": drawn_n, "share": drawn_n / feasible_n if feasible_n else None, "layouts": per}
    out["adapter"] = adapter
    out["exclusions"] = [
        {
            "when": " x ".join(f"{n} in {', '.join(v) if v != (OTHER,) else OTHER}" for n, v in e.when),
            "directions": list(e.directions),
            "layouts": list(e.layouts),
            "reason": e.reason,
            "source": e.source,
            "policy": e.policy,
        }
        for e in EXCLUSIONS
    ]
    return out
