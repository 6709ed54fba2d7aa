"""An honest SM80 forward stand-in for the CPU: the float64 reference rounded
into the caller's buffers where the kernel writes them, nowhere else.

``ReferenceKernel`` follows the prepared entry's output contract
(properties.tails.tail_expectation): dense O and LSE stored whole; THD O and
LSE stored at the live tokens, the whole capacity zeroed first when
``initialize_outputs`` (the host's ``zero_outputs``), the caller's bytes left
otherwise; without a Stats output the LSE buffer is never touched. Every
property that launches must pass on it: what fails is the suite's (a false
red), or a ``mischief`` planted on purpose (one out-of-bounds access)."""

from __future__ import annotations

import torch

from ground.data import flat_storage, guard_bands, make_outputs
from kernels.base import CompileDelta, KernelResult


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
