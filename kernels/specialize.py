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

from ground.case import Case


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


def scheduler(case: Case, flavor: str) -> Tuple[int, int]:
    """(TemplateParams.sched_policy, sched_l2_mib) of ``case``: the Case's
    scheduler, "auto" resolved by the wrapper's own function
    (api_dsl._sm80_resolve_scheduler), the L2 budget the flavor's tuned one
    (what the wrapper passes) unless the Case names 1 MiB."""
    from cudnn.sdpa.fwd.api_dsl import _sm80_resolve_scheduler, _sm80_sched_policy_int

    token = "default" if case.sched == "natural" else case.sched
    swa, _ = mask_runtime(case)
    token, l2 = _sm80_resolve_scheduler(scheduler=token, flavor=flavor, is_causal=case.causal, swa_window=swa, skv=case.s_kv)
    return _sm80_sched_policy_int(token), (case.sched_l2_mib or l2)


def specialize(case: Case, *, sched_policy: Optional[int] = None) -> Specialization:
    """The flavor and validated TemplateParams serving ``case``.

    Raises the kernels' own ValueError where the facts are outside what the
    templates serve (no envelope covers the head dims, invalid params)."""
    from cudnn.frost.tile_dsl.constants import SCHED_NATURAL
    from cudnn.sdpa.fwd import config_sm80 as cfg
    from cudnn.sdpa.fwd.api_dsl import _SM80_FLAVOR_CAUSAL_L2_MIB, _SM80_FLAVOR_DIMS, _SM80_FLAVOR_KNOBS

    flavor = pick_flavor(case.d_qk, case.d_v)
    fdqk, fdv = _SM80_FLAVOR_DIMS[flavor]
    tile_m, num_warps, tile_n = _SM80_FLAVOR_KNOBS[flavor]
    swa, right = mask_runtime(case)
    policy, l2_mib = (SCHED_NATURAL, _SM80_FLAVOR_CAUSAL_L2_MIB[flavor]) if case.is_thd else scheduler(case, flavor)
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
        has_rope=case.rope,
        thd_varlen=case.is_thd,
        # The THD grid requires the natural scheduler (api_dsl refuses others).
        sched_policy=policy if sched_policy is None else sched_policy,
        sched_l2_mib=l2_mib,
        has_lse=case.has_lse,
        sink_natural=not case.sink_log2,
        score_sign=cfg.score_sign(case.softmax_scale),
    )
    cfg.validate_params(params)
    return Specialization(flavor, params, swa, right)
