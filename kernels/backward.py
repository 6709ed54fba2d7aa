"""The SM80 backward through its two entry points.

- ``prepared_backward`` (the prepared adapter): ``SdpaBwdDslSm80`` driven the
  way its graph lowering drives it -- check_support, compile (which reaches
  ``prepared_sm80.build_spec`` -> ``prepared_host.compile_host``, or the staged
  recipe ``staged_sm80.compile_staged`` for layouts the pointer chain cannot
  bind, or the packed THD chain), execute on CALLER buffers: the gradients
  (dQ, dK, dV, dBias, dSink) and the uint8 workspace are guarded buffers of
  the suite, so a stray write of any stage lands in a guard band.
- ``wrapper_backward`` (the wrapper adapter): the public
  ``sdpa_bwd_wrapper_sm80``, which allocates and returns its own gradients.

Both take the adapter they serve and ask it only through its public face:
``name``, ``rewrites`` and ``live_environment()`` (prepared: the live device,
refused without one), ``sm80_compat`` and ``serving_mode(entry)`` (wrapper:
the mode it runs in here, refused where it serves none). The adapters import
this module for their ``backward()``; it imports neither adapter.

Off SM80 both entries refuse the device in ``SdpaBwdDslSm80.check_support``
(``torch.cuda.get_device_capability`` must answer (8, 0)); the prepared
adapter and the wrapper's SM80-compatibility mode answer it for api_dsl's
frames only, as the forward wrapper's mode does. Nothing else is bypassed:
the backward's compiles name no ``--gpu-arch`` and target the live device
(sm_90 on an H200). The CPU compile tier pins them to sm_80 instead.

The result is a ``KernelResult`` whose ``grads`` holds views of the memory
the kernel wrote, in the suite's layouts (dense logical (B, H, S, D) views;
THD packed (T, H, D)); ``o``/``lse`` are the O and LSE the backward was
handed.
"""

from __future__ import annotations

import hashlib
import sys
from contextlib import ExitStack, contextmanager
from typing import Dict, Optional

import torch

from ground.case import Case
from ground.data import TORCH_DTYPES, dense_view, guarded, guarded_copy, make_grad_outputs, make_outputs
from kernels.arch import COMPILE_ONLY_ARCH, compile_arch
from kernels.base import CompileDelta, KernelResult
from kernels.counters import measure

API_MODULE = "cudnn.sdpa.bwd.api_dsl"
# The workspace body the prepared adapter hands: 0xFF bytes, NaN in every
# fp16/bf16/fp32 view. The entry points take scratch uninitialized (the
# wrapper's torch.empty, cudnn/sdpa/bwd/api_dsl.py:955), so a stage that
# consumes scratch it never wrote shows as NaN, the same on every launch,
# not as whatever the allocator last held (backward_tails' GQA fold rule).
SCRATCH_FILL = 0xFF

# How THD buffers are handed for cu_seqlens with a first offset > 0. The
# backward normalizes its cu_seqlens (cu - cu[0]) and addresses the packed
# buffers from token 0 ("a cu tensor sliced from a larger prefix means the
# same lengths", cudnn/frost/tile_dsl/thd.py:115-127, write_thd_meta; the
# warp form :160-190), while the forward addresses tokens at cu[b] itself.
# "backward" (the default): its own contract, every packed operand and
# gradient handed from token cu[0]; "forward": the buffers as the forward
# takes them (what a training step hands both), which the backward_addressing
# property judges against the first (a finding while they differ).
ADDRESSINGS = ("backward", "forward")


def thd_origin(case: Case, addressing: str = "backward") -> tuple:
    """(Q, KV) token where the THD buffers handed to the backward begin."""
    if addressing not in ADDRESSINGS:
        raise ValueError(f"addressing {addressing!r}: one of {', '.join(ADDRESSINGS)}")
    return (case.q_base, case.kv_base) if case.is_thd and addressing == "backward" else (0, 0)


_KV_SIDE = ("k", "v", "dk", "dv")  # packed operands on the KV tokens; the rest are on the Q tokens


def from_origin(case: Case, addressing: str = "backward", **packed: torch.Tensor) -> Dict[str, torch.Tensor]:
    """Each packed (T, H, D) THD operand as the backward is handed it: the
    view from its side's ``thd_origin`` token."""
    bq, bk = thd_origin(case, addressing)
    return {n: t[bk if n in _KV_SIDE else bq :] for n, t in packed.items()}


