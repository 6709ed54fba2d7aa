"""The Case: one frozen, JSON-serializable set of graph facts plus a data seed.

A Case is the spine of the suite. A strategy draws it, a kernel adapter runs
it, a property judges the result against the reference, and it ends in the
report or in a repro file. The tensors are never stored: ``ground.data``
regenerates them bit for bit from the facts and ``seed``.

Every fact is declared ONCE, below, as a field of ``Case``: its type (the
annotation), default, validation, description and how it shows in coverage,
descriptions and adapters (``fact(...)``). ``FACTS`` (name -> ``Fact``) is
built from those declarations, and everything else derives from it: case-file
reading (``Case.from_dict``: every fact of the file's schema must be present,
with its type), ``structural_problem``, the findings file's ``when``
(``coerce_fact``), the coverage vocabulary (``ground.coverage``),
the one-line description (``Case.describe``), the adapters' refusal of facts
they cannot express (``Case.unexpressible``) and the facts table
(``facts_markdown``; ``sdpa-conformance facts``), and the lists of the facts'
roles (``Fact``: direction, compiled, feature, simplest, needs, kernel,
distinct) that the strategies, the geometry pools and shrinker, the feature
space and the compile-cache properties read. docs/CONTRIBUTING.md says
which files a new fact touches.

Conventions (shared by every module):
- Dense tensors are logically (B, H, S, D); ``memory`` says how they sit in
  storage. THD tensors are packed (T, H, D) with per-sequence lengths.
- ``window_left = -1`` means no sliding window; ``window_right = -1`` means no
  right band (a right band widens the causal diagonal and needs ``causal``).
- ``scale = None`` means the kernels' default, 1/sqrt(d_qk).
- ``violation`` names the contract rule a contract-violating Case breaks
  (``None`` for valid Cases); see ``strategies.violations``.
"""

from __future__ import annotations

import dataclasses
import json
import math
import typing
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Optional, Tuple

# The case-file schema this suite writes. A fact added later declares the
# schema that introduced it (``fact(since=N)``, with SCHEMA_VERSION = N): files
# of an older schema get its default, the behaviour they were recorded with.
SCHEMA_VERSION = 5

from .families import DEFAULT_FAMILY, FAMILIES, FAMILY_NAMES  # noqa: E402
from .outcome import Unsupported  # noqa: E402
from .tables import ADAPTERS, DTYPE_SHORT, DTYPES  # noqa: E402,F401  (one definition, re-exported)

BIAS_DTYPES = ("float16", "bfloat16", "float32")
LAYOUTS = ("dense", "thd")
DIRECTIONS = ("fwd", "bwd")
INPUT_SOURCES = ("reference", "kernel")
DBIAS_DTYPES = ("float32", "io")  # the dBias buffer: fp32 or the I/O dtype (prepared_sm80.build_spec accepts both)
# Dense storage orders of Q/K/V/O. Every one keeps the head dim innermost and
# every outer stride a multiple of 8 elements, which is what the native
# pointer host serves (prepared_sm80.native_layouts).
MEMORY_ORDERS = ("bshd", "bhsd", "bshd_padded")
# Extra elements per token row in "bshd_padded" (a multiple of 8: 16-byte
# vector loads stay aligned).
ROW_PAD = 8
# Tile schedulers of the dense SM80 grid (TemplateParams.sched_policy): the
# plain 3-D grid, longest-processing-time first, LPT in L2-sized blocks of
# (batch, kv head) groups; "auto" is the public wrapper's pick
# (api_dsl._sm80_resolve_scheduler), resolved the same way for every adapter.
SCHEDULERS = ("natural", "lpt", "lpt_l2", "auto")
# Stats (LSE) layouts: dense (B, H, S) compact / S-pitch padded / token-major
# (B, S, H); THD head-major (H, T) / head-major with a padded head pitch /
# token-major (T, H) (compile_thd_host lse_stride).
LSE_LAYOUTS = ("compact", "padded", "token_major")
# Elements past S in each (batch, head) row of a dense "padded" LSE.
LSE_ROW_PAD = 8
# Sink buffers: one logit per head, every other element (stride 2), or one
# logit for every head (stride 0).
SINK_LAYOUTS = ("compact", "strided", "broadcast")
SINK_DTYPES = ("float32", "float16", "bfloat16")
PREFIX_DTYPES = ("int32", "int64")


class CaseFileError(ValueError):
    """A case file (or dict) that cannot be turned into a Case; names the field."""


# ------------------------------------------------------------------ facts
AUTO = "auto"  # Fact.coverage: an axis of its own, from the fact's domain (bool: no/yes; choices)


_SAME = object()  # fact(simplest=): the default


def fact(
    default: Any,
    doc: str,
    *,
    choices: Optional[Tuple[Any, ...]] = None,
    minimum: Optional[int] = None,
    coverage: Any = AUTO,
    shown: Optional[str] = None,
    adapters: Optional[Tuple[str, ...]] = None,
    since: int = 1,
    direction: Tuple[str, ...] = DIRECTIONS,
    compiled: Optional[bool] = True,
    feature: bool = False,
    simplest: Any = _SAME,
    needs: Tuple[str, ...] = (),
    kernel: Tuple[str, ...] = (),
    distinct: Optional[str] = None,
    no_variant: Tuple[Tuple[str, str], ...] = (),
):
    """Declare one Case fact (a dataclass field); see ``Fact`` for the keywords."""
    meta = dict(doc=doc, choices=choices, minimum=minimum, coverage=coverage, shown=shown, adapters=adapters, since=since)
    meta.update(direction=direction, compiled=compiled, feature=feature, simplest=default if simplest is _SAME else simplest)
    meta.update(needs=needs, kernel=kernel, distinct=distinct, no_variant=no_variant)
    return field(default=default, metadata={"fact": meta})


