"""The test matrix, declared once.

Every property test of conformance/test_*.py (GPU and compile tier) is one
``Family``: its test name and module, the property it checks and that
property's parameters, where its Cases come from (a strategy of
``strategies``, a function of the flavor/dtype restriction and the family's
strategy arguments; or one fixed Case per parameter), its parametrization
(``Axis``), its example budget (a ``strategies.profiles.KIND_SCALE`` key) and
its markers.

- ``conformance.testgen`` makes the pytest test of each family; every test
  carries a ``property`` marker from here, which the plugin reads.
- ``conformance.kill.kinds`` derives its searches from the families that name
  a ``kind`` (see ``Axis`` for what the harness does with each axis).

Not here: test_findings (each case file names its property).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from functools import partial
from typing import Callable, Dict, Iterator, List, Mapping, Optional, Tuple

from ground import findings
from ground.case import FACTS, Case
from ground.contracts import BWD_RULE_NAMES, BWD_RULES, CONFIG, PREPARED, RULES, RULES_BY_NAME, WRAPPER
from ground.outcome import Observation
from ground.tables import ADAPTERS, STRATA, STRATA_IDS, flavor_of
from properties import COMPILED_FACTS, DENSE_RELATIONS, DISK_CASES, PROPERTIES, THD_RELATIONS
from properties.metamorphic import entries_launched
from strategies import backward_cases, based_thd_backward_cases, cases, dense_cases, thd_cases, violating_cases
from strategies.geometry import mode as geometry_mode
from strategies.large import GQA_SHAPES, LARGE_SHAPES, LSE_PAD_SHAPES, OFFSET_SHAPES, REPLAY_ROWS, SLICE_SHAPES, large_cases, replay_cases

# How an axis' values reach the check (and what the kill-rate harness does):
STRATUM = "stratum"  # (flavor, dtype): restricts the strategy to one stratum (harness: the mutant's flavors, every dtype)
SOURCE = "source"  # keyword arguments of the strategy / fixed Case (harness: one search per value)
PARAM = "param"  # keyword arguments of the property (harness: one search per value)
TRANSFORM = "transform"  # arguments of the family's transform of the drawn Case (harness: drawn per example)
ROLES = (STRATUM, SOURCE, PARAM, TRANSFORM)


@dataclass(frozen=True)
class Axis:
    """One parametrization axis: the test's argument names, one tuple of
    argument values per parameter, each parameter's node-id part, how the
    values reach the check, and (split axes) the harness' kind-name suffixes
    (default: the ids)."""

    args: Tuple[str, ...]
    values: Tuple[tuple, ...]
    ids: Tuple[str, ...]
    role: str
    labels: Tuple[str, ...] = ()

    def __post_init__(self):
        assert self.role in ROLES and len(self.values) == len(self.ids) and all(len(v) == len(self.args) for v in self.values), self
        assert not self.labels or len(self.labels) == len(self.ids), self

    def id_of(self, values: Mapping) -> str:
        return self.ids[self.values.index(tuple(values[a] for a in self.args))]

    def kind_labels(self) -> Tuple[str, ...]:
        return self.labels or self.ids


def _axis(arg: str, values, role: str, **kw) -> Axis:
    """A one-argument axis whose ids are its (string) values."""
    values = tuple(values)
    return Axis((arg,), tuple((v,) for v in values), tuple(str(v) for v in values), role, **kw)


# xdist distributes test items, not examples: the GPU properties run per
# (flavor, dtype) stratum (ground.tables.STRATA).
STRATA_AXIS = Axis(("flavor", "dtype"), tuple(STRATA), tuple(STRATA_IDS), STRATUM)
NO_INIT = Axis(("initialize_outputs",), ((False,),), ("no-init",), PARAM, labels=("noinit",))
LAYOUTS = _axis("layout", ("dense", "thd"), SOURCE)
DISK_LAYOUTS = _axis("layout", DISK_CASES, SOURCE)

# test_padding_poison: which padding operand the NaN sits behind, Q rows past
# seq_q_lens or K/V rows past seq_kv_lens; the other operand's lengths are dropped.
PADDED = {"q": "seq_kv_lens", "kv": "seq_q_lens"}
PADDED_AXIS = _axis("padded", PADDED, TRANSFORM)


def _drop_other_lengths(case: Case, padded: str) -> Case:
    return case.replace(**{PADDED[padded]: None})


# metamorphic: the relation checked (properties.metamorphic.RELATIONS), per layout.
DENSE_RELATION_AXIS = _axis("relation", DENSE_RELATIONS, PARAM)
THD_RELATION_AXIS = _axis("relation", THD_RELATIONS, PARAM)


def rules_of(entry: str) -> Axis:
    """The contract rules that target ``entry``, as an axis."""
    return _axis("rule", (r.name for r in RULES if entry in r.expect), SOURCE)


def _layout_cases(layout: str, **restrict):
    return cases(layouts=(layout,), **restrict)


def _violating(rule: str, **restrict):
    return violating_cases([rule], **restrict)


def _disk_case(layout: str) -> Case:
    return DISK_CASES[layout]


@dataclass(frozen=True)
class Served:
    """A drawn Case as its test runs it (``Family.serve``): projected for
    every adapter the example launches, then steered around the crash
    findings in force."""

    case: Case
    projected: Tuple[Tuple[str, Tuple[str, ...]], ...] = ()  # (adapter, the facts it cannot express, set to their defaults)
    steered: Tuple[findings.Finding, ...] = ()  # the crash findings that moved it


# A base Case per layout, to read which facts a contract rule's transform sets (Family.unservable).
_RULE_BASES = {"dense": Case(), "thd": Case(layout="thd", q_lens=(1,), kv_lens=(1,))}


# Family.strategy_for's strategies, by (test, geometry mode, arguments).
_STRATEGIES: Dict[tuple, object] = {}


@dataclass(frozen=True, eq=False)
class Family:
    """One pytest test (its node ids: ``module::test[ids]``, the ids of its
    axes joined by ``-`` in axis order) and, when ``kind`` is set, the
    kill-rate searches derived from it."""

    test: str  # the test function's name
    module: str  # its module, as in node ids
    property: str  # key of properties.PROPERTIES (its Property: check, checks, weight, directions)
    examples: Optional[str]  # strategies.profiles.KIND_SCALE key; None: no Hypothesis (fixed cases)
    marks: Tuple[str, ...] = ()  # pytest markers; "gpu" also requests the gpu fixture (skips without one)
    axes: Tuple[Axis, ...] = ()
    strategy: Optional[Callable] = None  # (flavors=, dtypes=, **source args) -> SearchStrategy[Case]
    case: Optional[Callable[..., Case]] = None  # (**source args) -> Case, for a family without a strategy
    transform: Optional[Callable[..., Case]] = None  # (case, **transform args) -> the Case checked
    params: Mapping = field(default_factory=dict)  # property keyword arguments of every parameter
    adapter: Optional[str] = "adapter"  # the fixture that gives the adapter (None: the property takes none)
    target: bool = False  # steer the search: hypothesis.target() on each error/bound ratio
    kind: Optional[str] = None  # kill-rate search name (prefix, with split axes); None: not searched
    doc: str = ""

    def __post_init__(self):
        assert (self.strategy is None) != (self.case is None) and (self.examples is None) == (self.strategy is None), self.test
        assert self.property in PROPERTIES, self.property
        assert (self.transform is None) == (TRANSFORM not in self.roles()), self.test

    def roles(self) -> Tuple[str, ...]:
        return tuple(a.role for a in self.axes)

    def argnames(self) -> List[str]:
        return [arg for axis in self.axes for arg in axis.args]

    def parameters(self) -> Iterator[Tuple[Dict, str]]:
        """(argument values, node-id part) of every parameter, in collection
        order (the first axis outermost)."""
        for combo in itertools.product(*(zip(a.values, a.ids) for a in self.axes)):
            values = {arg: v for (vals, _), axis in zip(combo, self.axes) for arg, v in zip(axis.args, vals)}
            yield values, "-".join(i for _, i in combo)

    def nodeid(self, values: Optional[Mapping] = None) -> str:
        """The node id of the parameter ``values`` (the test's id without axes)."""
        base = f"{self.module}::{self.test}"
        return f"{base}[{'-'.join(a.id_of(values) for a in self.axes)}]" if self.axes else base

    def nodeids(self) -> List[str]:
        return [self.nodeid(values) for values, _ in self.parameters()]

    def _args(self, values: Mapping, role: str) -> dict:
        return {arg: values[arg] for a in self.axes if a.role == role for arg in a.args if arg in values}

    def strategy_for(self, values: Mapping, **restrict):
        """The strategy of the Cases of parameter ``values`` (before the
        transform); ``restrict`` (flavors=, dtypes=) applies where ``values``
        name no stratum. Built once per arguments and geometry mode (a
        strategy is immutable; building one decorates composites, which reads
        their source: milliseconds an example otherwise pays)."""
        stratum = self._args(values, STRATUM)
        if stratum:
            restrict = dict(restrict, flavors=(stratum["flavor"],), dtypes=(stratum["dtype"],))
        kwargs = {**restrict, **self._args(values, SOURCE)}
        try:
            key = (self.test, geometry_mode(), tuple(sorted(kwargs.items())))
            hash(key)
        except TypeError:  # an unhashable option: built each time
            return self.strategy(**kwargs)
        if key not in _STRATEGIES:
            _STRATEGIES[key] = self.strategy(**kwargs)
        return _STRATEGIES[key]

    def fixed_case(self, values: Mapping) -> Case:
        return self.case(**self._args(values, SOURCE))

    def apply(self, case: Case, values: Mapping) -> Case:
        """The Case checked for a drawn ``case``: the transform applied."""
        return self.transform(case, **self._args(values, TRANSFORM)) if self.transform else case

    def params_for(self, values: Mapping) -> dict:
        return {**self.params, **self._args(values, PARAM)}

    def check(self, case: Case, adapter, values: Mapping) -> Observation:
        """The property of parameter ``values`` on ``case`` (transformed already)."""
        return PROPERTIES[self.property].check(case, adapter, **self.params_for(values))

    # ------------------------------------------------ what an adapter serves
    def launches(self, values: Mapping, adapter=None) -> Tuple[str, ...]:
        """The adapters (tables.ADAPTERS names) an example of parameter
        ``values`` launches: the property's ``entry`` where it names one, else
        ``adapter``'s; and the other entry point too where the metamorphic
        relation launches it (``entry``). Other entry names (config) express
        every fact: none."""
        params = self.params_for(values)
        first = params.get("entry") or getattr(adapter, "name", None)
        if first not in ADAPTERS:
            return ()
        if self.property == "metamorphic":
            return entries_launched(params["relation"], first)
        return (first,)

    def unservable(self, values: Mapping, entries: Tuple[str, ...]) -> Optional[str]:
        """Why parameter ``values`` cannot be tested on ``entries`` at all:
        its fixed parameters demand a fact value one of them cannot express
        (the compiled-in ``fact`` compile_distinct varies, a strategy option
        or contract rule that sets such a fact, a fixed Case holding one). A
        projection would drop the point of the test: it skips, naming the
        fact and the adapter. None: every drawn Case can be projected."""
        params = self.params_for(values)
        source = self._args(values, SOURCE)
        options = dict(getattr(self.strategy, "keywords", None) or {}, **source)
        demanded = []  # (fact, where the parameters demand it)
        if params.get("fact") in FACTS:
            demanded.append((params["fact"], f"fact={params['fact']!r}: the compiled-in fact it varies"))
        for name, value in options.items():
            if name in FACTS and value not in (None, False, FACTS[name].default):
                demanded.append((name, f"strategy option {name}={value!r}"))
        rule = RULES_BY_NAME.get(source.get("rule")) if isinstance(source.get("rule"), str) else None
        if rule is not None:
            for layout in (rule.layout,) if rule.layout else tuple(_RULE_BASES):
                base = _RULE_BASES[layout]
                changed = rule.facts(base)
                demanded += [(n, f"contract rule {rule.name!r}") for n in FACTS if getattr(changed, n) != getattr(base, n)]
        if self.strategy is None:
            case = self.fixed_case(values)
            demanded += [(n, "its fixed Case") for e in entries for n in case.unexpressed_facts(e)]
        for name, where in demanded:
            restricted = FACTS[name].adapters
            for e in entries:
                if restricted is not None and e not in restricted:
                    return (
                        f"{self.test}: the {e} adapter ({ADAPTERS[e]}) cannot express the fact {name!r} ({where}); only "
                        f"{', '.join(restricted)} can, and a Case projected without it would not test what this test is for"
                    )
        return None

    def serve(self, case: Case, values: Mapping, entries: Tuple[str, ...], known: Optional[List[findings.Finding]] = None) -> Served:
        """The Case an example of parameter ``values`` runs for the drawn (and
        transformed) ``case``, launched on ``entries`` (``launches``): every
        fact an adapter cannot express at its default (``Case.expressed``),
        then each crash finding in force (or ``known``) that selects it for
        one of ``entries`` replaces it with its steered Case
        (findings.steer). Any other Case is served as drawn."""
        projected = []
        for e in entries:
            names = case.unexpressed_facts(e)
            if names:
                projected.append((e, names))
                case = case.expressed(e)
        if case.violation in RULES_BY_NAME and projected and not RULES_BY_NAME[case.violation].broken_by(case):
            raise AssertionError(
                f"{self.test}: projecting for {', '.join(e for e, _ in projected)} undid the contract rule {case.violation!r} "
                "(Family.unservable should have skipped it)"
            )
        case, steered = findings.steer(self.property, case, entries, self.params_for(values), entries=known)
        for e in entries:  # a steer keeps what its entry point expresses (findings.parse): never a filter, nor a refusal
            why = case.unexpressible(e)
            if why:
                raise AssertionError(f"{self.test}: a crash finding steered the Case to one the {e} adapter cannot express: {why}")
        return Served(case, tuple(projected), tuple(steered))


def stratum_of(case: Case) -> dict:
    """The stratum axis' values of a Case (flavor serving its head dims, dtype)."""
    return {"flavor": flavor_of(case.d_qk, case.d_v), "dtype": case.dtype}


def _distinct_cases(direction: str, layout: str, **restrict):
    """The Cases a compile_distinct family draws from: valid Cases of ``direction`` on ``layout``."""
    return (backward_cases if direction == "bwd" else cases)(layouts=(layout,), **restrict)


def distinct_families(rows: Mapping) -> Tuple["Family", ...]:
    """A compile-key fact gets a kernel per value: one family per row of
    ``rows`` (properties.COMPILED_FACTS, derived from the declarations), one
    parameter per (pass, layout) place of its row, one example each under
    ci (``compile_distinct``), the CPU tier."""
    return tuple(
        Family(
            f"test_{name}_compiles_its_own_kernel",
            COMPILE,
            "compile_distinct",
            "compile_distinct",
            COMPILE_TIER,
            (Axis(("direction", "layout"), tuple(row.places), tuple(f"{d}-{x}" for d, x in row.places), SOURCE),),
            _distinct_cases,
            params={"fact": name},
            adapter="prepared_adapter",
            doc=f"{name}: {row.source}",
        )
        for name, row in rows.items()
        if row.places
    )


NUMERICS, TAILS, COMPILE, CONTRACTS, METAMORPHIC, BACKWARD = (
    f"conformance/test_{m}.py" for m in ("numerics", "tails", "compile", "contracts", "metamorphic", "backward")
)
LARGE, PARITY = "conformance/test_large.py", "conformance/test_parity.py"
GPU, COMPILE_TIER = ("gpu",), ("compile",)
# The compile tier whose verdict is the same on every machine: it compiles for sm_80 whatever the live device
# (compile_cache.COLD["sm80"], check_compiles) and launches nothing, so the CPU run judges it and the gate
# leaves it out unless --cpu-tier. compile_distinct (compiles for the live device on a GPU) is not of it.
CPU_TIER = ("compile", "cpu_tier")
# The large tier: selected by --large (or -m large) and the nightly profile, skipped otherwise (conformance.plugin).
LARGE_TIER = ("gpu", "large")
# Large shapes by layout, and the relations run on them (the entry-point one
# needs the wrapper's own copies, v_pow2 is the reference-free twin of numerics).
# (A relation must move something: "long" and "gqa64" hold one batch entry, "long" one head, and mostly no
# padding, so neither permutations nor isolation move them: RELATIONS[...].moves.)
LARGE_DENSE_SHAPES, LARGE_ONE_BATCH_SHAPES, LARGE_THD_SHAPES = ("decode", "grid"), ("long", "gqa64"), ("thd_seqs",)
LARGE_DENSE_RELATIONS, LARGE_ONE_BATCH_RELATIONS = ("batch_perm", "head_perm", "isolation", "determinism"), ("determinism",)
LARGE_THD_RELATIONS = ("seq_perm", "position", "isolation", "determinism")

MATRIX: Tuple[Family, ...] = (
    # numerics: O and LSE against the fp32 reference, poisoned dead inputs.
    Family("test_numerics_dense", NUMERICS, "numerics", "numerics", GPU, (STRATA_AXIS,), dense_cases, target=True, kind="numerics_dense"),
    # THD numerics launches exactly what the THD tails with initialized outputs launch: each example is judged by both (tails=True).
    Family("test_numerics_thd", NUMERICS, "numerics", "numerics", GPU, (STRATA_AXIS,), thd_cases, target=True, kind="numerics_thd", params={"tails": True}),
    # tails: output storage outside the live rows, NaN behind every dead input (THD with initialized outputs: test_numerics_thd).
    Family("test_tails_thd", TAILS, "tails", "tails", GPU, (STRATA_AXIS, NO_INIT), thd_cases, kind="tails_thd"),
    Family("test_tails_dense", TAILS, "tails", "tails", GPU, (STRATA_AXIS,), partial(dense_cases, memory=("bshd_padded",), padding=False), kind="tails_dense"),
    Family(
        "test_padding_poison",
        TAILS,
        "tails",
        "tails",
        GPU,
        (STRATA_AXIS, PADDED_AXIS),
        partial(dense_cases, padding=True),
        transform=_drop_other_lengths,
        kind="padding_poison",
    ),
    # compile cache and the CPU compile tier.
    Family("test_valid_cases_compile_for_sm80", COMPILE, "compiles", "compile", CPU_TIER, (), cases, adapter="prepared_adapter"),
    Family(
        "test_runtime_facts_mint_no_compile_cpu",
        COMPILE,
        "compile_reuse",
        "compile",
        CPU_TIER,
        (),
        cases,
        params={"launch": False},
        adapter="prepared_adapter",
    ),
    # Per stratum (xdist spreads the strata): each THD example compiles its sequence count + 1, one test of them all was 288 s on the H200.
    Family("test_runtime_facts_mint_no_compile", COMPILE, "compile_reuse", "compile_reuse", GPU, (STRATA_AXIS, LAYOUTS), _layout_cases, kind="compile_reuse"),
    Family(
        "test_disk_cache_serves_a_second_process",
        COMPILE,
        "disk_reuse",
        None,
        GPU,
        (DISK_LAYOUTS,),
        case=_disk_case,
        doc="CUDNN_FRONTEND_COMPILED_CACHE: a second process reloads what the first compiled, without compiling (counters read around its one launch).",
    ),
    *distinct_families(COMPILED_FACTS),
    # the large tier (strategies.large): production-scale shapes against the row-chunked reference.
    Family(
        "test_large",
        LARGE,
        "numerics",
        "large",
        LARGE_TIER,
        (_axis("shape", LARGE_SHAPES, SOURCE),),
        large_cases,
        doc="dense S 32k, S_q = 1 against 32k KV, H_q 64 GQA 8:1, 1,024-CTA grids, >= 64 packed sequences of >= 64k tokens",
    ),
    Family(
        "test_large_offsets",
        LARGE,
        "numerics",
        "large",
        LARGE_TIER,
        (_axis("shape", OFFSET_SHAPES, SOURCE),),
        large_cases,
        kind="numerics_large",
        doc="THD K/V element offsets past 2^31 and 2^32, decoys where a 32-bit offset would read (ground.data.wrapped_span)",
    ),
    Family(
        "test_large_slice",
        LARGE,
        "numerics",
        "large",
        GPU,
        (_axis("shape", SLICE_SHAPES, SOURCE),),
        large_cases,
        doc="the large tier's ci slice: decode rows against 8k KV, 64 packed sequences",
    ),
    # upstream parity (cudnn-frontend's SM80 tests): GQA groups, padded-row LSE, graph replay, launch hygiene.
    Family("test_gqa_groups", PARITY, "numerics", "parity", GPU, (_axis("shape", GQA_SHAPES, SOURCE),), large_cases),
    Family("test_padded_row_lse", PARITY, "numerics", "parity", GPU, (_axis("shape", LSE_PAD_SHAPES, SOURCE),), large_cases),
    Family("test_graph_replay", PARITY, "graph_replay", "parity", GPU, (_axis("layout", REPLAY_ROWS, SOURCE),), replay_cases, adapter="prepared_adapter"),
    Family("test_launch_hygiene", PARITY, "launch_hygiene", "parity", GPU, (_axis("layout", REPLAY_ROWS, SOURCE),), replay_cases, adapter="prepared_adapter"),
    # contract rejections, per entry point.
    Family("test_config_rejects", CONTRACTS, "rejection", "contracts", (), (rules_of(CONFIG),), _violating, params={"entry": CONFIG}, adapter=None),
    Family(
        "test_prepared_rejects_before_compiling",
        CONTRACTS,
        "rejection",
        "compile",
        COMPILE_TIER,
        (rules_of(PREPARED),),
        _violating,
        params={"entry": PREPARED, "launch": False},
        adapter="prepared_adapter",
    ),
    Family(
        "test_prepared_rejects",
        CONTRACTS,
        "rejection",
        "contracts",
        GPU,
        (rules_of(PREPARED),),
        _violating,
        params={"entry": PREPARED},
        adapter="prepared_adapter",
    ),
    Family(
        "test_wrapper_rejects", CONTRACTS, "rejection", "contracts", GPU, (rules_of(WRAPPER),), _violating, params={"entry": WRAPPER}, adapter="wrapper_adapter"
    ),
    # metamorphic: two launches whose O and LSE must agree bit for bit (no reference), every relation x stratum.
    Family("test_metamorphic_dense", METAMORPHIC, "metamorphic", "metamorphic", GPU, (STRATA_AXIS, DENSE_RELATION_AXIS), dense_cases, kind="metamorphic_dense"),
    # The same relations at the large tier's sizes, where a reference bound is widest and they are the strongest check.
    Family(
        "test_metamorphic_large_dense",
        LARGE,
        "metamorphic",
        "large",
        LARGE_TIER,
        (_axis("shape", LARGE_DENSE_SHAPES, SOURCE), _axis("relation", LARGE_DENSE_RELATIONS, PARAM)),
        large_cases,
    ),
    Family(
        "test_metamorphic_large_one_batch",
        LARGE,
        "metamorphic",
        "large",
        LARGE_TIER,
        (_axis("shape", LARGE_ONE_BATCH_SHAPES, SOURCE), _axis("relation", LARGE_ONE_BATCH_RELATIONS, PARAM)),
        large_cases,
    ),
    Family(
        "test_metamorphic_large_thd",
        LARGE,
        "metamorphic",
        "large",
        LARGE_TIER,
        (_axis("shape", LARGE_THD_SHAPES, SOURCE), _axis("relation", LARGE_THD_RELATIONS, PARAM)),
        large_cases,
    ),
    Family("test_metamorphic_thd", METAMORPHIC, "metamorphic", "metamorphic", GPU, (STRATA_AXIS, THD_RELATION_AXIS), thd_cases, kind="metamorphic_thd"),
)
# The backward (direction "bwd"): gradients, determinism, its compile tier and compile reuse.
BACKWARD_LAYOUTS = Axis(("layouts",), ((("dense",),), (("thd",),)), ("dense", "thd"), SOURCE)
# The backward's THD tails in both host modes (the prepared entry has both; the wrapper always initializes).
BWD_INIT = Axis(("initialize_outputs",), ((True,), (False,)), ("init", "no-init"), PARAM, labels=("init", "noinit"))
MATRIX += (
    # A deterministic draw (about half) launches twice and is also judged bitwise (the determinism check,
    # check_backward): one compile for both verdicts, where a test of its own paid one per example.
    Family(
        "test_backward_dense",
        BACKWARD,
        "backward",
        "backward",
        GPU,
        (STRATA_AXIS,),
        partial(backward_cases, layouts=("dense",)),
        target=True,
        kind="backward_dense",
        doc="dQ, dK, dV, dBias, dSink of dense backward Cases against the float64 closed form under the backward error model; "
        "deterministic=True: two launches give bitwise identical gradients.",
    ),
    Family(
        "test_backward_thd",
        BACKWARD,
        "backward",
        "backward",
        GPU,
        (STRATA_AXIS,),
        partial(backward_cases, layouts=("thd",)),
        target=True,
        kind="backward_thd",
        doc="dQ, dK, dV, dSink of packed THD backward Cases against the float64 closed form; deterministic=True: bitwise repeatable.",
    ),
    # tails: NaN behind every input element the backward must not read, gradient capacity per TAIL_RULES (one launch each).
    Family(
        "test_backward_tails_dense",
        BACKWARD,
        "backward_tails",
        "backward",
        GPU,
        (STRATA_AXIS,),
        partial(backward_cases, layouts=("dense",), inputs_from="reference", padding=True),
        kind="backward_tails_dense",
        doc="Dense backward with NaN in padded Q/K/V/dO/O/LSE rows: no NaN in any gradient, padded rows and dead dBias cells 0, pad columns untouched.",
    ),
    Family(
        "test_backward_tails_thd",
        BACKWARD,
        "backward_tails",
        "backward",
        GPU,
        (STRATA_AXIS, BWD_INIT),
        partial(backward_cases, layouts=("thd",), inputs_from="reference"),
        kind="backward_tails_thd",
        doc="THD backward with NaN outside every sequence: no NaN in live rows; dQ/dK/dV capacity zeroed or untouched per initialize_outputs and GQA.",
    ),
    # THD cu_seqlens[0] > 0: the backward's addressing against the forward's (two deterministic launches, bitwise).
    Family(
        "test_backward_thd_forward_addressing",
        BACKWARD,
        "backward_addressing",
        "determinism",
        GPU,
        (),
        based_thd_backward_cases,
        adapter="prepared_adapter",
        doc="THD backward with cu_seqlens_q[0] > 0, buffers handed as the forward takes them vs from cu_seqlens[0]: "
        "the same gradients bit for bit (kernels.backward.thd_origin).",
    ),
    Family(
        "test_backward_cases_compile_for_sm80",
        BACKWARD,
        "compiles",
        "backward_compile",
        CPU_TIER,
        (),
        backward_cases,
        adapter="prepared_adapter",
        doc="Every valid backward Case plans and compiles its chain for sm_80 without a GPU.",
    ),
    Family(
        "test_backward_runtime_facts_mint_no_compile_cpu",
        BACKWARD,
        "compile_reuse",
        "backward_compile",
        CPU_TIER,
        (),
        backward_cases,
        params={"launch": False},
        adapter="prepared_adapter",
        doc="Runtime facts of a backward Case (data, THD token totals, padding lengths, the scale's magnitude) reach no compile key.",
    ),
    Family(
        "test_backward_runtime_facts_mint_no_compile",
        BACKWARD,
        "compile_reuse",
        "determinism",
        GPU,
        (BACKWARD_LAYOUTS,),
        partial(backward_cases, inputs_from="reference"),
        kind="backward_compile_reuse",
    ),
    Family(
        "test_backward_wrapper_rejects",
        BACKWARD,
        "backward_rejection",
        None,
        (),
        (_axis("rule", BWD_RULE_NAMES, SOURCE),),
        case=lambda rule: next(r for r in BWD_RULES if r.name == rule).case(),
        adapter=None,
        doc="sdpa_bwd_wrapper_sm80 refuses each backward contract row with its exception naming the argument, before compiling (CPU).",
    ),
)
FAMILIES: Dict[str, Family] = {f.test: f for f in MATRIX}
assert len(FAMILIES) == len(MATRIX), "two families share a test name"

# Profiles that run part of the suite (strategies.profiles): test -> the
# stratum ids it runs on (None: every parameter; a test outside the matrix,
# another family's: the parameter values it runs with); every other test of a
# kernel family (the findings' replays, the sm90 gate's compile tier too) is
# deselected. ``pr``, the first stage of a
# kernel-change CI (<= 60 s cold on one GPU, 16 workers): the checks that kill
# most per compile over the few pool rows of geometry mode "few": numerics on
# every stratum (each forward template flavor and dtype), tails on each forward
# template once and compile reuse on one stratum per flavor (their checks are
# of storage and keys, not of the dtype's arithmetic), padding poison on two;
# the contract rejections that compile nothing (the config's, the backward
# wrapper's: the prepared and forward wrapper entries compile most violating
# Cases, and no kill-rate kind searches rejections); the backward on its
# cheapest strata, one per backward kernel (bprop_d64_f16: gptoss; bprop_f16:
# llama), one per dtype, where backward and backward_tails share their chains'
# compiles (the THD tails in the init mode only: a no-init chain compiles apart); no metamorphic, parity, large, findings' replays or compile tier
# (deliberate compiles). The sm90 family (its tests are outside the matrix):
# dense numerics and tails on its compile entry (the public wrapper's plan is
# ci's) over its pool's fewest rows and reach rows (strategies.sm90.few_rows),
# and its dense compile reuse on the same rows; its THD is ci's (a THD row is another
# compile of seconds). The compile budget: strategies.profiles.PR_COMPILE_SLOTS.
# docs/throughput.md.
PR_BACKWARD_STRATA = ("gptoss-fp16", "llama-bf16")
PR_FLAVOR_STRATA = ("gptoss-fp16", "llama-bf16", "dsv3-fp16", "qwen-bf16")  # each flavor once, the dtypes alternating
PR_TEMPLATE_STRATA = ("gptoss-fp16", "qwen-bf16")  # each forward template once (prefill_f16, prefill_d256_f16), both dtypes
PROFILE_TESTS: Dict[str, Dict[str, Optional[Tuple[str, ...]]]] = {
    "pr": {
        **dict.fromkeys(("test_numerics_dense", "test_numerics_thd")),
        **dict.fromkeys(("test_tails_thd", "test_tails_dense"), PR_TEMPLATE_STRATA),
        "test_runtime_facts_mint_no_compile": PR_FLAVOR_STRATA,
        "test_padding_poison": PR_BACKWARD_STRATA,
        **dict.fromkeys(("test_config_rejects", "test_backward_wrapper_rejects")),
        **dict.fromkeys(("test_backward_dense", "test_backward_thd", "test_backward_tails_dense"), PR_BACKWARD_STRATA),
        "test_backward_tails_thd": PR_BACKWARD_STRATA + ("init",),  # the no-init chain is a compile of its own: ci's
        **dict.fromkeys(("test_sm90_numerics_dense", "test_sm90_tails_dense"), ("compile",)),
        "test_sm90_runtime_facts_mint_no_compile": ("dense",),
    }
}


def in_profile(profile: str, test: str, values: Mapping) -> bool:
    """Whether ``profile`` runs the test ``test`` (of a kernel family) with
    parameter ``values`` (``PROFILE_TESTS``): every test under a profile
    without a table; under one with a table, the tests it names, a matrix
    test on the strata it lists, another family's test with the parameter
    values it lists."""
    table = PROFILE_TESTS.get(profile)
    if table is None:
        return True
    if test not in table:
        return False
    only = table[test]
    if only is None:
        return True
    if test in FAMILIES:  # each axis whose ids the entry names keeps those values (the strata: every entry names some)
        for axis in FAMILIES[test].axes:
            named = set(axis.ids) & set(only)
            if named and all(a in values for a in axis.args) and axis.id_of(values) not in named:
                return False
        return True
    return any(v in only for v in values.values())


def _axis_ids(test: str) -> set:
    return {i for axis in FAMILIES[test].axes for i in axis.ids}


# A matrix test's entry names strata (at least one) and, optionally, ids of its other axes.
assert all(
    s is None or name not in FAMILIES or (set(s) <= _axis_ids(name) and set(s) & set(STRATA_IDS)) for t in PROFILE_TESTS.values() for name, s in t.items()
)


def family(test: str) -> Family:
    return FAMILIES[test]
