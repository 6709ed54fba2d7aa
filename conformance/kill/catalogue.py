"""The mutant harness' catalogue: the report's defaults, each kernel
family's control, catalogue and adapter (``HARNESS``), the flavors a
rewritten file serves, and the cap on a mutant's wall clock."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Dict, Optional, Tuple

from conformance.kill_sm90 import hopper_refusal
from ground.families import FAMILY_NAMES
from kernels.mutants import MUTANTS, SM90_MUTANTS, Mutant

DEFAULT_REPORT_DIR = "sdpa-report"
FINDINGS_FILE = "known_findings.toml"
CONTROL = Mutant("control", "control", (), "", "No rewrites: the installed kernels. Must survive every property.")
CONTROL_SM90 = Mutant("control_sm90", "control", (), "", "No rewrites: the installed sm90 kernels. Must survive every sm90 property.", family="sm90")


@dataclass(frozen=True)
class FamilyHarness:
    """What the harness needs of a kernel family (``--family``): the control
    its catalogue runs with; its catalogue (read when called: tests plant
    their own); the adapter its mutants are planted in (module, class);
    whether that adapter applies rewrites only when it compiles (then they
    are checked before the search); why a GPU cannot launch its kernels
    (capability -> reason; None: any CUDA GPU can); and what the catalogue
    listing says of its mutants."""

    control: Mutant
    catalogue: Callable[[], Tuple[Mutant, ...]]
    adapter: Tuple[str, str]
    rewrites_at_compile: bool = False
    gpu_refusal: Optional[Callable[[Optional[tuple]], Optional[str]]] = None
    listing: str = ""


HARNESS: Dict[str, FamilyHarness] = {
    "sm80": FamilyHarness(CONTROL, lambda: MUTANTS, ("kernels.prepared", "PreparedAdapter")),
    "sm90": FamilyHarness(
        CONTROL_SM90,
        lambda: SM90_MUTANTS,
        ("kernels.sm90.adapter", "Sm90Adapter"),
        rewrites_at_compile=True,
        gpu_refusal=hopper_refusal,  # sm_90a artifacts: no other GPU launches them
        listing=" (sm90: --family sm90 on a Hopper GPU)",
    ),
}
assert set(HARNESS) == set(FAMILY_NAMES)
CONTROLS = {name: h.control for name, h in HARNESS.items()}  # per family: the control its catalogue runs with


def catalogue_of(family: str) -> Tuple[Mutant, ...]:
    """The mutants of ``family`` (read when called: tests plant their own)."""
    return HARNESS[family].catalogue()


FAMILY_FLAVORS = {
    "f16": ("gptoss", "llama", "dsv3"),
    "d256": ("qwen",),
    "host": ("gptoss", "llama", "dsv3", "qwen"),
    # The backward: one generic template for every flavor, the d=64 MHA kernel for gptoss.
    "bwd_f16": ("gptoss", "llama", "dsv3", "qwen"),
    "bwd_d64": ("gptoss",),
    "bwd_host": ("gptoss", "llama", "dsv3", "qwen"),
    "bwd_spec": ("gptoss", "llama", "dsv3", "qwen"),
}
LARGE_BUDGET = "large"  # the example budget (strategies.profiles) of the large tier's families
# The safety cap on one mutant's wall clock (--budget-s): searching and shrinking. Never
# what decides how many examples a kind draws (its count does); a search it stops is
# "incomplete", not survived. Generous: a full control search on the H200 takes minutes.
CAP_S = 3600.0
GRACE_S = 150  # a worker's start-up, first compiles and one last example past its cap


def adapter_for(mutant: Mutant, adapter_factory=None):
    """The adapter a mutant's searches run on; raises StaleMutant for a rewrite
    that does not match exactly once (a family whose adapter applies its
    rewrites only when it compiles, ``HARNESS``: they are checked here)."""
    import importlib

    from kernels.source import check_rewrites

    harness = HARNESS[mutant.family]
    if adapter_factory is None:
        module, name = harness.adapter
        adapter_factory = getattr(importlib.import_module(module), name)
    if harness.rewrites_at_compile:
        check_rewrites(mutant.rewrites)
    return adapter_factory(rewrites=mutant.rewrites)