@dataclass(frozen=True)
class Kind:
    """How a fact's type reads from JSON: ``coerce(value)``, or ``_NO`` if it does not fit."""

    expected: str  # for messages: "an integer", ...
    coerce: Callable[[Any], Any]
    optional: bool = False  # null allowed


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


_NO = object()  # coerce's "does not fit"
KINDS: Dict[Any, Kind] = {
    bool: Kind("true/false", lambda v: v if isinstance(v, bool) else _NO),
    int: Kind("an integer", lambda v: v if _is_int(v) else _NO),
    str: Kind("a string", lambda v: v if isinstance(v, str) else _NO),
    Optional[str]: Kind("a string or null", lambda v: v if isinstance(v, str) else _NO, optional=True),
    Optional[float]: Kind("a number or null", lambda v: float(v) if _is_int(v) or isinstance(v, float) else _NO, optional=True),
    Optional[Tuple[int, ...]]: Kind(
        "a list of integers or null", lambda v: tuple(v) if isinstance(v, (list, tuple)) and all(_is_int(x) for x in v) else _NO, optional=True
    ),
}


@dataclass(frozen=True)
class Fact:
    """One declared Case fact.

    type: the field's annotation (one of ``KINDS``). choices: the values a
    Case may hold (None: any value of the type; null is always allowed for an
    Optional type). minimum: the least int (for length lists: the least
    entry). coverage: the coverage axis/axes that show the fact (``AUTO``: an
    axis of its own from its domain, bool or choices; a tuple of axis names
    of ``ground.coverage.DERIVED``; None: not a feature, e.g. the
    data seed). shown: the part of ``Case.describe`` that shows it (None: shown
    as ``name`` / ``name=value`` when not the default). adapters: the adapters
    (``tables.ADAPTERS``) that can express a non-default value (None: every
    one); the others refuse such a Case (``Unsupported``, scope "case"), a test draws
    its projection (``Case.expressed``: the fact at its default, which must
    keep every Case valid). since: the case-file schema that introduced the fact.

    Its roles (what the lists of the suite derive from):
    direction: the passes whose Cases may hold a non-default value: ("fwd",)
    forward-only (a backward Case keeps the default: ``FORWARD_ONLY_FACTS``,
    strategies.backward resets it), ("bwd",) backward-only
    (``BACKWARD_FACTS``: the forward strategies never reach its other
    values, the backward ones must, coverage.BACKWARD_REQUIRED). compiled:
    True where a value reaches the kernels' compile key (for some facts a
    part of it: a padding operand's presence, the scale's sign, the THD
    sequence count); False for a runtime value (a launch argument or data: a
    new value must mint no compile, properties.compile_cache.runtime_variants);
    None for what is no kernel input (the contract rule, where backward
    inputs come from). ``compiled_facts(direction)``. feature: an optional
    kernel feature, off (at ``simplest``) in the simplest Case: the free
    strategies draw it behind a switch and the geometry pools place it on
    their rows (strategies.features/geometry: by hand for the facts those
    modules name, generically for any other), the geometry shrinker turns it
    off first. simplest: the value the geometry shrinker aims for (the
    default unless declared). needs: facts this one describes (sink_dtype:
    sinks); off at its simplest with any of them (the shrinker turns them
    off together; a compile_distinct family switches them on). kernel: the
    kernels' degrees of freedom that realise it, "source.name" of
    ``ground.feature_space.SOURCES`` ("TemplateParams.stats_log2",
    "wrapper.q_tensor"): ``feature_space.DRAWN`` is their inverse. Every
    compile-key fact (compiled, or realised by a TemplateParams field or a
    compile host argument) has a compile_distinct family per pass it applies
    to (properties.compile_cache.COMPILED_FACTS): a Case and the Case with
    only this fact at another value must get two kernels. distinct: where
    the kernels compile it in (the family's reason; else its ``kernel``
    entries). no_variant: (pass, reason) for each pass on which no valid Case
    differs from another in this fact alone in a way the kernels specialize
    on, so it has no compile_distinct family there.
    """

    name: str
    type: Any
    default: Any
    doc: str
    choices: Optional[Tuple[Any, ...]] = None
    minimum: Optional[int] = None
    coverage: Any = AUTO
    shown: Optional[str] = None
    adapters: Optional[Tuple[str, ...]] = None
    since: int = 1
    direction: Tuple[str, ...] = DIRECTIONS
    compiled: Optional[bool] = True
    feature: bool = False
    simplest: Any = None
    needs: Tuple[str, ...] = ()
    kernel: Tuple[str, ...] = ()
    distinct: Optional[str] = None
    no_variant: Tuple[Tuple[str, str], ...] = ()

    def other_values(self) -> Tuple[Any, ...]:
        """The values besides the default of a bool or choice fact, in declared order (() for others)."""
        if self.type is bool:
            return (not self.default,)
        return tuple(c for c in self.choices if c != self.default) if self.choices is not None else ()

    @property
    def kind(self) -> Kind:
        return KINDS[self.type]

    def coerce(self, value: Any) -> Any:
        """``value`` read from JSON/TOML as this fact's type; CaseFileError naming the field."""
        if value is None and self.kind.optional:
            return None
        out = self.kind.coerce(value) if value is not None else _NO
        if out is _NO:
            raise CaseFileError(f"case field {self.name!r}: expected {self.kind.expected}, got {value!r}")
        return out

    def problem(self, value: Any) -> Optional[str]:
        """What is wrong with ``value`` on its own (choices, minimum, finiteness), or None."""
        if value is None:
            return None
        if self.choices is not None and value not in self.choices:
            return f"case field {self.name!r}: {value!r} is not one of {self.choices}"
        if self.minimum is not None:
            entries = value if isinstance(value, tuple) else (value,)
            if any(v < self.minimum for v in entries):
                what = "every length" if isinstance(value, tuple) else "must be"
                return f"case field {self.name!r}: {what} >= {self.minimum}, got {value}"
        if isinstance(value, float) and not math.isfinite(value):
            return f"case field {self.name!r}: must be finite"
        return None