@contextmanager
def sm80_answer(module: str = API_MODULE, *, available: bool = False):
    """``torch.cuda.get_device_capability`` answers (8, 0) to ``module``'s
    frames only (its check_support's architecture check); with ``available``
    ``torch.cuda.is_available`` answers True to them too (the CPU compile
    tier: check_support insists on CUDA before it plans anything)."""
    real_cap, real_avail = torch.cuda.get_device_capability, torch.cuda.is_available

    def capability(device=None):
        if sys._getframe(1).f_globals.get("__name__") == module:
            return (8, 0)
        return real_cap(device)

    def is_available():
        return True if sys._getframe(1).f_globals.get("__name__") == module else real_avail()

    torch.cuda.get_device_capability = capability
    if available:
        torch.cuda.is_available = is_available
    try:
        yield
    finally:
        torch.cuda.get_device_capability = real_cap
        torch.cuda.is_available = real_avail


def _window(n: int) -> Optional[int]:
    return None if n < 0 else int(n)


def _flavor_dims(case: Case):
    from cudnn.sdpa.bwd.api_dsl import _SM80_BWD_FLAVOR_DIMS, _sm80_bwd_pick_flavor

    flavor = _sm80_bwd_pick_flavor(case.d_qk, case.d_v)
    return flavor, _SM80_BWD_FLAVOR_DIMS[flavor]


def _packed(t: torch.Tensor, width: int) -> torch.Tensor:
    """A packed (T, H, D) operand at the flavor width: itself when it already
    is, else a guarded zero-padded copy (the THD chain has no staging leg)."""
    if t.shape[-1] == width and t.is_contiguous():
        return t
    buf = guarded((*t.shape[:-1], width), t.dtype, t.device, row=t.shape[1] * width, fill=0)
    buf[..., : t.shape[-1]].copy_(t)
    return buf


def plan(case: Case, q, k, v, o, do, lse, grads: Dict[str, torch.Tensor], inputs_bias=None, inputs_sinks=None, *, initialize_outputs=True):
    """The ``SdpaBwdDslSm80`` of ``case`` over these (sample) tensors, not yet checked.
    Dense: logical (B, H, S, D) views. THD: packed (T, H, D) at the flavor width."""
    from cudnn.sdpa.bwd.api_dsl import SdpaBwdDslSm80

    common = dict(
        sample_sink=inputs_sinks,
        sample_dsink=grads.get("dsink"),
        is_causal=case.causal,
        causal_bottom_right=case.bottom_right,
        window_size_left=_window(case.window_left),
        window_size_right=_window(case.window_right),
        deterministic=case.deterministic,
        scale_softmax=case.softmax_scale,
    )
    if not case.is_thd:
        return SdpaBwdDslSm80(
            q,
            k,
            v,
            o,
            do,
            lse,
            grads["dq"],
            grads["dk"],
            grads["dv"],
            sample_bias=inputs_bias,
            sample_dbias=grads.get("dbias"),
            seq_kv_lens_present=case.seq_kv_lens is not None,
            seq_q_lens_present=case.seq_q_lens is not None,
            has_bias=case.bias is not None,
            bias_is_fp32=case.bias in (None, "float32"),
            bias_batch=case.bias_batch,
            **common,
        )
    # Packed: the envelope descs of _sm80_thd_plan, (n_seq, H, T, D) over [1, T, H, D] rows.
    from cudnn.api_base import TensorDesc

    n = case.n_seq

    def env(t):  # (T, H, D) packed -> the (n_seq, H, T, D) envelope desc over its rows
        tokens, h, d = t.shape
        return TensorDesc(t.dtype, (n, h, tokens, d), (tokens * h * d, d, h * d, 1), (3, 1, 2, 0), t.device)

    h, tokens = lse.shape
    stats = TensorDesc(torch.float32, (n, h, tokens), (h * tokens, tokens, 1), (2, 1, 0), lse.device)
    sink = None if inputs_sinks is None else TensorDesc(torch.float32, (h,), (1,), (0,), lse.device)
    common.update(sample_sink=sink, sample_dsink=sink)
    api = SdpaBwdDslSm80(
        env(q),
        env(k),
        env(v),
        env(o),
        env(do),
        stats,
        env(grads["dq"]),
        env(grads["dk"]),
        env(grads["dv"]),
        thd=True,
        max_total_seq_len_q=q.shape[0],
        max_total_seq_len_kv=k.shape[0],
        **common,
    )
    # The launch bounds (the wrapper's max_s_q / max_s_kv hints) are set after check_support (_compile).
    api._initialize_packed_outputs = bool(initialize_outputs)
    return api


