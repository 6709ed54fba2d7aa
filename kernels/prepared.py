"""PreparedAdapter: the SM80 templates through their compile entry points.

Drives ``cudnn/sdpa/fwd/kernels/sm80/prepared_host.py`` the way its real
callers do (dense: ``prepared_sm80.build_spec``; THD:
``SdpaFwdDslSm80._execute_thd`` / ``_sm80_thd_forward``), with none of the
wrappers' contract checks in between. See kernels/README.md.
"""

from __future__ import annotations

import dataclasses
import math
from contextlib import contextmanager
from typing import Callable, List, Optional

import torch

from ground.case import Case
from ground.data import TORCH_DTYPES, CaseTensors, dense_view, guarded, guarded_copy, make_outputs
from ground.outcome import Unsupported
from ground.phases import timed
from ground.tables import NO_GPU
from kernels.arch import COMPILE_ONLY_ARCH, compile_arch
from kernels.backward import compile_only_backward, prepared_backward
from kernels.base import CompileDelta, KernelResult, key_digest
from kernels.counters import adapter_memo, measure
from kernels.specialize import specialize

LOG2E = math.log2(math.e)
# cu_seqlens and sink dtypes compile_thd_host is asked for (the wrapper's defaults).
THD_PREFIX_DTYPES = ("torch.int32", "torch.int32")
THD_SINK_DTYPE = "torch.float32"


def thd_host_args(case: Case) -> tuple:
    """(prefix_dtypes, sink_dtype, lse_stride) compile_thd_host is asked for:
    the Case's cu_seqlens and sink dtypes, and its Stats layout as the
    (batch, head, token) strides the host's lse_stride constexpr takes (None:
    the compact head-major default)."""
    from ground.data import thd_lse_pitch

    prefix = (f"torch.{case.prefix_dtype}",) * 2
    lse_stride = {"compact": None, "padded": (0, thd_lse_pitch(case), 1), "token_major": (0, 1, case.h_q)}[case.lse_layout]
    return prefix, f"torch.{case.sink_dtype}", lse_stride