_STRATUM = (
    "the stratum itself: dense and THD are different hosts and entries (compile_host / compile_thd_host, TemplateParams.thd_varlen), "
    "and no dense Case becomes a THD one by its layout alone (THD needs per-sequence lengths)"
)


@dataclass(frozen=True)
class Case:
    """Graph facts plus a data seed. Every field is a fact declared with
    ``fact(default, doc, ...)``: the one place a fact is defined (``FACTS``,
    ``facts_markdown()``, ``sdpa-conformance facts``)."""

    layout: str = fact(
        "dense",
        "dense (B, H, S, D) tensors or packed THD (T, H, D) varlen",
        choices=LAYOUTS,
        shown="shape",
        kernel=("TemplateParams.thd_varlen", "wrapper.q_tensor"),
        no_variant=tuple((d, _STRATUM) for d in DIRECTIONS),
    )
    dtype: str = fact("float16", "I/O dtype of Q, K, V and O", choices=DTYPES, shown="dtype", kernel=("TemplateParams.io_bf16",))
    batch: int = fact(
        1, "dense batch size (THD: one; the sequence count is len(q_lens))", minimum=1, coverage=("dense batch",), shown="shape", kernel=("wrapper.q_tensor",)
    )
    h_q: int = fact(1, "query (and output) heads", minimum=1, coverage=("heads",), shown="heads", kernel=("wrapper.q_tensor", "compile_thd_host.h"))
    h_kv: int = fact(
        1, "key/value heads; divides h_q (MHA, GQA, MQA)", minimum=1, coverage=("heads",), shown="heads", kernel=("wrapper.k_tensor", "compile_thd_host.h_kv")
    )
    d_qk: int = fact(
        64,
        "head dim of Q and K (off a flavor envelope: padded into it)",
        minimum=1,
        coverage=("flavor", "head dims"),
        shown="dims",
        kernel=("TemplateParams.d_qk", "wrapper.q_tensor"),
    )
    d_v: int = fact(64, "head dim of V and O", minimum=1, coverage=("flavor", "head dims"), shown="dims", kernel=("TemplateParams.d_v", "wrapper.v_tensor"))
    # Dense: physical sequence lengths (the tensors' S axis).
    s_q: int = fact(
        1,
        "dense physical Q length (the tensors' S axis)",
        minimum=1,
        coverage=("dense lengths", "causal alignment"),
        shown="shape",
        kernel=("wrapper.q_tensor",),
    )
    s_kv: int = fact(1, "dense physical K/V length", minimum=1, coverage=("dense lengths", "causal alignment"), shown="shape", kernel=("wrapper.k_tensor",))
    # Dense padding lengths (per batch; None = operand absent).
    seq_q_lens: Optional[Tuple[int, ...]] = fact(
        None,
        "dense per-batch live Q lengths in [0, s_q] (the seq_len_q operand); null: absent",
        minimum=0,
        coverage=("padding",),
        shown="shape",
        kernel=("TemplateParams.has_seq_q_lens", "wrapper.seq_len_q", "compile_host.geometry"),
    )
    seq_kv_lens: Optional[Tuple[int, ...]] = fact(
        None,
        "dense per-batch live K/V lengths in [0, s_kv] (seq_kv_lens); null: absent",
        minimum=0,
        coverage=("padding",),
        shown="shape",
        kernel=("TemplateParams.has_seq_kv_lens", "wrapper.seq_kv_lens", "compile_host.geometry"),
    )
    # THD: per-sequence live lengths, first offsets and capacity slack.
    q_lens: Optional[Tuple[int, ...]] = fact(
        None,
        "THD per-sequence Q lengths (one entry per sequence)",
        minimum=0,
        coverage=("thd lengths", "causal alignment"),
        shown="shape",
        kernel=("wrapper.cum_seqlen_q_tensor", "wrapper.max_s_q", "compile_thd_host.n_seq"),
    )
    kv_lens: Optional[Tuple[int, ...]] = fact(
        None,
        "THD per-sequence K/V lengths (as many as q_lens)",
        minimum=0,
        coverage=("thd lengths", "causal alignment"),
        shown="shape",
        kernel=("wrapper.cum_seqlen_k_tensor", "compile_thd_host.n_seq"),
    )
    q_base: int = fact(
        0,
        "THD first Q offset, cu_seqlens_q[0] (tokens)",
        minimum=0,
        coverage=("padding",),
        shown="shape",
        compiled=False,
        kernel=("wrapper.cum_seqlen_q_tensor",),
    )
    kv_base: int = fact(
        0,
        "THD first K/V offset, cu_seqlens_k[0] (tokens)",
        minimum=0,
        coverage=("padding",),
        shown="shape",
        compiled=False,
        kernel=("wrapper.cum_seqlen_k_tensor",),
    )
    q_slack: int = fact(
        0,
        "THD Q capacity past the last sequence (tokens)",
        minimum=0,
        coverage=("padding",),
        shown="shape",
        compiled=False,
        kernel=("wrapper.cum_seqlen_q_tensor",),
    )
    kv_slack: int = fact(
        0,
        "THD K/V capacity past the last sequence (tokens)",
        minimum=0,
        coverage=("padding",),
        shown="shape",
        compiled=False,
        kernel=("wrapper.cum_seqlen_k_tensor",),
    )
    # Mask family.
    causal: bool = fact(False, "causal mask", coverage=("mask", "causal alignment"), shown="mask", kernel=("TemplateParams.is_causal", "wrapper.is_causal"))
    bottom_right: bool = fact(
        False,
        "causal diagonal / window aligned bottom-right (needs causal or a left window)",
        coverage=("mask", "causal alignment"),
        shown="mask",
        kernel=("TemplateParams.causal_bottom_right", "wrapper.causal_bottom_right"),
    )
    window_left: int = fact(
        -1,
        "sliding window: keys at most this far left of the diagonal; -1: none",
        coverage=("mask",),
        shown="mask",
        kernel=("TemplateParams.has_swa", "wrapper.window_size", "compile_host.swa_window", "compile_thd_host.swa_window"),
    )
    window_right: int = fact(
        -1,
        "right band widening the causal diagonal (needs causal); -1: none",
        coverage=("mask",),
        shown="mask",
        kernel=("wrapper.window_size", "compile_host.right_bound"),
    )
    # Optional operands.
    bias: Optional[str] = fact(
        None,
        "dtype of a [bias_batch, H, SQ, SKV] additive bias; null: none",
        choices=BIAS_DTYPES + ("float64", "int32"),
        coverage=("bias",),
        shown="bias",
        feature=True,
        kernel=("TemplateParams.has_bias", "TemplateParams.bias_is_fp32", "wrapper.bias_tensor", "compile_host.geometry"),
    )
    bias_batch: int = fact(
        1,
        "bias batch extent (1: one bias broadcast over the batch)",
        minimum=1,
        coverage=("bias",),
        shown="bias",
        needs=("bias",),
        kernel=("wrapper.bias_tensor",),
        no_variant=(("fwd", "the forward takes only a bias broadcast over the batch (contracts bias_batch_gt_1): one value"),),
    )
    sinks: bool = fact(
        False,
        "one sink logit per Q head (natural-log units), joining the softmax denominator",
        feature=True,
        kernel=("TemplateParams.has_sink", "wrapper.sinks"),
    )
    lse_log2: bool = fact(
        False,
        "LSE (Stats) written in base-2 units: natural LSE * log2(e) (TemplateParams.stats_log2); the public wrapper has no argument for it",
        adapters=("prepared",),
        since=2,
        feature=True,
        kernel=("TemplateParams.stats_log2",),
        distinct="TemplateParams.stats_log2 (cudnn/sdpa/fwd/config_sm80.py)",
        no_variant=(
            (
                "bwd",
                "the backward reads natural-log Stats and takes no stats_log2 (bprop_f16.py:840; kernels/backward.py plan hands none): "
                "strategies.directions.to_backward drops it",
            ),
        ),
    )
    # The pass under test (schema 3): one Case type serves both directions.
    direction: str = fact(
        "fwd",
        "the pass under test: the forward (O, LSE) or the backward (dQ, dK, dV, dBias, dSink from dO, O and LSE)",
        choices=DIRECTIONS,
        since=3,
        direction=("bwd",),
    )
    deterministic: bool = fact(
        False,
        "backward: deterministic dQ (TemplateParams.deterministic, the kv-ordered semaphore relay); two launches must then be bitwise identical",
        since=3,
        direction=("bwd",),
        feature=True,
        distinct="TemplateParams.deterministic: the dQ semaphore relay (cudnn/sdpa/bwd/config_sm80.py)",
    )
    inputs_from: str = fact(
        "reference",
        "backward: where O and LSE come from: the float64 reference (O rounded to the I/O dtype, LSE fp32) or the forward kernel under test",
        choices=INPUT_SOURCES,
        since=3,
        direction=("bwd",),
        compiled=None,
    )
    dbias_dtype: str = fact(
        "float32",
        "backward with a bias: the dBias buffer's dtype, float32 or io (the I/O dtype): the host casts its fp32 "
        "accumulator to it once (bprop prepared_host.py:171-184, 524); the public wrapper allocates fp32. No coverage "
        "axis, not drawn: the 1.32.0 compile key omits it (docs/backward.md)",
        choices=DBIAS_DTYPES,
        coverage=(),
        adapters=("prepared",),
        since=4,
        direction=("bwd",),
        feature=True,
        needs=("bias",),
        distinct="compile_host bakes the dBias dtype in (cudnn/sdpa/bwd/kernels/sm80/prepared_host.py:524, its pointer type :576, _copy_aux's cast :183)",
    )
    has_lse: bool = fact(
        True,
        "a Stats (LSE) output is handed (TemplateParams.has_lse); false compiles the LSE block out: O alone is judged "
        "and the LSE buffer, never handed, must stay untouched",
        adapters=("prepared",),
        since=3,
        direction=("fwd",),
        feature=True,
        kernel=("TemplateParams.has_lse", "compile_host.geometry"),
    )
    lse_layout: str = fact(
        "compact",
        "Stats layout: dense (B,H,S) compact, S-pitch padded (+LSE_ROW_PAD) or token-major (B,S,H); THD head-major, "
        "head-major with a padded head pitch (thd_lse_pitch) or token-major (T,H) (compile_thd_host lse_stride)",
        choices=LSE_LAYOUTS,
        adapters=("prepared",),
        since=3,
        direction=("fwd",),
        feature=True,
        kernel=("compile_host.geometry", "compile_thd_host.lse_stride"),
    )
    sched: str = fact(
        "natural",
        "dense tile scheduler (TemplateParams.sched_policy; the wrapper's scheduler argument): natural 3-D grid, LPT, "
        "LPT in L2 blocks, or auto (the wrapper's pick, api_dsl._sm80_resolve_scheduler); THD: natural only",
        choices=SCHEDULERS,
        since=3,
        direction=("fwd",),
        feature=True,
        kernel=("TemplateParams.sched_policy", "wrapper.scheduler"),
    )
    sched_l2_mib: int = fact(
        0,
        "LPT-L2 budget (TemplateParams.sched_l2_mib): 0 the flavor's tuned budget (what the wrapper passes), 1 MiB: "
        "several L2 blocks once B*H_kv*S_kv*(d_qk+d_v)*2 bytes pass it",
        choices=(0, 1),
        adapters=("prepared",),
        since=3,
        direction=("fwd",),
        feature=True,
        needs=("sched",),
        kernel=("TemplateParams.sched_l2_mib",),
    )
    rope: bool = fact(
        False,
        "fused RoPE (TemplateParams.has_rope, the wrapper's rope_freqs): Q and K rotated half-split by position-indexed "
        "fp32 angles before q.k (the flavor envelope's halves); dense, no padding operands",
        since=3,
        direction=("fwd",),
        feature=True,
        kernel=("TemplateParams.has_rope", "wrapper.rope_freqs", "compile_host.geometry"),
    )
    sink_log2: bool = fact(
        False,
        "sinks handed in base-2 units (TemplateParams.sink_natural=False, the legacy tensor hosts' ABI)",
        adapters=("prepared",),
        since=3,
        direction=("fwd",),
        feature=True,
        needs=("sinks",),
        kernel=("TemplateParams.sink_natural",),
    )
    sink_dtype: str = fact(
        "float32",
        "sink buffer dtype (THD: compile_thd_host sink_dtype; dense hosts take float32 only)",
        choices=SINK_DTYPES,
        adapters=("prepared",),
        since=3,
        direction=("fwd",),
        feature=True,
        needs=("sinks",),
        kernel=("compile_thd_host.sink_dtype",),
    )
    sink_layout: str = fact(
        "compact",
        "sink buffer: one per head, stride 2, or one logit broadcast to every head (stride 0)",
        choices=SINK_LAYOUTS,
        adapters=("prepared",),
        since=3,
        direction=("fwd",),
        feature=True,
        needs=("sinks",),
        kernel=("compile_host.geometry",),
    )
    prefix_dtype: str = fact(
        "int32",
        "THD cu_seqlens dtype (compile_thd_host prefix_dtypes)",
        choices=PREFIX_DTYPES,
        adapters=("prepared",),
        since=3,
        direction=("fwd",),
        feature=True,
        kernel=("compile_thd_host.prefix_dtypes",),
    )
    scale: Optional[float] = fact(
        None,
        "softmax scale, any sign (0 included); null: the kernels' default 1/sqrt(d_qk)",
        coverage=("scale",),
        kernel=("TemplateParams.score_sign", "wrapper.scale_softmax"),
        no_variant=(
            (
                "bwd",
                "its compiled part is the score sign, and backward Cases hold positive scales only (strategies.directions.to_backward: "
                "the backward folds no sign, its negative and zero scales are not judged yet, docs/backward.md)",
            ),
        ),
    )
    memory: str = fact(
        "bshd",
        "dense storage order of Q, K, V and O",
        choices=MEMORY_ORDERS,
        coverage=("memory",),
        shown="shape",
        kernel=("wrapper.q_tensor", "wrapper.k_tensor", "wrapper.v_tensor", "compile_host.geometry"),
    )
    # The kernel family (schema 5): which templates a Case is asked of (ground.families).
    family: str = fact(
        DEFAULT_FAMILY,
        "the kernel family (ground.families): sm80, the SM80 prefill templates; sm90, the native Hopper D512 forward "
        "(kernels.sm90, docs/sm90.md). A fact a family has no counterpart for keeps its default",
        choices=FAMILY_NAMES,
        coverage=(),
        adapters=("sm90",),
        since=5,
        direction=("fwd",),
        kernel=(),
        no_variant=(("fwd", "the stratum itself: another family is another template, planner and compile entry (ground.families)"),),
    )
    pack_gqa: bool = fact(
        False,
        "sm90: PackGQA, 64 / (H_q / H_kv) tokens of every head of a KV group packed into one 64-row Q tile "
        "(config_sm90.TemplateParams.pack_gqa; the ratio divides 64)",
        coverage=(),
        adapters=("sm90",),
        since=5,
        direction=("fwd",),
        no_variant=(("fwd", "an sm90 fact: the sm80 family, whose compile keys the compile_distinct families judge, has no PackGQA"),),
    )
    seed: int = fact(0, "seed of the tensor data (ground.data)", coverage=None, shown="seed", compiled=False)
    violation: Optional[str] = fact(None, "the contract rule this Case breaks (strategies.violations); null: a valid Case", coverage=None, compiled=None)

    # ------------------------------------------------------------------ derived
    @property
    def is_thd(self) -> bool:
        return self.layout == "thd"

    @property
    def is_bwd(self) -> bool:
        return self.direction == "bwd"

    @property
    def n_seq(self) -> int:
        return len(self.q_lens) if self.is_thd else self.batch

    @property
    def softmax_scale(self) -> float:
        return 1.0 / math.sqrt(self.d_qk) if self.scale is None else float(self.scale)

    @property
    def t_q(self) -> int:
        """THD packed Q capacity (tokens): base + live + slack."""
        return self.q_base + sum(self.q_lens) + self.q_slack

    @property
    def t_kv(self) -> int:
        return self.kv_base + sum(self.kv_lens) + self.kv_slack

    @property
    def max_s_q(self) -> int:
        """The host-side bound on per-sequence Q length (THD grid); at least 1."""
        return max(1, max(self.q_lens)) if self.is_thd else self.s_q

    def q_lengths(self) -> Tuple[int, ...]:
        """Live Q length of every batch entry / sequence."""
        if self.is_thd:
            return tuple(self.q_lens)
        return tuple(self.seq_q_lens) if self.seq_q_lens is not None else (self.s_q,) * self.batch

    def kv_lengths(self) -> Tuple[int, ...]:
        if self.is_thd:
            return tuple(self.kv_lens)
        return tuple(self.seq_kv_lens) if self.seq_kv_lens is not None else (self.s_kv,) * self.batch

    def cu_seqlens(self, which: str) -> Tuple[int, ...]:
        """Cumulative offsets (with the non-zero first offset) for 'q' or 'kv'."""
        lens, base = (self.q_lens, self.q_base) if which == "q" else (self.kv_lens, self.kv_base)
        out = [base]
        for n in lens:
            out.append(out[-1] + n)
        return tuple(out)

    def mask_name(self) -> str:
        """A short label of the mask family, used by coverage and reports."""
        parts = []
        if self.causal:
            parts.append("causal_br" if self.bottom_right else "causal")
        if self.window_left >= 0:
            parts.append("swa_br" if (self.bottom_right and not self.causal) else "swa")
        if self.window_right >= 0:
            parts.append("band")
        return "+".join(parts) or "none"

    def replace(self, **changes) -> "Case":
        return dataclasses.replace(self, **changes)

    # ------------------------------------------------------------ serialization
    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        for k, v in d.items():
            if isinstance(v, tuple):
                d[k] = list(v)
        return d

    def to_json(self) -> str:
        return json.dumps({"schema": SCHEMA_VERSION, "case": self.to_dict()}, sort_keys=True)

    @classmethod
    def from_dict(cls, data: Any, schema: int = SCHEMA_VERSION) -> "Case":
        """The Case a case file's "case" object (of case-file ``schema``) holds.
        Every fact that schema knows must be present with its type; facts
        added by a later schema take their defaults. CaseFileError names the field."""
        if not isinstance(data, dict):
            raise CaseFileError(f"case: expected a JSON object, got {type(data).__name__}")
        unknown = sorted(set(data) - set(FACTS))
        if unknown:
            raise CaseFileError(f"case field {unknown[0]!r}: unknown field (known: {', '.join(FACTS)})")
        missing = [name for name, f in FACTS.items() if f.since <= schema and name not in data]
        if missing:
            raise CaseFileError(f"case field {missing[0]!r}: missing (a schema {schema} case names every fact: {', '.join(missing)} absent)")
        case = cls(**{name: FACTS[name].coerce(value) for name, value in data.items()})
        problem = case.structural_problem()
        if problem:
            raise CaseFileError(problem)
        return case

    @classmethod
    def from_json(cls, text: str) -> "Case":
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as e:
            raise CaseFileError(f"case file is not valid JSON: {e}") from None
        if not isinstance(doc, dict) or "schema" not in doc or "case" not in doc:
            raise CaseFileError("case file field 'schema'/'case': a case file is {\"schema\": N, \"case\": {...}}")
        schema = doc["schema"]
        if not _is_int(schema) or not 1 <= schema <= SCHEMA_VERSION:
            raise CaseFileError(f"case file field 'schema': version {schema!r} is not supported (this suite reads 1 to {SCHEMA_VERSION})")
        return cls.from_dict(doc["case"], schema)

    def structural_problem(self) -> Optional[str]:
        """Facts that no kernel could be asked about (not contract violations:
        those are meaningful Cases). Returns a message naming the field."""
        for f in FACTS.values():
            problem = f.problem(getattr(self, f.name))
            if problem:
                return problem
        for name in BACKWARD_FACTS if not self.is_bwd else FORWARD_ONLY_FACTS:  # Fact.direction
            if getattr(self, name) != FACTS[name].default:
                what = "a backward-only fact (direction is 'fwd')" if not self.is_bwd else "a forward-only kernel feature (direction is 'bwd')"
                return f"case field {name!r}: {what}"
        for name, ok, why in self._feature_rules():
            if not ok:
                return f"case field {name!r}: {why}"
        if self.is_thd:
            if self.q_lens is None or self.kv_lens is None:
                return "case field 'q_lens'/'kv_lens': a THD case needs both length lists"
            if len(self.q_lens) != len(self.kv_lens) or not self.q_lens:
                return "case field 'kv_lens': must be as long as 'q_lens' (one entry per sequence, at least one)"
        else:
            for name, phys in (("seq_q_lens", self.s_q), ("seq_kv_lens", self.s_kv)):
                lens = getattr(self, name)
                if lens is not None:
                    if len(lens) != self.batch:
                        return f"case field {name!r}: needs {self.batch} entries (one per batch), got {len(lens)}"
                    if any(n < 0 or n > phys for n in lens):
                        return f"case field {name!r}: lengths must lie in [0, {phys}]"
        return None

    def _feature_rules(self):
        """(fact, holds, why): where the feature facts of schema 3 mean something
        (a fact outside its domain keeps its default, so coverage and case
        files never hold a value no kernel reads)."""
        sinks_only = "only with sinks (it describes the sink buffer)"
        dense_only = "dense only (the THD grid is the natural one, its host has no such operand)"
        absent = FAMILIES[self.family].absent if self.family in FAMILIES else {}
        family = tuple((name, getattr(self, name) == FACTS[name].default, f"the {self.family} family has none: {why}") for name, why in absent.items())
        return family + (
            ("sink_log2", self.sinks or not self.sink_log2, sinks_only),
            ("sink_dtype", self.sinks or self.sink_dtype == "float32", sinks_only),
            ("sink_dtype", self.is_thd or self.sink_dtype == "float32", "dense hosts take float32 sinks only (prepared_host types)"),
            ("sink_layout", self.sinks or self.sink_layout == "compact", sinks_only),
            ("lse_layout", self.has_lse or self.lse_layout == "compact", "only with an LSE output (has_lse)"),
            ("lse_log2", self.has_lse or not self.lse_log2, "only with an LSE output (has_lse)"),
            ("sched", not self.is_thd or self.sched == "natural", dense_only),
            ("sched_l2_mib", self.sched in ("lpt_l2", "auto") or self.sched_l2_mib == 0, "only with an L2 scheduler (lpt_l2, auto)"),
            (
                "rope",
                not self.rope or (not self.is_thd and self.seq_q_lens is None and self.seq_kv_lens is None),
                "dense without padding operands (compile_thd_host has no RoPE operand; api_dsl refuses RoPE with padding)",
            ),
            ("prefix_dtype", self.is_thd or self.prefix_dtype == "int32", "THD only (cu_seqlens)"),
            ("dbias_dtype", self.bias is not None or self.dbias_dtype == "float32", "only with a bias (it describes the dBias buffer)"),
        )

    # ------------------------------------------------------------- adapters
    def unexpressible(self, adapter: str) -> Optional[str]:
        """Why ``adapter`` (a name of tables.ADAPTERS) cannot run this Case: the
        first fact with a non-default value that it has no way to express
        (``Fact.adapters``); None when it can (and for other entry names)."""
        if adapter not in ADAPTERS:
            return None
        for f in FACTS.values():
            value = getattr(self, f.name)
            if f.adapters is not None and adapter not in f.adapters and value != f.default:
                return f"case field {f.name!r} = {value!r}: the {adapter} adapter ({ADAPTERS[adapter]}) cannot express it; only {', '.join(f.adapters)} can"
        return None

    def unexpressed_facts(self, adapter: str) -> Tuple[str, ...]:
        """The facts of this Case, off their defaults, that ``adapter`` has no
        way to express (``Fact.adapters``); () for other entry names."""
        if adapter not in ADAPTERS:
            return ()
        return tuple(f.name for f in FACTS.values() if f.adapters is not None and adapter not in f.adapters and getattr(self, f.name) != f.default)

    def expressed(self, adapter: str) -> "Case":
        """This Case as ``adapter`` can run it: every fact it cannot express
        (``unexpressed_facts``) at its default, every other fact kept; the
        Case itself when there is none. A default never makes a Case invalid
        (a feature rule only bounds a non-default value: ``_feature_rules``,
        forward/backward-only facts), so the projection is a valid Case of
        the same contract rule; ValueError where that ever fails (a new fact
        whose default depends on another). conformance.testgen projects
        every drawn Case for the adapters its test launches: strategies
        bound what an adapter takes by construction, never by filtering."""
        names = self.unexpressed_facts(adapter)
        if not names:
            return self
        out = self.replace(**{n: FACTS[n].default for n in names})
        problem = out.structural_problem()
        if problem:
            raise ValueError(f"projecting {self.describe()} for the {adapter} adapter ({', '.join(names)} to their defaults) gives an invalid Case: {problem}")
        return out

    def require_expressible(self, adapter: str) -> None:
        """Refuse (``Unsupported``, scope "case": a Hypothesis example is
        rejected, a repro exits 2) where ``adapter`` cannot run this Case
        (adapters call it first)."""
        why = self.unexpressible(adapter)
        if why:
            raise Unsupported.case(why, adapter=adapter, hint="--adapter picks another")

    # ------------------------------------------------------------- describe
    def describe(self) -> str:
        """The one-line description of the Case (reports, CLI, kill-rate table):
        the composite parts below, then every fact declared without ``shown``
        as ``name`` (true) / ``name=value`` when not its default, then the seed."""
        parts = [_DESCRIBE_PARTS[p](self) for p in ("shape", "dtype", "heads", "dims", "mask", "bias")]
        for f in FACTS.values():
            value = getattr(self, f.name)
            if f.shown is None and value != f.default:
                parts.append(f.name if value is True else f"{f.name}={_text(value)}")
        parts.append(_DESCRIBE_PARTS["seed"](self))
        return " ".join(p for p in parts if p)


