"""Tensors of a Case, regenerated bit for bit from its facts and seed.

Every value is drawn on the CPU from one ``torch.Generator`` seeded with
``case.seed`` in a fixed order, then copied to the target device, so a repro
on another machine sees the same bits. Storage that holds no live token
(dense rows past the padding lengths, the pad columns of ``bshd_padded``,
THD capacity before the first offset and after the last live token) is
filled with NaN when ``poison`` is set: a kernel that reads it and lets it
reach a live output is caught by the numerics and tail properties.

Guard bands: every buffer a kernel is handed (these inputs, the outputs of
``make_outputs``, the adapters' staging copies) is a view into a larger
allocation, with a band of sentinels before and after it (``guarded``). The
bands are never part of any tensor, so a launch must leave them bit for bit
as written (``guard_bands`` finds them again from the view alone, on any
device); a sentinel read by mistake shows in the outputs (NaN, or an integer
far beyond any length or offset). See GUARD_* below for the sizes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional, Tuple

import torch

from .case import LSE_ROW_PAD, ROW_PAD, Case
from .phases import timed
from .tables import TILE_M

TORCH_DTYPES = {
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float32": torch.float32,
    "float64": torch.float64,
    "int32": torch.int32,
    "int64": torch.int64,
}

# The value that poisons storage outside the live tokens.
POISON = float("nan")
# A finite stand-in for NaN in dense rows past the padding lengths, for the
# numerics property: the kernels zero padded rows by multiplying with 0 and
# mask padded keys by P = 0, so NaN there is a finding of its own (the
# padding-poison tests, known_findings.toml); a large finite value still makes
# any padded key or value that slips into a live row's softmax visible.
FINITE_PAD = 1000.0
# ------------------------------------------------------------ guard bands
# Each band (before and after a buffer) holds TILE_M rows of the buffer's
# token axis: the kernels store whole tiles of TILE_M (Q/O/LSE) or TILE_N
# (K/V) rows under a per-row predicate, so a missing or off-by-one predicate
# on the last tile writes (or reads) at most TILE_M - 1 rows past the end;
# a band that long keeps all of it in the band, never in a neighbour's
# memory. At least GUARD_MIN_BYTES: four 128-byte lines, one row of the
# widest tile (d = 256 in 16-bit), so a stray 16-byte vector or a whole
# warp-coalesced line past either end of even a tiny buffer (an LSE row, a
# cu_seqlens) stays inside. At most GUARD_MAX_BYTES (per band) to bound the
# memory of big bias buffers (a row of S_KV cells): 4 MiB holds TILE_M rows of
# the widest Q/K/V/O token row drawn (64 heads x 128 dims in 16-bit, 16 KiB:
# 2 MiB; the sm90 family's 16 x 512: the same). A multiple of GUARD_ALIGN bytes: the body then
# keeps the allocator's own alignment (CUDA: 512 bytes; CPU: 64), so the
# 16-byte aligned base the native host requires (prepared_sm80.native_layouts,
# kernels.prepared._vector_ready) is never lost to a guard.
GUARD_MIN_BYTES = 512
GUARD_MAX_BYTES = 4 << 20
GUARD_ALIGN = 512
# What the bands hold. Floating buffers: NaN (a read of it poisons every
# output it reaches). Integer buffers (cu_seqlens, seq lens): 0x5EADBEEF, a
# recognizable value far past any token capacity, so a length or an offset
# read from a guard sends the kernel out of every buffer (a visible fault, or
# NaN read from another guard), never silently to a plausible row; positive,
# so subtracting a real offset from it cannot wrap int32.
FLOAT_SENTINEL = float("nan")
INT_SENTINEL = 0x5EADBEEF
# The integer dtype whose bits stand for each element size (bit-exact compares).
_BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def bits_of(t: torch.Tensor) -> torch.Tensor:
    """``t``'s raw bits as integers (contiguous): bit-exact compares where a
    NaN's payload and the sign of zero count."""
    return t.contiguous().view(_BITS[t.element_size()])


# Byte buffers (the backward's uint8 workspace): the low byte of INT_SENTINEL.
BYTE_SENTINEL = INT_SENTINEL & 0xFF


def sentinel(dtype: torch.dtype):
    """What guard bands of a ``dtype`` buffer hold."""
    if dtype.is_floating_point:
        return FLOAT_SENTINEL
    return BYTE_SENTINEL if dtype == torch.uint8 else INT_SENTINEL


