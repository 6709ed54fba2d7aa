"""What a property hands back: an Observation, or a PropertyFailure.

Both carry the Case, so whatever judged it (pytest, the repro command, the
mutant harness) can record it in the report or write it to a case file.
"""

from __future__ import annotations

import unittest
from dataclasses import dataclass, field
from typing import Any, List, Optional

from ground.case import Case


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

    def __init__(self, property: str, case: Case, summary: str, detail: Optional[dict] = None, observation: Optional[Observation] = None,
                 *, check: Optional[str] = None, where: Any = None, observed: Optional[str] = None):
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


class Unsupported(unittest.SkipTest):
    """An adapter was asked for something it cannot run: a capability its
    ``supports`` set does not declare (ground.tables.CAPABILITIES).
    Properties raise it before launching anything, never substituting another
    mode. A ``unittest.SkipTest``: pytest reports the test skipped with this
    reason, and Hypothesis re-raises it at once instead of shrinking; the
    repro command reports it as a usage error."""

    def __init__(self, adapter: str, capability: str, what: str, why: str = ""):
        from .tables import CAPABILITIES

        self.adapter, self.capability, self.what = adapter, capability, what
        reason = f"adapter {adapter!r} cannot run {what}: no {capability!r} ({CAPABILITIES.get(capability, '?')})"
        super().__init__(reason + (f"; {why}" if why else ""))
