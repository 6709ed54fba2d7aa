"""The mutant record: a plausible bug as source rewrites of the kernels under
test (``kernels.source.Rewrite``). The catalogue is ``kernels.mutants``
(the SM80 family) and ``kernels.mutants_sm90`` (the sm90 family)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Tuple

from kernels.source import Rewrite


@dataclass(frozen=True)
class Mutant:
    name: str
    bug_class: str  # a kernels.mutants.BUG_CLASSES key
    rewrites: Tuple[Rewrite, ...]
    expected_killer: str  # a conformance.kill.kinds.KINDS name (sm90: or a conformance.kill_sm90.PENDING one)
    why: str  # the real bug it imitates
    probe: dict = field(default_factory=dict)  # Case fields reaching the mutated code
    scope: str = ""  # why only one template family, when so
    family: str = "sm80"  # the kernel family it is planted in (ground.families): which adapter and properties judge it

    @property
    def targets(self) -> Tuple[str, ...]:
        return tuple(sorted({rw.target for rw in self.rewrites}))

    @property
    def digest(self) -> str:
        """Every rewrite in full (target, text, replacement, regex): a record of the
        mutant is the record of these rewrites only (the kill harness' --resume)."""
        text = repr([(rw.target, rw.pattern, rw.replacement, rw.regex) for rw in self.rewrites])
        return hashlib.sha256(text.encode()).hexdigest()[:16]
