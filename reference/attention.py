"""The attention the SM80 forward kernels compute, written plainly in torch.

Conventions, each fixed by the kernel source (site-packages
``cudnn/sdpa/fwd/``; ``f16`` = kernels/sm80/prefill_f16.py, whose d=256
sibling prefill_d256_f16.py repeats every line cited; the mask itself is in
``reference/masks.py``):

- logits = scale * (q . k) + bias, for any sign of scale including 0. The
  kernel folds sign(scale) into S (f16:1094-1099; config_sm80.py:115-121),
  runs at kernel_scale = |scale| (1 when scale == 0), adds bias * (1 /
  kernel_scale) before the scale (f16:1015-1018, 1100-1102) and exponentiates
  ``S * kernel_scale * log2(e)`` (f16:1251); net: scale*s + bias (scale 0:
  logits = bias). The masked fill happens AFTER the bias (f16:1102 then 1153),
  so a huge bias never unmasks a key.
- GQA/MQA: q head h reads kv head h // (Hq // Hkv) (f16:400).
- bias is [1, H_q, SQ, SKV] indexed by the PHYSICAL q row and key column. The
  kernel's bias address has a head term only, no batch term (f16:410), and the
  prepared host declares the bias as [1, H_q, SQ, SKV] (prepared_sm80.py:83):
  batch 0's bias serves every batch. This reference takes bias[b] when the bias
  has B entries (bias[0] when it has 1), so a kernel that accepts a per-batch
  bias and applies batch 0 everywhere is caught, not mirrored. THD has no bias
  (api_dsl.py:7099).
- sinks: one logit per q head in NATURAL-log units (the pointer hosts compile
  sink_natural=True, api_dsl.py:6845, 7159; f16:1346-1347 converts to log2),
  NOT multiplied by scale, joining only the softmax denominator (V_sink = 0):
  lse = log(sum_j exp(logit_j) + exp(sink_h)); o = sum_j exp(logit_j - lse) v_j
  (f16:1343-1365).
- Sink units and buffers (schema 3): a Case with ``sink_log2`` hands base-2
  logits (TemplateParams.sink_natural=False: the kernel skips the log2(e)
  multiply, f16:1346-1347), so the natural logit is the handed value / log2(e);
  the buffer is read through its own stride (``sink_layout``: stride 2, or 0
  broadcasting one logit, f16:1345) in its own dtype (``sink_dtype``):
  ``sink_logits``.
- RoPE (``rope``, dense): before q.k the kernel rotates each Q and K row in
  shared memory (frost/tile_dsl/rope.py rope_rotate_smem_tile, f16:790-795,
  981-985): half-split pairs (i, i + D/2) of the flavor's envelope D, angle
  table [pos, i] (pos: the row's index in S, Q and K alike), cos/sin taken in
  float32 of the float32 angle (kernels/sm80/rope_table.py), the rotation in
  float32 and the result rounded to the I/O dtype (it is stored back into the
  I/O tile). ``rotate`` applies exactly that, so the error model sees the
  operands the tensor cores multiply, up to the last bit of the fp32 rotation
  (an FFMA contraction, another trig's table): where that bit decides the I/O
  rounding, ``rotate(..., unsure=True)`` says by how much the kernel's operand
  may differ (ground.tolerances.rotation_unsure), and the error
  model charges it.
- LSE is natural log: LN2 * (row_max + log2(row_sum)) (f16:1386); a Case
  with ``lse_log2`` (TemplateParams.stats_log2) asks for base 2: natural LSE *
  log2(e), -inf staying -inf (f16:1405-1408); ``reference_for_case`` converts.
- A row with no visible key: O = 0 (the row_sum > 0 guard, f16:1461-1484) and
  LSE = -inf (log2(0)); with sinks O = 0 and LSE = sink (f16:1340-1342).
- Dense padded Q rows (i >= seq_len_q[b], only when q lengths are given):
  O = 0 (f16:1492-1496) and LSE = -inf EVEN WITH SINKS: the select runs after
  the sink lift (f16:1399-1404).
- THD: each sequence is its own batch with lengths cu[s+1] - cu[s]
  (f16:429-436); rows past a sequence are never stored (f16:1376), so capacity
  rows outside [cu_q[0], cu_q[-1]) have no reference value (NaN here).

NaN poison outside the live tokens never reaches a matmul: non-live Q/K/V rows
are replaced (torch.where, since 0 * NaN = NaN) before the products.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Dict, Optional, Sequence, Union

import torch

from ground.data import live_key_extent
from ground.phases import timed
from ground.tolerances import lse_log2_bound, rotation_unsure

from . import masks

Lens = Optional[Union[torch.Tensor, Sequence[int]]]
LOWP = (torch.float16, torch.bfloat16)
LOG2E = 1.4426950408889634  # log2(e), the kernel's base-2 Stats factor (f16:1407)


def _lens(lens: Lens, b: int, phys: int, device) -> torch.Tensor:
    if lens is None:
        return torch.full((b,), phys, dtype=torch.int64, device=device)
    if not isinstance(lens, torch.Tensor):  # checked on the host: no wait for the device
        lens = [int(n) for n in lens]
        if len(lens) != b or (lens and (min(lens) < 0 or max(lens) > phys)):
            raise ValueError(f"lengths: expected {b} entries in [0, {phys}], got {lens}")
        return torch.tensor(lens, dtype=torch.int64).to(device)
    t = lens.to(device=device, dtype=torch.int64).reshape(-1)
    if t.numel() != b:
        raise ValueError(f"lengths: expected {b} entries, got {t.numel()}")
    if t.numel() and (int(t.min()) < 0 or int(t.max()) > phys):
        raise ValueError(f"lengths must lie in [0, {phys}], got {t.tolist()}")
    return t


@contextmanager
def _full_fp32_matmul(device: torch.device):
    # A TF32 matmul would make the "fp32" reference a 10-bit one on CUDA.
    if device.type != "cuda":
        yield
        return
    prev = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(prev)


@dataclass
class Internals:
    """What one float64 ``attention`` call computed on the way, for the error
    model (``ground.tolerances.kernel_bounds``). Shapes: B batches, H q
    heads (``group`` q heads per kv head), SQ rows, SKV keys.

    - q (B,H,SQ,Dqk), k (B,Hkv,SKV,Dqk), v (B,Hkv,SKV,Dv): the inputs, dead rows 0.
    - logits (B,H,SQ,SKV): scale * q.k + bias, -inf where the key is not visible.
    - bias (1|B,H,SQ,SKV) or None; sink (1,H,1) natural-log logits or None.
    - p (B,H,SQ,SKV): softmax weights (the sink takes ``sink_p`` of the mass).
    - m (B,H,SQ): largest logit, sink included (-inf: nothing); l: sum of
      exp(logit - m), sink included (0: nothing).
    - o (B,H,SQ,Dv), lse (B,H,SQ): the softmax result BEFORE the padded-row
      override (the contract values of padded rows are the caller's business).
    - q_live (B,SQ): rows inside the q lengths.
    - q_unsure, k_unsure: per element, how far the kernel's own q / k operand
      may differ from q / k (RoPE's rounding; dead rows 0), or None: exact.
    - walked: the keys each batch entry's kernel walks, where the call pads
      entries of fewer keys to SKV (``reference_for_case``'s THD buckets); None: SKV.
    """

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    group: int
    scale: float
    logits: torch.Tensor
    bias: Optional[torch.Tensor]
    sink: Optional[torch.Tensor]
    p: torch.Tensor
    sink_p: torch.Tensor
    m: torch.Tensor
    l: torch.Tensor
    o: torch.Tensor
    lse: torch.Tensor
    q_live: torch.Tensor
    q_unsure: Optional[torch.Tensor] = None  # (B,H,SQ,Dqk): how far the kernel's q operand may sit from q (RoPE), or None
    k_unsure: Optional[torch.Tensor] = None  # (B,Hkv,SKV,Dqk): the same for k
    walked: Optional[torch.Tensor] = None  # (B,) int64: the keys each entry's kernel walks (THD buckets), or None: SKV


def attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    scale: float,
    causal: bool = False,
    bottom_right: bool = False,
    window_left: int = -1,
    window_right: int = -1,
    bias: Optional[torch.Tensor] = None,
    sinks: Optional[torch.Tensor] = None,
    q_lens: Lens = None,
    kv_lens: Lens = None,
    compute_dtype: torch.dtype = torch.float32,
    internals: bool = False,
    row0: int = 0,
    q_phys: Optional[int] = None,
    q_unsure: Optional[torch.Tensor] = None,
    k_unsure: Optional[torch.Tensor] = None,
    walked: Lens = None,
):
    """Attention on dense logical tensors q (B,Hq,SQ,Dqk), k (B,Hkv,SKV,Dqk),
    v (B,Hkv,SKV,Dv). Returns O (B,Hq,SQ,Dv) and natural-log LSE (B,Hq,SQ), in
    float64 when ``compute_dtype`` is float64, else float32; with
    ``internals`` (float64 only) also the ``Internals`` of the call.

    ``q_unsure``/``k_unsure`` (shaped like q / k): carried into the Internals
    for the error model (``rotate(..., unsure=True)``); the result ignores them.
    ``walked`` (B,): carried into the Internals likewise (``Internals.walked``).

    A chunk of rows: ``q`` (and ``bias``, ``q_unsure``) hold query rows row0 .. row0+SQ-1 of
    a query of ``q_phys`` physical rows (``q_lens`` and the mask are the whole
    query's); every result is per row, so chunks concatenate to the whole.

    compute_dtype float32/float64: everything in that precision. float16/
    bfloat16 ("lowp", the legacy error model's same-dtype run): q@k^T and P@V
    are matmuls in that dtype (results rounded to it), the softmax and LSE are
    float32 on the rounded scores, P is normalized then rounded to that dtype.
    """
    if internals and compute_dtype != torch.float64:
        raise ValueError("internals are float64 only")
    b, h_q, s_q, d_qk = q.shape
    bk, h_kv, s_kv, d_k = k.shape
    if bk != b or d_k != d_qk or v.shape[:3] != k.shape[:3] or h_kv < 1 or h_q % h_kv:
        raise ValueError(f"shapes q {tuple(q.shape)} k {tuple(k.shape)} v {tuple(v.shape)} do not fit")
    d_v = v.shape[-1]
    g = h_q // h_kv
    dev = q.device
    lowp = compute_dtype in LOWP
    acc = torch.float32 if lowp else compute_dtype  # softmax / output precision

    n_q = _lens(q_lens, b, s_q if q_phys is None else q_phys, dev)
    n_kv = _lens(kv_lens, b, s_kv, dev)
    q_live = torch.arange(row0, row0 + s_q, device=dev)[None, :] < n_q[:, None]  # (B, SQ)
    kv_live = torch.arange(s_kv, device=dev)[None, :] < n_kv[:, None]

    # Poison rule: dead rows become 0 before any product.
    qz = torch.where(q_live[:, None, :, None], q.to(compute_dtype), 0.0)
    kz = torch.where(kv_live[:, None, :, None], k.to(compute_dtype), 0.0)
    vz = torch.where(kv_live[:, None, :, None], v.to(compute_dtype), 0.0)

    with _full_fp32_matmul(dev):
        # GQA without copying K/V: the g q heads of one kv head are stacked on
        # the row axis, so one batched matmul serves them (head h = kvh*g + gi).
        s = torch.matmul(qz.reshape(b, h_kv, g * s_q, d_qk), kz.transpose(-1, -2))
        logits = s.view(b, h_q, s_q, s_kv).to(acc)  # lowp: rounded scores, upcast
        del s
        logits.mul_(scale)
        bias_acc = None
        if bias is not None:
            if bias.dim() != 4 or bias.shape[0] not in (1, b) or bias.shape[1] not in (1, h_q) or tuple(bias.shape[2:]) != (s_q, s_kv):
                raise ValueError(f"bias shape {tuple(bias.shape)} is not [1|{b}, 1|{h_q}, {s_q}, {s_kv}]")
            bias_acc = bias.to(device=dev, dtype=acc)
            logits.add_(bias_acc)
        vis = masks.visibility(s_q, s_kv, n_q, n_kv, causal=causal, bottom_right=bottom_right, window_left=window_left, window_right=window_right, row0=row0)
        logits.masked_fill_(~vis, float("-inf"))
        del vis

        # Stable logsumexp, the sink counted in both the max and the sum.
        if s_kv:
            m = logits.amax(dim=-1)
        else:
            m = torch.full((b, h_q, s_q), float("-inf"), dtype=acc, device=dev)
        sink = None
        if sinks is not None:
            sink = sinks.to(device=dev, dtype=acc).reshape(1, h_q, 1)
            m = torch.maximum(m, sink)
        # A row whose max is -inf has nothing visible: shift by 0 so exp gives 0, not NaN.
        m_true = m
        m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
        kept = logits.clone() if internals else None
        p = logits.sub_(m[..., None]).exp_()  # reuses the logits storage
        l = p.sum(dim=-1)
        sink_w = None
        if sink is not None:
            sink_w = torch.exp(sink - m)
            l = l + sink_w
        lse = m + torch.log(l)  # l == 0 -> -inf
        inv_l = torch.where(l > 0, 1.0 / l, torch.zeros_like(l))
        p.mul_(inv_l[..., None])
        if lowp:
            p = p.to(compute_dtype)
        o = torch.matmul(p.view(b, h_kv, g * s_q, s_kv), vz).view(b, h_q, s_q, d_v).to(acc)
        if internals:
            sink_p = sink_w * inv_l if sink_w is not None else torch.zeros_like(l)
            unsure = [
                None if x is None else torch.where(live[:, None, :, None], x.to(compute_dtype), 0.0) for x, live in ((q_unsure, q_live), (k_unsure, kv_live))
            ]
            inner = Internals(
                q=qz,
                k=kz,
                v=vz,
                group=g,
                scale=float(scale),
                logits=kept,
                bias=bias_acc,
                sink=sink,
                p=p,
                sink_p=sink_p,
                m=m_true,
                l=l,
                o=o.clone(),
                lse=lse.clone(),
                q_live=q_live,
                q_unsure=unsure[0],
                k_unsure=unsure[1],
                walked=None if walked is None else _lens(walked, b, s_kv, dev),
            )

    if q_lens is not None:  # dense padded Q rows: O = 0, LSE = -inf (sinks or not)
        row = q_live[:, None, :]
        o = torch.where(row[..., None], o, torch.zeros((), dtype=acc, device=dev))
        lse = torch.where(row, lse, torch.full((), float("-inf"), dtype=acc, device=dev))
    if internals:
        return o, lse, inner
    return o, lse


# internals -> {name: tensor}, each shaped like O (B,H,SQ,Dv) or like LSE (B,H,SQ).
Extra = Callable[[Internals], Dict[str, torch.Tensor]]


def rope_width(case) -> int:
    """The head width RoPE rotates: the serving flavor's d_qk envelope."""
    from ground.tables import FLAVOR_ENVELOPES, flavor_of

    return FLAVOR_ENVELOPES[flavor_of(case.d_qk, case.d_v)][0]


def mask_args(case) -> dict:
    """``attention``'s scale and mask arguments of ``case``."""
    return dict(
        scale=case.softmax_scale,
        causal=case.causal,
        bottom_right=case.bottom_right,
        window_left=case.window_left,
        window_right=case.window_right,
    )


def sink_logits(case, tensors) -> Optional[torch.Tensor]:
    """The (H_q,) natural-log sink logits the kernel must use: the handed
    buffer read through its own strides and dtype, base-2 values converted
    (``case.sink_log2``); float64."""
    if tensors.sinks is None:
        return None
    sinks = tensors.sinks.to(torch.float64)
    return sinks / LOG2E if case.sink_log2 else sinks


def rotate(x: torch.Tensor, angles: torch.Tensor, width: Optional[int] = None, *, unsure: bool = False):
    """RoPE as the kernel applies it: x (B, H, S, D) in the I/O dtype, angles
    (>= S, >= W/2) float32; x zero-padded to ``width`` W (the flavor's d_qk:
    the kernel rotates the envelope's halves of the zero-filled shared-memory
    tile; default D), pairs (i, i + W/2) rotated by angles[pos, i] in float32
    (cos/sin of the float32 angle), rounded back to x's dtype. W wide: past D
    the rotated columns are no longer zero, and q.k runs over all W.
    ``unsure``: (rotated, float64 per-element distance the kernel's own
    rounding may take it, ``tolerances.rotation_unsure``)."""
    if width is not None and width > x.shape[-1]:
        x = torch.nn.functional.pad(x, (0, width - x.shape[-1]))
    d2 = x.shape[-1] // 2
    a = angles[: x.shape[-2], :d2].to(device=x.device, dtype=torch.float32)
    c, s = torch.cos(a), torch.sin(a)
    lo, hi = x[..., :d2].to(torch.float32), x[..., d2:].to(torch.float32)
    out = torch.cat((lo * c - hi * s, hi * c + lo * s), dim=-1).to(x.dtype)
    return (out, rotation_unsure(lo, hi, c, s, x.dtype)) if unsure else out


# Reference memory. One float64 attention call with the error model holds about
# a dozen (B, H, rows, SKV) tensors (logits, p, the model's per-key terms); the
# query rows are cut into chunks of at most REF_CHUNK_ELEMS (row, key) pairs
# (B * H * rows * SKV, 128 MiB per float64 tensor) so a 32k x 32k case costs
# O(S x chunk), not O(S^2). Every quantity is per row, so the chunks
# concatenate to the unchunked call (tests/test_reference.py).
REF_CHUNK_ELEMS = 1 << 24


def chunked_attention(
    q,
    k,
    v,
    *,
    bias=None,
    q_lens: Lens = None,
    kv_lens: Lens = None,
    extra: Optional[Extra] = None,
    chunk_elems: Optional[int] = None,
    q_unsure: Optional[torch.Tensor] = None,
    **common,
):
    """``attention`` over chunks of query rows, each of at most ``chunk_elems``
    (row, key) pairs: (O, LSE, extras) with ``extra`` applied to each chunk's
    ``Internals`` and the pieces joined on the row axis (extras None without
    ``extra``); ``q_unsure`` is cut into the same chunks as q."""
    b, h, s_q, _ = q.shape
    rows = max(1, (chunk_elems or REF_CHUNK_ELEMS) // max(1, b * h * k.shape[2]))
    common = dict(common, q_lens=q_lens, kv_lens=kv_lens, internals=extra is not None)
    if rows >= s_q:
        got = attention(q, k, v, bias=bias, q_unsure=q_unsure, **common)
        return got[0], got[1], None if extra is None else extra(got[2])
    os_, lses, extras = [], [], []
    for r0 in range(0, s_q, rows):
        r1 = min(s_q, r0 + rows)
        part = None if bias is None else bias[:, :, r0:r1]
        got = attention(q[:, :, r0:r1], k, v, bias=part, row0=r0, q_phys=s_q, q_unsure=None if q_unsure is None else q_unsure[:, :, r0:r1], **common)
        os_.append(got[0])
        lses.append(got[1])
        if extra is not None:
            extras.append(extra(got[2]))
    joined = None if extra is None else {name: torch.cat([x[name] for x in extras], 2) for name in extras[0]}
    return torch.cat(os_, 2), torch.cat(lses, 2), joined


@timed("reference")
def reference_for_case(case, tensors, compute_dtype: torch.dtype = torch.float32, *, extra: Optional[Extra] = None, chunk_elems: Optional[int] = None):
    """(O, LSE) of a ``ground.case.Case`` on the ``CaseTensors`` that
    ``make_inputs`` made, in the layouts of ``ground.data.make_outputs``
    (dense O (B,H,SQ,Dv), LSE (B,H,SQ); THD O (T_q,H,Dv), LSE (H,T_q)), float32
    (float64 for compute_dtype float64). THD capacity rows outside every
    sequence are NaN: the tail property, not the reference, judges them.

    ``extra`` (float64 only): called with the ``Internals`` of every attention
    call (THD: one per bucket of sequences, ``thd_buckets``); its tensors come back as a third item, a
    dict laid out like O or LSE (by rank), NaN outside every THD sequence;
    empty when no THD sequence has a Q row (no call was made).
    ``chunk_elems``: the row chunking (``chunked_attention``; default
    REF_CHUNK_ELEMS)."""
    common = dict(
        **mask_args(case),
        sinks=sink_logits(case, tensors),
        compute_dtype=compute_dtype,
        extra=extra,
        chunk_elems=chunk_elems,
    )
    if not case.is_thd:
        q, k, unsure = tensors.q, tensors.k, {}
        if case.rope:
            width = rope_width(case)
            if extra is None:  # no Internals asked for: the error model's operand distances are not needed
                q, k = rotate(q, tensors.rope, width), rotate(k, tensors.rope, width)
            else:
                (q, q_unsure), (k, k_unsure) = (rotate(x, tensors.rope, width, unsure=True) for x in (q, k))
                unsure = dict(q_unsure=q_unsure, k_unsure=k_unsure)
        v, keys = tensors.v, live_key_extent(case)
        if keys < case.s_kv:  # the dead key tail of a huge dense K/V (ground.data.live_key_extent)
            k, v = k[:, :, :keys], v[:, :, :keys]
        # the padding lengths from the Case's facts (the buffers the kernel reads hold the same): no device read
        got = chunked_attention(q, k, v, bias=tensors.bias, q_lens=case.seq_q_lens, kv_lens=case.seq_kv_lens, **common, **unsure)
        return _lse_units(case, *got)
    acc = torch.float64 if compute_dtype == torch.float64 else torch.float32
    dev = tensors.q.device
    t_q, h_q, _ = tensors.q.shape
    o = torch.full((t_q, h_q, tensors.v.shape[-1]), float("nan"), dtype=acc, device=dev)
    lse = torch.full((h_q, t_q), float("nan"), dtype=acc, device=dev)
    extras: Dict[str, torch.Tensor] = {}
    for bucket in thd_buckets(case.q_lens, case.kv_lens):
        # The bucket's sequences as one dense batch: each padded to the longest,
        # its own lengths masking the rest (the dense path's seq lens), so the
        # model's launches are per bucket, not per sequence.
        n_q, n_kv = [case.q_lens[s] for s in bucket], [case.kv_lens[s] for s in bucket]
        rows, keys = _packed_index(case.cu_seqlens("q"), bucket, n_q, dev), _packed_index(case.cu_seqlens("kv"), bucket, n_kv, dev)
        as_bhsd = lambda x, index, n: x.index_select(0, index).unflatten(0, (len(bucket), n)).transpose(1, 2)  # noqa: E731
        got = chunked_attention(
            as_bhsd(tensors.q, rows, max(n_q)),
            as_bhsd(tensors.k, keys, max(n_kv)),
            as_bhsd(tensors.v, keys, max(n_kv)),
            q_lens=n_q,
            kv_lens=n_kv,
            walked=n_kv,
            **common,
        )
        live = _live_rows(n_q, dev)  # the bucket's live (entry, row) positions, in packed order
        packed = rows.index_select(0, live)

        def place(into: torch.Tensor, x: torch.Tensor) -> None:
            """The bucket's live rows of ``x`` into their packed tokens: O-like
            (B,H,SQ,D) into (T_q,H,D), LSE-like (B,H,SQ) into (H,T_q)."""
            if x.dim() == 4:
                into.index_copy_(0, packed, x.transpose(1, 2).flatten(0, 1).index_select(0, live))
            else:
                into.index_copy_(1, packed, x.transpose(0, 1).flatten(1, 2).index_select(1, live))

        place(o, got[0])
        place(lse, got[1])
        for name, x in (got[2] if extra is not None else {}).items():
            if name not in extras:  # O-like (T_q,H,D) or LSE-like (H,T_q), NaN outside sequences
                shape = (t_q, h_q, x.shape[-1]) if x.dim() == 4 else (h_q, t_q)
                extras[name] = torch.full(shape, float("nan"), dtype=x.dtype, device=dev)
            place(extras[name], x)
    return _lse_units(case, o, lse, None if extra is None else extras)


# THD buckets. The sequences of a bucket are padded to its longest Q and K/V
# lengths; a bucket takes the next sequence (longest first) while its padded
# (row, key) pairs stay within THD_PAD_SLACK times their own plus
# THD_PAD_FREE, so many short sequences share one call and a long one is not
# padded to another's length; and while its entries times its longest K/V
# stay within THD_BUCKET_KEYS, so one row of every entry fits a reference
# chunk (REF_CHUNK_ELEMS, up to 256 heads) and the large tier's long sequences
# go one per call.
THD_PAD_SLACK = 1.25
THD_PAD_FREE = 1 << 14
THD_BUCKET_KEYS = 1 << 16


def seq_as_batch(x: torch.Tensor) -> torch.Tensor:
    """One THD sequence's packed rows (T, H, D) as a batch of one (1, H, T, D)."""
    return x.permute(1, 0, 2).unsqueeze(0)


def batch_as_seq(x: torch.Tensor) -> torch.Tensor:
    """A batch of one (1, H, T, D) back to packed rows (T, H, D)."""
    return x[0].permute(1, 0, 2)


def sequence_spans(cu_q: Sequence[int], cu_kv: Sequence[int], n_seq: int):
    """(s, q0, q1, k0, k1) of each packed sequence s with a Q row, from its
    offsets: its rows [q0, q1) and keys [k0, k1). One with no Q row has
    nothing to compute (its keys' gradients stay as the caller made them)."""
    for s in range(n_seq):
        if cu_q[s + 1] > cu_q[s]:
            yield s, cu_q[s], cu_q[s + 1], cu_kv[s], cu_kv[s + 1]


def thd_buckets(q_lens: Sequence[int], kv_lens: Sequence[int]) -> list:
    """The sequences with a Q row, as lists of indices, one dense reference call each."""
    area = lambda n, m: n * max(m, 1)  # noqa: E731  a sequence without keys still has rows
    order = sorted((s for s in range(len(q_lens)) if q_lens[s]), key=lambda s: (-area(q_lens[s], kv_lens[s]), s))
    buckets: list = []
    for s in order:
        if buckets:
            b = buckets[-1] + [s]
            keys = max(kv_lens[i] for i in b)
            padded = len(b) * area(max(q_lens[i] for i in b), keys)
            if padded <= THD_PAD_SLACK * sum(area(q_lens[i], kv_lens[i]) for i in b) + THD_PAD_FREE and len(b) * keys <= THD_BUCKET_KEYS:
                buckets[-1] = b
                continue
        buckets.append([s])
    return buckets


def _packed_index(cu: Sequence[int], bucket: Sequence[int], lens: Sequence[int], dev) -> torch.Tensor:
    """Packed token of each (entry, row) of a bucket padded to max(lens); a
    padded row reads the buffer's token 0 (``attention`` zeroes it before any
    product, whatever it holds)."""
    width = max(lens)
    index = [cu[s] + i if i < n else 0 for s, n in zip(bucket, lens) for i in range(width)]
    return torch.tensor(index, dtype=torch.int64).to(dev)


def _live_rows(lens: Sequence[int], dev) -> torch.Tensor:
    width = max(lens)
    return torch.tensor([e * width + i for e, n in enumerate(lens) for i in range(n)], dtype=torch.int64).to(dev)


def _lse_units(case, o: torch.Tensor, lse: torch.Tensor, extras: Optional[Dict[str, torch.Tensor]] = None):
    """(O, LSE) with LSE in the units the Case asks for: natural log, or base 2
    (``lse_log2``: the kernel multiplies its natural LSE by log2(e)); an
    ``extras`` "lse" entry (the error model's LSE bound) scales with it, and
    comes back as a third item when given."""
    if case.lse_log2:
        lse = lse * LOG2E
        if extras and "lse" in extras:
            extras = {**extras, "lse": lse_log2_bound(extras["lse"], lse)}
    return (o, lse) if extras is None else (o, lse, extras)


def visible_counts(case, tensors) -> torch.Tensor:
    """Visible keys per output row, in the LSE layout (dense (B,H,SQ), THD
    (H,T_q); rows outside every THD sequence count 0). Failure reports use it
    to name the region a wrong element sits in (e.g. a row with no key)."""
    from .masks import visibility

    mask = dict(causal=case.causal, bottom_right=case.bottom_right, window_left=case.window_left, window_right=case.window_right)
    dev = tensors.q.device
    if not case.is_thd:  # in row chunks: O(S x chunk) memory, as the reference
        n_q, n_kv = torch.tensor(case.q_lengths(), device=dev), torch.tensor(case.kv_lengths(), device=dev)
        rows = max(1, REF_CHUNK_ELEMS // (case.batch * case.s_kv))
        counts = [visibility(min(rows, case.s_q - r0), case.s_kv, n_q, n_kv, row0=r0, **mask).sum(-1) for r0 in range(0, case.s_q, rows)]
        return torch.cat(counts, 2).expand(case.batch, case.h_q, case.s_q)
    counts = torch.zeros(case.h_q, case.t_q, dtype=torch.int64, device=dev)
    cu = case.cu_seqlens("q")
    for s, (n_q, n_kv) in enumerate(zip(case.q_lens, case.kv_lens)):
        if n_q:
            vis = visibility(n_q, max(n_kv, 1), torch.tensor([n_q], device=dev), torch.tensor([n_kv], device=dev), **mask)
            counts[:, cu[s] : cu[s + 1]] = vis.sum(-1)[0, 0]
    return counts
