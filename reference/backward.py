"""The gradients the SM80 backward kernels compute, in closed form.

Given the forward's float64 ``Internals`` (reference.attention) and the
incoming gradient dO, with P the softmax weights (the sink's weight P_s
apart) and scale the softmax scale:

    dV_j   = sum_i P_ij dO_i                    (summed over the q heads of a kv head)
    dP_ij  = dO_i . V_j
    D_i    = dO_i . O_i                          (= sum_j P_ij dP_ij: the sink's V is 0)
    dS'_ij = P_ij (dP_ij - D_i)                  the gradient of logit_ij
    dQ_i   = scale * sum_j dS'_ij K_j
    dK_j   = scale * sum_i dS'_ij Q_i            (summed over the q heads of a kv head)
    dBias  = dS'                                 (summed over the batch when one bias serves all)
    dSink_h = -sum_{b,i} P_s(b,h,i) D_i          (d lse / d sink = P_s; d O / d sink = -P_s O)

This is the exact gradient of the forward reference (tests/test_backward_reference.py
checks it against float64 autograd of an independent forward, and the
closed form against a per-element loop). Kernel lines (site-packages
``cudnn/sdpa/bwd/kernels/sm80/bprop_f16.py``, ``b16`` below) that fix the
conventions:

- P is recomputed as exp2(scale*log2e*S + bias*log2e - LSE*log2e) from the
  LSE it is handed (b16:840-861); dBias is the UNSCALED dS' (bias adds after
  the scale, b16:940-948), dS = scale * dS' (b16:979-982).
- Rows with no visible key and padded Q rows: the handed LSE is -inf there
  and P is forced to 0 (b16:862-871); padded Q rows (q >= seq_len_q) and
  rows past a THD sequence get P = 0 by the q-bound gate (b16:372-376,
  908-912). So dQ of such a row is exactly 0, and so is every dK/dV/dBias
  contribution from it; their dSink term is 0 too (the dSink kernel skips
  -inf LSE rows, b16:1534-1540).
- Keys past seq_kv_lens / the partial tile / a THD sequence: P = 0
  (b16:888-907), so dK = dV = 0 for a key no live row sees, and dBias = 0
  on every masked cell.
- GQA: a CTA works on one q head; dK/dV are written per q head and summed
  over the group by ``_dkv_reduce_*`` (b16:340-346).
- dSink in natural-log units: exp2((sink - lse) * log2e) * D (b16:1538).

Padded Q rows: the forward reference computes softmax weights for them too
(its O/LSE override comes after); here their P is 0, as the kernel's.
"""

from __future__ import annotations

from typing import Callable, Dict, Optional

import torch

from ground.phases import timed

from .attention import Internals, attention, batch_as_seq, mask_args, seq_as_batch, sequence_spans

GRADS = ("dq", "dk", "dv", "dbias", "dsink")


