"""Sm90WrapperAdapter: the sm90 family through its public wrapper
``cudnn.sdpa.fwd.api_dsl.sdpa_fwd_wrapper_dsl_sm90``.

The wrapper takes rank-4 BHSD Q/K/V (any layout the planner binds), the
causal flag and its bottom-right alignment, the left window offset W, the
scale, dense Q/KV lengths and sinks. It allocates its own outputs (O in BSHD
storage, compact FP32 Stats, always), plans and compiles ``SdpaFwdDslSm90``
once per tensor signature and flags (a process-wide cache of its own), and
executes. So the adapter:

- refuses (``Unsupported``, scope "adapter") the facts it has no argument
  for (``CANNOT``: THD, no Stats, base-2 Stats, PackGQA, a widened causal
  band, a scheduler other than the planner's auto pick), each with its reason;
  ``expressible(case)`` is a Case bounded to what it can express;
- returns the wrapper's own O and Stats as its result and says so in its
  notes: the kernel never writes the caller's output buffers, so the tails
  judge the wrapper's tensors (no guard bands, no pad columns or pitch of
  the caller's: a copy into the caller's buffers would make those checks
  judge the copy), and Stats strides of the compile are the wrapper's own,
  whatever ``lse_layout`` says;
- ``compile_only``: the wrapper itself runs on meta tensors until it asks
  for its plan (``_get_or_create_api``), which is answered by
  ``check_support`` on the same arguments declared on CUDA device 0, the
  capability probe answered as SM 9.0 (``specialize.planning_device``); that
  plan's template is compiled for sm_90a. No CUDA call, no launch.

``run`` needs a Hopper GPU (run on an H200: docs/sm90.md).
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Optional, Tuple

from ground.case import Case
from ground.outcome import Unsupported
from ground.phases import timed
from kernels.base import CompileDelta, KernelResult, key_digest
from kernels.counters import measure
from kernels.sm90.adapter import compile_spec, hopper_launch
from kernels.sm90.specialize import FAMILY, SCHED_POLICY, _desc, planning_device, specialization, specialize
from kernels.source import sm90_sources

ENTRY = "sdpa_fwd_wrapper_dsl_sm90"


def _sched_refusal(case: Case) -> Optional[str]:
    """The wrapper passes no scheduler: the planner's auto pick. A Case that names another is not its."""
    if case.sched == "auto" or case.is_thd:
        return None
    auto = specialize(case.replace(sched="auto")).params.sched_policy
    if auto == SCHED_POLICY[case.sched]:
        return None
    return f"case field 'sched' = {case.sched!r}: {ENTRY} has no scheduler argument (the planner's auto pick is {auto} here)"


# (fact, what the wrapper can express, why it cannot express the rest): refused in this order.
CANNOT: Tuple[Tuple[str, Callable[[Case], bool], str], ...] = (
    ("layout", lambda c: not c.is_thd, "the wrapper takes rank-4 BHSD Q/K/V only: no THD (cu_seqlens) argument"),
    ("has_lse", lambda c: c.has_lse, "the wrapper always allocates and writes Stats: no Stats-off specialization (has_lse=False)"),
    ("lse_log2", lambda c: not c.lse_log2, "no stats_log2 argument: its Stats are natural log"),
    ("pack_gqa", lambda c: not c.pack_gqa, "no pack_gqa argument"),
    ("window_right", lambda c: c.window_right <= 0, "no window_size_right argument: a causal band ends on the diagonal"),
)
# What ``expressible`` sets each refused fact to (dense Cases: THD has no dense counterpart).
EXPRESSIBLE = dict(has_lse=True, lse_log2=False, pack_gqa=False, window_right=-1, sched="auto")


def refusal(case: Case) -> Optional[str]:
    """Why the wrapper cannot express ``case`` (None: it can)."""
    for fact, can, why in CANNOT:
        if not can(case):
            return f"case field {fact!r} = {getattr(case, fact)!r}: {why}"
    return _sched_refusal(case)


def expressible(case: Case) -> Case:
    """Dense ``case`` with every fact the wrapper has no argument for set to one it has (``EXPRESSIBLE``)."""
    if case.is_thd:
        raise ValueError(f"{case.describe()}: THD has no counterpart in {ENTRY}")
    return case.replace(**EXPRESSIBLE)


def wrapper_call(case: Case, x) -> Tuple[tuple, dict]:
    """(args, kwargs) of the wrapper for ``case`` on tensors ``x`` (q, k, v,
    seq_q_lens, seq_kv_lens, sinks attributes: a ``CaseTensors``)."""
    kwargs = dict(
        is_causal=case.causal,
        causal_bottom_right=case.bottom_right,
        window_size_left=case.window_left if case.window_left >= 0 else None,
        scale_softmax=case.scale,
        seq_q_lens=x.seq_q_lens,
        seq_kv_lens=x.seq_kv_lens,
        sinks=x.sinks,
    )
    return (x.q, x.k, x.v), kwargs


class _Planned(Exception):
    """Raised from inside the wrapper with the plan it asked for."""

    def __init__(self, api):
        super().__init__("planned")
        self.api = api


@contextmanager
def _plan_only():
    """While active, the wrapper's plan request (``api_dsl._get_or_create_api``)
    is answered by ``check_support`` on its own arguments, tensors declared on
    CUDA device 0, and stops the call there (``_Planned``): nothing compiles,
    nothing executes, its cache is not touched."""
    import torch
    from cudnn.sdpa.fwd import api_dsl

    real = api_dsl._get_or_create_api

    def plan(cache_key, **kwargs):
        declared = {k: _desc(t, k.removeprefix("sample_")) if isinstance(t, torch.Tensor) else t for k, t in kwargs.items()}
        api = cache_key.api_type(**declared)
        with planning_device():
            api.check_support()
        raise _Planned(api)

    api_dsl._get_or_create_api = plan
    try:
        yield
    finally:
        api_dsl._get_or_create_api = real


