"""What every kernel adapter takes and returns.

An adapter runs one ``Case`` (with the tensors ``conformance.ground.data`` made for
it) on one entry point of the kernels under test and hands back a
``KernelResult``: O and LSE in the suite's layouts plus a ``CompileDelta``
read around that single call.

Layouts (the same as ``conformance.ground.data.make_outputs``):
- dense: O logical (B, H, SQ, D_V) over storage per ``case.memory``; LSE (B, H, SQ).
- THD:   O packed (T_q, H, D_V); LSE head-major (H, T_q).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Protocol, Tuple

import torch

from conformance.ground.case import Case
from conformance.ground.data import CaseTensors


@dataclass(frozen=True)
class CompileDelta:
    """Compile counters read before and after ONE adapter call.

    misses/hits/memo_hits: ``cudnn.frost.compiled_cache.stats()`` deltas;
    thd_lru_misses: growth of ``compile_thd_host.cache_info().misses``
    (and ``build_launch``'s); modules: template modules the loader minted;
    seconds: wall time spent in the call's compile step.
    """

    misses: int = 0
    hits: int = 0
    memo_hits: int = 0
    thd_lru_misses: int = 0
    modules: int = 0
    seconds: float = 0.0

    @property
    def compiled(self) -> bool:
        """True when this call reached the compiler (a real compile)."""
        return self.misses > 0

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class KernelResult:
    o: torch.Tensor
    lse: Optional[torch.Tensor]
    compile: CompileDelta = field(default_factory=CompileDelta)
    # Free-form facts about how the case was driven (flavor, padded widths,
    # compiled arch), recorded in reports and case files.
    notes: dict = field(default_factory=dict)


class Adapter(Protocol):
    """What every adapter offers (kernels.prepared.PreparedAdapter,
    kernels.wrapper.WrapperAdapter); ``kernels.get_adapter`` returns one."""

    name: str  # a key of conformance.ground.tables.ADAPTERS
    label: str  # name plus mode, for headers and reports

    def run(
        self,
        case: Case,
        inputs: CaseTensors,
        outputs: Optional[Tuple[torch.Tensor, torch.Tensor]] = None,
        *,
        initialize_outputs: bool = True,
        tamper: Optional[str] = None,
    ) -> KernelResult:
        """Launch the kernel on ``inputs``. ``outputs`` are caller-owned (O, LSE)
        buffers (pre-poisoned by tail properties) that the kernel writes into
        where the entry point accepts caller storage; ``initialize_outputs``
        selects the THD host's zero-initialisation mode where it has one;
        ``tamper`` names a call-level contract violation
        (conformance.ground.contracts.TAMPERS). Contract violations raise the
        entry point's own exception."""
        ...

    def compile_only(self, case: Case, *, tamper: Optional[str] = None) -> CompileDelta:
        """Specialize and compile ``case`` for sm_80 without launching (CPU tier)."""
        ...
