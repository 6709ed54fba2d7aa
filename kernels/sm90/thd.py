"""The THD launch of the sm90 compile entry: what ``SdpaFwdDslSm90.execute``
takes for a packed Case, built from the caller's guarded buffers
(``ground.data``), and the binder's own geometry rules that check it.

- Q, K, V, O: the packed ``(T, H, D)`` buffers as they are (the binder reads
  a rank-3 operand as (token, head, elem) strides: ``prepared._packed_role_layout``).
- Lengths: the Case's cumulative prefixes (``cu_q`` / ``cu_kv``, int32
  ``(n_seq + 1,)``), so the plan declares the prefix form on both sides
  (``cu_seq_q_lens`` / ``cu_seq_kv_lens``: ``thd_lens_form`` 3). Neither is
  in the compile key.
- Stats: the caller's (H, T_q) view, handed in the rank-2 form the binder
  classifies (``prepared._ragged_lse_layout``): head-major as (H, T),
  token-major transposed to (T, H). Same storage either way.
- Workspace: ``scratch_workspace_bytes()`` bytes (metadata, then B + 3 tensor
  maps), contiguous, at the template's ``PREPARED_WORKSPACE_ALIGNMENT``; the
  adapter allocates it (no Case fact names it).

``binding_problems`` compares the arguments with the plan (the planner's own
``_thd_decl`` and Stats packing) and with the compile arguments of
``specialize`` without launching: the CPU half of the THD launch. The launch
itself needs a Hopper GPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional

from ground.case import Case

# Constructor arguments a THD plan adds to ``specialize.plan``: the lengths arrive as cumulative prefixes.
PLAN_OVERRIDES = dict(cu_seq_q_lens=True, cu_seq_kv_lens=True)
ROLES = ("q", "k", "v", "o")


@dataclass(frozen=True)
class ThdLaunch:
    """``SdpaFwdDslSm90.execute``'s THD operands (workspace excepted)."""

    q: object
    k: object
    v: object
    o: object
    lse: Optional[object]
    q_lens: object
    kv_lens: object
    sinks: Optional[object]


def stats_argument(lse):
    """The rank-2 form of the caller's (H, T_q) Stats view the binder
    classifies: token-major as (T, H); head-major (unit token stride) as
    (H, head stride). The binder requires a head-major buffer to span H_q
    whole head strides ("head-major lse_tensor observed storage must hold
    H_q*head_stride elements", the native binder behind ``execute``), so a
    head-padded view (H, T_q) of (H, pitch) storage is handed as the
    (H, pitch) rows it lies in: the same storage, the pitch padding inside
    the guard bands (the kernel must leave it untouched)."""
    if lse.stride(1) != 1:
        return lse.T
    return lse.as_strided((lse.shape[0], max(lse.shape[1], lse.stride(0))), lse.stride())


def thd_launch(case: Case, inputs, outputs) -> ThdLaunch:
    """The THD operands of ``case`` from the caller's buffers (``inputs``:
    ``ground.data.CaseTensors``; ``outputs``: (O, LSE) of ``make_outputs``)."""
    if not case.is_thd:
        raise ValueError(f"{case.describe()}: not a THD Case")
    o, lse = outputs
    return ThdLaunch(
        q=inputs.q,
        k=inputs.k,
        v=inputs.v,
        o=o,
        lse=stats_argument(lse) if case.has_lse else None,
        q_lens=inputs.cu_q,
        kv_lens=inputs.cu_kv,
        sinks=inputs.sinks,
    )


# The workspace body's bytes before the kernel writes its metadata: 0xFF (as the SM80 backward's), so a
# read of a byte it never wrote is not a plausible zero.
WORKSPACE_FILL = 0xFF


def guarded_workspace(nbytes: int, alignment: int, device):
    """A uint8 workspace of ``nbytes`` inside guard bands (ground.data.guarded:
    its body keeps the allocator's alignment, 512 bytes on CUDA), refused on a
    GPU where that is no multiple of ``alignment``. The CPU's allocator aligns
    64 bytes and no kernel launches there: an unguarded aligned one."""
    import torch

    from ground.data import guarded

    ws = guarded((max(1, nbytes),), torch.uint8, device, row=1, fill=WORKSPACE_FILL)
    if ws.data_ptr() % alignment:
        if ws.device.type == "cpu":
            return aligned_workspace(nbytes, alignment, device)
        raise RuntimeError(f"a guarded workspace at {ws.data_ptr():#x} is not {alignment}-byte aligned")
    return ws


