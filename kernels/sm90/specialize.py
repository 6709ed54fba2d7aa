"""Case facts -> the sm90 template's compile-time identity, by the kernels'
own planner.

``specialize(case)`` plans the Case with ``SdpaFwdDslSm90.check_support``
(cudnn/sdpa/fwd/api_dsl.py), the kernels' own canonicalization (band
bounds, the square-unpadded bottom-right spelling, vacuous windows, the
scheduler's auto pick, the scale's sign, the head ratio) and refusals, from
tensor declarations built out of the Case's layouts (``ground.data`` on the
meta device: no memory, no CUDA). Nothing is re-implemented: what the
planner refuses is refused with its own exception. The result is what
``SdpaFwdDslSm90.compile`` hands the template's ``compile()``
(cudnn/sdpa/fwd/kernels/sm90/prefill_d512_f16.py:1490): ``TemplateParams``
plus (B, H_q, H_kv, S_q, S_kv), the four (B, H, S, D) stride tuples, the Stats
strides and the real head dims.

The planner reads the device twice (``cudnn.frost.buffers.current_sm`` and
``current_device_id``); on a machine without a Hopper GPU ``planning_device``
answers (9, 0) / device 0 for the duration of the plan, which is then the
plan a Hopper device gets (the plan reads nothing else of the device).
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Optional, Tuple

from ground.case import Case
from ground.families import FAMILIES

FAMILY = FAMILIES["sm90"]
# The template file and the loader tag SdpaFwdDslSm90.compile uses (api_dsl.py:5342).
TEMPLATE = "sm90/prefill_d512_f16.py"
TAG = "sdpa_fwd_sm90_d512"
# Case.sched -> SdpaFwdDslSm90's sched_policy (None: the planner's auto pick).
SCHED_POLICY = {"natural": 0, "lpt": 1, "lpt_l2": 2, "auto": None}


@dataclass(frozen=True)
class Sm90Specialization:
    """What ``SdpaFwdDslSm90.compile`` hands the template: ``params``
    (config_sm90.TemplateParams) and the arguments of its ``compile()``.
    ``s_q``/``s_kv`` are the declared lengths (THD: the longest sequence);
    ``strides``: the (B, H, S, D) element strides of Q, K, V, O (THD: batch
    stride 0); ``lse_stride``: the Stats (B, H, S) strides (None without
    Stats); ``scale``: the natural, signed softmax scale a launch hands."""

    params: object
    batch: int
    h_q: int
    h_kv: int
    s_q: int
    s_kv: int
    strides: Tuple[Tuple[int, ...], ...]
    lse_stride: Optional[Tuple[int, ...]]
    d_qk: int
    d_v: int
    scale: float

    @property
    def thd(self) -> bool:
        return bool(self.params.thd_varlen)

    def compile_args(self) -> Tuple[tuple, dict]:
        """(args, kwargs) of the template module's ``compile()`` for ``arch``."""
        args = (self.batch, self.h_q, self.h_kv, self.s_q, self.s_kv, *self.strides, self.lse_stride)
        return args, dict(target=FAMILY.arch, d_qk=self.d_qk, d_v=self.d_v)

    @property
    def key(self) -> tuple:
        """The identity of the compile: ``_compile``'s lru arguments
        (prefill_d512_f16.py:1528; THD zeroes S_q/S_kv out of them, :1524)
        with the TemplateParams standing for the template's source digest.
        Equal keys share one artifact; a new key is a new ~2 s compile."""
        s_q, s_kv = (0, 0) if self.thd else (self.s_q, self.s_kv)
        return ("sm90", self.params, self.batch, self.h_q, self.h_kv, s_q, s_kv, self.strides, self.lse_stride, self.d_qk, self.d_v)


@contextmanager
def planning_device():
    """While active, the planner's two device reads answer an SM90 device 0
    where no Hopper GPU is current (the CPU, another arch): what it plans is
    then what it plans on a Hopper device."""
    from cudnn.frost import buffers

    if buffers.current_sm() == 90:
        yield
        return
    real = buffers.current_sm, buffers.current_device_id
    buffers.current_sm, buffers.current_device_id = (lambda: 90), (lambda: 0)
    try:
        yield
    finally:
        buffers.current_sm, buffers.current_device_id = real


def _desc(t, name: str, shape=None, stride=None):
    """A planner TensorDesc of (meta) tensor ``t`` on CUDA device 0 (a declaration: no storage)."""
    import torch
    from cudnn.api_base import TensorDesc

    shape = tuple(int(n) for n in (t.shape if shape is None else shape))
    stride = tuple(int(s) for s in (t.stride() if stride is None else stride))
    order = tuple(sorted(range(len(shape)), key=lambda i: (stride[i], i)))
    return TensorDesc(dtype=t.dtype, shape=shape, stride=stride, stride_order=order, device=torch.device("cuda", 0), name=name)