# --------------------------------------------------------- derived tables
def _declared() -> Dict[str, Fact]:
    hints = typing.get_type_hints(Case)
    out = {}
    for f in dataclasses.fields(Case):
        if hints[f.name] not in KINDS:
            raise TypeError(f"Case fact {f.name!r}: type {hints[f.name]} has no case-file reading (ground.case.KINDS)")
        out[f.name] = Fact(f.name, hints[f.name], f.default, **f.metadata["fact"])
    return out


# name -> Fact, in declaration order.
FACTS: Dict[str, Fact] = _declared()


# ------------------------------------------------------ the roles' lists
def facts_only_in(direction: str) -> Tuple[str, ...]:
    """The facts whose non-default values only a Case of ``direction`` holds (``Fact.direction``)."""
    return tuple(f.name for f in FACTS.values() if f.direction == (direction,))


# Facts only a backward Case sets to a non-default value (coverage: the
# backward strategies, not the forward ones, must reach those values), the
# pass itself first.
BACKWARD_FACTS: Tuple[str, ...] = facts_only_in("bwd")
# Forward kernel features the SM80 backward has no counterpart for: it reads a
# compact natural-log Stats (so it needs one), compact fp32 natural-log sinks
# and int32 cu_seqlens, takes no tile scheduler, and its RoPE is not judged
# yet (docs/backward.md). A backward Case keeps their defaults (seen on the
# H200: strided sinks and padded THD Stats refused, no-Stats runs handing a
# NaN LSE).
FORWARD_ONLY_FACTS: Tuple[str, ...] = facts_only_in("fwd")


