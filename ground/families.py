"""The kernel families under test, as data: one ``KernelFamily`` per forward
template family of cudnn-frontend this suite knows, with its envelope.

A family is what a Case's ``family`` fact names: which templates, which
``TemplateParams`` class specializes them, which compile entry point builds
them and for which arch the CPU compile tier builds, which head dims, dtypes,
schedulers and head ratios they serve, and which Case facts they have no
counterpart for (``absent``: such a fact keeps its default in a Case of the
family, ``Case._feature_rules``). Nothing here imports ``cudnn`` or another
module of the suite; tests/test_families.py checks the numbers against the
installed kernels (config_sm90 constants, the planner's tables).

- ``sm80``: the SM80 prefill templates (four flavor envelopes, the forward and
  the backward): everything else in this suite (kernels/prepared.py,
  kernels/wrapper.py, kernels/backward.py).
- ``sm90``: the native Hopper D512 forward (one template for every head dim,
  kernels/sm90/): compiled on the CPU for sm_90a; launching it waits for a
  Hopper GPU (docs/sm90.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, Mapping, Optional, Tuple

from .tables import DTYPES, FLAVOR_ENVELOPES, TILE_M, TILE_N

_FWD = "cudnn/sdpa/fwd"


@dataclass(frozen=True)
class KernelFamily:
    """One forward template family.

    templates: the template files (under cudnn/sdpa/fwd/kernels/). params: the
    ``TemplateParams`` dataclass that specializes them (module.class).
    compile_entry: the function the suite's prepared adapter compiles through;
    planner / wrapper: the kernels' own plan-time adapter and public wrapper.
    arch: the ``--gpu-arch`` the CPU compile tier builds for (what the
    family's GPU compiles target). head_dims: (align, largest) of a served
    head dim when one tile serves every multiple (None: the flavor envelopes
    decide). tile: (tile_m, tile_n). pack_gqa_tile: the Q tile a packed head
    group must divide (None: no PackGQA). schedulers: the Case ``sched``
    values it serves. directions: the passes it has. absent: Case facts
    with no counterpart in the family -> why (they keep their defaults).
    pairs: the module of its own compile-key factors, whose ``coverage``
    counts the run's pairs (None: the SM80 factors of ground.pairs).
    unreachable: coverage labels (``ground.coverage``, "axis:value") no Case
    of the family can exercise -> why (an absent fact's values, a rule of
    its planner); every other label its strategies must reach
    (``coverage_gaps``), but those of ``foreign_axes``: coverage axes that
    classify another family's kernels (the SM80 flavor envelopes)."""

    name: str
    doc: str
    templates: Tuple[str, ...]
    params: str
    compile_entry: str
    planner: str
    wrapper: str
    arch: str
    dtypes: Tuple[str, ...]
    tile: Tuple[int, int]
    schedulers: Tuple[str, ...]
    directions: Tuple[str, ...]
    head_dims: Optional[Tuple[int, int]] = None
    envelopes: Mapping[str, Tuple[int, int]] = field(default_factory=dict)
    pack_gqa_tile: Optional[int] = None
    absent: Mapping[str, str] = field(default_factory=dict)
    pairs: Optional[str] = None
    unreachable: Mapping[str, str] = field(default_factory=dict)
    foreign_axes: Tuple[str, ...] = ()

    def serves_head_dims(self, d_qk: int, d_v: int) -> bool:
        """Whether a template of the family computes these head dims (SM80:
        some flavor envelope covers them, smaller ones padded; SM90: both
        multiples of ``align`` up to the tile, D_QK != D_V included)."""
        if self.head_dims is None:
            return any(d_qk <= q and d_v <= v for q, v in self.envelopes.values())
        align, most = self.head_dims
        return all(0 < d <= most and d % align == 0 for d in (d_qk, d_v))

    def pack_gqa_ratios(self, most: int = 64) -> Tuple[int, ...]:
        """The head ratios H_q / H_kv (up to ``most``) a packed Case may have:
        those dividing the Q tile (() without PackGQA)."""
        if self.pack_gqa_tile is None:
            return ()
        return tuple(g for g in range(1, most + 1) if self.pack_gqa_tile % g == 0)


_SM90_THD_BASE = (
    "the SM90 THD setup normalizes the cu prefixes (subtracts cu[0]) and addresses the packed buffers from token 0 "
    "(cudnn/frost/tile_dsl/thd.py:114-150): the suite's absolute first offset has no counterpart until the GPU adapter "
    "decides between offset pointers and relative offsets (docs/sm90.md)"
)

_SM90_ABSENT = {
    "bias": "no bias operand (config_sm90.TemplateParams has no bias field, the pointer host no bias pointer)",
    "rope": "no RoPE arm (config_sm90.TemplateParams has no RoPE field)",
    "sched_l2_mib": "the LPT-L2 budget is fixed (SCHED_L2_BUDGET_BYTES, cudnn/sdpa/fwd/kernels/sm90/_common_hopper.py:25)",
    "sink_log2": "sinks are natural-log FP32 logits only (TemplateParams.has_sink)",
    "sink_dtype": "the pointer host types the sinks FP32 (cudnn/sdpa/fwd/kernels/sm90/prepared_host.py:68)",
    "sink_layout": "the pointer host binds the sinks (H_q,) with stride 1 (cudnn/sdpa/fwd/kernels/sm90/prepared_host.py:68)",
    "prefix_dtype": "the THD length pointers are Int32 (cudnn/sdpa/fwd/kernels/sm90/prepared_host.py:106-107)",
    "q_base": _SM90_THD_BASE,
    "kv_base": _SM90_THD_BASE,
}
# The coverage labels an absent sm90 fact would show (its non-default values).
_SM90_ABSENT_LABELS = {
    "bias": ("bias:float16", "bias:bfloat16", "bias:float32", "bias:broadcast over batch"),
    "prefix_dtype": ("prefix_dtype:int64",),
    "rope": ("rope:yes",),
    "sched_l2_mib": ("sched_l2_mib:1",),
    "sink_dtype": ("sink_dtype:float16", "sink_dtype:bfloat16"),
    "sink_layout": ("sink_layout:broadcast", "sink_layout:strided"),
    "sink_log2": ("sink_log2:yes",),
    "q_base": ("padding:thd: first offset > 0",),
}
_SM90_PLANNER_LABELS = {
    "mask:swa_br": "the planner aligns bottom-right only under a causal mask (api_dsl.py:5199; contracts sm90_bottom_right_without_causal)",
    "padding:dense: seq_q_lens": "dense padding lengths come both or neither (api_dsl.py:5195)",
    "padding:dense: seq_kv_lens": "dense padding lengths come both or neither (api_dsl.py:5195)",
}

_SM90_UNREACHABLE = {
    **{label: f"fact {fact!r} is absent: {_SM90_ABSENT[fact]}" for fact, labels in _SM90_ABSENT_LABELS.items() for label in labels},
    **_SM90_PLANNER_LABELS,
}

FAMILIES: Dict[str, KernelFamily] = {
    "sm80": KernelFamily(
        name="sm80",
        doc="the SM80 prefill templates (four flavor envelopes), forward and backward",
        templates=("sm80/prefill_f16.py", "sm80/prefill_d256_f16.py"),
        params="cudnn.sdpa.fwd.config_sm80.TemplateParams",
        compile_entry="cudnn.sdpa.fwd.kernels.sm80.prepared_host.compile_host / compile_thd_host",
        planner="cudnn.sdpa.fwd.api_dsl.SdpaFwdDslSm80",
        wrapper="cudnn.sdpa.fwd.sdpa_fwd_wrapper_sm80",
        arch="sm_80",
        dtypes=DTYPES,
        tile=(TILE_M, TILE_N),
        schedulers=("natural", "lpt", "lpt_l2", "auto"),
        directions=("fwd", "bwd"),
        envelopes=FLAVOR_ENVELOPES,
        absent={"pack_gqa": "the SM80 templates have no PackGQA (config_sm80.TemplateParams has no pack_gqa field)"},
    ),
    "sm90": KernelFamily(
        name="sm90",
        doc="the native Hopper D512 forward: one 512-column template for every head dim (multiples of 8), D_QK != D_V served",
        templates=("sm90/prefill_d512_f16.py",),
        params="cudnn.sdpa.fwd.config_sm90.TemplateParams",
        compile_entry="cudnn.sdpa.fwd.kernels.sm90.prefill_d512_f16.compile (prepared_host.compile_host)",
        planner="cudnn.sdpa.fwd.api_dsl.SdpaFwdDslSm90",
        wrapper="cudnn.sdpa.fwd.api_dsl.sdpa_fwd_wrapper_dsl_sm90",
        arch="sm_90a",
        dtypes=DTYPES,
        tile=(64, 64),
        schedulers=("natural", "lpt", "lpt_l2", "auto"),
        directions=("fwd",),
        head_dims=(8, 512),
        pack_gqa_tile=64,
        pairs="ground.pairs_sm90",
        absent=_SM90_ABSENT,
        unreachable=_SM90_UNREACHABLE,
        # The SM80 flavor a Case's head dims fall in, and whether they fill its envelope: one sm90 template
        # serves every head dim, so neither classifies this family's kernels.
        foreign_axes=("flavor", "head dims"),
    ),
}


def coverage_gaps(name: str, seen, required) -> Tuple[str, ...]:
    """The coverage labels of ``required`` that family ``name`` can exercise
    (all but its ``unreachable`` and its ``foreign_axes``') and no Case of
    ``seen`` (labels) did."""
    fam = FAMILIES[name]
    own = {label for label in required if label.split(":", 1)[0] not in fam.foreign_axes}
    return tuple(sorted(own - set(fam.unreachable) - set(seen)))


FAMILY_NAMES: Tuple[str, ...] = tuple(FAMILIES)
DEFAULT_FAMILY = "sm80"

# sm90 THD: head-major Stats ((H, T_q): lse_layout "compact" or "padded") have head stride T_q, and the Stats
# strides are a compile() argument (cudnn/sdpa/fwd/kernels/sm90/prefill_d512_f16.py:1490-1503), so there the
# packed Q total is compiled; with token-major Stats or none it is runtime (properties/compile_cache_sm90.py).
SM90_HEAD_MAJOR_STATS = ("compact", "padded")


def sm90_q_total_is_runtime(case) -> bool:
    """Whether an sm90 THD ``case``'s packed Q total reaches no ``compile()`` argument: its Stats are token-major or absent."""
    return not case.has_lse or case.lse_layout not in SM90_HEAD_MAJOR_STATS


def family(name: str) -> KernelFamily:
    try:
        return FAMILIES[name]
    except KeyError:
        raise ValueError(f"kernel family {name!r}: unknown (known: {', '.join(FAMILIES)})") from None