def _launch_bounds(case: Case):
    """The THD launch bounds the wrapper derives from exact hints: (max_s_q, max_s_kv)."""
    return max(1, max(case.q_lens)), max(1, max(case.kv_lens))


def _compile(api, case: Case):
    api.check_support()
    if case.is_thd:
        api._thd_launch_bounds = _launch_bounds(case)
    api.compile()


def _compile_live(adapter, env, api, case: Case):
    """Compile ``api`` for the live device ``env`` as a launch does (the
    adapter's kernel sources; the capability answered off SM80 only): the
    counters' box (``.delta``)."""
    from kernels.source import backward_sources

    with ExitStack() as stack:
        if not env.native:
            stack.enter_context(sm80_answer())
        box = stack.enter_context(measure())
        stack.enter_context(backward_sources(adapter.rewrites))
        _compile(api, case)
    return box


def compile_key(case: Case, *, initialize_outputs: bool = True) -> str:
    """A short name of what a backward Case compiles (reports count distinct keys):
    its TemplateParams facts and the geometry facts that reach the compile;
    THD: and the output mode (``initialize_outputs``: the packed outputs'
    zero-fill is compiled into the chain, a no-init call is an artifact of its
    own)."""
    facts = {
        n: getattr(case, n)
        for n in ("layout", "dtype", "h_q", "h_kv", "d_qk", "d_v", "causal", "bottom_right", "bias", "sinks", "deterministic", "memory", "dbias_dtype")
    }
    facts.update(
        window=case.window_left >= 0,
        swa=max(case.window_left, 0),
        right=max(case.window_right, 0),
        bias_batch=case.bias_batch if case.bias else 0,
        seq_q=case.seq_q_lens is not None,
        seq_kv=case.seq_kv_lens is not None,
    )
    fdqk, fdv = _flavor_dims(case)[1]
    if case.is_thd:  # THD operands are handed at the flavor width (prepared_backward): its dims, not the Case's
        facts.update(n_seq=case.n_seq, d_qk=fdqk, d_v=fdv)
        if not initialize_outputs:  # left out when set, so the keys of the default mode stay as they were
            facts.update(initialize_outputs=False)
    else:
        facts.update(batch=case.batch, s_q=case.s_q, s_kv=case.s_kv)
        if (case.d_qk, case.d_v) == (fdqk, fdv):  # the native pointer chain (prepared_sm80.native_layouts): the caller's strides
            facts.update(memory=_dense_strides(case))
        else:  # staged copies at the flavor width, whatever the caller's dims and order (staged_sm80)
            facts.update(d_qk=fdqk, d_v=fdv, memory="staged")
    return hashlib.sha1(repr(sorted(facts.items())).encode()).hexdigest()[:12]


def _dense_strides(case: Case) -> tuple:
    """The strides of the dense Q, K, V and O a backward of ``case`` is handed
    (meta tensors: no memory): a storage order reaches the key through them
    (two orders of size-1 axes have the same)."""
    dt = TORCH_DTYPES[case.dtype]
    with torch.device("meta"):
        views = (
            dense_view(case, case.batch, case.h_q, case.s_q, case.d_qk, dt),
            dense_view(case, case.batch, case.h_kv, case.s_kv, case.d_qk, dt),
            dense_view(case, case.batch, case.h_kv, case.s_kv, case.d_v, dt),
            dense_view(case, case.batch, case.h_q, case.s_q, case.d_v, dt),
        )
    return tuple(tuple(v.stride()) for v in views)


