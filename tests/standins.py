"""An honest SM80 stand-in for the CPU: the float64 reference rounded into
the caller's buffers where the kernels write them, nowhere else.

``ReferenceKernel`` follows the prepared entry's output contract
(properties.tails.tail_expectation): dense O and LSE stored whole; THD O and
LSE stored at the live tokens, the whole capacity zeroed first when
``initialize_outputs`` (the host's ``zero_outputs``), the caller's bytes left
otherwise; without a Stats output the LSE buffer is never touched. Every
property that launches must pass on it: what fails is the suite's (a false
red), or a ``mischief`` planted on purpose (one out-of-bounds access).

``backward`` follows the backward's (properties.backward_tails.TAIL_RULES):
dense gradients stored whole (the reference's zeros on padded rows and dead
cells); THD dQ, dK, dV at the live tokens, the rows before the first
sequence never touched, the rows past the last zeroed when
``initialize_outputs`` for dQ and for GQA dK/dV, the caller's bytes
otherwise (MHA dK/dV always)."""

from __future__ import annotations

import dataclasses
import sys

import torch

from ground.data import flat_storage, guard_bands, make_outputs
from kernels.base import CompileDelta, KernelResult

# The matrix tests whose every example the stand-ins can stand in for (tests/test_standin_draws.py,
# tools/standin_run.py): those that launch the SM80 kernels and judge their outputs. Left out:
# test_gqa_groups and the large tier (production shapes, half a minute an example on the CPU, judged by
# numerics_dense's code), the compile-cache, replay and hygiene tests (they judge real compiles and
# launches), the THD forward addressing (a capability the stand-in lacks), and the entry relation's
# parameters (their second launch is the public wrapper itself).
STANDS_IN_FOR = (
    "test_numerics_dense",
    "test_numerics_thd",
    "test_tails_dense",
    "test_tails_thd",
    "test_padding_poison",
    "test_padded_row_lse",
    "test_metamorphic_dense",
    "test_metamorphic_thd",
    "test_backward_dense",
    "test_backward_thd",
    "test_backward_tails_dense",
    "test_backward_tails_thd",
)


def device_users() -> list:
    """The loaded property modules that took ``properties.common.device`` (each refuses without a GPU): set
    their ``device`` to launch on the CPU."""
    from properties.common import device

    return [m for name, m in list(sys.modules.items()) if name.split(".")[0] == "properties" and getattr(m, "device", None) is device]


def _unpoisoned(x):
    return None if x is None else torch.where(torch.isnan(x), torch.zeros((), dtype=x.dtype), x)


class ReferenceKernel:
    name = label = "fake"
    supports = frozenset({"caller-outputs", "no-init"})
    lacks: dict = {}

    def __init__(self, mischief=None, *, name: str = None):
        self.mischief = mischief
        if name is not None:
            self.name = self.label = name

    def run(self, case, inputs, outputs=None, *, initialize_outputs=True, tamper=None):
        from reference.attention import attention, reference_for_case

        o, lse = outputs if outputs is not None else make_outputs(case, inputs.q.device)
        if self.mischief == "read past K":  # one key row past the end of K (and V): the guard band
            ext = lambda t: t.as_strided((*t.shape[:2], t.shape[2] + 1, t.shape[3]), t.stride(), t.storage_offset())  # noqa: E731
            ref_o, ref_lse = attention(inputs.q, ext(inputs.k), ext(inputs.v), scale=case.softmax_scale)
        else:
            ref_o, ref_lse = reference_for_case(case, inputs, torch.float64)[:2]
        if case.is_thd:
            live = inputs.q_live
            if initialize_outputs:
                o.zero_()
                if case.has_lse:
                    lse.zero_()
            o[live] = ref_o[live].to(o.dtype)
            if case.has_lse:
                lse[:, live] = ref_lse[:, live].to(lse.dtype)
        else:
            o.copy_(ref_o)
            if case.has_lse:
                lse.copy_(ref_lse)
        g, n, _ = guard_bands(o)
        if self.mischief == "write past O":
            flat_storage(o)[g + n] = 0.0
        if self.mischief == "write before LSE":
            flat_storage(lse)[guard_bands(lse)[0] - 1] = 0.0
        notes = {"adapter": self.name, "initialize_outputs": initialize_outputs} if case.is_thd else {"adapter": self.name}
        handed = {"o": o, **({"lse": lse} if case.has_lse else {}), **inputs.buffers()}
        return KernelResult(o, lse, CompileDelta(), notes, handed)

    def backward(self, case, inputs, o, lse, do, grads=None, *, initialize_outputs=True, addressing=None):
        from ground.data import make_grad_outputs
        from reference.backward import backward_for_case

        grads = grads if grads is not None else make_grad_outputs(case, inputs.q.device)
        # What the backward reads of a dead row is gated to zero (Q and dO rows past the q bound, K/V rows past
        # the KV bound): the float64 gradients of the inputs with their NaN poison as zeros.
        clean = dataclasses.replace(inputs, q=_unpoisoned(inputs.q), k=_unpoisoned(inputs.k), v=_unpoisoned(inputs.v), bias=_unpoisoned(inputs.bias))
        ref = backward_for_case(case, clean, _unpoisoned(do), o=_unpoisoned(o), lse=_unpoisoned(lse))
        for name, buf in grads.items():
            if name not in ref:
                continue
            want = ref[name]
            if case.is_thd and name in ("dq", "dk", "dv"):
                side = "q" if name == "dq" else "kv"
                if initialize_outputs and (name == "dq" or case.h_q != case.h_kv):
                    buf[case.cu_seqlens(side)[-1] :] = 0
                live = inputs.q_live if side == "q" else inputs.kv_live
                buf[live] = want[live].to(buf.dtype)
            else:
                buf.copy_(want)
        notes = {"adapter": self.name, "direction": "bwd", **({"initialize_outputs": initialize_outputs} if case.is_thd else {})}
        handed = {"o": o, "lse": lse, "do": do, **grads, **inputs.buffers()}
        return KernelResult(o, lse, CompileDelta(), notes, handed, grads={n: grads[n] for n in grads if n in ref})


class Sm90StandIn:
    """Both sm90 entry points: dense Cases on the emulated kernel storing into the caller's buffers, THD Cases
    on the reference stand-in that stores as the SM90 THD host does (tests.kernel_emulation_sm90)."""

    name = "sm90"
    supports = frozenset({"caller-outputs", "no-init"})
    lacks: dict = {}

    def __init__(self):
        from tests.kernel_emulation_sm90 import EmulatedSm90Adapter, ReferenceSm90Thd

        self.dense, self.thd = EmulatedSm90Adapter(store=True), ReferenceSm90Thd()

    def run(self, case, inputs, outputs=None, **kw):
        return (self.thd if case.is_thd else self.dense).run(case, inputs, outputs, **kw)