def compiled_facts(direction: str) -> Tuple[str, ...]:
    """The compile-key facts a Case of ``direction`` ("fwd"/"bwd") may set
    (``Fact.compiled``; some reach the key only in part: a padding
    operand's presence, the scale's sign, the THD sequence count), in
    declaration order."""
    if direction not in DIRECTIONS:
        raise ValueError(f"direction {direction!r} is not one of {DIRECTIONS}")
    return tuple(f.name for f in FACTS.values() if f.compiled and direction in f.direction)


def runtime_facts() -> Tuple[str, ...]:
    """The facts whose values are launch arguments or data, never a compile key (``compiled=False``)."""
    return tuple(f.name for f in FACTS.values() if f.compiled is False)


def feature_facts(direction: str) -> Tuple[str, ...]:
    """The optional kernel features a Case of ``direction`` may switch on (``Fact.feature``)."""
    return tuple(f.name for f in FACTS.values() if f.feature and direction in f.direction)


def dependents(name: str) -> Tuple[str, ...]:
    """The facts that describe fact ``name`` (``needs`` it): off with it."""
    return tuple(f.name for f in FACTS.values() if name in f.needs)


def coerce_fact(name: str, value: Any) -> Any:
    """``value`` (from a case file or a findings file's ``when``) as the Case
    fact ``name``'s type; CaseFileError naming the field."""
    if name not in FACTS:
        raise CaseFileError(f"case field {name!r}: unknown field (known: {', '.join(FACTS)})")
    return FACTS[name].coerce(value)