def rope_geometry(case: Case, fdqk: int) -> tuple:
    """The RoPE table operand build_spec declares: (rows, d_qk/2, 2) float32 (cos, sin)."""
    from ground.data import rope_rows

    return ((rope_rows(case), fdqk // 2, 2), (fdqk, 2, 1))


def rope_table(freqs: torch.Tensor, fdqk: int) -> torch.Tensor:
    """The (rows, d_qk/2, 2) float32 (cos, sin) table of an angle table, in a
    guarded buffer: what kernels/sm80/rope_table.py builds for the wrapper
    (torch's float32 cos/sin of the float32 angle)."""
    a = freqs[:, : fdqk // 2].to(torch.float32)
    table = guarded((a.shape[0], fdqk // 2, 2), torch.float32, freqs.device, row=fdqk)
    table[..., 0] = torch.cos(a)
    table[..., 1] = torch.sin(a)
    return table


# ------------------------------------------------------------------ staging
def _vector_ready(t: torch.Tensor) -> bool:
    """What prepared_sm80.native_layouts admits: head dim contiguous, every outer
    stride a multiple of 8 elements, a 16-byte aligned base."""
    return t.stride(-1) == 1 and t.data_ptr() % 16 == 0 and all(n == 1 or st % 8 == 0 for n, st in zip(t.shape[:-1], t.stride()[:-1]))


def _stage_dense(t: torch.Tensor, width: int) -> torch.Tensor:
    """``t`` (logical B,H,S,D) itself when the native host can take it, else a
    compact BSHD copy zero-padded to ``width`` (what the wrapper's staged path
    builds), inside guard bands like every buffer a kernel is handed. Values
    are copied in, outputs included: cells the kernel does not write keep the
    caller's bytes."""
    if t.shape[-1] == width and _vector_ready(t):
        return t
    b, h, s, d = t.shape
    buf = guarded((b, s, h, width), t.dtype, t.device, row=h * width, fill=0).permute(0, 2, 1, 3)
    buf[..., :d].copy_(t)
    return buf


def _stage_packed(t: torch.Tensor, width: int) -> torch.Tensor:
    """A packed (T, H, D) operand as the THD host addresses it: compact,
    ``width`` wide (a guarded, zero-padded copy when ``t`` is not)."""
    if t.shape[-1] == width and t.is_contiguous():
        return t
    buf = guarded((*t.shape[:-1], width), t.dtype, t.device, row=t.shape[1] * width, fill=0)
    buf[..., : t.shape[-1]].copy_(t)
    return buf


def _stage_contiguous(t: torch.Tensor) -> torch.Tensor:
    """``t`` when contiguous, else a guarded contiguous copy."""
    return t if t.is_contiguous() else guarded_copy(t, row=1)


def _written_o(o_run: torch.Tensor, o: torch.Tensor, d_v: int) -> torch.Tensor:
    """The O the kernel wrote (the staging copy when staged: its first d_v
    columns), copied back into the caller's ``o`` where they differ."""
    written = o_run[..., :d_v]
    if o_run is not o:
        o.copy_(written)
    return written


def _handed(**buffers) -> dict:
    """role -> tensor handed to the kernel (absent operands dropped)."""
    return {k: t for k, t in buffers.items() if t is not None}


def _bshd(t: torch.Tensor):
    """(shape, strides) of a logical (B,H,S,D) tensor in the host's (B,S,H,D) order."""
    order = (0, 2, 1, 3)
    return tuple(int(t.shape[i]) for i in order), tuple(int(t.stride(i)) for i in order)


def dense_geometry(case: Case, q, k, v, o, lse, sinks_stride: int = 1, fdqk: int = 0) -> tuple:
    """The geometry tuple prepared_sm80.build_spec declares (nine operands;
    a tenth, the RoPE table, with ``case.rope``). No LSE operand without
    ``case.has_lse``; LSE and sinks through their own strides."""
    b, h = case.batch, case.h_q
    vec = lambda on, n, st=1: ((n,), (st,)) if on else None  # noqa: E731
    bias = None
    if case.bias is not None:
        # build_spec declares [1, H, SQ, SKV] compact whatever the caller holds;
        # the kernel indexes head * SQ * SKV from the base pointer.
        bias = ((1, h, case.s_q, case.s_kv), (h * case.s_q * case.s_kv, case.s_q * case.s_kv, case.s_kv, 1))
    out = (
        _bshd(q),
        _bshd(k),
        _bshd(v),
        _bshd(o),
        (tuple(lse.shape), tuple(lse.stride())) if case.has_lse else None,
        vec(case.seq_kv_lens is not None, b),
        vec(case.seq_q_lens is not None, b),
        vec(case.sinks, h, sinks_stride),
        bias,
    )
    return out + (rope_geometry(case, fdqk),) if case.rope else out


def sinks_stride(case: Case) -> int:
    return {"compact": 1, "strided": 2, "broadcast": 0}[case.sink_layout]


def meta_dense_geometry(case: Case, spec) -> tuple:
    """The geometry a run of dense ``case`` hands compile_host, from the facts
    alone: meta tensors (no memory, no device) in the layouts and staging a run
    would use."""
    dt = TORCH_DTYPES[case.dtype]
    with torch.device("meta"):
        q = _stage_dense(dense_view(case, case.batch, case.h_q, case.s_q, case.d_qk, dt), _qk_width(case.d_qk))
        k = _stage_dense(dense_view(case, case.batch, case.h_kv, case.s_kv, case.d_qk, dt), _qk_width(case.d_qk))
        v = _stage_dense(dense_view(case, case.batch, case.h_kv, case.s_kv, case.d_v, dt), spec.envelope[1])
        o, lse = make_outputs(case, "meta")
        o = _stage_dense(o, spec.envelope[1])
    return dense_geometry(case, q, k, v, o, lse, sinks_stride(case), spec.envelope[0])


def compile_key(case: Case, *, initialize_outputs: bool = True, tamper: Optional[str] = None) -> tuple:
    """The identity of the one compile a run of ``case`` asks the prepared entry
    points for, from the facts alone (no template module loaded, nothing
    compiled): equal keys share one compiled artifact, a new key is a new
    compile (~1.5-2.6 s).

    Dense: what ``_compile_dense`` hands ``template_key`` -- the geometry of the
    nine operands, the window constexprs -- with (flavor, TemplateParams)
    standing for the template module's source digest, which they determine.
    THD: ``compile_thd_host``'s lru arguments (heads, sequence count, window,
    the output-initialisation mode) with (flavor, TemplateParams). The arch
    is one per run and left out. ``tamper``: the key of a call tampered so
    (``_tampered``). Raises what ``specialize`` raises."""
    spec = _tampered(specialize(case), case, tamper)
    if case.is_thd:
        return _thd_key(case, spec, initialize_outputs)
    return _dense_key(spec, meta_dense_geometry(case, spec))


def named_key(case: Case, *, tamper: Optional[str] = None, arch: Optional[str] = None) -> str:
    """The ``compile_key`` digest a call of ``case`` compiles under, as a
    run's notes name it (``key_digest``): ``tamper`` as the call is tampered
    (``_tampered``: a raw right bound is a dense constexpr); ``arch``, a
    compile for another arch than the live one (compile_only's sm_80), names
    an artifact of its own. A backward Case: kernels.backward.compile_key."""
    from kernels.backward import compile_key as backward_key

    key: tuple = ("bwd", backward_key(case)) if case.is_bwd else compile_key(case, tamper=tamper)
    if case.is_bwd and arch is None:
        return key[1]
    return key_digest(key if arch is None else (arch, key))


def _dense_key(spec, geometry) -> tuple:
    return ("dense", spec.flavor, spec.params, geometry, spec.swa_window, spec.right_bound)


def _thd_key(case: Case, spec, initialize_outputs: bool) -> tuple:
    return ("thd", spec.flavor, spec.params, case.h_q, case.h_kv, case.n_seq, spec.swa_window, bool(initialize_outputs), thd_host_args(case))


def _qk_width(d_qk: int) -> int:
    # The loads predicate whole 8-element vectors against the real d
    # (load_tile_2d valid_cols), so a d that is not a multiple of 8 is padded
    # to the next multiple, as the wrapper's staged path does.
    return -(-d_qk // 8) * 8


def _ptr(t: Optional[torch.Tensor]):
    return None if t is None else t.data_ptr()


@dataclasses.dataclass
class Prepared:
    """A staged, compiled launch of one Case on fixed buffers
    (``PreparedAdapter.prepare``): ``launch()`` enqueues the kernel alone on
    the current stream; ``result()`` finishes (copy-back) and reports;
    ``staged``: the operands handed as staging copies (a change made in place
    to such an input after ``prepare`` does not reach the kernel)."""

    launch: Callable[[], None]
    result: Callable[[], KernelResult]
    staged: List[str]


# Compiled dense specializations of this process: (compile key, arch) -> artifact.
# A memo in front of compile_cached, owned by kernels.counters (forget_front_memos
# drops it, memos_forgotten restores it).
_DENSE = adapter_memo("the prepared adapter's dense artifacts by the kernel's key")


class PreparedAdapter:
    name = "prepared"
    # The pointer hosts take the caller's buffers and both THD init modes.
    supports = frozenset({"caller-outputs", "no-init", "compile-only", "thd-addressing"})
    lacks: dict = {}

    def __init__(self, rewrites=None):
        from kernels.source import check_rewrites

        if rewrites is None:  # not chosen by the caller: $SDPA_PLANT_MUTANT's, if set (kernels.mutants.planted)
            from kernels.mutants import planted

            mutant = planted()
            rewrites = mutant.rewrites if mutant is not None else ()
            self.planted = mutant.name if mutant is not None else None
        else:
            self.planted = None
        self.rewrites = tuple(rewrites)
        check_rewrites(self.rewrites)  # a stale mutant fails here, before any compile
        self._env = None
        # For the pytest header and reports.
        self.label = (
            self.name if not self.rewrites else f"{self.name} ({f'mutant {self.planted}: ' if self.planted else ''}{len(self.rewrites)} source rewrites)"
        )

    # ----------------------------------------------------------- plumbing
    @property
    def host(self):
        from kernels.source import host_module

        return host_module(self.rewrites)

    def _module(self, spec):
        from kernels.source import template_module

        return template_module(spec.flavor, spec.params, self.rewrites)

    def live_environment(self):
        """The live device's environment (kernels.environment.detect, once);
        refuses (``Unsupported``, scope "machine") without a CUDA GPU."""
        from kernels.environment import detect

        if self._env is None:
            self._env = detect()
        if self._env.capability is None:
            raise Unsupported.machine(NO_GPU + " (the prepared adapter can only compile_only() here)", adapter=self.name)
        return self._env

    def _compile_dense(self, mod, spec, geometry, arch: Optional[str]):
        host = self.host
        key = host.template_key(vars(mod), dict(geometry=geometry, swa_window=spec.swa_window, right_bound=spec.right_bound), "prepared_dense")
        memo = (key, arch)
        if key is None or memo not in _DENSE:
            with compile_arch(host, arch, add=True):
                artifact = host.compile_host(mod, spec.params, geometry, spec.swa_window, spec.right_bound, key)
            if key is None:
                return artifact
            _DENSE[memo] = artifact
        return _DENSE[memo]

    def _notes(self, spec, **more) -> dict:
        notes = {"adapter": self.name, "flavor": spec.flavor, "envelope": list(spec.envelope)}
        if self.rewrites:
            notes["rewrites"] = len(self.rewrites)
        notes.update(more)
        return notes

    # -------------------------------------------------------------- run
    @timed("launch")
    def run(self, case: Case, inputs: CaseTensors, outputs=None, *, initialize_outputs: bool = True, tamper=None) -> KernelResult:
        # Counters around the whole call (staging, compile, launch, copy-back):
        # a compile the launch path asks for counts too. seconds stays the
        # compile step's own time (measured inside).
        with measure() as whole:
            prepared = self.prepare(case, inputs, outputs, initialize_outputs=initialize_outputs, tamper=tamper)
            prepared.launch()
            result = prepared.result()
        result.compile = dataclasses.replace(whole.delta, seconds=result.compile.seconds)
        return result

    def prepare(self, case: Case, inputs: CaseTensors, outputs=None, *, initialize_outputs: bool = True, tamper=None) -> "Prepared":
        """Stage and compile ``case`` for these buffers without launching:
        ``launch()`` then enqueues exactly the kernel on the current stream
        (pointers and launch arguments bound here; no staging, compile or
        allocation), as often as asked (CUDA-graph capture included);
        ``result()`` copies staged outputs back and gives the KernelResult."""
        case.require_expressible(self.name)  # a fact these entry points cannot take: refused (scope "case")
        env = self.live_environment()
        dev = inputs.q.device if inputs.q.is_cuda else torch.device("cuda", torch.cuda.current_device())
        inputs = inputs.to(dev)
        o, lse = outputs if outputs is not None else make_outputs(case, dev)
        if o.device != dev or lse.device != dev:
            raise ValueError(f"output buffers must be on {dev} (the kernel writes them in place)")
        spec = _tampered(specialize(case), case, tamper)
        if case.is_thd:
            return self._prepare_thd(case, spec, env, inputs, o, lse, initialize_outputs)
        return self._prepare_dense(case, spec, env, inputs, o, lse)

    def _launch_context(self, dev):
        from cudnn._device import ensure_current_context

        stream = torch.cuda.current_stream(dev).cuda_stream
        # The real callers bind the stream's context before a raw launch.
        ensure_current_context(int(stream), dev.index)
        return int(stream)

    def _prepare_dense(self, case, spec, env, inputs, o, lse) -> "Prepared":
        from cudnn.frost.compiled_cache import positional_entry
        from cudnn.sdpa.fwd.config_sm80 import kernel_scale

        fdqk, fdv = spec.envelope
        qk_width = _qk_width(case.d_qk)
        q, k = _stage_dense(inputs.q, qk_width), _stage_dense(inputs.k, qk_width)
        v, o_run = _stage_dense(inputs.v, fdv), _stage_dense(o, fdv)
        staged = [n for n, a, b in (("q", q, inputs.q), ("k", k, inputs.k), ("v", v, inputs.v), ("o", o_run, o)) if a is not b]
        geometry = dense_geometry(case, q, k, v, o_run, lse, sinks_stride(case), fdqk)
        rope = rope_table(inputs.rope, fdqk) if case.rope else None
        lse_run = lse if case.has_lse else None
        with measure() as box:
            artifact = self._compile_dense(self._module(spec), spec, geometry, arch=None)
        fn = positional_entry(artifact)
        if fn is None:
            raise NotImplementedError("prepared_host.compile_host gave no positional tvm-ffi entry")
        scale = kernel_scale(case.softmax_scale)
        ptrs = [_ptr(q), _ptr(k), _ptr(v), _ptr(o_run), _ptr(lse_run), _ptr(inputs.seq_kv_lens), _ptr(inputs.seq_q_lens), _ptr(inputs.sinks), _ptr(inputs.bias)]
        if case.rope:
            ptrs.append(_ptr(rope))
        args = (*ptrs, scale * LOG2E, 1.0 / scale)

        def launch():
            fn(*args, self._launch_context(q.device))

        def result() -> KernelResult:
            written = _written_o(o_run, o, case.d_v)
            arch = "sm_80" if env.native else f"{env.live_arch} (compile_host names no --gpu-arch: the DSL targets the live device)"
            handed = _handed(
                q=q,
                k=k,
                v=v,
                o=o_run,
                lse=lse_run,
                seq_kv_lens=inputs.seq_kv_lens,
                seq_q_lens=inputs.seq_q_lens,
                sinks=inputs.sinks,
                bias=inputs.bias,
                rope=rope,
            )
            key = key_digest(_dense_key(spec, geometry))
            return KernelResult(written, lse, box.delta, self._notes(spec, arch=arch, mode=env.mode, staged=staged, compile_key=key), handed)

        return Prepared(launch, result, staged)

    def _prepare_thd(self, case, spec, env, inputs, o, lse, initialize_outputs) -> "Prepared":
        from cudnn.sdpa.fwd.config_sm80 import kernel_scale

        fdqk, fdv = spec.envelope
        q, k, v = _stage_packed(inputs.q, fdqk), _stage_packed(inputs.k, fdqk), _stage_packed(inputs.v, fdv)
        # A compact LSE is handed contiguous (a staging copy if need be); the
        # other layouts are handed as they are, through lse_stride.
        o_run = _stage_packed(o, fdv)
        lse_run = (_stage_contiguous(lse) if case.lse_layout == "compact" else lse) if case.has_lse else None
        staged = [
            n
            for n, a, b in (("q", q, inputs.q), ("k", k, inputs.k), ("v", v, inputs.v), ("o", o_run, o), ("lse", lse_run, lse))
            if a is not None and a is not b
        ]
        arch = None if env.native else env.live_arch
        with measure() as box:
            _, fn = self._compile_thd(case, spec, arch, initialize_outputs)
        scale = kernel_scale(case.softmax_scale)
        args = (
            _ptr(q),
            _ptr(k),
            _ptr(v),
            _ptr(o_run),
            _ptr(lse_run),
            _ptr(inputs.cu_q),
            _ptr(inputs.cu_kv),
            _ptr(inputs.sinks),
            case.t_q,
            case.t_kv,
            case.max_s_q,
            case.h_q * fdqk,
            fdqk,
            case.h_kv * fdqk,
            fdqk,
            case.h_kv * fdv,
            fdv,
            scale * LOG2E,
            1.0 / scale,
            spec.right_bound,
            (inputs.cu_q.stride(0), inputs.cu_kv.stride(0), inputs.sinks.stride(0) if inputs.sinks is not None else 1),
        )

        def launch():
            fn(*args, self._launch_context(q.device))

        def result() -> KernelResult:
            written = _written_o(o_run, o, case.d_v)
            if lse_run is not None and lse_run is not lse:
                lse.copy_(lse_run)
            arch_note = "sm_80" if arch is None else f"{arch} (--gpu-arch=sm_80 rewritten)"
            key = key_digest(_thd_key(case, spec, initialize_outputs))
            notes = self._notes(spec, arch=arch_note, mode=env.mode, staged=staged, initialize_outputs=initialize_outputs, compile_key=key)
            handed = _handed(q=q, k=k, v=v, o=o_run, lse=lse_run, cu_q=inputs.cu_q, cu_kv=inputs.cu_kv, sinks=inputs.sinks)
            # Without an LSE output: the buffer never handed (it must stay as filled).
            return KernelResult(written, lse if lse_run is None else lse_run, box.delta, notes, handed)

        return Prepared(launch, result, staged)

    # ---------------------------------------------------------- backward
    def backward(
        self, case: Case, inputs: CaseTensors, o, lse, do, grads=None, *, initialize_outputs: bool = True, addressing: str = "backward"
    ) -> KernelResult:
        """The backward through SdpaBwdDslSm80 on caller buffers (kernels/backward.py; ``addressing``: backward.ADDRESSINGS)."""
        return prepared_backward(self, case, inputs, o, lse, do, grads, initialize_outputs=initialize_outputs, addressing=addressing)

    # ------------------------------------------------------ compile only
    def compile_only(self, case: Case, *, initialize_outputs: bool = True, tamper=None, live: bool = False) -> CompileDelta:
        """Specialize and compile ``case`` for sm_80 from its facts alone (no CUDA);
        a backward Case compiles the backward chain (kernels/backward.py).
        ``live`` (a GPU present): compile for the live device as a run does, an
        artifact that loads there, so the run's compiled cache keeps it (an sm_80
        artifact never loads on sm_90: every such call compiled again, the H200's
        104 rejection compiles in a warm run)."""
        case.require_expressible(self.name)
        if case.is_bwd:
            if tamper is not None:
                raise ValueError(f"tamper {tamper!r}: the backward's compile_only takes none")
            return compile_only_backward(self, case, live=live)
        spec = _tampered(specialize(case), case, tamper)
        host = self.host
        if live:
            return self._compile_live(case, spec, initialize_outputs)
        if case.is_thd:
            with measure() as box, _entry_optional(host):
                # The unwrapped function: the lru must never hold an artifact
                # built for another arch than the live runs' (nor an entry-less one).
                host.compile_thd_host.__wrapped__(
                    self._module(spec), case.h_q, case.h_kv, case.n_seq, spec.swa_window, *thd_host_args(case), initialize_outputs
                )
            return box.delta
        geometry = meta_dense_geometry(case, spec)  # the layouts a run would hand the host
        with measure() as box:
            self._compile_dense(self._module(spec), spec, geometry, arch=COMPILE_ONLY_ARCH)
        return box.delta

    def _compile_thd(self, case: Case, spec, arch: Optional[str], initialize_outputs: bool):
        """compile_thd_host's lru call, as a launch makes it: (artifact, entry).
        It hard-codes sm_80; ``arch`` (off SM80: the live one) retargets it."""
        with compile_arch(self.host, arch):
            return self.host.compile_thd_host(self._module(spec), case.h_q, case.h_kv, case.n_seq, spec.swa_window, *thd_host_args(case), initialize_outputs)

    def _compile_live(self, case: Case, spec, initialize_outputs: bool) -> CompileDelta:
        """The compile step of a run (prepare's), from the facts alone: the dense
        geometry from meta tensors, the THD lru call as a launch makes it."""
        env = self.live_environment()
        with measure() as box:
            if case.is_thd:
                self._compile_thd(case, spec, None if env.native else env.live_arch, initialize_outputs)
            else:
                self._compile_dense(self._module(spec), spec, meta_dense_geometry(case, spec), arch=None)
        return box.delta


def _tampered(spec, case: Case, tamper):
    """The one call-level violation the pointer hosts can be handed: a right
    band without causal, passed through as the raw right bound."""
    if tamper is None:
        return spec
    if tamper == "raw_right_bound":
        return dataclasses.replace(spec, right_bound=max(0, case.window_right))
    raise ValueError(f"tamper {tamper!r}: the prepared entry points take no such argument (only 'raw_right_bound')")


@contextmanager
def _entry_optional(host):
    """compile_thd_host raises when its artifact has no positional entry, which
    is always so where no sm_80 device can load it (CPU, another arch): the
    compile happened all the same. Only for the unwrapped (uncached) call."""
    real = host.positional_entry
    host.positional_entry = lambda artifact: real(artifact) or (lambda *a: None)
    try:
        with compile_arch(host, COMPILE_ONLY_ARCH, add=True):
            yield
    finally:
        host.positional_entry = real