def _meta_tensors(case: Case):
    """The wrapper's input tensors of ``case`` on the meta device (layouts as
    ``ground.data`` gives them; no memory)."""
    from types import SimpleNamespace

    import torch

    from ground.data import TORCH_DTYPES, dense_view

    dt, b = TORCH_DTYPES[case.dtype], case.batch
    with torch.device("meta"):
        lens = lambda xs: None if xs is None else torch.empty(len(xs), dtype=torch.int32)  # noqa: E731
        return SimpleNamespace(
            q=dense_view(case, b, case.h_q, case.s_q, case.d_qk, dt),
            k=dense_view(case, b, case.h_kv, case.s_kv, case.d_qk, dt),
            v=dense_view(case, b, case.h_kv, case.s_kv, case.d_v, dt),
            seq_q_lens=lens(case.seq_q_lens),
            seq_kv_lens=lens(case.seq_kv_lens),
            sinks=torch.empty(case.h_q, dtype=torch.float32) if case.sinks else None,
        )


class Sm90WrapperAdapter:
    """The sm90 family's public wrapper (see the module doc)."""

    name = "sm90-wrapper"
    entry = "wrapper"  # the entry-point name (kernels.FAMILY_ADAPTERS) case files record
    label = f"sm90-wrapper ({ENTRY})"
    supports = frozenset({"compile-only"})
    lacks = {
        "caller-outputs": f"{ENTRY} allocates and returns its own O/Stats: the adapter copies them into the caller's buffers",
        "no-init": f"{ENTRY} allocates its outputs itself (torch.empty): there is no caller output to leave uninitialised",
        "thd-addressing": "the sm90 family is forward only",
    }

    def __init__(self, rewrites=()):
        # kernels.source.Rewrite s of the sm90 sources (mutants): applied wherever the template is loaded.
        self.rewrites = tuple(rewrites)

    def _served(self, case: Case) -> None:
        if case.family != FAMILY.name:
            raise Unsupported.case(f"case field 'family' = {case.family!r}: the {self.name} adapter runs the sm90 family only", adapter=self.name)
        if case.is_bwd:
            raise Unsupported.case("case field 'direction' = 'bwd': the sm90 family is forward only", adapter=self.name)
        why = refusal(case)
        if why:
            raise Unsupported("adapter", f"{ENTRY} cannot express it: {why}", adapter=self.name, what=case.describe())

    def plan(self, case: Case):
        """The ``SdpaFwdDslSm90`` plan the wrapper asks for on ``case``'s inputs
        (meta tensors; see ``_plan_only``), after ``check_support``."""
        from cudnn.sdpa.fwd.api_dsl import sdpa_fwd_wrapper_dsl_sm90

        self._served(case)
        args, kwargs = wrapper_call(case, _meta_tensors(case))
        try:
            with _plan_only():
                sdpa_fwd_wrapper_dsl_sm90(*args, **kwargs)
        except _Planned as planned:
            return planned.api
        raise RuntimeError(f"{ENTRY} returned without asking for a plan")

    def specialize(self, case: Case):
        """The wrapper's TemplateParams and compile arguments for ``case`` (``specialize.Sm90Specialization``)."""
        return specialization(self.plan(case))

    def compile_only(self, case: Case, *, tamper: Optional[str] = None, live: bool = False) -> CompileDelta:
        """Plan ``case`` through the wrapper and compile that plan for sm_90a (no CUDA call)."""
        if tamper is not None:
            raise ValueError(f"tamper {tamper!r}: the sm90 wrapper takes none")
        spec = self.specialize(case)
        with sm90_sources(self.rewrites), measure() as box:
            compile_spec(spec)
        return box.delta

    @timed("launch")
    def run(self, case: Case, inputs, outputs=None, *, initialize_outputs: bool = True, tamper: Optional[str] = None) -> KernelResult:
        """Call the wrapper on the caller's inputs on a Hopper GPU; its result is
        the wrapper's own O and Stats, as returned (no guard bands: their pad
        columns and pitch are the wrapper's to lay out, and the tails judge
        what the kernel wrote, not a copy of it)."""
        from cudnn.sdpa.fwd.api_dsl import sdpa_fwd_wrapper_dsl_sm90

        self._served(case)
        x, _, _ = hopper_launch(self, case, inputs, outputs, tamper=tamper, initialize_outputs=initialize_outputs, entry=ENTRY)
        args, kwargs = wrapper_call(case, x)
        with sm90_sources(self.rewrites), measure() as box:  # the wrapper plans, compiles and launches in one call
            got = sdpa_fwd_wrapper_dsl_sm90(*args, **kwargs)
        notes = {
            "adapter": self.name,
            "family": FAMILY.name,
            "arch": FAMILY.arch,
            "compile_key": key_digest(self.specialize(case).key),  # the wrapper's own plan of the Case (planned again: no launch)
            "outputs": f"wrapper-owned ({ENTRY}'s own O, BSHD storage, and compact Stats, as returned; no guard bands); "
            "the caller's output buffers are not used",
        }
        handed = dict(q=x.q, k=x.k, v=x.v, sinks=x.sinks, seq_q_lens=x.seq_q_lens, seq_kv_lens=x.seq_kv_lens)
        return KernelResult(got["o_tensor"], got["lse_tensor"], box.delta, notes, {k: t for k, t in handed.items() if t is not None})

    def backward(self, case: Case, *args, **kwargs) -> KernelResult:
        raise Unsupported("adapter", "the sm90 family is forward only: no SM90 backward", adapter=self.name, what=case.describe())