def prepared_backward(adapter, case: Case, inputs, o, lse, do, grads=None, *, initialize_outputs: bool = True, addressing: str = "backward") -> KernelResult:
    """Run the backward of ``case`` through ``SdpaBwdDslSm80`` on caller buffers
    (THD buffers handed from ``thd_origin(case, addressing)``)."""

    env = adapter.live_environment()
    dev = inputs.q.device
    grads = make_grad_outputs(case, dev) if grads is None else grads
    staged = []
    lse_run = lse
    if case.is_thd:
        _, (fdqk, fdv) = _flavor_dims(case)
        bq, _ = thd_origin(case, addressing)
        # What the backward is handed: the packed buffers from their origin (views), then at the flavor width.
        view = from_origin(case, addressing, q=inputs.q, k=inputs.k, v=inputs.v, o=o, do=do, dq=grads["dq"], dk=grads["dk"], dv=grads["dv"])
        width = dict(q=fdqk, k=fdqk, v=fdv, o=fdv, do=fdv, dq=fdqk, dk=fdqk, dv=fdv)
        # An origin at the end of a buffer (every sequence empty, no slack) leaves nothing to hand: one
        # never-live row instead, as the wrapper does for a zero capacity (api_dsl.py:907-910).
        ran = {
            n: _packed(t, width[n]) if t.shape[0] else guarded((1, *t.shape[1:-1], width[n]), t.dtype, t.device, row=t.shape[1] * width[n], fill=0)
            for n, t in view.items()
        }
        q, k, v, o_run, do_run = (ran[n] for n in ("q", "k", "v", "o", "do"))
        run = {n: ran[n] for n in ("dq", "dk", "dv")}
        if "dsink" in grads:
            run["dsink"] = grads["dsink"]
        staged = [n for n in view if ran[n] is not view[n]]
        if bq:  # head-major Stats from token cu[0]: a compact copy (a sliced (H, T) view is not compact)
            lse_run = guarded_copy(lse[:, bq:], row=1) if lse.shape[1] > bq else guarded((lse.shape[0], 1), lse.dtype, lse.device, row=1, fill=0)
            staged.append("lse")
    else:
        q, k, v, o_run, do_run, run, view = inputs.q, inputs.k, inputs.v, o, do, dict(grads), dict(grads)
    api = plan(case, q, k, v, o_run, do_run, lse_run, run, inputs.bias, inputs.sinks, initialize_outputs=initialize_outputs)
    box = _compile_live(adapter, env, api, case)
    workspace = guarded((max(1, api.scratch_workspace_bytes()),), torch.uint8, dev, row=1, fill=SCRATCH_FILL)
    if case.is_thd:
        env_view = lambda t: t.unsqueeze(0).transpose(1, 2)  # noqa: E731
        api.execute(
            env_view(q),
            env_view(k),
            env_view(v),
            env_view(o_run),
            env_view(do_run),
            lse_run.unsqueeze(0),
            env_view(run["dq"]),
            env_view(run["dk"]),
            env_view(run["dv"]),
            scale_softmax=case.softmax_scale,
            workspace=workspace,
            seq_q_lens=inputs.cu_q,
            seq_kv_lens=inputs.cu_kv,
            sink_tensor=inputs.sinks,
            dsink_tensor=run.get("dsink"),
        )
    else:
        api.execute(
            q,
            k,
            v,
            o,
            do,
            lse,
            grads["dq"],
            grads["dk"],
            grads["dv"],
            scale_softmax=case.softmax_scale,
            workspace=workspace,
            seq_q_lens=inputs.seq_q_lens,
            seq_kv_lens=inputs.seq_kv_lens,
            sink_tensor=inputs.sinks,
            dsink_tensor=grads.get("dsink"),
            bias_tensor=inputs.bias,
            dbias_tensor=grads.get("dbias"),
        )
    written = {}
    for name, t in run.items():
        target = view.get(name, grads[name])
        if t is not target:  # a staged (flavor-width or never-live-row) gradient: copied back into the caller's view
            target.copy_(t[: target.shape[0], ..., : target.shape[-1]] if name in ("dq", "dk", "dv") else t)
        # The caller's whole buffer where a view was handed (rows before the origin are its own bytes), else the memory written.
        written[name] = grads[name] if target is not grads[name] else (t[..., : grads[name].shape[-1]] if name in ("dq", "dk", "dv") else t)
    path = "packed THD chain" if case.is_thd else ("native pointer chain" if api._native_pointer else "staged copies + pointer chain")
    notes = {
        "adapter": adapter.name,
        "direction": "bwd",
        "mode": env.mode,
        "flavor": api.flavor,
        "path": path,
        "d64_kernel": bool(api._use_d64),
        "arch": "sm_80" if env.native else f"{env.live_arch} (the backward's compiles name no --gpu-arch: the DSL targets the live device)",
        "staged": staged,
        "compile_key": compile_key(case, initialize_outputs=initialize_outputs),
        "deterministic": case.deterministic,
    }
    if case.is_thd:
        notes["initialize_outputs"] = bool(initialize_outputs)
        notes["thd_origin"] = {"addressing": addressing, "tokens": list(thd_origin(case, addressing))}
    # Guard bands are checked on whole allocations: a view handed from a THD origin is named by its buffer.
    whole = lambda n, t, full: full if view.get(n) is t else t  # noqa: E731
    handed = _handed(
        inputs,
        q=whole("q", q, inputs.q),
        k=whole("k", k, inputs.k),
        v=whole("v", v, inputs.v),
        o=whole("o", o_run, o),
        do=whole("do", do_run, do),
        lse=lse_run,
        workspace=workspace,
    )
    handed.update({n: whole(n, t, grads[n]) for n, t in run.items()})
    return KernelResult(o, lse, box.delta, notes, handed, grads=written)