def _group_sum(x: torch.Tensor, group: int) -> torch.Tensor:
    """(B, H, S, D) per q head -> (B, H/group, S, D): the sum over each kv head's q heads."""
    b, h, s, d = x.shape
    return x.view(b, h // group, group, s, d).sum(2)


def _per_q_head(x: torch.Tensor, group: int) -> torch.Tensor:
    return x.repeat_interleave(group, dim=1)


def gradients(it: Internals, do: torch.Tensor, *, bias_batch: int = 1) -> Dict[str, torch.Tensor]:
    """The closed-form gradients of one dense attention call (``Internals``,
    float64) for dO (B,H,SQ,Dv): dq (B,H,SQ,Dqk), dk/dv (B,Hkv,SKV,D),
    dbias (bias_batch,H,SQ,SKV) when the call had a bias, dsink (H,) when
    it had sinks; plus the intermediates the error model reads (p, dp, d,
    ds: P, dP, D, dS' with P zero on rows the kernel gates)."""
    g = it.group
    live = it.q_live[:, None, :, None].to(it.p.dtype)  # padded Q rows: P = 0 (the kernel's q-bound gate)
    p = it.p * live
    do = torch.where(it.q_live[:, None, :, None], do.to(p.dtype), 0.0)
    o = it.o * live
    k, v, q = _per_q_head(it.k, g), _per_q_head(it.v, g), it.q
    dp = do @ v.transpose(-1, -2)
    d = (do * o).sum(-1)
    ds = p * (dp - d[..., None])
    out = {
        "dq": it.scale * (ds @ k),
        "dk": _group_sum(it.scale * (ds.transpose(-1, -2) @ q), g),
        "dv": _group_sum(p.transpose(-1, -2) @ do, g),
        "p": p,
        "dp": dp,
        "d": d,
        "ds": ds,
        "do": do,
    }
    if it.bias is not None:
        out["dbias"] = ds.sum(0, keepdim=True) if bias_batch == 1 else ds
    if it.sink is not None:
        sink_p = it.sink_p * it.q_live[:, None, :].to(p.dtype)
        out["dsink"] = -(sink_p * d).sum((0, 2))
        out["sink_p"] = sink_p
    return out


def structural_zeros(it: Internals, grads: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
    """1.0 where a gradient is exactly 0 by the kernel's gating (see the module
    docstring): dQ rows with no visible key or padded; dK/dV rows no live row
    of any q head in the group sees; dBias cells no live row sees."""
    vis = torch.isfinite(it.logits) & it.q_live[:, None, :, None]
    g = it.group
    b, h, s_q, s_kv = vis.shape
    seen = vis.any(2).view(b, h // g, g, s_kv).any(2)  # (B, Hkv, SKV)
    out = {
        "dq": (~vis.any(-1))[..., None].expand(grads["dq"].shape),
        "dk": (~seen)[..., None].expand(grads["dk"].shape),
        "dv": (~seen)[..., None].expand(grads["dv"].shape),
    }
    if "dbias" in grads:
        out["dbias"] = ~vis.any(0, keepdim=True) if grads["dbias"].shape[0] == 1 else ~vis
    return {n: x.to(torch.float64) for n, x in out.items()}


# (internals, gradients, handed O (B,H,SQ,Dv), handed natural LSE (B,H,SQ)) -> {name: tensor}:
# extra per-call tensors laid out like the gradient they describe (the error model's bounds, ...).
Extra = Callable[..., Dict[str, torch.Tensor]]


@timed("reference")
def backward_for_case(case, tensors, do: torch.Tensor, *, extra: Optional[Extra] = None, o=None, lse=None) -> Dict[str, torch.Tensor]:
    """The float64 gradients of a Case for dO (laid out like O:
    dense logical (B,H,SQ,Dv), THD (T_q,H,Dv)), in the layouts the backward
    adapters return: dense dq (B,H,SQ,Dqk), dk/dv (B,Hkv,SKV,D); THD dq
    (T_q,H,Dqk), dk/dv (T_kv,Hkv,D), NaN on capacity rows outside every
    sequence; dbias like the bias; dsink (H,). ``extra`` (e.g. the error
    model's bounds) is called per attention call with the slices of the
    handed ``o`` / ``lse`` (O's and LSE's layouts: dense (B,H,SQ,Dv) and
    (B,H,SQ); THD (T_q,H,Dv) and (H,T_q)); its tensors come back under their
    own names ("bound:dq", ...) in the gradients' layouts. A THD sequence
    without Q rows makes no call: its keys' rows hold 0 in every extra
    tensor, 1 in "zero:" ones."""
    common = dict(
        **mask_args(case),
        sinks=tensors.sinks,
        compute_dtype=torch.float64,
        internals=True,
    )

    def one(q, k, v, dout, o_given, lse_given, **kw):
        _, _, it = attention(q, k, v, **common, **kw)
        grads = gradients(it, dout, bias_batch=case.bias_batch)
        keep = {n: grads[n] for n in GRADS if n in grads}
        if extra is not None:
            keep.update(extra(it, grads, o_given, lse_given))
        return keep

    if not case.is_thd:
        return one(tensors.q, tensors.k, tensors.v, do, o, lse, bias=tensors.bias, q_lens=case.seq_q_lens, kv_lens=case.seq_kv_lens)
    dev = tensors.q.device
    f64 = torch.float64
    shapes = {"dq": (case.t_q, case.h_q, case.d_qk), "dk": (case.t_kv, case.h_kv, case.d_qk), "dv": (case.t_kv, case.h_kv, case.d_v), "dsink": (case.h_q,)}
    out: Dict[str, torch.Tensor] = {}

    def slot(key: str) -> torch.Tensor:
        # NaN outside every sequence; the keys of every sequence start as a sequence with no Q row leaves them.
        if key not in out:
            name = key.split(":")[-1]
            x = torch.full(shapes[name], float("nan"), dtype=f64, device=dev)
            if name == "dsink":
                x.zero_()
            elif name in ("dk", "dv"):
                for s in range(case.n_seq):
                    k0, k1 = cu_kv[s : s + 2]
                    x[k0:k1] = 1.0 if key.startswith("zero:") else 0.0
            out[key] = x
        return out[key]

    cu_q, cu_kv = case.cu_seqlens("q"), case.cu_seqlens("kv")
    for name in ("dq", "dk", "dv") + (("dsink",) if case.sinks else ()):
        slot(name)
    for _, q0, q1, k0, k1 in sequence_spans(cu_q, cu_kv, case.n_seq):
        o_s = None if o is None else seq_as_batch(o[q0:q1])
        lse_s = None if lse is None else lse[:, q0:q1].unsqueeze(0)
        got = one(seq_as_batch(tensors.q[q0:q1]), seq_as_batch(tensors.k[k0:k1]), seq_as_batch(tensors.v[k0:k1]), seq_as_batch(do[q0:q1]), o_s, lse_s)
        for key, x in got.items():
            name = key.split(":")[-1]
            if name == "dsink":
                slot(key).add_(x)
            elif name == "dq":
                slot(key)[q0:q1] = batch_as_seq(x)
            else:
                slot(key)[k0:k1] = batch_as_seq(x)
    return out
