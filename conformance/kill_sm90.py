"""The kill harness' searches of the sm90 family (the native Hopper D512
forward): one ``Sm90Kind`` per sm90 property test of the compile entry, run
on ``Sm90Adapter(rewrites=mutant.rewrites)`` by the kill harness (``conformance.kill``).

A kind searches as its pytest test checks: the Cases of
``strategies.sm90.sm90_cases`` the test draws, the property function it
calls with its arguments (under the refusal policy, as the test's
``_judged``), one search over both dtypes (the test is one test, not one per
stratum), its example count from its budget kind
(``strategies.profiles.KIND_SCALE``, as the SM80 kinds: a count, never a
time). The sm90 family has no flavors and no transform axes. The public
wrapper's parameters of the dense tests (``[wrapper]``) are not searched:
the mutants' rewrites reach the compile entry (``Sm90Adapter``), which is
what the harness hands them.

``PENDING`` names the sm90 kinds that would kill a mutant but cannot run yet,
and why: the mutant's ``expected_killer`` names one, its verdict over the
kinds that run is still measured (a survivor there is a blind spot of the
suite, as it is).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Tuple

FAMILY = "sm90"
HOPPER = (9, 0)  # the family's artifacts are sm_90a: it launches on SM 9.0 only


@dataclass(frozen=True, eq=False)
class Sm90Kind:
    """One sm90 property search: the function ``call`` ("module:name", of
    ``property``) with ``params`` on the Cases ``sm90_cases(layouts=layouts)``
    draws (``cases`` "module:name": that strategy's, called with the dtypes,
    instead); ``examples`` its budget kind; ``test`` the node id it stands for."""

    name: str
    property: str
    examples: str
    test: str
    call: str
    layouts: Tuple[str, ...] = ("dense",)
    params: dict = field(default_factory=dict)
    cases: str = ""
    family_name = FAMILY
    backward = False
    target = False  # the sm90 tests call no hypothesis.target(): neither does their search
    fixed: dict = field(default_factory=dict)  # no split axes: nothing fixed per search

    def strategy(self, flavors=(), dtypes=None, adapter=None):
        """SearchStrategy of ({}, the Case checked): nothing is drawn beside the Case."""
        import importlib

        from ground.case import DTYPES
        from strategies.sm90 import sm90_cases

        if self.cases:
            module, name = self.cases.split(":")
            return getattr(importlib.import_module(module), name)(tuple(dtypes or DTYPES)).map(lambda case: ({}, case))
        return sm90_cases(layouts=self.layouts, dtypes=tuple(dtypes or DTYPES)).map(lambda case: ({}, case))

    def check(self, case, adapter):
        """The property the pytest test calls, as it calls it: a refusal takes
        the refusal policy (a Case the adapter cannot express is rejected)."""
        import importlib

        from ground.outcome import Unsupported
        from properties.common import refusal_policy

        module, name = self.call.split(":")
        try:
            return getattr(importlib.import_module(module), name)(case, adapter, **self.params)
        except Unsupported as refusal:
            refusal_policy(refusal)

    def strata(self, flavors) -> list:
        return [None]  # one test over both dtypes: one search

    def tests(self) -> int:
        return 1

    def runs_in(self, profile: str, stratum) -> bool:
        """Whether ``profile`` runs the test this kind stands for, on the compile entry (properties.matrix.PROFILE_TESTS)."""
        from properties.matrix import in_profile

        return in_profile(profile, self.test.split("::")[-1].split("[")[0], {"entry": "compile", "layout": self.layouts[0]})

    def nodeid(self, case=None, drawn: Optional[dict] = None) -> str:
        return self.test


NUMERICS, TAILS = "properties.numerics:check_numerics", "properties.tails:check_tails"
REUSE = "properties.compile_cache_sm90:check_sm90_compile_reuse"
SM90_KINDS: Tuple[Sm90Kind, ...] = (
    Sm90Kind("sm90_numerics_dense", "numerics", "numerics", "conformance/test_sm90_numerics.py::test_sm90_numerics_dense[compile]", NUMERICS),
    Sm90Kind(
        "sm90_numerics_thd", "numerics", "numerics", "conformance/test_sm90_numerics.py::test_sm90_numerics_thd", NUMERICS, ("thd",), params={"tails": True}
    ),
    Sm90Kind("sm90_tails_dense", "tails", "tails", "conformance/test_sm90_numerics.py::test_sm90_tails_dense[compile]", TAILS),
    Sm90Kind(
        "sm90_compile_reuse_dense",
        "compile_reuse",
        "compile_reuse",
        "conformance/test_sm90_compile.py::test_sm90_runtime_facts_mint_no_compile[dense]",
        REUSE,
        params={"launch": True},
    ),
    # The large tier (gigabytes per example): budgeted as the SM80 large kinds ("large"), searched only
    # for the mutant that names it and the control (conformance.kill.kinds.searched).
    Sm90Kind(
        "sm90_numerics_large_offsets",
        "numerics",
        "large",
        "conformance/test_sm90_large.py::test_sm90_large_offsets",
        NUMERICS,
        cases="strategies.sm90_large:sm90_large_cases",
    ),
)
# Kinds a mutant needs that cannot run yet: why (none now).
PENDING: dict = {}


def hopper_refusal(capability: Optional[Tuple[int, int]]) -> Optional[str]:
    """Why the sm90 mutants cannot run on a device of this compute capability
    (None: no CUDA device), or None where they can."""
    from ground.tables import NO_GPU

    if capability is None:
        return f"{NO_GPU}: the sm90 family's mutants need a Hopper GPU (SM 9.0)"
    if tuple(capability) != HOPPER:
        return f"the sm90 family's mutants need a Hopper GPU (SM 9.0): its artifacts are sm_90a; this GPU is SM {capability[0]}.{capability[1]}"
    return None
