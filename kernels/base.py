"""What every kernel adapter takes and returns.

An adapter runs one ``Case`` (with the tensors ``ground.data`` made for
it) on one entry point of the kernels under test and hands back a
``KernelResult``: O and LSE in the suite's layouts plus a ``CompileDelta``
read around that single call.

Layouts (the same as ``ground.data.make_outputs``):
- dense: O logical (B, H, SQ, D_V) over storage per ``case.memory``; LSE (B, H, SQ).
- THD:   O packed (T_q, H, D_V); LSE head-major (H, T_q).

``KernelResult.o``/``lse`` are views of the memory the kernel itself wrote
(the caller's buffers, an adapter's staging copy, or the public wrapper's own
outputs), never a copy the adapter made afterwards; ``handed`` holds every
buffer the kernel was handed, so the properties can check their guard bands.
An adapter declares what it can be asked for beyond a plain launch in
``supports`` (ground.tables.CAPABILITIES) and refuses the rest
(``require``); every refusal is a ``ground.outcome.Unsupported`` whose scope
(machine / adapter / case) decides what happens to it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import FrozenSet, Optional, Protocol, Tuple

import torch

from ground.case import Case
from ground.data import CaseTensors
from ground.outcome import Unsupported
from ground.tables import CAPABILITIES


def key_digest(key: tuple) -> str:
    """A short stable name of a compile key (an observation's ``compile_key``: reports count distinct keys)."""
    return hashlib.sha1(repr(key).encode()).hexdigest()[:12]


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
    # Views (suite layouts) of the memory the kernel wrote.
    o: torch.Tensor
    lse: Optional[torch.Tensor]
    compile: CompileDelta = field(default_factory=CompileDelta)
    # Free-form facts about how the case was driven (flavor, padded widths,
    # compiled arch), recorded in reports and case files.
    notes: dict = field(default_factory=dict)
    # role ("q", "k", "v", "o", "lse", "bias", "sinks", "seq_q_lens",
    # "seq_kv_lens", "cu_q", "cu_kv") -> the tensor whose address the kernel
    # got for it: the caller's buffer or a staging copy (notes["staged"] names
    # those). Memory the kernels' own callers allocate (the public wrapper's
    # outputs and internal copies) is not the adapter's to hand, so not here.
    handed: dict = field(default_factory=dict)
    # A backward (case.direction == "bwd"): role ("dq", "dk", "dv", "dbias",
    # "dsink") -> views of the gradients the kernel wrote; o/lse are then the
    # O and LSE it was handed. Empty for a forward.
    grads: dict = field(default_factory=dict)


class Adapter(Protocol):
    """What every adapter offers (kernels.prepared.PreparedAdapter,
    kernels.wrapper.WrapperAdapter); ``kernels.get_adapter`` returns one."""

    name: str  # a key of ground.tables.ADAPTERS
    label: str  # name plus mode, for headers and reports
    supports: FrozenSet[str]  # keys of ground.tables.CAPABILITIES
    # capability -> why this adapter lacks it (for the skip reason)
    lacks: dict

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
        (ground.contracts.TAMPERS). Contract violations raise the
        entry point's own exception."""
        ...

    def compile_only(self, case: Case, *, tamper: Optional[str] = None, live: bool = False) -> CompileDelta:
        """Specialize and compile ``case`` for sm_80 without launching (CPU tier);
        ``live``: for the live GPU instead, as a run's compile step. An adapter
        without "compile-only" refuses (``require``)."""
        ...

    def backward(
        self,
        case: Case,
        inputs: CaseTensors,
        o: torch.Tensor,
        lse: torch.Tensor,
        do: torch.Tensor,
        grads: Optional[dict] = None,
        *,
        initialize_outputs: bool = True,
    ) -> KernelResult:
        """Launch the backward of ``case`` (direction "bwd") on O, LSE and dO
        (O's layout); ``grads`` are caller-owned gradient buffers
        (ground.data.make_grad_outputs) where the entry point takes
        them. kernels/backward.py."""
        ...


def require(adapter, capability: str, what: str) -> None:
    """Refuse (``Unsupported``, scope "adapter": naming the adapter, the
    capability and why it lacks it) unless ``adapter`` declares
    ``capability`` in ``supports``."""
    if capability not in CAPABILITIES:
        raise ValueError(f"unknown capability {capability!r} (known: {', '.join(CAPABILITIES)})")
    if capability not in getattr(adapter, "supports", frozenset()):
        name = getattr(adapter, "label", None) or getattr(adapter, "name", type(adapter).__name__)
        raise Unsupported.lacking(name, capability, what, getattr(adapter, "lacks", {}).get(capability, ""))
