"""backward_tails: NaN poisoned into every input element the backward must
not read never reaches a gradient the contract defines, and gradient storage
outside the live rows ends exactly as ``TAIL_RULES`` says; no guard band of
any buffer is touched.

Source lines cited as ``b16`` (site-packages ``cudnn/sdpa/bwd/kernels/sm80/
bprop_f16.py``), ``host`` (``.../sm80/prepared_host.py``), ``api``
(``cudnn/sdpa/bwd/api_dsl.py``), ``staged`` (``cudnn/sdpa/bwd/staged_sm80.py``),
nvidia-cudnn-frontend 1.32.0.

What is poisoned, and why the kernel must not read it:

- Q and dO rows past the q bound (dense seq_q_len, THD sequence length) are
  loaded as zeros (b16:384, 703, 721: ``valid_rows``); LSE and D = rowsum(dO O)
  are read at indices clamped into the bound and P is forced to 0 there
  (b16:837, 868, 899, 933): "the clamped value is only ever read, never used
  live" (b16:197). So dO, O and LSE of those rows are dead: NaN. (A dense
  entry with seq_q_len 0 clamps to its row 0, a dead row: its D is then read
  and multiplied by P = 0, so NaN there would leak. The kernel states the
  value is never used live; if the GPU disagrees that is a finding.)
- dSink reads THD rows inside sequences only (b16:1505) and drops rows with a
  non-finite LSE (b16:1539), NaN included.
- K/V rows past the KV bound: the kernel states the intent itself, "zero-filled
  K/V keep dP finite (0) for padded kv-rows so dQ's dS^T K term over those
  rows is a clean 0 (no NaN leak into valid dQ)" (b16:570), and zero-fills
  them where ``GATE_KV`` holds: a partial last tile and THD (b16:385, 586, 600).
  Dense rows past seq_kv_len inside the physical SKV are not gated
  (``kv_bound = SKV``, b16:378): they are loaded and masked through P = 0
  only (b16:166), and a NaN V row makes dP NaN, dS' = NaN x 0. The contract
  is the stated intent and the forward's poison rule (known finding
  dense-padded-kv-rows-nan on O): the check stays, and the H200 shows the
  leak (known findings bwd-dense-padded-kv-nan-dq / -dk-rows).
- THD storage outside every sequence (Q, K, V, dO, O, LSE): every read is at
  a sequence origin and gated by its length (b16:353-366, 486). The buffers
  are handed from cu_seqlens[0] (the backward normalizes cu_seqlens,
  kernels.backward.thd_origin), so the head before it is never handed: its
  poison must not be read, its gradient rows keep the caller's bytes.

What the gradients' capacity holds: ``TAIL_RULES``. ``CALLER`` rows are
judged only in memory the caller handed (an adapter with "caller-outputs");
the public wrapper allocates its gradients with ``torch.empty_like``
(api:931), so there nothing is promised and nothing is judged.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Dict, Optional, Tuple

import torch

from ground.case import Case
from ground.data import bits_of, body_storage, make_grad_output, make_grad_outputs, make_inputs
from kernels.base import require
from properties import judge, recorder
from properties.backward import GRADS, _live, handed_inputs
from properties.common import accepted, device, finish, launched_buffers, storage_outside_view

PROPERTY = "backward_tails"
ZERO, CALLER = "0", "the caller's bytes"


@dataclass(frozen=True)
class TailRule:
    """Gradients ``grads`` of a ``layout`` Case hold ``want`` on ``region``
    (a key of REGIONS), for THD ``init`` (initialize_outputs; None: either)
    and ``heads`` ("gqa": H_q != H_kv, "mha"; None: either); ``why``: the
    source lines that say so."""

    layout: str
    grads: Tuple[str, ...]
    region: str
    want: str
    why: str
    init: Optional[bool] = None
    heads: Optional[str] = None

    def holds(self, case: Case, grad: str, initialize_outputs: bool) -> bool:
        gqa = case.h_q != case.h_kv
        return (
            self.layout == case.layout
            and grad in self.grads
            and (self.init is None or not case.is_thd or self.init == initialize_outputs)
            and (self.heads is None or self.heads == ("gqa" if gqa else "mha"))
        )


TAIL_RULES: Tuple[TailRule, ...] = (
    # ---- dense: the chain writes every row and cell; padding is P = 0
    TailRule(
        "dense",
        ("dq",),
        "padded rows",
        ZERO,
        "host:318, 526 zero the fp32 dQ accumulator; only rows below seq_q_len add to it (b16:1136, 1154); host:410 casts every row",
    ),
    TailRule(
        "dense",
        ("dk", "dv"),
        "padded rows",
        ZERO,
        "dense stores are gated by the physical SKV only (b16:378, 1249): every row is stored from an accumulator that starts "
        "at 0 (b16:654) and sees P = 0 past seq_kv_len (b16:166); GQA: host:411-413 folds every row",
    ),
    TailRule(
        "dense",
        ("dbias",),
        "dead cells",
        ZERO,
        "host:318 zeroes the dBias accumulator, cells past a length get P = 0 (b16:166, 899), host:417 casts every cell",
    ),
    TailRule(
        "dense",
        ("dq", "dk", "dv"),
        "pad columns",
        CALLER,
        "staged:52 stages a padded layout; the copy back writes the logical view only (cudnn/sdpa/fwd/kernels/staged_copy.py:19-33)",
    ),
    # ---- THD: rows before the first sequence (head) and past the last (tail)
    # Rows before cu[0] are never handed: the backward addresses its packed buffers from token 0
    # (it normalizes cu_seqlens), so the adapters hand them from cu[0] (kernels.backward.thd_origin).
    TailRule(
        "thd",
        ("dq", "dk", "dv"),
        "head",
        CALLER,
        "not handed: the backward reads and writes its packed buffers from token 0 of what it is handed, cu_seqlens "
        "normalized to cu - cu[0] (cudnn/frost/tile_dsl/thd.py:115-127, :186-190); the buffers are handed from cu[0]",
    ),
    TailRule("thd", ("dq",), "tail", ZERO, "initialize_outputs zeroes the caller's dQ (host:287-293; api:928 'zeroed dQ ... tails')", init=True),
    TailRule(
        "thd",
        ("dq",),
        "tail",
        CALLER,
        "rows past cu_q[n_seq] 'are the caller's capacity tail and must stay as the caller left them' (b16:1582-1583, 1609)",
        init=False,
    ),
    TailRule("thd", ("dk", "dv"), "tail", ZERO, "initialize_outputs zeroes GQA dK/dV (host:291-293; api:928 'GQA output tails')", init=True, heads="gqa"),
    TailRule("thd", ("dk", "dv"), "tail", CALLER, "the GQA fold writes rows below cu_k[n_seq] only (b16:1676, 1701)", init=False, heads="gqa"),
    TailRule("thd", ("dk", "dv"), "tail", CALLER, "MHA dK/dV are direct kernel outputs (api:928-929; b16:1249; host:291-292)", heads="mha"),
)


# -------------------------------------------------------------- regions
def _side(grad: str) -> str:
    return "kv" if grad in ("dk", "dv") else "q"


def _padded_rows(case: Case, inputs, grad: str, shape) -> torch.Tensor:
    live = inputs.kv_live if _side(grad) == "kv" else inputs.q_live  # (B, S)
    return ~live.to(inputs.q.device)[:, None, :, None].expand(shape)


def _dead_cells(case: Case, inputs, grad: str, shape) -> torch.Tensor:
    """dBias cells past a length in every batch entry the cell serves (a broadcast bias serves all)."""
    q, kv = inputs.q_live.to(inputs.q.device), inputs.kv_live.to(inputs.q.device)
    dead = ~q[:, :, None] | ~kv[:, None, :]  # (B, SQ, SKV)
    if case.bias_batch != case.batch:
        dead = dead.all(0, keepdim=True)
    return dead[:, None].expand(shape)


def _thd_rows(which: str) -> Callable:
    def rows(case: Case, inputs, grad: str, shape) -> torch.Tensor:
        cu = case.cu_seqlens(_side(grad))
        t = torch.arange(shape[0], device=inputs.q.device)
        dead = t < cu[0] if which == "head" else t >= cu[-1]
        return dead[:, None, None].expand(shape)

    return rows


# region -> (case, inputs, gradient, the gradient's logical shape) -> bool mask. "pad columns" is storage (judged apart).
REGIONS: Dict[str, Callable] = {"padded rows": _padded_rows, "dead cells": _dead_cells, "head": _thd_rows("head"), "tail": _thd_rows("tail")}


def poison_dead_rows(case: Case, inputs, o: torch.Tensor, lse: torch.Tensor) -> None:
    """NaN into the O and LSE rows no live Q token owns (dense rows past
    seq_q_len, THD tokens outside every sequence), in place."""
    dead = ~inputs.q_live.to(o.device)
    if case.is_thd:
        o.masked_fill_(dead[:, None, None], float("nan"))
        lse.masked_fill_(dead[None, :], float("nan"))
    else:
        o.masked_fill_(dead[:, None, :, None], float("nan"))
        lse.masked_fill_(dead[:, None, :], float("nan"))


# ------------------------------------------------------------- property
def check_backward_tails(case: Case, adapter, *, initialize_outputs: bool = True):
    """One backward launch with every input element it must not read NaN
    (module docstring), into NaN-filled caller gradient buffers: each
    gradient element the contract defines is NaN-free, each capacity region
    holds what ``TAIL_RULES`` says, every guard band is intact. THD
    ``initialize_outputs=False`` needs an adapter that declares "no-init"
    (else refused, ``Unsupported`` scope "adapter": the test skips)."""
    if not case.is_bwd:
        raise ValueError(f"check_backward_tails judges backward Cases (direction 'bwd'); got {case.describe()}")
    if case.is_thd and not initialize_outputs:
        require(adapter, "no-init", "the backward's THD tails with initialize_outputs=False")
    recorder.begin(PROPERTY, case, initialize_outputs=initialize_outputs)
    start = time.perf_counter()
    dev = device()
    inputs = make_inputs(case, dev, poison=True)
    do = make_grad_output(case, dev, poison=True)
    # O and LSE of the live rows as numerics hands them (a forward kernel run on NaN padding
    # would itself leak: dense-padded-kv-rows-nan), then the dead rows NaN.
    fwd_inputs = make_inputs(case, dev, poison=True, pad_fill=0.0)
    o, lse, fwd = handed_inputs(case, adapter, fwd_inputs, dev)
    poison_dead_rows(case, inputs, o, lse)
    grads = make_grad_outputs(case, dev)
    prefill = {n: (t.clone(), body_storage(t).clone()) for n, t in grads.items()}
    result = accepted(PROPERTY, case, start, lambda: adapter.backward(case, inputs, o, lse, do, grads, initialize_outputs=initialize_outputs))
    caller = "caller-outputs" in getattr(adapter, "supports", frozenset())
    checked: Dict[str, int] = {}
    # Elements each check judged, read in one host sync at the end (a device count per check
    # was a wait for this process's turn on a GPU that 16 workers share).
    counts: Dict[str, torch.Tensor] = {}

    def judged():
        buffers = launched_buffers(inputs, (o, lse), result)
        buffers.update({f"{n} (caller)": t for n, t in grads.items()}, do=do)
        if fwd is not None:  # a forward kernel launched on inputs of its own: those and its staging copies
            buffers.update({f"{n} (forward launch)": t for n, t in launched_buffers(fwd_inputs, None, fwd).items()})
        judge.guards_intact(PROPERTY, case, buffers)
        for name in GRADS:
            if name not in grads:
                continue
            if name not in result.grads:
                judge.failed(PROPERTY, case, f"the backward returned no {name}", {"missing": [name]}, check="outputs")
                continue
            got = grads[name] if caller else result.grads[name]  # the memory the contract speaks of
            ruled = torch.zeros(got.shape, dtype=torch.bool, device=got.device)
            for rule in (r for r in TAIL_RULES if r.holds(case, name, initialize_outputs)):
                label = f"{name} {rule.region}"
                if rule.want == CALLER and not caller:
                    checked[label] = 0  # the adapter's own allocation: no caller bytes to keep
                    continue
                if rule.region == "pad columns":
                    pad = storage_outside_view(got)
                    flat = body_storage(got)
                    counts[label] = pad.sum()
                    judge.exactly(
                        PROPERTY,
                        case,
                        name,
                        bits_of(flat),
                        bits_of(prefill[name][1]),
                        pad,
                        f"{label} ({rule.want}: {rule.why})",
                        check="pad columns",
                        defer=True,
                    )
                    continue
                where = REGIONS[rule.region](case, inputs, name, got.shape)
                ruled |= where
                counts[label] = where.sum()
                want = torch.zeros_like(got) if rule.want == ZERO else prefill[name][0]
                g, w = (got, want) if rule.want == ZERO else (bits_of(got), bits_of(want))
                judge.exactly(PROPERTY, case, name, g, w, where, f"{label} ({rule.want}: {rule.why})", check="capacity", defer=True)
            live = _live(case, inputs, name, got.shape) & ~ruled
            counts[f"{name} defined"] = live.sum()
            judge.exactly(
                PROPERTY,
                case,
                name,
                torch.isnan(got),
                torch.zeros_like(got, dtype=torch.bool),
                live,
                "gradient elements the contract defines (NaN read from a dead input, or never written)",
                check="no nan",
                defer=True,
            )
        if counts:
            checked.update(zip(counts, torch.stack(list(counts.values())).tolist()))
        return {}

    notes = {
        **result.notes,
        "initialize_outputs": initialize_outputs,
        "checked_elements": checked,
        "judged_memory": "caller buffers" if caller else "the adapter's own gradients (caller-byte rules not judged)",
    }
    if fwd is not None:
        notes["forward"] = {k: fwd.notes.get(k) for k in ("compile_key", "mode", "arch")}
    return finish(PROPERTY, case, start, judged, params={"initialize_outputs": initialize_outputs}, compile=result.compile.to_dict(), notes=notes)
