"""Call-level contract violations the Case facts cannot state.

``ground.contracts.TAMPERS`` names them; this table says how each one
changes the public wrapper's keyword arguments (``kw``) for a Case ``case``
whose device tensors are ``x``. The prepared adapter honours only
``raw_right_bound`` (see ``kernels.prepared``).
"""

from __future__ import annotations

import torch

from ground.data import TORCH_DTYPES, guarded, guarded_copy

# Tampered operands sit inside guard bands too (ground.data.guarded), and the
# adapter hands them to the guard check with the Case's own (``tampered``).


def _cu_k_length(kw, case, x):
    cu = kw["cum_seqlen_k_tensor"]
    kw["cum_seqlen_k_tensor"] = guarded_copy(torch.cat([cu, cu[-1:]]))


def _thd_bias(kw, case, x):
    kw["bias_tensor"] = guarded((1, case.h_q, case.max_s_q, max(1, max(case.kv_lens))), TORCH_DTYPES[case.bias or "float32"], x.q.device, fill=0)


def _thd_seq_lens(kw, case, x):
    for key, lens in (("seq_kv_lens", case.seq_kv_lens), ("seq_len_q", case.seq_q_lens)):
        if lens is not None:
            kw[key] = guarded_copy(torch.tensor(list(lens), dtype=torch.int32, device=x.q.device))


WRAPPER_TAMPERS = {
    "cu_k_missing": lambda kw, case, x: kw.update(cum_seqlen_k_tensor=None),
    "cu_k_length": _cu_k_length,
    "cu_q_short": lambda kw, case, x: kw.update(cum_seqlen_q_tensor=kw["cum_seqlen_q_tensor"][:1]),
    "scale_output": lambda kw, case, x: kw.update(scale_output=2.0),
    "rope_freqs": lambda kw, case, x: kw.update(rope_freqs=guarded((case.max_s_q, case.d_qk // 2), torch.float32, x.q.device, fill=0)),
    "scheduler": lambda kw, case, x: kw.update(scheduler="lpt"),
    "thd_bias": _thd_bias,
    "thd_seq_lens": _thd_seq_lens,
    # The wrapper already receives the Case's window as given.
    "raw_right_bound": lambda kw, case, x: None,
}


def apply_wrapper_tamper(name, kw, case, x) -> None:
    if name is None:
        return
    try:
        WRAPPER_TAMPERS[name](kw, case, x)
    except KeyError:
        raise ValueError(f"tamper {name!r}: unknown to the wrapper adapter (known: {', '.join(WRAPPER_TAMPERS)})") from None


def tampered(kw, handed) -> dict:
    """The tensors in ``kw`` that are none of ``handed``'s (the operands a tamper made), as "<argument> (tampered)"."""
    own = {id(t) for t in handed.values()}
    return {f"{key} (tampered)": t for key, t in kw.items() if isinstance(t, torch.Tensor) and id(t) not in own}
