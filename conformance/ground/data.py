"""Tensors of a Case, regenerated bit for bit from its facts and seed.

Every value is drawn on the CPU from one ``torch.Generator`` seeded with
``case.seed`` in a fixed order, then copied to the target device, so a repro
on another machine sees the same bits. Storage that holds no live token
(dense rows past the padding lengths, the pad columns of ``bshd_padded``,
THD capacity before the first offset and after the last live token) is
filled with NaN when ``poison`` is set: a kernel that reads it and lets it
reach a live output is caught by the numerics and tail properties.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from .case import ROW_PAD, Case

TORCH_DTYPES = {
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float32": torch.float32,
    "float64": torch.float64,
    "int32": torch.int32,
}

# The value that poisons storage outside the live tokens.
POISON = float("nan")
# A finite stand-in for NaN in dense rows past the padding lengths, for the
# numerics property: the kernels zero padded rows by multiplying with 0 and
# mask padded keys by P = 0, so NaN there is a finding of its own (the
# padding-poison tests, known_findings.toml); a large finite value still makes
# any padded key or value that slips into a live row's softmax visible.
FINITE_PAD = 1000.0
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
    q_live: Optional[torch.Tensor] = None
    kv_live: Optional[torch.Tensor] = None

    def to(self, device) -> "CaseTensors":
        moved = {}
        for name in ("q", "k", "v", "bias", "sinks", "seq_q_lens", "seq_kv_lens", "cu_q", "cu_kv", "q_live", "kv_live"):
            t = getattr(self, name)
            moved[name] = None if t is None else _to_preserving_strides(t, device)
        return CaseTensors(case=self.case, **moved)


def flat_storage(t: torch.Tensor) -> torch.Tensor:
    """A 1-D view of ``t``'s whole storage (pad columns included)."""
    return t.as_strided((t.untyped_storage().nbytes() // t.element_size(),), (1,), 0)


def _to_preserving_strides(t: torch.Tensor, device) -> torch.Tensor:
    """Copy a (possibly strided) view to ``device`` keeping its storage layout,
    pad columns included, so poisoned pad elements travel too."""
    if t.device == torch.device(device):
        return t
    moved = flat_storage(t).to(device)
    return moved.as_strided(t.shape, t.stride(), t.storage_offset())


def _dense_storage(b: int, h: int, s: int, d: int, dtype, memory: str) -> torch.Tensor:
    """An empty logical (B, H, S, D) view laid out in storage per ``memory``."""
    if memory == "bhsd":
        return torch.empty(b, h, s, d, dtype=dtype)
    if memory == "bshd":
        return torch.empty(b, s, h, d, dtype=dtype).permute(0, 2, 1, 3)
    if memory == "bshd_padded":
        return torch.empty(b, s, h, d + ROW_PAD, dtype=dtype)[..., :d].permute(0, 2, 1, 3)
    raise ValueError(f"memory order {memory!r}")


def dense_view(case: Case, b: int, h: int, s: int, d: int, dtype) -> torch.Tensor:
    """Public: the dense storage a Case implies (outputs use it too)."""
    return _dense_storage(b, h, s, d, dtype, case.memory)


def _fill_dense(view: torch.Tensor, values: torch.Tensor, live_rows: Optional[torch.Tensor], poison: bool, pad_fill: float) -> torch.Tensor:
    # Whole storage first (pad columns included), then the logical values.
    flat_storage(view).fill_(POISON if poison else 0.0)
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


def make_inputs(case: Case, device="cpu", *, poison: bool = True, pad_fill: float = POISON) -> CaseTensors:
    """Regenerate the inputs of ``case`` (bit for bit) on ``device``.
    ``pad_fill``: what dense rows past the padding lengths hold when poisoned
    (NaN, or FINITE_PAD); all other dead storage is NaN when ``poison``."""
    g = torch.Generator().manual_seed(case.seed)
    dt = TORCH_DTYPES[case.dtype]

    def randn(*shape):
        return torch.randn(*shape, generator=g, dtype=torch.float32)

    if case.is_thd:
        cu_q, cu_kv = case.cu_seqlens("q"), case.cu_seqlens("kv")
        q_live, kv_live = _packed_live(cu_q, case.t_q), _packed_live(cu_kv, case.t_kv)
        q, k, v = randn(case.t_q, case.h_q, case.d_qk), randn(case.t_kv, case.h_kv, case.d_qk), randn(case.t_kv, case.h_kv, case.d_v)
        q, k, v = (x.to(dt) for x in (q, k, v))
        if poison:
            q[~q_live] = POISON
            k[~kv_live] = POISON
            v[~kv_live] = POISON
        sinks = randn(case.h_q) * SINK_SPREAD if case.sinks else None
        t = CaseTensors(
            case,
            q,
            k,
            v,
            sinks=sinks,
            cu_q=torch.tensor(cu_q, dtype=torch.int32),
            cu_kv=torch.tensor(cu_kv, dtype=torch.int32),
            q_live=q_live,
            kv_live=kv_live,
        )
        return t.to(device)

    b = case.batch
    q_live = _lens_mask(case.q_lengths(), case.s_q)
    kv_live = _lens_mask(case.kv_lengths(), case.s_kv)
    q = _fill_dense(_dense_storage(b, case.h_q, case.s_q, case.d_qk, dt, case.memory), randn(b, case.h_q, case.s_q, case.d_qk), q_live, poison, pad_fill)
    k = _fill_dense(_dense_storage(b, case.h_kv, case.s_kv, case.d_qk, dt, case.memory), randn(b, case.h_kv, case.s_kv, case.d_qk), kv_live, poison, pad_fill)
    v = _fill_dense(_dense_storage(b, case.h_kv, case.s_kv, case.d_v, dt, case.memory), randn(b, case.h_kv, case.s_kv, case.d_v), kv_live, poison, pad_fill)
    bias = None
    if case.bias is not None:
        bias = randn(case.bias_batch, case.h_q, case.s_q, case.s_kv).to(TORCH_DTYPES[case.bias])
    sinks = randn(case.h_q) * SINK_SPREAD if case.sinks else None
    lens = lambda xs: None if xs is None else torch.tensor(list(xs), dtype=torch.int32)  # noqa: E731
    t = CaseTensors(
        case, q, k, v, bias=bias, sinks=sinks, seq_q_lens=lens(case.seq_q_lens), seq_kv_lens=lens(case.seq_kv_lens), q_live=q_live, kv_live=kv_live
    )
    return t.to(device)


def make_outputs(case: Case, device="cpu", *, fill: float = POISON, d_v: Optional[int] = None):
    """(O, LSE) buffers pre-filled with ``fill`` (NaN poison by default), laid
    out the way the adapters hand them to the kernels: dense O per
    ``case.memory`` as a logical (B, H, SQ, D_V) view, LSE (B, H, SQ)
    contiguous; THD O packed (T_q, H, D_V), LSE head-major (H, T_q).
    ``d_v`` overrides the O width (an adapter that pads to the flavor width)."""
    d_v = case.d_v if d_v is None else d_v
    dt = TORCH_DTYPES[case.dtype]
    if case.is_thd:
        o = torch.full((case.t_q, case.h_q, d_v), fill, dtype=dt, device=device)
        lse = torch.full((case.h_q, case.t_q), fill, dtype=torch.float32, device=device)
        return o, lse
    o = _dense_storage(case.batch, case.h_q, case.s_q, d_v, dt, case.memory)
    o = _to_preserving_strides(o, device)
    flat_storage(o).fill_(fill)
    lse = torch.full((case.batch, case.h_q, case.s_q), fill, dtype=torch.float32, device=device)
    return o, lse
