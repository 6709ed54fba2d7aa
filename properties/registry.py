"""The properties, one object each: ``Property`` owns its name, its check
function, the checks a failure (and so a known finding) may name, its
schedule weight, the directions of the Cases it judges and a one-line doc.

Everything else reads these objects: ``conformance.schedule`` the weight,
``ground.findings.load`` / ``parse`` the vocabulary (``CHECKS``, handed in by
the callers: ground imports nothing of ours), the test matrix
(``properties/matrix.py``: a ``Family`` names its property) and the repro
command, the kill harness and case files the check. A new property is one
``Property`` here plus its module (docs/CONTRIBUTING.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Callable, Dict, Mapping, Tuple

from ground.case import DIRECTIONS
from ground.findings import OUTCOME, PLAIN, ROWS, STORAGE
from ground.outcome import Observation
from properties.backward import check_backward, check_backward_addressing, check_backward_rejection, check_determinism
from properties.backward_tails import check_backward_tails
from properties.common import served
from properties.compile_cache import check_compile_distinct, check_compile_reuse, check_compiles, check_disk_reuse
from properties.launch import check_graph_replay, check_launch_hygiene
from properties.metamorphic import check_metamorphic
from properties.numerics import check_numerics
from properties.rejection import check_rejection
from properties.tails import check_tails

KINDS = (ROWS, STORAGE, OUTCOME, PLAIN)  # how a check's failure says what failed (ground.findings)
FWD, BWD = DIRECTIONS
BOTH = (FWD, BWD)


@dataclass(frozen=True, eq=False)
class Property:
    """One property. ``check(case, adapter, **params) -> Observation`` runs
    under the refusal policy (``properties.common.served``); it raises
    ``PropertyFailure`` naming one of ``checks`` where the property does not
    hold."""

    name: str
    check: Callable[..., Observation]  # served: a Case its adapter cannot express is refused
    # check name -> (kind, what it asserts): what a failure names (properties.judge ``check=``) and so
    # what a known finding may name (ground.findings.load, kind: ROWS / STORAGE / OUTCOME / PLAIN).
    checks: Mapping[str, Tuple[str, str]]
    # Seconds per test on the H200's cold ci run of 2026-12-03 (report ci-1: the property's example
    # seconds over its tests; compiles are most of it): conformance.schedule deals the heaviest tests
    # first. A relative weight only: a wrong one costs balance, never a verdict.
    cold_seconds: float
    directions: Tuple[str, ...]  # the passes (ground.case.DIRECTIONS) of the Cases it judges
    doc: str  # one line: what must hold

    def __post_init__(self):
        object.__setattr__(self, "checks", MappingProxyType(dict(self.checks)))
        assert self.name.isidentifier(), self.name
        assert all(kind in KINDS and desc for kind, desc in self.checks.values()), self.name
        assert self.cold_seconds > 0 and self.directions and set(self.directions) <= set(DIRECTIONS), self.name
        assert self.doc and "\n" not in self.doc, self.name

    @property
    def launches(self) -> bool:
        """It launches a kernel (every property that launches checks the guard bands)."""
        return "guards" in self.checks


# Every property that launches checks the guard bands around every buffer.
_GUARDS = {"guards": (STORAGE, "the guard bands around every buffer are untouched (no out-of-bounds write)")}
# Every property that launches the backward on a valid Case: the entry point must take it.
# (Only what the kernels' package raises: a CUDA fault ends the worker, conformance.isolation;
# the suite's own exceptions are raised as they are, properties.common.accepted.)
_LAUNCH = {"launch": (OUTCOME, "the entry point takes a valid Case: the launch returns instead of raising (observed: the exception type)")}
_LSE_UNTOUCHED = {"lse untouched": (STORAGE, "without a Stats output (has_lse false) the LSE buffer, never handed, is untouched")}
_OUTPUTS = {"outputs": (PLAIN, "the backward returns every gradient its Case asks for")}

REGISTRY: Tuple[Property, ...] = (
    Property(
        "numerics",
        served(check_numerics),
        {
            "error model": (ROWS, "O and LSE within the error model of the kernel's arithmetic (float64 reference) on every row the model judges"),
            "contract rows": (ROWS, "rows the contract fixes bit for bit: dense padded Q rows and rows with no visible key (O 0, LSE -inf)"),
            "model finite": (PLAIN, "the error model's bound is finite on every judged element"),
            **_LSE_UNTOUCHED,
            **_GUARDS,
        },
        cold_seconds=9.0,
        directions=(FWD,),
        doc="O and LSE within the error model of the float64 reference; rows the contract fixes, bit for bit",
    ),
    Property(
        "tails",
        served(check_tails),
        {
            "capacity": (ROWS, "THD O/LSE capacity outside the live tokens: zeroed when the host initializes outputs, untouched otherwise"),
            "pad columns": (STORAGE, "dense O pad columns (bshd_padded) never written"),
            "no nan": (ROWS, "every output row the contract defines is written and free of NaN (dense padded rows: O 0, LSE -inf)"),
            **_LSE_UNTOUCHED,
            "lse pitch": (STORAGE, "the storage between the elements of a strided Stats layout (a padded pitch) is never written"),
            **_GUARDS,
        },
        cold_seconds=8.0,
        directions=(FWD,),
        doc="output storage outside the live rows ends as the contract says; NaN in dead inputs reaches no defined output",
    ),
    Property(
        "compile_reuse",
        served(check_compile_reuse),
        {
            "compile budget": (PLAIN, "runtime-only variants mint no compile and no template module"),
            "capacity budget": (PLAIN, "the same, for THD variants with another packed capacity (token totals, capacities, first offsets, a sequence more)"),
            **_LAUNCH,
            **_GUARDS,
        },
        cold_seconds=12.0,
        directions=BOTH,
        doc="runtime data asks the compiled cache for no entry the Case itself did not ask for and mints no template module",
    ),
    Property(
        "disk_reuse",
        served(check_disk_reuse),
        {
            **_GUARDS,
            "cold first process": (PLAIN, "the first process on a fresh cache directory compiles"),
            "compile budget": (PLAIN, "a second process on the same on-disk cache compiles nothing"),
            "disk hit": (PLAIN, "the second process reads the on-disk cache"),
            "same output": (PLAIN, "the kernel served from disk writes the O and LSE bits the compiled one wrote"),
        },
        cold_seconds=22.0,
        directions=(FWD,),
        doc="a second process on the same CUDNN_FRONTEND_COMPILED_CACHE directory compiles nothing: it reads what the first wrote",
    ),
    Property(
        "compile_distinct",
        served(check_compile_distinct),
        {
            "cold first compile": (PLAIN, "a fresh compiled cache compiles the Case (where no request can be observed)"),
            "distinct kernel": (PLAIN, "the Case's variant in a compile-key fact asks for a compiled entry of its own (not the Case's artifact)"),
        },
        cold_seconds=1.5,
        directions=BOTH,
        doc="a Case's variant in any compile-key fact (derived from the declarations) gets a kernel of its own (CPU tier)",
    ),
    Property(
        "rejection",
        served(check_rejection),
        {
            "rejects": (OUTCOME, "the entry point raises the stated exception naming the argument"),
            "outputs untouched": (STORAGE, "a rejected call writes nothing to the caller's outputs"),
            "compiles nothing": (PLAIN, "a rejected call asks for no compile, template module or staging kernel"),
            **_GUARDS,
        },
        cold_seconds=6.0,
        directions=(FWD,),
        doc="each contract rule raises the stated exception naming the argument, before compiling, launching or writing anything",
    ),
    # No check of its own: any exception fails it (no finding can name one).
    Property(
        "compiles",
        served(check_compiles),
        {"compiled": (PLAIN, "the call asks the compiled cache for a kernel (a compile, a disk or a memo hit)")},
        cold_seconds=11.0,
        directions=BOTH,
        doc="every valid Case compiles for sm_80 (CPU tier)",
    ),
    Property(
        "graph_replay",
        served(check_graph_replay),
        {
            "capture": (OUTCOME, "one launch can be captured in a CUDA graph"),
            "replay equals eager": (ROWS, "after the inputs changed in place, the replay's O and LSE equal an eager launch's bit for bit"),
            "compile budget": (PLAIN, "capture, replay and the eager launch of the changed Case compile nothing"),
            **_GUARDS,
        },
        cold_seconds=2.0,
        directions=(FWD,),
        doc="a launch captured in a CUDA graph, replayed on inputs changed in place, equals an eager launch bit for bit",
    ),
    Property(
        "launch_hygiene",
        served(check_launch_hygiene),
        {
            "no host synchronization": (OUTCOME, "a warm launch neither synchronizes nor reads device memory back to the host"),
            "no allocation": (OUTCOME, "a warm launch allocates no device memory (caching-allocator counters)"),
            "compile budget": (PLAIN, "a warm launch compiles nothing"),
            "launch did the work": (ROWS, "the watched launch's O and LSE equal an eager launch's bit for bit"),
            **_GUARDS,
        },
        cold_seconds=0.5,
        directions=(FWD,),
        doc="a warm launch neither synchronizes, allocates nor compiles, and its outputs equal an eager launch's",
    ),
    # The second launch's rows live in its own layout (a permuted or shifted pack), so no row region
    # of the Case bounds them: a finding names the check with Case facts.
    Property(
        "metamorphic",
        served(check_metamorphic),
        {
            "o": (PLAIN, "O of the second launch equals the first's, moved as the relation moves the inputs, bit for bit"),
            "lse": (PLAIN, "LSE of the second launch equals the first's, moved as the relation moves the inputs, bit for bit"),
            "subnormal rescale": (PLAIN, "V * 2^k: O elements subnormal in the I/O dtype within the double rounding (tolerances.SUBNORMAL_RESCALE_ULPS)"),
            "same compile": (PLAIN, "a relation that keeps the compile key: the second launch compiles nothing"),
            **_GUARDS,
        },
        cold_seconds=3.0,
        directions=(FWD,),
        doc="two launches related by a relation agree bit for bit on O and LSE, no reference, no tolerance",
    ),
    # The backward's row checks name gradient quantities (dq, dk, dv, dbias, dsink), which no
    # finding's row region can bound yet: a backward finding names Case facts instead.
    Property(
        "backward",
        served(check_backward),
        {
            "error model": (PLAIN, "dQ, dK, dV, dBias, dSink within the backward error model of the float64 closed form"),
            "contract rows": (PLAIN, "gradients the kernel's gating makes exactly 0 (no visible key, padded rows, unseen keys, masked cells)"),
            "model finite": (PLAIN, "the backward error model's bound is finite on every judged element (the handed O/LSE are finite where they must be)"),
            "handed forward": (
                PLAIN,
                "the forward kernel's O and LSE handed to the backward (inputs_from kernel) are within the forward error model, contract rows exact",
            ),
            **_OUTPUTS,
            **_LAUNCH,
            **_GUARDS,
        },
        cold_seconds=55.0,
        directions=(BWD,),
        doc="dQ, dK, dV (dBias, dSink) within the backward error model of the float64 closed form; gated gradients exactly 0",
    ),
    # In a run it rides on the backward tests (every deterministic draw of check_backward is judged by both).
    Property(
        "determinism",
        served(check_determinism),
        {
            "bitwise": (PLAIN, "deterministic=True: two launches give bitwise identical gradients"),
            **_LAUNCH,
            **_GUARDS,
        },
        cold_seconds=24.0,
        directions=(BWD,),
        doc="deterministic=True: two backward launches on the same inputs give bitwise identical gradients",
    ),
    Property(
        "backward_tails",
        served(check_backward_tails),
        {
            "no nan": (PLAIN, "every gradient element the contract defines is written and free of the NaN poisoned into every dead input"),
            "capacity": (PLAIN, "gradient storage outside the live rows ends as the contract says (properties.backward_tails.TAIL_RULES)"),
            "pad columns": (STORAGE, "dense dQ/dK/dV pad columns (bshd_padded) never written"),
            **_OUTPUTS,
            **_LAUNCH,
            **_GUARDS,
        },
        cold_seconds=30.0,
        directions=(BWD,),
        doc="NaN in every input element the backward must not read reaches no defined gradient; gradient capacity as the source says",
    ),
    Property(
        "backward_rejection",
        served(check_backward_rejection),
        {
            "rejects": (OUTCOME, "sdpa_bwd_wrapper_sm80 raises the stated exception naming the argument"),
            "compile budget": (PLAIN, "a refused backward call compiles nothing"),
            **_GUARDS,
        },
        cold_seconds=0.5,
        directions=(BWD,),
        doc="sdpa_bwd_wrapper_sm80 refuses each backward contract row with its exception naming the argument, before compiling",
    ),
    Property(
        "backward_addressing",
        served(check_backward_addressing),
        {
            "forward addressing": (
                PLAIN,
                "THD cu_seqlens[0] > 0: the gradients of buffers handed as the forward takes them equal those handed from cu_seqlens[0], bit for bit",
            ),
            **_LAUNCH,
            **_GUARDS,
        },
        cold_seconds=8.0,
        directions=(BWD,),
        doc="THD cu_seqlens[0] > 0: buffers handed as the forward takes them give the gradients of buffers handed from cu_seqlens[0]",
    ),
)

# name -> Property. Each check runs under the refusal policy (common.served): a Case its adapter
# cannot express is refused, and every ``ground.outcome.Unsupported`` it raises is rejected (a
# Hypothesis example of scope "case") or raised (skip; CLI exit 2).
PROPERTIES: Dict[str, Property] = {p.name: p for p in REGISTRY}
assert len(PROPERTIES) == len(REGISTRY), "two properties share a name"

# The findings vocabulary: property -> check -> (kind, what it asserts), for ground.findings.load / parse.
CHECKS: Mapping[str, Mapping[str, Tuple[str, str]]] = MappingProxyType({p.name: p.checks for p in REGISTRY})