def _text(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, tuple):
        return str(list(value))
    return str(value)


def _shape(c: Case) -> str:
    if c.is_thd:
        text = f"THD q_lens={list(c.q_lens or ())} kv_lens={list(c.kv_lens or ())}"
        if c.q_base or c.kv_base or c.q_slack or c.kv_slack:
            text += f" base={c.q_base}/{c.kv_base} slack={c.q_slack}/{c.kv_slack}"
        return text
    text = f"dense B={c.batch} S={c.s_q}x{c.s_kv} {c.memory}"
    if c.seq_q_lens is not None:
        text += f" seq_q_lens={list(c.seq_q_lens)}"
    if c.seq_kv_lens is not None:
        text += f" seq_kv_lens={list(c.seq_kv_lens)}"
    return text


def _mask(c: Case) -> str:
    text = f"mask={c.mask_name()}"
    if c.window_left >= 0 or c.window_right >= 0:
        text += f" window=({c.window_left},{c.window_right})"
    return text


# Case.describe's composite parts; Fact.shown names one of them.
_DESCRIBE_PARTS: Dict[str, Callable[[Case], str]] = {
    "shape": _shape,
    "dtype": lambda c: DTYPE_SHORT.get(c.dtype, c.dtype),
    "heads": lambda c: f"H={c.h_q}" if c.h_q == c.h_kv else f"H={c.h_q}/{c.h_kv}",
    "dims": lambda c: f"D={c.d_qk}" if c.d_qk == c.d_v else f"D={c.d_qk}/{c.d_v}",
    "mask": _mask,
    "bias": lambda c: f"bias={c.bias}[{c.bias_batch}]" if c.bias else "",
    "seed": lambda c: f"seed={c.seed}",
}
assert {f.shown for f in FACTS.values()} - {None} <= set(_DESCRIBE_PARTS), "Fact.shown names a part of Case.describe"
assert all(f.since <= SCHEMA_VERSION for f in FACTS.values()), "a fact's schema is at most SCHEMA_VERSION"
assert all(f.direction and set(f.direction) <= set(DIRECTIONS) for f in FACTS.values()), "Fact.direction names passes of DIRECTIONS"
assert all(n in FACTS and n != f.name for f in FACTS.values() for n in f.needs), "Fact.needs names other declared facts"
assert all(f.simplest == f.default or f.problem(f.simplest) is None for f in FACTS.values()), "Fact.simplest is a value of the fact"
assert all(f.compiled for f in FACTS.values() if f.distinct), "a fact compiled in somewhere (Fact.distinct) is a compile-key fact"
assert all(d in f.direction and why for f in FACTS.values() for d, why in f.no_variant), "Fact.no_variant names passes of the fact, with a reason"