class _Named(Exception):
    """Raised in place of the frontend's compile once its cache key is known."""


def frontend_cache_keys(adapter, case: Case, *, initialize_outputs: bool = True, addressing: str = "backward") -> tuple:
    """The cache keys the frontend's backward chain asks ``compile_cached``
    for on ``case`` (compile_only's path; nothing compiled: the first
    request stops the chain). ``compile_key`` partitions the drawn Cases
    exactly as these do (tests/test_backward_cpu.py); it also splits by the
    dBias dtype, which these omit (known finding
    bwd-compile-key-omits-dbias-dtype; the strategies draw no dtype there)."""
    from cudnn.sdpa.bwd.kernels.sm80 import prepared_host, staged_copy

    asked = []

    def named(fn, *args, cache_key=None, **kwargs):
        asked.append(cache_key)
        raise _Named()

    real = prepared_host.compile_cached, staged_copy.compile_cached
    prepared_host.compile_cached = staged_copy.compile_cached = named
    try:
        for lru in (prepared_host._compile_thd_artifact, prepared_host._compile_staged_artifact):
            lru.cache_clear()  # an lru hit would ask for no key (this process recompiles those later)
        compile_only_backward(adapter, case, initialize_outputs=initialize_outputs, addressing=addressing)
    except _Named:
        pass
    finally:
        prepared_host.compile_cached, staged_copy.compile_cached = real
    return tuple(asked)


def compile_only_backward(adapter, case: Case, *, live: bool = False, initialize_outputs: bool = True, addressing: str = "backward") -> CompileDelta:
    """Plan and compile the backward of ``case`` for sm_80 from its facts
    alone (meta tensors, no CUDA): check_support sees an SM80 with CUDA, the
    pointer host's compiles are pinned to sm_80. ``live`` (a GPU present):
    for the live device as ``prepared_backward`` compiles (no arch pinned,
    the capability answered only off SM80), so the run's compiled cache keeps
    an artifact that loads there and a later run asks it again."""
    from cudnn.sdpa.bwd.kernels.sm80 import prepared_host

    from kernels.source import backward_sources

    case.require_expressible(adapter.name)
    dt = TORCH_DTYPES[case.dtype]
    with torch.device("meta"):
        if case.is_thd:
            _, (fdqk, fdv) = _flavor_dims(case)
            packed = lambda t, h, d: guarded((t, h, d), dt, row=h * d)  # noqa: E731
            bq, bk = thd_origin(case, addressing)
            t_q, t_kv = max(1, case.t_q - bq), max(1, case.t_kv - bk)  # the tokens prepared_backward hands
            q, k, v = packed(t_q, case.h_q, fdqk), packed(t_kv, case.h_kv, fdqk), packed(t_kv, case.h_kv, fdv)
            o, do = packed(t_q, case.h_q, fdv), packed(t_q, case.h_q, fdv)
            lse = guarded((case.h_q, t_q), torch.float32, row=1)
            grads = {"dq": packed(t_q, case.h_q, fdqk), "dk": packed(t_kv, case.h_kv, fdqk), "dv": packed(t_kv, case.h_kv, fdv)}
            if case.sinks:
                grads["dsink"] = guarded((case.h_q,), torch.float32, row=1)
            bias = None
        else:
            q = dense_view(case, case.batch, case.h_q, case.s_q, case.d_qk, dt)
            k = dense_view(case, case.batch, case.h_kv, case.s_kv, case.d_qk, dt)
            v = dense_view(case, case.batch, case.h_kv, case.s_kv, case.d_v, dt)
            o, lse = make_outputs(case, "meta", fill=None)
            do = dense_view(case, case.batch, case.h_q, case.s_q, case.d_v, dt)
            grads = make_grad_outputs(case, "meta", fill=None)
            bias = guarded((case.bias_batch, case.h_q, case.s_q, case.s_kv), TORCH_DTYPES[case.bias]) if case.bias else None
        sinks = guarded((case.h_q,), torch.float32, row=1) if case.sinks else None
    api = plan(case, q, k, v, o, do, lse, grads, bias, sinks, initialize_outputs=initialize_outputs)
    if live:
        return _compile_live(adapter, adapter.live_environment(), api, case).delta
    with sm80_answer(available=True), measure() as box, backward_sources(adapter.rewrites), compile_arch(prepared_host, COMPILE_ONLY_ARCH, add=True):
        try:
            _compile(api, case)
        except NotImplementedError as e:  # no loadable entry off an sm_80 device: the compile happened all the same
            if "positional tvm-ffi entry" not in str(e):
                raise
    return box.delta