def guard_elems(dtype: torch.dtype, row: int) -> int:
    """Elements in each band of a ``dtype`` buffer whose token axis has
    stride ``row`` elements (see GUARD_*)."""
    size = torch.empty((), dtype=dtype).element_size()
    want = min(max(TILE_M * max(row, 1) * size, GUARD_MIN_BYTES), GUARD_MAX_BYTES)
    return -(-want // GUARD_ALIGN) * GUARD_ALIGN // size


def guarded(shape, dtype, device=None, *, row: Optional[int] = None, fill=None) -> torch.Tensor:
    """A contiguous ``shape`` tensor in the middle of a larger allocation,
    guard bands of ``sentinel(dtype)`` on both sides (``row``: the stride of
    its token axis, default its last dim). The body holds ``fill`` (None:
    left uninitialized, i.e. whatever the caller writes next). ``device``
    None: torch's default device (meta inside ``with torch.device("meta")``)."""
    shape = tuple(int(n) for n in shape)
    n = 1
    for x in shape:
        n *= x
    g = guard_elems(dtype, shape[-1] if row is None and shape else (row or 1))
    whole = torch.empty(g + n + g, dtype=dtype, device=device)
    whole[:g].fill_(sentinel(dtype))
    whole[g + n :].fill_(sentinel(dtype))
    if fill is not None:
        whole[g : g + n].fill_(fill)
    return whole.as_strided(shape, _contiguous_strides(shape), g)


def guarded_copy(t: torch.Tensor, *, row: Optional[int] = None) -> torch.Tensor:
    """``t``'s values in a fresh contiguous guarded allocation on its device."""
    out = guarded(t.shape, t.dtype, t.device, row=row)
    out.copy_(t)
    return out


def _contiguous_strides(shape) -> tuple:
    strides, acc = [], 1
    for n in reversed(shape):
        strides.append(acc)
        acc *= max(n, 1)
    return tuple(reversed(strides))


def guard_bands(t: torch.Tensor) -> Optional[Tuple[int, int, int]]:
    """(g, n, total) in elements of ``t``'s allocation when ``t`` is a view
    made by ``guarded`` (any view of it with the body's start, e.g. a
    permute or a [..., :d] slice): bands [0, g) and [g + n, total), body
    [g, g + n). None for a tensor with no bands (an allocation of someone
    else's: the public wrapper's own outputs)."""
    size = t.element_size()
    total = t.untyped_storage().nbytes() // size
    g = t.storage_offset()
    if g <= 0 or (g * size) % GUARD_ALIGN or g * size < GUARD_MIN_BYTES or total < 2 * g:
        return None
    return g, total - 2 * g, total


def guard_bits(t: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, int]:
    """(front, back, expected): the raw bits of ``t``'s two bands (integer
    views, so a NaN with another payload differs too) and the bits a band
    element must hold. Raises ValueError for a tensor without bands."""
    bands = guard_bands(t)
    if bands is None:
        raise ValueError(f"a {tuple(t.shape)} {t.dtype} tensor with no guard bands (not made by ground.data.guarded)")
    g, n, _ = bands
    whole = bits_of(flat_storage(t))
    bits = SENTINEL_BITS.get(t.dtype)
    return whole[:g], whole[g + n :], _sentinel_bits(t.dtype) if bits is None else bits


def _sentinel_bits(dtype: torch.dtype) -> int:
    """The bits a band element of a ``dtype`` buffer holds."""
    return int(bits_of(torch.tensor([sentinel(dtype)], dtype=dtype)).item())


# Read once, at import, for every dtype a buffer of the suite has: judging then reads no
# tensor for them, whatever the process judged before.
SENTINEL_BITS = {dtype: _sentinel_bits(dtype) for dtype in (*TORCH_DTYPES.values(), torch.uint8)}


def body_storage(t: torch.Tensor) -> torch.Tensor:
    """A 1-D view of ``t``'s storage without its guard bands (pad columns
    included): the whole storage for a tensor without bands."""
    bands = guard_bands(t)
    flat = flat_storage(t)
    return flat if bands is None else flat[bands[0] : bands[0] + bands[1]]


# Sink logits are drawn wider than scores so that both "sink dominates" and
# "sink negligible" rows occur.
SINK_SPREAD = 3.0


@dataclass
class CaseTensors:
    """Inputs of one Case on one device.

    Dense: q/k/v are logical (B, H, S, D) views over storage laid out per
    ``case.memory``; bias is (bias_batch, H, SQ, SKV); seq_*_lens are int32 (B,).
    THD: q/k/v are packed (T, H, D) contiguous; cu_q/cu_kv are int32 (n_seq+1,).
    ``q_live`` is a bool mask over Q rows (dense (B, SQ), THD (T_q,)): the rows
    the contract defines an output for.
    """

    case: Case
    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    bias: Optional[torch.Tensor] = None
    sinks: Optional[torch.Tensor] = None
    seq_q_lens: Optional[torch.Tensor] = None
    seq_kv_lens: Optional[torch.Tensor] = None
    cu_q: Optional[torch.Tensor] = None
    cu_kv: Optional[torch.Tensor] = None
    rope: Optional[torch.Tensor] = None
    q_live: Optional[torch.Tensor] = None
    kv_live: Optional[torch.Tensor] = None

    def to(self, device) -> "CaseTensors":
        """On ``device``, each buffer's whole allocation copied (pad columns
        and guard bands included)."""
        moved = {}
        for name in ("q", "k", "v", "bias", "sinks", "seq_q_lens", "seq_kv_lens", "cu_q", "cu_kv", "rope", "q_live", "kv_live"):
            t = getattr(self, name)
            moved[name] = None if t is None else _to_preserving_strides(t, device, wait=False)
        _uploaded(device)
        return CaseTensors(case=self.case, **moved)

    def buffers(self) -> Dict[str, torch.Tensor]:
        """The kernel inputs (every one guarded), by name; q_live/kv_live are
        the suite's own masks, never handed to a kernel."""
        return {n: getattr(self, n) for n in KERNEL_INPUTS if getattr(self, n) is not None}


# The CaseTensors fields a kernel is handed.
KERNEL_INPUTS = ("q", "k", "v", "bias", "sinks", "seq_q_lens", "seq_kv_lens", "cu_q", "cu_kv", "rope")


def flat_storage(t: torch.Tensor) -> torch.Tensor:
    """A 1-D view of ``t``'s whole storage (pad columns and guard bands included)."""
    return t.as_strided((t.untyped_storage().nbytes() // t.element_size(),), (1,), 0)


def _to_preserving_strides(t: torch.Tensor, device, *, wait: bool = True) -> torch.Tensor:
    """Copy a (possibly strided) view to ``device`` keeping its storage layout,
    pad columns and guard bands included, so poisoned pad elements and the
    sentinels travel too."""
    if t.device == torch.device(device):
        return t
    return relocate(t, device, wait=wait)


# Host buffers up to this size go to a GPU through a pinned staging copy, without
# waiting: a pageable upload waits for the device (a host sync per buffer, a dozen
# per example, each behind 15 other workers' launches); larger ones (the large
# tier's) are not pinned, to keep page-locked host memory small.
PINNED_UPLOAD_BYTES = 64 << 20


def relocate(t: torch.Tensor, device, *, wait: bool = True) -> torch.Tensor:
    """``t`` as the same view over a copy of its whole allocation on ``device``
    (a new allocation even on ``t``'s own device). ``wait=False``: a small
    upload to a GPU may still be in flight on the current stream when this
    returns (``_uploaded`` waits for it)."""
    src, dev = flat_storage(t), torch.device(device)
    if dev.type == "cuda" and src.device.type == "cpu" and src.numel() * src.element_size() <= PINNED_UPLOAD_BYTES:
        moved = src.pin_memory().to(dev, non_blocking=True)
        if wait:
            _uploaded(dev)
    else:
        moved = src.to(dev, copy=True)
    return moved.as_strided(t.shape, t.stride(), t.storage_offset())


def _uploaded(device) -> None:
    """Wait for the uploads in flight to ``device``: once per example's inputs,
    so no launch on another stream can read a buffer before it has arrived."""
    dev = torch.device(device)
    if dev.type == "cuda":
        torch.cuda.current_stream(dev).synchronize()


def _dense_storage(b: int, h: int, s: int, d: int, dtype, memory: str, device=None) -> torch.Tensor:
    """An empty (guarded) logical (B, H, S, D) view laid out in storage per ``memory``."""
    if memory == "bhsd":
        return guarded((b, h, s, d), dtype, device)
    if memory == "bshd":
        return guarded((b, s, h, d), dtype, device, row=h * d).permute(0, 2, 1, 3)
    if memory == "bshd_padded":
        return guarded((b, s, h, d + ROW_PAD), dtype, device, row=h * (d + ROW_PAD))[..., :d].permute(0, 2, 1, 3)
    raise ValueError(f"memory order {memory!r}")


def dense_view(case: Case, b: int, h: int, s: int, d: int, dtype, device=None) -> torch.Tensor:
    """Public: the dense storage a Case implies (outputs use it too)."""
    return _dense_storage(b, h, s, d, dtype, case.memory, device)


def _fill_dense(view: torch.Tensor, values: torch.Tensor, live_rows: Optional[torch.Tensor], poison: bool, pad_fill: float) -> torch.Tensor:
    # Whole body first (pad columns included, guard bands never), then the logical values.
    body_storage(view).fill_(POISON if poison else 0.0)
    view.copy_(values.to(view.dtype))
    if poison and live_rows is not None:
        # live_rows: (B, S) bool -> NaN the dead rows of every head.
        view.masked_fill_(~live_rows[:, None, :, None], pad_fill)
    return view


def _lens_mask(lens, s: int) -> torch.Tensor:
    idx = torch.arange(s)
    return idx[None, :] < torch.tensor(list(lens), dtype=torch.int64)[:, None]


def _packed_live(cu, capacity: int) -> torch.Tensor:
    live = torch.zeros(capacity, dtype=torch.bool)
    live[cu[0] : cu[-1]] = True
    return live


def _guarded_ints(values, dtype=torch.int32) -> torch.Tensor:
    return guarded_copy(torch.tensor(list(values), dtype=dtype, device="cpu"))


def _sinks(case: Case, drawn: torch.Tensor) -> torch.Tensor:
    """The sink buffer as a kernel is handed it: ``drawn`` (one logit per Q
    head, float32) in ``case.sink_dtype``, laid out per ``case.sink_layout``
    as an (H,) view: compact, every other element (the skipped ones NaN: a
    kernel reading them poisons its output), or one logit at stride 0 for
    every head (the first drawn). The values are base-2 logits when
    ``case.sink_log2`` (reference.attention.sink_logits converts)."""
    dt = TORCH_DTYPES[case.sink_dtype]
    h = drawn.shape[0]
    if case.sink_layout == "broadcast":
        one = guarded_copy(drawn[:1].to(dt))
        return one.as_strided((h,), (0,), one.storage_offset())
    if case.sink_layout == "strided":
        two = guarded((h, 2), dt, "cpu", row=2, fill=POISON)
        two[:, 0] = drawn.to(dt)
        return two[:, 0]
    return guarded_copy(drawn.to(dt))


# RoPE angles: position * BASE^(-2i/d) (the usual inverse-frequency table), float32.
ROPE_BASE = 10000.0


def rope_rows(case: Case) -> int:
    """Rows (positions) of the RoPE angle table: every live Q and K position, no more."""
    return max(case.s_q, case.s_kv)


def rope_freqs(case: Case, width: int) -> torch.Tensor:
    """The (rope_rows, width) float32 angle table (``width``: half the
    flavor's d_qk, what the kernels' table covers), guarded: the wrapper's
    rope_freqs. Deterministic in the shape; no seed."""
    pos = torch.arange(rope_rows(case), dtype=torch.float64)[:, None]
    inv = ROPE_BASE ** (-2.0 * torch.arange(width, dtype=torch.float64) / (2 * width))
    return guarded_copy((pos * inv).to(torch.float32), row=width)


def bias_dead(case: Case) -> Tuple[int, int]:
    """(rows, cols): the bias cells [rows:, :] and [:, cols:] of every head
    lie past every batch entry's q length, resp. kv length.

    The kernel may READ any cell of the physical [H, SQ, SKV] of batch 0: it
    loads whole bias tiles, clamping the last uneven tile to the physical SQ
    and SKV (prefill_f16.py:994-1018, bias address head*SQ*SKV, f16:410), so
    only storage outside it is a guard band. But a cell in a padded row or
    key column can never matter: padded keys are overwritten with -FLT_MAX
    AFTER the bias add (select, f16:1100-1153) and padded Q rows end as
    O = 0 / LSE = -inf (f16:1492-1496). One [1, H, SQ, SKV] bias serves every
    batch entry, so only cells padded in every entry are dead: those hold the
    pad fill, like the padded Q/K/V rows (NaN in tails, FINITE_PAD in
    numerics), and a kernel whose mask lets a padded column through, or that
    adds the bias after masking, shows it. A per-batch bias (the backward's
    [B, H, SQ, SKV]) serves one entry per slice: ``bias_dead_per_entry``."""
    return max(case.q_lengths(), default=case.s_q), max(case.kv_lengths(), default=case.s_kv)


def bias_dead_per_entry(case: Case) -> Tuple[Tuple[int, int], ...]:
    """(rows, cols) of each batch slice of a bias: bias_dead's for a broadcast
    bias (one slice serving every entry), each entry's own lengths for a
    per-batch one (its slice serves that entry alone)."""
    if case.bias_batch == case.batch > 1:
        return tuple(zip(case.q_lengths(), case.kv_lengths()))
    return (bias_dead(case),) * case.bias_batch


# ------------------------------------------------ big THD capacities, decoys
# A packed operand of more than SPAN_DRAW_ELEMS elements (the large tier's
# capacities, e.g. K/V placed past 2^32 elements by kv_base) is built on the
# target device: values are drawn for its live span only (drawing gigabytes
# on the CPU would take minutes), dead storage holds the poison, and the
# storage a 32-bit offset would reach instead of the live span holds decoys.
# Below the threshold the bits are those of every earlier schema (whole
# capacity drawn in order), so saved case files replay unchanged.
SPAN_DRAW_ELEMS = 1 << 26
# Element offsets are 64-bit in the kernels (prefill_f16.py:443-463: "Cast
# BEFORE every product"). One computed in 32 bits wraps modulo WRAP: a live
# element at offset e >= WRAP is read from e - WRAP (signed or unsigned wrap
# alike while e < WRAP + 2^31); an offset in [2^31, 2^32) wraps negative, out
# of the allocation (a fault, or the front guard band's NaN).
WRAP = 1 << 32
# Decoys are finite values of another draw, DECOY_SCALE times larger: a read
# of them instead of the live rows moves O and LSE far outside the error
# model, and unlike NaN they cannot be mistaken for the poison rule.
DECOY_SCALE = 4.0
DECOY_SEED = 0xDEC0


def wrapped_span(first: int, end: int, row: int) -> Optional[Tuple[int, int]]:
    """Elements [lo, hi) of a packed operand (token-axis stride ``row``) that
    a 32-bit offset would reach instead of its live tokens [first, end): the
    live elements at offsets >= WRAP, moved down by WRAP; None when no live
    element sits that far."""
    a, b = first * row, end * row
    if b <= WRAP:
        return None
    return max(a, WRAP) - WRAP, b - WRAP


def _packed_span(capacity: int, h: int, d: int, first: int, end: int, values: torch.Tensor, dt, device, poison: bool, decoys: torch.Generator) -> torch.Tensor:
    """A guarded packed (capacity, h, d) buffer on ``device``: poison (0 when
    not ``poison``) everywhere, ``values`` at tokens [first, end), decoys at
    ``wrapped_span``."""
    x = guarded((capacity, h, d), dt, device, row=h * d, fill=POISON if poison else 0.0)
    x[first:end] = values.to(device=device, dtype=dt)
    span = wrapped_span(first, end, h * d)
    if span is not None:
        lo, hi = span
        flat = x.view(-1)
        flat[lo:hi] = (torch.randn(hi - lo, generator=decoys) * DECOY_SCALE).to(device=device, dtype=dt)
    return x


def decoy_spans(case: Case) -> Dict[str, Tuple[int, int]]:
    """name -> the element span of each packed input that holds decoys (THD)."""
    if not case.is_thd:
        return {}
    cu_q, cu_kv = case.cu_seqlens("q"), case.cu_seqlens("kv")
    spans = {
        "q": wrapped_span(cu_q[0], cu_q[-1], case.h_q * case.d_qk),
        "k": wrapped_span(cu_kv[0], cu_kv[-1], case.h_kv * case.d_qk),
        "v": wrapped_span(cu_kv[0], cu_kv[-1], case.h_kv * case.d_v),
    }
    return {n: s for n, s in spans.items() if s is not None}


def span_drawn(case: Case) -> bool:
    """Whether ``make_inputs`` draws only the live span (SPAN_DRAW_ELEMS)."""
    if not case.is_thd:
        return False
    return max(case.t_q * case.h_q * case.d_qk, case.t_kv * case.h_kv * max(case.d_qk, case.d_v)) > SPAN_DRAW_ELEMS


def _thd_span_inputs(case: Case, device, poison: bool) -> CaseTensors:
    g = torch.Generator().manual_seed(case.seed)
    decoys = torch.Generator().manual_seed(case.seed ^ DECOY_SEED)
    dt = TORCH_DTYPES[case.dtype]
    cu_q, cu_kv = case.cu_seqlens("q"), case.cu_seqlens("kv")
    nq, nkv = cu_q[-1] - cu_q[0], cu_kv[-1] - cu_kv[0]
    randn = lambda *shape: torch.randn(*shape, generator=g, dtype=torch.float32)  # noqa: E731
    q, k, v = randn(nq, case.h_q, case.d_qk), randn(nkv, case.h_kv, case.d_qk), randn(nkv, case.h_kv, case.d_v)
    q = _packed_span(case.t_q, case.h_q, case.d_qk, cu_q[0], cu_q[-1], q, dt, device, poison, decoys)
    k = _packed_span(case.t_kv, case.h_kv, case.d_qk, cu_kv[0], cu_kv[-1], k, dt, device, poison, decoys)
    v = _packed_span(case.t_kv, case.h_kv, case.d_v, cu_kv[0], cu_kv[-1], v, dt, device, poison, decoys)
    # The sink and prefix facts as make_inputs' other path applies them (the same draws for the default facts).
    sinks = relocate(_sinks(case, randn(case.h_q) * SINK_SPREAD), device) if case.sinks else None
    ints = lambda xs: relocate(_guarded_ints(xs, TORCH_DTYPES[case.prefix_dtype]), device)  # noqa: E731
    return CaseTensors(
        case, q, k, v, sinks=sinks, cu_q=ints(cu_q), cu_kv=ints(cu_kv), q_live=_packed_live(cu_q, case.t_q), kv_live=_packed_live(cu_kv, case.t_kv)
    )


# A dense operand of more than DENSE_SPAN_ELEMS elements (the sm90 large
# tier's K/V: a batch entry past 2^31 elements) is built on the target device
# the same way: values drawn for the live rows only, every other row the pad
# fill. Every smaller dense Case keeps the whole-tensor draw (and its bits).
DENSE_SPAN_ELEMS = 1 << 30


def dense_elems(case: Case) -> int:
    """Elements of the largest dense operand (Q, K or V; 0 for THD)."""
    if case.is_thd:
        return 0
    return case.batch * max(case.s_q * case.h_q * case.d_qk, case.s_kv * case.h_kv * max(case.d_qk, case.d_v))


def dense_span_drawn(case: Case) -> bool:
    """Whether ``make_inputs`` builds the dense operands row-span-wise on the device (DENSE_SPAN_ELEMS)."""
    return dense_elems(case) > DENSE_SPAN_ELEMS


# Such a Case's keys past its longest kv length are dead in every row (masked
# before any product), so the reference and its error model compute the keys
# up to that length rounded up to whole KV tiles only (K and V in float64
# would be tens of GiB): the same O, LSE and bounds as the whole key axis
# (tests/test_sm90_large.py compares them bit for bit).
KEY_EXTENT_ALIGN = 256


def live_key_extent(case: Case) -> int:
    """Keys of a dense Case the reference computes: ``s_kv``; for a
    ``dense_span_drawn`` Case its longest kv length rounded up to
    KEY_EXTENT_ALIGN (at most ``s_kv``)."""
    if not dense_span_drawn(case):
        return case.s_kv
    longest = max(case.kv_lengths(), default=0)
    return min(case.s_kv, -(-longest // KEY_EXTENT_ALIGN) * KEY_EXTENT_ALIGN)


def _dense_span(case: Case, h: int, s: int, d: int, lens, draw, dt, device, poison: bool, pad_fill: float) -> torch.Tensor:
    """A guarded dense (B, H, S, D) view on ``device``: the body poison (0 when
    not ``poison``), the logical rows ``pad_fill``, then each batch entry's
    live rows [0, len) drawn (``draw(h, n, d)``, batch entry by entry)."""
    view = _dense_storage(case.batch, h, s, d, dt, case.memory, device)
    body_storage(view).fill_(POISON if poison else 0.0)
    view.fill_(pad_fill if poison else 0.0)
    for b, n in enumerate(lens):
        view[b, :, :n] = draw(h, n, d).to(device=device, dtype=dt)
    return view


def _dense_span_inputs(case: Case, device, poison: bool, pad_fill: float) -> CaseTensors:
    if case.bias is not None or case.rope:
        raise ValueError(f"{case.describe()}: a dense Case past DENSE_SPAN_ELEMS takes no bias or RoPE")
    g = torch.Generator().manual_seed(case.seed)
    dt = TORCH_DTYPES[case.dtype]
    draw = lambda *shape: torch.randn(*shape, generator=g, dtype=torch.float32)  # noqa: E731
    q_lens, kv_lens = case.q_lengths(), case.kv_lengths()
    q = _dense_span(case, case.h_q, case.s_q, case.d_qk, q_lens, draw, dt, device, poison, pad_fill)
    k = _dense_span(case, case.h_kv, case.s_kv, case.d_qk, kv_lens, draw, dt, device, poison, pad_fill)
    v = _dense_span(case, case.h_kv, case.s_kv, case.d_v, kv_lens, draw, dt, device, poison, pad_fill)
    sinks = relocate(_sinks(case, draw(case.h_q) * SINK_SPREAD), device) if case.sinks else None
    lens = lambda xs: None if xs is None else relocate(_guarded_ints(xs), device)  # noqa: E731
    live = lambda xs, s: _lens_mask(xs, s).to(device)  # noqa: E731
    return CaseTensors(
        case,
        q,
        k,
        v,
        sinks=sinks,
        seq_q_lens=lens(case.seq_q_lens),
        seq_kv_lens=lens(case.seq_kv_lens),
        q_live=live(q_lens, case.s_q),
        kv_live=live(kv_lens, case.s_kv),
    )


@timed("inputs")
def make_inputs(case: Case, device="cpu", *, poison: bool = True, pad_fill: float = POISON) -> CaseTensors:
    """Regenerate the inputs of ``case`` (bit for bit) on ``device``, every
    buffer inside guard bands (``guarded``).
    ``pad_fill``: what dense rows past the padding lengths (and dead bias
    cells, ``bias_dead``) hold when poisoned (NaN, or FINITE_PAD); all other
    dead storage is NaN when ``poison``."""
    if span_drawn(case):
        return _thd_span_inputs(case, device, poison)
    if dense_span_drawn(case):
        return _dense_span_inputs(case, device, poison, pad_fill)
    g = torch.Generator().manual_seed(case.seed)
    dt = TORCH_DTYPES[case.dtype]

    def randn(*shape):
        return torch.randn(*shape, generator=g, dtype=torch.float32)

    if case.is_thd:
        cu_q, cu_kv = case.cu_seqlens("q"), case.cu_seqlens("kv")
        q_live, kv_live = _packed_live(cu_q, case.t_q), _packed_live(cu_kv, case.t_kv)
        q, k, v = randn(case.t_q, case.h_q, case.d_qk), randn(case.t_kv, case.h_kv, case.d_qk), randn(case.t_kv, case.h_kv, case.d_v)
        # Packed (T, H, D): the token axis has stride H * D.
        q, k, v = (guarded_copy(x.to(dt), row=x.shape[1] * x.shape[2]) for x in (q, k, v))
        if poison:
            q[~q_live] = POISON
            k[~kv_live] = POISON
            v[~kv_live] = POISON
        sinks = _sinks(case, randn(case.h_q) * SINK_SPREAD) if case.sinks else None
        prefix = TORCH_DTYPES[case.prefix_dtype]
        t = CaseTensors(
            case,
            q,
            k,
            v,
            sinks=sinks,
            cu_q=_guarded_ints(cu_q, prefix),
            cu_kv=_guarded_ints(cu_kv, prefix),
            q_live=q_live,
            kv_live=kv_live,
        )
        return t.to(device)

    b = case.batch
    q_live = _lens_mask(case.q_lengths(), case.s_q)
    kv_live = _lens_mask(case.kv_lengths(), case.s_kv)
    q = _fill_dense(_dense_storage(b, case.h_q, case.s_q, case.d_qk, dt, case.memory, "cpu"), randn(b, case.h_q, case.s_q, case.d_qk), q_live, poison, pad_fill)
    k = _fill_dense(
        _dense_storage(b, case.h_kv, case.s_kv, case.d_qk, dt, case.memory, "cpu"), randn(b, case.h_kv, case.s_kv, case.d_qk), kv_live, poison, pad_fill
    )
    v = _fill_dense(
        _dense_storage(b, case.h_kv, case.s_kv, case.d_v, dt, case.memory, "cpu"), randn(b, case.h_kv, case.s_kv, case.d_v), kv_live, poison, pad_fill
    )
    bias = None
    if case.bias is not None:
        bias = guarded_copy(randn(case.bias_batch, case.h_q, case.s_q, case.s_kv).to(TORCH_DTYPES[case.bias]))
        if poison and bias.is_floating_point():  # an integer bias is a contract violation: nothing to poison it with
            for b, (rows, cols) in enumerate(bias_dead_per_entry(case)):
                bias[b, :, rows:, :] = pad_fill
                bias[b, :, :, cols:] = pad_fill
    sinks = _sinks(case, randn(case.h_q) * SINK_SPREAD) if case.sinks else None
    lens = lambda xs: None if xs is None else _guarded_ints(xs)  # noqa: E731
    from .tables import FLAVOR_ENVELOPES, flavor_of

    # The table spans the flavor's envelope; a Case past every envelope (a head-dim contract violation) its own d_qk.
    envelope = FLAVOR_ENVELOPES.get(flavor_of(case.d_qk, case.d_v), (case.d_qk,))[0]
    rope = rope_freqs(case, envelope // 2) if case.rope else None
    t = CaseTensors(
        case,
        q,
        k,
        v,
        bias=bias,
        sinks=sinks,
        seq_q_lens=lens(case.seq_q_lens),
        seq_kv_lens=lens(case.seq_kv_lens),
        rope=rope,
        q_live=q_live,
        kv_live=kv_live,
    )
    return t.to(device)


# The smallest head pitch of a THD "padded" LSE (tokens); past it, the next
# power of two above T_q. A compile_thd_host constexpr (lse_stride): one pitch
# for every capacity the ci pools draw, so token totals stay runtime facts.
THD_LSE_PITCH = 8192


def thd_lse_pitch(case: Case) -> int:
    """Head pitch (elements) of a THD "padded" LSE: at least T_q + 1."""
    pitch = THD_LSE_PITCH
    while pitch <= case.t_q:
        pitch *= 2
    return pitch


def lse_view(case: Case, device=None, *, fill=None) -> torch.Tensor:
    """The logical LSE (dense (B, H, SQ); THD (H, T_q)) as a strided view of
    one guarded allocation laid out per ``case.lse_layout`` (the storage
    between live elements -- pitch padding -- holds ``fill`` too)."""
    if case.is_thd:
        h, t = case.h_q, case.t_q
        if case.lse_layout == "token_major":
            return guarded((t, h), torch.float32, device, row=h, fill=fill).T
        if case.lse_layout == "padded":
            return guarded((h, thd_lse_pitch(case)), torch.float32, device, row=1, fill=fill)[:, :t]
        return guarded((h, t), torch.float32, device, row=1, fill=fill)
    b, h, s = case.batch, case.h_q, case.s_q
    if case.lse_layout == "token_major":
        return guarded((b, s, h), torch.float32, device, row=h, fill=fill).permute(0, 2, 1)
    if case.lse_layout == "padded":
        return guarded((b, h, s + LSE_ROW_PAD), torch.float32, device, row=1, fill=fill)[..., :s]
    return guarded((b, h, s), torch.float32, device, row=1, fill=fill)


@timed("inputs")
def make_outputs(case: Case, device="cpu", *, fill: float = POISON, d_v: Optional[int] = None):
    """(O, LSE) buffers pre-filled with ``fill`` (NaN poison by default), laid
    out the way the adapters hand them to the kernels, inside guard bands:
    dense O per ``case.memory`` as a logical (B, H, SQ, D_V) view, LSE
    (B, H, SQ); THD O packed (T_q, H, D_V), LSE (H, T_q); the LSE storage per
    ``case.lse_layout`` (``lse_view``). Without ``case.has_lse`` the LSE buffer
    is made all the same and never handed: it must end as filled.
    ``d_v`` overrides the O width (an adapter that pads to the flavor width)."""
    d_v = case.d_v if d_v is None else d_v
    dt = TORCH_DTYPES[case.dtype]
    lse = lse_view(case, device, fill=fill)
    if case.is_thd:
        o = guarded((case.t_q, case.h_q, d_v), dt, device, row=case.h_q * d_v, fill=fill)
        return o, lse
    o = _dense_storage(case.batch, case.h_q, case.s_q, d_v, dt, case.memory, device)
    if fill is not None:
        body_storage(o).fill_(fill)
    return o, lse


# ------------------------------------------------------------ the backward
# dO is drawn from its own generator, so a backward Case's Q/K/V are the
# forward Case's bit for bit (the same seed draws the same forward inputs).
DO_SEED_SALT = 0x5EED_D0


def make_grad_output(case: Case, device="cpu", *, poison: bool = True, pad_fill: float = POISON) -> torch.Tensor:
    """dO of a backward Case, laid out like O (dense per ``case.memory``,
    logical (B, H, SQ, D_V); THD packed (T_q, H, D_V)), guarded. Rows outside
    the live Q tokens hold ``pad_fill`` (dense padded rows) or NaN (THD
    capacity) when ``poison``: the kernel gates P on them, so no gradient may
    depend on them."""
    g = torch.Generator().manual_seed(case.seed ^ DO_SEED_SALT)
    dt = TORCH_DTYPES[case.dtype]
    if case.is_thd:
        do = guarded_copy(torch.randn(case.t_q, case.h_q, case.d_v, generator=g).to(dt), row=case.h_q * case.d_v)
        if poison:
            do[~_packed_live(case.cu_seqlens("q"), case.t_q)] = POISON
        return relocate(do, device) if torch.device(device) != do.device else do  # a plain .to() would drop the guard bands
    live = _lens_mask(case.q_lengths(), case.s_q)
    view = _dense_storage(case.batch, case.h_q, case.s_q, case.d_v, dt, case.memory, "cpu")
    do = _fill_dense(view, torch.randn(case.batch, case.h_q, case.s_q, case.d_v, generator=g), live, poison, pad_fill)
    return relocate(do, device) if torch.device(device) != do.device else do


# The gradient roles a backward returns (KernelResult.grads), in the wrapper's order.
GRAD_ROLES = ("dq", "dk", "dv", "dbias", "dsink")


def dbias_dtype_of(case: Case) -> str:
    """The dBias buffer's dtype name: fp32, or the I/O dtype (``case.dbias_dtype`` "io")."""
    return case.dtype if case.dbias_dtype == "io" else "float32"


def make_grad_outputs(case: Case, device="cpu", *, fill: float = POISON, dbias_dtype: Optional[str] = None) -> Dict[str, torch.Tensor]:
    """Caller-owned gradient buffers, pre-filled with ``fill``, guarded: dq
    like Q, dk/dv like K/V (dense per ``case.memory`` as logical (B, H, S, D)
    views; THD packed (T, H, D)); dbias (bias_batch, H, SQ, SKV) in
    ``dbias_dtype`` (default: the Case's) when the Case has a bias; dsink (H,) fp32 with sinks."""
    dbias_dtype = dbias_dtype_of(case) if dbias_dtype is None else dbias_dtype
    dt = TORCH_DTYPES[case.dtype]
    out: Dict[str, torch.Tensor] = {}
    if case.is_thd:
        for name, t, h, d in (("dq", case.t_q, case.h_q, case.d_qk), ("dk", case.t_kv, case.h_kv, case.d_qk), ("dv", case.t_kv, case.h_kv, case.d_v)):
            out[name] = guarded((t, h, d), dt, device, row=h * d, fill=fill)
    else:
        for name, h, s, d in (("dq", case.h_q, case.s_q, case.d_qk), ("dk", case.h_kv, case.s_kv, case.d_qk), ("dv", case.h_kv, case.s_kv, case.d_v)):
            view = _dense_storage(case.batch, h, s, d, dt, case.memory, device)
            if fill is not None:
                body_storage(view).fill_(fill)
            out[name] = view
        if case.bias is not None:
            out["dbias"] = guarded((case.bias_batch, case.h_q, case.s_q, case.s_kv), TORCH_DTYPES[dbias_dtype], device, fill=fill)
    if case.sinks:
        out["dsink"] = guarded((case.h_q,), torch.float32, device, row=1, fill=fill)
    return out