def _roles(f: Fact) -> str:
    """The facts table's roles cell (``Fact.direction`` ... ``distinct``)."""
    out = [f"{f.direction[0]} only" if len(f.direction) == 1 else "", {True: "compiled", False: "runtime", None: ""}[f.compiled]]
    out += ["feature" if f.feature else "", f"simplest `{json.dumps(f.simplest)}`" if f.simplest != f.default else ""]
    out += [f"needs {', '.join(f.needs)}" if f.needs else "", f"no variant ({', '.join(d for d, _ in f.no_variant)})" if f.no_variant else ""]
    return ", ".join(x for x in out if x) or "-"


def facts_markdown() -> str:
    """The facts table (docs, ``sdpa-conformance facts``), from the declarations."""
    rows = ["| fact | type | default | allowed | coverage | roles | meaning |", "|---|---|---|---|---|---|---|"]
    for f in FACTS.values():
        allowed = []
        if f.choices is not None:
            allowed.append(" / ".join(map(str, f.choices)))
        if f.minimum is not None:
            allowed.append(f">= {f.minimum}")
        if f.adapters is not None:
            allowed.append(f"non-default only on {', '.join(f.adapters)}")
        cov = f.name if f.coverage == AUTO else ", ".join(f.coverage) if f.coverage else "-"
        meaning = f.doc + (f" (since schema {f.since})" if f.since > 1 else "")
        rows.append(f"| `{f.name}` | {f.kind.expected} | `{json.dumps(f.default)}` | {'; '.join(allowed) or 'any'} | {cov} | {_roles(f)} | {meaning} |")
    return "\n".join(rows) + "\n"


def load_case_file(path) -> Tuple[Case, dict]:
    """Read a case file written by the suite: returns (Case, the whole document).
    Raises CaseFileError with a message naming the field on anything malformed."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:  # the caller names the path, as for every other CaseFileError here
        raise CaseFileError(f"cannot read it ({e.strerror})") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise CaseFileError(f"cannot read it (not UTF-8 text: byte {data[e.start]:#04x} at offset {e.start})") from None
    case = Case.from_json(text)
    # torch.Generator takes a 64-bit seed and ground.data xors salts into it: a seed out of
    # this range would be refused (or wrapped) only when the tensors are drawn, mid-replay.
    if not 0 <= case.seed < 2**63:
        raise CaseFileError(f"case field 'seed': expected 0 to 2**63 - 1, got {case.seed}")
    return case, json.loads(text)