def _wrapper_kwargs(case: Case, inputs) -> dict:
    """``sdpa_bwd_wrapper_sm80``'s mask, scale, sink and determinism arguments of ``case``."""
    return dict(
        is_causal=case.causal,
        window_size=(case.window_left, case.window_right),
        scale_softmax=case.scale,
        causal_bottom_right=case.bottom_right,
        sinks=inputs.sinks,
        deterministic=case.deterministic,
    )


def wrapper_backward(adapter, case: Case, inputs, o, lse, do, grads=None, *, initialize_outputs: bool = True) -> KernelResult:
    """Run the backward of ``case`` through ``sdpa_bwd_wrapper_sm80`` (its own outputs)."""
    from cudnn.sdpa.bwd import sdpa_bwd_wrapper_sm80

    case.require_expressible(adapter.name)
    env, mode = adapter.serving_mode("sdpa_bwd_wrapper_sm80")
    kw = _wrapper_kwargs(case, inputs)
    bq, bk = thd_origin(case)
    lse_run = lse
    if case.is_thd:  # handed from the THD origin (thd_origin): the wrapper normalizes cu_seqlens as the prepared entry does
        h = from_origin(case, q=inputs.q, k=inputs.k, v=inputs.v, o=o, do=do)
        if bq:  # head-major Stats from token cu[0], as .contiguous() would hand it (the view itself where torch calls it
            # contiguous: finding wrapper-bwd-thd-stats-strides), its copy inside guard bands
            view = lse[:, bq:]
            lse_run = view if view.is_contiguous() else guarded_copy(view, row=1)
        args = tuple(h[n].unsqueeze(0) for n in ("q", "k", "v", "o", "do")) + (lse_run.unsqueeze(0),)
        max_q, max_kv = _launch_bounds(case)
        kw.update(cum_seqlen_q_tensor=inputs.cu_q, cum_seqlen_k_tensor=inputs.cu_kv, max_s_q=max_q, max_s_kv=max_kv)
    else:
        args = (inputs.q, inputs.k, inputs.v, o, do, lse)
        kw.update(seq_kv_lens=inputs.seq_kv_lens, seq_len_q=inputs.seq_q_lens, bias_tensor=inputs.bias)
    with ExitStack() as stack:
        if not env.native:
            stack.enter_context(sm80_answer())
        box = stack.enter_context(measure())
        got = sdpa_bwd_wrapper_sm80(*args, **kw)
    out = {"dq": got["dq_tensor"], "dk": got["dk_tensor"], "dv": got["dv_tensor"]}
    if case.is_thd:  # packed [1, T, H, D]: views, not copies
        out = {n: t[0] for n, t in out.items()}
        if bq or bk:  # at the Case's token positions; rows before the origin were never handed (NaN)
            out = {n: _at_origin(t, *((bq, case.t_q) if n == "dq" else (bk, case.t_kv))) for n, t in out.items()}
    for name in ("dbias", "dsink"):
        if f"{name}_tensor" in got:
            out[name] = got[f"{name}_tensor"]
    notes = {
        "adapter": adapter.name,
        "direction": "bwd",
        "mode": mode,
        "sm80_compat": adapter.sm80_compat,
        "compile_key": compile_key(case),
        "outputs": "wrapper-owned (as returned by sdpa_bwd_wrapper_sm80; no guard bands)",
        "deterministic": case.deterministic,
    }
    if case.is_thd and (bq or bk):
        notes["thd_origin"] = {
            "addressing": "backward",
            "tokens": [bq, bk],
            "gradients": "the returned rows placed from the origin; rows before it NaN (never handed)",
        }
    handed = _handed(inputs, q=inputs.q, k=inputs.k, v=inputs.v, o=o, do=do, lse=lse)
    if lse_run.untyped_storage().data_ptr() != lse.untyped_storage().data_ptr():
        handed["lse (staged copy)"] = lse_run
    return KernelResult(o, lse, box.delta, notes, handed, grads=out)