def aligned_workspace(nbytes: int, alignment: int, device):
    """A contiguous uint8 workspace of ``nbytes`` whose address is a multiple of ``alignment``."""
    import torch

    raw = torch.empty(nbytes + alignment, dtype=torch.uint8, device=device)
    start = (-raw.data_ptr()) % alignment
    return raw[start : start + nbytes]


def binding_problems(api, spec, launch: ThdLaunch) -> List[str]:
    """Where ``launch`` differs from what planned THD ``api`` binds and
    ``spec`` (its ``specialize`` compile arguments) compiled: each operand's
    (token, head) strides, row span and dtype, the Stats packing and strides,
    the lengths' form and count, the sinks. [] where they agree."""
    import torch
    from cudnn.sdpa.fwd.prepared import _packed_role_layout, _ragged_lse_layout, facts_of_tensor

    out = []
    descs = dict(q=api.q_desc, k=api.k_desc, v=api.v_desc, o=api.o_desc)
    for role, compiled in zip(ROLES, spec.strides):
        t, desc = getattr(launch, role), descs[role]
        h, d, ts, hs, _, row = api._thd_decl(desc)
        if t.dtype != desc.dtype:
            out.append(f"{role}: dtype {t.dtype} != planned {desc.dtype}")
        try:
            got = _packed_role_layout(tuple(t.shape), tuple(t.stride()), h, d, t.element_size(), True, role)
        except ValueError as e:
            out.append(f"{role}: {e}")
            continue
        if got != (ts, hs, row):
            out.append(f"{role}: (token, head, row) {got} != planned {(ts, hs, row)}")
        if compiled != (0, got[1], got[0], 1):
            out.append(f"{role}: compiled strides {compiled} != handed (0, {got[1]}, {got[0]}, 1)")
    if (launch.lse is None) != (api.lse_desc is None):
        out.append(f"Stats handed: {launch.lse is not None}, planned: {api.lse_desc is not None}")
    elif launch.lse is not None:
        t = launch.lse
        try:
            hs, ss, _, head_major = _ragged_lse_layout(tuple(t.shape), tuple(t.stride()), api.h_q, api.thd_stats_head_major)
        except ValueError as e:
            out.append(f"lse: {e}")
        else:
            if head_major != api.thd_stats_head_major:
                out.append(f"lse: head-major {head_major} != planned {api.thd_stats_head_major}")
            if (0, hs, ss) != spec.lse_stride:
                out.append(f"lse: strides (0, {hs}, {ss}) != compiled {spec.lse_stride}")
            span = facts_of_tensor(t).span
            if head_major and span < api.h_q * hs:  # the native binder's rule (stats_argument)
                out.append(f"lse: spans {span} elements; head-major Stats must span H_q*head_stride = {api.h_q * hs}")
        if t.dtype != torch.float32:
            out.append(f"lse: dtype {t.dtype} is not float32")
    counts = dict(q_lens=api.batch_size + int(api.cu_seq_q_lens), kv_lens=api.batch_size + int(api.cu_seq_kv_lens))
    for role, count in counts.items():
        t = getattr(launch, role)
        if t.dtype != torch.int32 or t.dim() != 1 or not t.is_contiguous() or t.numel() != count:
            out.append(f"{role}: {t.dtype} {tuple(t.shape)} is not int32 ({count},) contiguous")
    if bool(api.has_sink) != (launch.sinks is not None):
        out.append(f"sinks handed: {launch.sinks is not None}, planned: {bool(api.has_sink)}")
    elif launch.sinks is not None and (launch.sinks.dtype != torch.float32 or launch.sinks.numel() != api.h_q or not launch.sinks.is_contiguous()):
        out.append(f"sinks: {launch.sinks.dtype} {tuple(launch.sinks.shape)} is not float32 ({api.h_q},) contiguous")
    return out
