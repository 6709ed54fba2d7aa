"""What a property hands back: an Observation, or a PropertyFailure; or
why nothing could be run: an ``Unsupported`` refusal (its policy: ``REFUSALS``).

Observations and failures carry the Case, so whatever judged it (pytest, the
repro command, the mutant harness) can record it in the report or write it to
a case file.
"""

from __future__ import annotations

import unittest
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Dict, List, Optional

from .tables import CAPABILITIES

if TYPE_CHECKING:  # annotations only: ground.case raises this module's Unsupported (Case.require_expressible)
    from .case import Case


# The notes key of an example whose compiles are deliberate (why, in words): a
# compile check compiling on purpose where the run shares nothing (a fresh
# cache, an sm_80 artifact); reports count them apart from the run's.
DELIBERATE_COMPILES = "deliberate_compiles"


@dataclass
class Observation:
    property: str
    case: Case
    # error / bound per checked quantity ('o', 'lse'); <= 1 passes.
    ratios: dict = field(default_factory=dict)
    compile: Optional[dict] = None  # kernels.base.CompileDelta.to_dict()
    seconds: float = 0.0
    outcome: str = "passed"  # passed | failed | xfailed (every failed check excused by a known finding)
    findings: list = field(default_factory=list)  # ids of the known findings that excused a failed check
    exercised: list = field(default_factory=list)  # ids of the known findings this example exercised
    notes: dict = field(default_factory=dict)
    phases: dict = field(default_factory=dict)  # ground.phases: seconds per phase of this example

    def to_dict(self) -> dict:
        return {
            "property": self.property,
            "case": self.case.to_dict(),
            "ratios": self.ratios,
            "compile": self.compile,
            "seconds": self.seconds,
            "outcome": self.outcome,
            "findings": self.findings,
            "exercised": self.exercised,
            "notes": self.notes,
            "phases": self.phases,
        }


class PropertyFailure(AssertionError):
    """A property does not hold for ``case``.

    ``summary`` is one line (observed vs expected); ``detail`` holds the
    worst elements with their coordinates and the region they sit in (see
    properties.judge), for the repro command and the case file.

    The structured key a known finding is matched against
    (ground.findings): ``check`` (the check's id), the quantity
    (``detail["quantity"]``), and what failed: ``where`` (a bool mask of the
    failing elements over the quantity) or ``observed`` (the outcome seen).
    ``failures``: every failed check of the example that no finding excuses
    (this one first).
    """

    def __init__(
        self,
        property: str,
        case: Case,
        summary: str,
        detail: Optional[dict] = None,
        observation: Optional[Observation] = None,
        *,
        check: Optional[str] = None,
        where: Any = None,
        observed: Optional[str] = None,
    ):
        super().__init__(f"[{property}] {summary}")
        self.property = property
        self.case = case
        self.summary = summary
        self.detail = detail or {}
        self.observation = observation
        self.check = check
        self.where = where
        self.observed = observed
        self.failures: List["PropertyFailure"] = [self]


# ------------------------------------------------------------------ refusals
@dataclass(frozen=True)
class Policy:
    """What a refusal of one scope does, wherever it is raised.

    ``meaning``: when an entry point refuses with this scope. ``in_example``:
    inside a Hypothesis example, ``"skip"`` (the test skips with the reason:
    Hypothesis re-raises a ``unittest.SkipTest`` at once, neither retrying nor
    shrinking) or ``"reject"`` (``hypothesis.reject()``: this example gives
    no verdict, the test draws another). Any other pytest test skips with the
    reason. ``cli_exit``: the exit status of the command-line front ends
    (``sdpa-conformance repro``, ``gate``, ``mutants``), which print the
    message."""

    meaning: str
    in_example: str  # "skip" | "reject"
    cli_exit: int


# The refusal policy, declared once: scope -> Policy. ``properties.common.refusal_policy``
# applies it where a property runs (ground imports no hypothesis), the front ends read ``cli_exit``.
REFUSALS: Dict[str, Policy] = {
    "machine": Policy("this machine cannot run it: no CUDA GPU, or an arch the entry point does not serve in this mode", "skip", 2),
    "adapter": Policy("the entry point lacks a capability the call needs (ground.tables.CAPABILITIES)", "skip", 2),
    "case": Policy("this Case holds a fact the entry point cannot express, or the metamorphic relation does not move it", "reject", 2),
}


class Unsupported(unittest.SkipTest):
    """The one way to say "this cannot run here": no verdict, never a
    failure. ``scope`` (a key of ``REFUSALS``) decides what happens to it,
    the same everywhere: "machine" and "adapter" skip the test with the
    reason, "case" rejects the Hypothesis example (elsewhere: skips); the
    command-line front ends exit ``REFUSALS[scope].cli_exit`` (2) with the
    message. Raised before anything launches, never substituting another
    mode. A ``unittest.SkipTest``: pytest reports the test skipped with this
    reason, and Hypothesis re-raises it at once instead of shrinking.

    Build one with ``machine`` (no GPU, an arch this mode does not serve),
    ``lacking`` (an adapter's missing capability) or ``case`` (a fact the
    adapter cannot express; a relation that does not move the Case)."""

    def __init__(self, scope: str, reason: str, *, adapter: Optional[str] = None, capability: Optional[str] = None, what: Optional[str] = None, hint: str = ""):
        if scope not in REFUSALS:
            raise ValueError(f"refusal scope {scope!r}: one of {', '.join(REFUSALS)}")
        self.scope, self.reason, self.hint = scope, reason, hint
        self.adapter, self.capability, self.what = adapter, capability, what
        super().__init__(reason)

    def __reduce__(self):  # pickles with its scope and facts (args holds the reason alone)
        return (self.__class__, (self.scope, self.reason), dict(self.__dict__))

    @property
    def policy(self) -> Policy:
        return REFUSALS[self.scope]

    @property
    def exit_status(self) -> int:
        """The command-line front ends' exit status for it (``Policy.cli_exit``)."""
        return self.policy.cli_exit

    def usage(self) -> str:
        """The message a command-line front end prints (with its hint, if any)."""
        return str(self) + (f" ({self.hint})" if self.hint else "")

    @classmethod
    def machine(cls, reason: str, *, adapter: Optional[str] = None) -> "Unsupported":
        """This machine cannot run it: no CUDA GPU, or an arch ``adapter``'s entry point does not serve in this mode."""
        return cls("machine", reason, adapter=adapter)

    @classmethod
    def lacking(cls, adapter: str, capability: str, what: str, why: str = "") -> "Unsupported":
        """``adapter`` cannot run ``what``: it does not declare ``capability`` (``why``: what it does instead)."""
        reason = f"adapter {adapter!r} cannot run {what}: no {capability!r} ({CAPABILITIES.get(capability, '?')})"
        return cls("adapter", reason + (f"; {why}" if why else ""), adapter=adapter, capability=capability, what=what)

    @classmethod
    def case(cls, reason: str, *, adapter: Optional[str] = None, hint: str = "") -> "Unsupported":
        """This Case holds a fact ``adapter`` cannot express, or the relation asked for does not move it."""
        return cls("case", reason, adapter=adapter, hint=hint)