def declarations(case: Case) -> dict:
    """The planner's sample declarations of ``case``'s operands, from the
    layouts ``ground.data`` gives its tensors (meta device): dense (B, H, S, D)
    views per ``case.memory``; THD the packed (T, H, D) buffers declared
    rank-4 (sequences, H, longest sequence, D) with their token and head
    strides (batch stride 0); Stats per ``case.lse_layout`` (None without
    ``has_lse``)."""
    import torch

    from ground.data import TORCH_DTYPES, dense_view, lse_view, make_outputs

    dt = TORCH_DTYPES[case.dtype]
    with torch.device("meta"):
        if case.is_thd:
            s_q, s_kv = _thd_lengths(case)

            def packed(t_len, h, s, d, name):
                t = torch.empty((t_len, h, d), dtype=dt)
                return _desc(t, name, (case.n_seq, h, s, d), (0, t.stride(1), t.stride(0), 1))

            q, k = packed(case.t_q, case.h_q, s_q, case.d_qk, "q"), packed(case.t_kv, case.h_kv, s_kv, case.d_qk, "k")
            v, o = packed(case.t_kv, case.h_kv, s_kv, case.d_v, "v"), packed(case.t_q, case.h_q, s_q, case.d_v, "o")
            lse = None
            if case.has_lse:
                view = lse_view(case)  # (H, T_q)
                lse = _desc(view, "lse", (case.n_seq, case.h_q, s_q), (0, view.stride(0), view.stride(1)))
        else:
            b = case.batch
            q = _desc(dense_view(case, b, case.h_q, case.s_q, case.d_qk, dt), "q")
            k = _desc(dense_view(case, b, case.h_kv, case.s_kv, case.d_qk, dt), "k")
            v = _desc(dense_view(case, b, case.h_kv, case.s_kv, case.d_v, dt), "v")
            out, stats = make_outputs(case, "meta")
            o = _desc(out, "o")
            lse = _desc(stats, "lse") if case.has_lse else None
    return dict(sample_q=q, sample_k=k, sample_v=v, sample_o=o, sample_lse=lse)


def _thd_lengths(case: Case) -> Tuple[int, int]:
    """The declared (S_q, S_kv) of a THD plan: the longest sequence of each side (at least 1)."""
    return max(1, max(case.q_lens)), max(1, max(case.kv_lens))


def plan_arguments(case: Case) -> dict:
    """The ``SdpaFwdDslSm90`` constructor arguments that state ``case``: its
    declarations and flags (the band as the public wrapper passes it:
    ``window_size_left`` the offset W, ``window_size_right`` the widened
    right bound; the Case's scale, None meaning the planner's 1/sqrt(d_qk))."""
    out = declarations(case)
    out.update(
        is_causal=case.causal,
        causal_bottom_right=case.bottom_right,
        window_size_left=case.window_left if case.window_left >= 0 else None,
        window_size_right=case.window_right if case.window_right >= 0 else None,
        scale_softmax=case.scale,
        seq_q_lens_present=not case.is_thd and case.seq_q_lens is not None,
        seq_kv_lens_present=not case.is_thd and case.seq_kv_lens is not None,
        has_sink=case.sinks,
        stats_log2=case.lse_log2,
        pack_gqa=case.pack_gqa,
        sched_policy=SCHED_POLICY[case.sched],
        thd=case.is_thd,
    )
    if case.is_thd:
        out.update(max_total_seq_len_q=case.t_q, max_total_seq_len_kv=case.t_kv)
    return out


def plan(case: Case, **overrides):
    """The kernels' own plan of ``case`` (``SdpaFwdDslSm90`` after
    ``check_support``), constructor arguments ``overrides`` replaced (the
    contract table's plan-argument rows). Raises what the planner raises."""
    from cudnn.sdpa.fwd.api_dsl import SdpaFwdDslSm90

    if case.family != FAMILY.name:
        raise ValueError(f"case field 'family' = {case.family!r}: kernels.sm90 plans the sm90 family only")
    if case.is_bwd:
        raise ValueError("case field 'direction' = 'bwd': the sm90 family is forward only")
    arguments = {**plan_arguments(case), **overrides}
    api = SdpaFwdDslSm90(**arguments)
    with planning_device():
        api.check_support()
    return api


def specialize(case: Case, **overrides) -> Sm90Specialization:
    """The TemplateParams and compile arguments the kernels' planner gives
    ``case`` (``plan``). Raises the planner's ValueError / NotImplementedError
    where the Case is outside what it serves."""
    return specialization(plan(case, **overrides))


def specialization(api) -> Sm90Specialization:
    """What planned ``api`` (an ``SdpaFwdDslSm90`` after ``check_support``)
    hands the template's ``compile()``: any entry point's plan, read alike."""
    return Sm90Specialization(
        params=api.params,
        batch=int(api.batch_size),
        h_q=int(api.h_q),
        h_kv=int(api.h_kv),
        s_q=int(api.s_q_max),
        s_kv=int(api.s_k_max),
        strides=tuple(tuple(int(x) for x in s) for s in api._strides),
        lse_stride=None if api._lse_stride is None else tuple(int(x) for x in api._lse_stride),
        d_qk=int(api.head_dim_qk),
        d_v=int(api.head_dim_v),
        scale=float(api.scale_softmax),
    )


def compile_key(case: Case) -> tuple:
    """The identity of the one compile ``case`` asks the sm90 template for
    (``Sm90Specialization.key``), from its facts alone: nothing compiled."""
    return specialize(case).key
