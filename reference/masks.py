"""Which (query row, key column) pairs the SM80 kernels let into the softmax.

Kernel source (site-packages ``cudnn/sdpa/fwd/``; ``f16`` = kernels/sm80/prefill_f16.py,
the d=256 sibling prefill_d256_f16.py has the same lines a few rows earlier):

- eff_sq / eff_skv are the per-batch live lengths (dense seq_len_q / seq_kv_lens,
  THD cu_* differences), else the physical lengths: f16:505-518.
- padding: ``col >= eff_skv`` is masked: f16:1131.
- bottom-right shift ``br = eff_skv - eff_sq`` (per batch, from the LIVE lengths),
  shared by the causal bound and the sliding-window bound: f16:529.
- causal: masked iff ``col > q + br + right``: f16:530, 1136-1138.
- sliding window: masked iff ``col < q + br - W``: f16:1120, 1141.
- ``right`` (the runtime causal_band_right) is window_right when causal and
  window_right > 0, else 0: api_dsl.py:6756 (graph), 7125 (THD wrapper); a
  window_right without causal is refused (api_dsl.py:6704, 7293), so it never
  reaches a kernel and is ignored here. W is window_left (causal: max(0, W),
  api_dsl.py:6755; -1 = no window).
"""

from __future__ import annotations

import torch


def band(i, j, n_q, n_kv, *, causal: bool, bottom_right: bool, window_left: int, window_right: int):
    """Visibility of key ``j`` to query row ``i`` (broadcastable integer tensors;
    ``n_q``/``n_kv`` are the live lengths). Kept apart from ``visibility`` so
    tests can mutate exactly this predicate."""
    vis = j < n_kv
    shift = (n_kv - n_q) if bottom_right else 0
    if causal:
        right = window_right if window_right > 0 else 0
        vis = vis & (j <= i + shift + right)
    if window_left >= 0:
        vis = vis & (j >= i + shift - window_left)
    return vis


def visibility(
    s_q: int, s_kv: int, q_lens: torch.Tensor, kv_lens: torch.Tensor, *, causal: bool, bottom_right: bool, window_left: int, window_right: int, row0: int = 0
) -> torch.Tensor:
    """Bool (B, 1, SQ, SKV): True where the key is visible. Lengths are int64 (B,).
    ``row0``: the SQ rows are query rows row0 .. row0 + SQ - 1 (a chunk of rows;
    the lengths stay those of the whole query)."""
    dev = q_lens.device
    i = torch.arange(row0, row0 + s_q, device=dev).view(1, 1, s_q, 1)
    j = torch.arange(s_kv, device=dev).view(1, 1, 1, s_kv)
    n_q = q_lens.view(-1, 1, 1, 1)
    n_kv = kv_lens.view(-1, 1, 1, 1)
    vis = band(i, j, n_q, n_kv, causal=causal, bottom_right=bottom_right, window_left=window_left, window_right=window_right)
    return vis.expand(q_lens.numel(), 1, s_q, s_kv)
