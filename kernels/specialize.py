"""Case facts -> the kernels' compile-time identity (flavor, TemplateParams).

Built the way the kernels' own adapter builds them (``api_dsl.SdpaFwdDslSm80``
check_support/compile for dense, ``_sm80_thd_forward`` for THD): the flavor
pick and ``config_sm80.TemplateParams``/``validate_params`` are the kernels'
own functions, imported, never re-implemented, so a Case the strategies call
valid is one the kernels' validators accept.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

from conformance.ground.case import Case


@dataclass(frozen=True)
class Specialization:
    flavor: str
    params: object  # config_sm80.TemplateParams
    swa_window: int  # runtime-constexpr window (compile_host / compile_thd_host argument)
    right_bound: int  # the causal band's right widening

    @property
    def envelope(self) -> Tuple[int, int]:
        return self.params.d_qk, self.params.d_v


def pick_flavor(d_qk: int, d_v: int) -> str:
    from cudnn.sdpa.fwd.api_dsl import _sm80_pick_flavor

    return _sm80_pick_flavor(d_qk, d_v)


def mask_runtime(case: Case) -> Tuple[int, int]:
    """(swa_window, right_bound) as the kernels' adapter derives them."""
    swa = max(0, case.window_left) if case.window_left >= 0 else 0
    right = max(0, case.window_right) if (case.causal and case.window_right >= 0) else 0
    return swa, right


def specialize(case: Case, *, sched_policy: Optional[int] = None) -> Specialization:
    """The flavor and validated TemplateParams serving ``case``.

    Raises the kernels' own ValueError where the facts are outside what the
    templates serve (no envelope covers the head dims, invalid params)."""
    from cudnn.frost.tile_dsl.constants import SCHED_NATURAL
    from cudnn.sdpa.fwd import config_sm80 as cfg
    from cudnn.sdpa.fwd.api_dsl import _SM80_FLAVOR_KNOBS, _SM80_FLAVOR_DIMS

    flavor = pick_flavor(case.d_qk, case.d_v)
    fdqk, fdv = _SM80_FLAVOR_DIMS[flavor]
    tile_m, num_warps, tile_n = _SM80_FLAVOR_KNOBS[flavor]
    swa, right = mask_runtime(case)
    params = cfg.TemplateParams(
        io_bf16=case.dtype == "bfloat16",
        d_qk=fdqk,
        d_v=fdv,
        tile_m=tile_m,
        num_warps=num_warps,
        tile_n=tile_n,
        is_causal=case.causal,
        has_swa=case.window_left >= 0,
        causal_bottom_right=case.bottom_right,
        has_seq_kv_lens=(not case.is_thd) and case.seq_kv_lens is not None,
        has_seq_q_lens=(not case.is_thd) and case.seq_q_lens is not None,
        has_sink=case.sinks,
        stats_log2=case.lse_log2,
        has_bias=case.bias is not None,
        bias_is_fp32=case.bias == "float32",
        thd_varlen=case.is_thd,
        # The natural scheduler: the THD grid requires it, and for dense the
        # scheduler is a performance knob, not a semantic one.
        sched_policy=SCHED_NATURAL if sched_policy is None else sched_policy,
        has_lse=True,
        sink_natural=True,
        score_sign=cfg.score_sign(case.softmax_scale),
    )
    cfg.validate_params(params)
    return Specialization(flavor, params, swa, right)