def _handed(inputs, **operands) -> Dict[str, torch.Tensor]:
    """The buffers a backward launch was handed, by role (guard bands are
    checked on each): the Q/K/V/O/dO/LSE (and workspace) ``operands`` as
    handed, then the Case's metadata operands from ``inputs``; None: not handed."""
    meta = ("bias", "sinks", "seq_q_lens", "seq_kv_lens", "cu_q", "cu_kv")
    roles = {**operands, **{n: getattr(inputs, n) for n in meta}}
    return {role: t for role, t in roles.items() if t is not None}


def _at_origin(t: torch.Tensor, origin: int, tokens: int) -> torch.Tensor:
    """The wrapper's (T - origin, H, D) gradient at rows [origin, T) of a NaN (T, H, D) one
    (a zero capacity came back as its one never-live row: nothing to place)."""
    full = torch.full((tokens, *t.shape[1:]), float("nan"), dtype=t.dtype, device=t.device)
    full[origin:] = t[: tokens - origin]
    return full


def rejected_call(case: Case, inputs, o, lse, do, change) -> None:
    """Call ``sdpa_bwd_wrapper_sm80`` for ``case`` with a contract rule's
    ``change`` (ground.contracts.BWD_CHANGES) applied; returns
    what it returns, raises what it raises. Off a GPU, check_support's CUDA
    and SM80 checks answer yes to api_dsl (the rules sit before any device
    use, or in build_spec before any compile); off SM80 the SM80 check does."""
    from cudnn.sdpa.bwd import sdpa_bwd_wrapper_sm80

    from kernels.environment import detect

    kind, arg = change
    dt = TORCH_DTYPES[case.dtype]
    dev = inputs.q.device
    ops = dict(q=inputs.q, k=inputs.k, v=inputs.v, o=o, do=do, lse=lse, bias=inputs.bias)
    if case.is_thd:
        ops.update({n: ops[n].unsqueeze(0) for n in ("q", "k", "v", "o", "do", "lse")})
    if kind == "dtype":
        role, to = arg
        ops[role] = ops[role].to(TORCH_DTYPES[to])
    if kind == "bias_heads":
        ops["bias"] = ops["bias"][:, :1].contiguous()
    kw = _wrapper_kwargs(case, inputs)
    if case.is_thd:
        kw.update(cum_seqlen_q_tensor=inputs.cu_q, cum_seqlen_k_tensor=None if kind == "drop_cu_k" else inputs.cu_kv)
    else:
        kw.update(seq_kv_lens=inputs.seq_kv_lens, seq_len_q=inputs.seq_q_lens, bias_tensor=ops["bias"])
    if kind == "kwarg":
        name, value = arg
        made = {
            "rope": lambda: torch.zeros((max(case.max_s_q, max(case.kv_lengths(), default=1)), case.d_qk // 2), dtype=torch.float32, device=dev),
            "bias": lambda: torch.zeros((1, case.h_q, case.max_s_q, max(case.kv_lengths(), default=1)), dtype=dt, device=dev),
            "lens": lambda: torch.tensor(case.q_lengths(), dtype=torch.int32, device=dev),
        }
        kw[name] = made[value]() if isinstance(value, str) else value
    env = detect()
    with ExitStack() as stack:
        if env.capability is None:
            stack.enter_context(sm80_answer(available=True))
        elif not env.native:
            stack.enter_context(sm80_answer())
        return sdpa_bwd_wrapper_sm80(ops["q"], ops["k"], ops["v"], ops["o"], ops["do"], ops["lse"], **kw)
