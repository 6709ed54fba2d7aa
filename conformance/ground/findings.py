"""Known findings: real kernel discrepancies the suite expects, with the reason.

A findings file (TOML, or JSON with the same shape) holds ``[[finding]]``
entries; docs/known_findings.md describes the format. Each entry selects
either

- tests: ``nodeid`` = a pytest node id or glob (fnmatch; an exact node id
  also matches literally, brackets included). The plugin marks the matching
  tests xfail at collection.
- examples: ``rule`` = a contract rule name (matches cases whose
  ``violation`` is that rule), and/or ``property`` with ``when`` = Case facts
  that must all be equal. Properties ask ``match(property, case)`` when they
  fail and turn a match into an ``xfailed`` Observation.

An entry that matches nothing by the end of a run is reported (pytest warning
and report): the kernel was fixed, or the entry is stale.
"""

from __future__ import annotations

import builtins
import dataclasses
import fnmatch
import json
import os
from dataclasses import dataclass, field
from typing import Any, List, Optional

from conformance.ground.case import FACTS, Case, CaseFileError, coerce_fact

KEYS = {"id", "reason", "nodeid", "rule", "property", "when", "link"}


class FindingsError(ValueError):
    """A findings file that cannot be used; the message names file, entry and key."""


@dataclass(frozen=True)
class Finding:
    id: str
    reason: str
    nodeid: Optional[str] = None
    rule: Optional[str] = None
    property: Optional[str] = None
    when: dict = field(default_factory=dict)
    link: Optional[str] = None

    @builtins.property  # the field 'property' shadows the builtin in this class body
    def kind(self) -> str:
        return "nodeid" if self.nodeid else ("rule" if self.rule else "property")

    def matches_node(self, nodeid: str) -> bool:
        return self.nodeid is not None and (nodeid == self.nodeid or fnmatch.fnmatchcase(nodeid, self.nodeid))

    def matches(self, property: str, case: Case) -> bool:
        if self.nodeid is not None:
            return False
        if self.rule is not None and case.violation != self.rule:
            return False
        if self.property is not None and property != self.property:
            return False
        return all(getattr(case, k) == v for k, v in self.when.items())

    def describe(self) -> str:
        if self.nodeid:
            return f"tests {self.nodeid}"
        sel = [f"rule {self.rule}"] if self.rule else []
        if self.property:
            sel.append(f"property {self.property}")
        if self.when:
            sel.append(", ".join(f"{k}={v!r}" for k, v in self.when.items()))
        return "; ".join(sel)

    def to_dict(self) -> dict:
        return {k: v for k, v in dataclasses.asdict(self).items() if v not in (None, {})} | {"kind": self.kind}


def parse(doc: Any, source: str = "findings") -> List[Finding]:
    """Validate a parsed findings document ({"finding": [entry, ...]})."""
    if not isinstance(doc, dict) or set(doc) - {"finding"}:
        extra = sorted(set(doc) - {"finding"}) if isinstance(doc, dict) else []
        raise FindingsError(f"{source}: top level must hold only [[finding]] entries" + (f" (found {extra[0]!r})" if extra else ""))
    entries = doc.get("finding", [])
    if not isinstance(entries, list):
        raise FindingsError(f"{source}: 'finding' must be an array of tables ([[finding]])")
    out, seen = [], set()
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise FindingsError(f"{source}: finding #{i + 1}: must be a table")
        named = isinstance(entry.get("id"), str) and entry["id"].strip()
        where = f"{source}: finding {entry['id']!r}" if named else f"{source}: finding #{i + 1}"
        unknown = sorted(set(entry) - KEYS)
        if unknown:
            raise FindingsError(f"{where}: unknown key {unknown[0]!r} (known: {', '.join(sorted(KEYS))})")
        for key in ("id", "reason"):
            if not isinstance(entry.get(key), str) or not entry[key].strip():
                raise FindingsError(f"{where}: key {key!r} is required (a non-empty string)")
        if entry["id"] in seen:
            raise FindingsError(f"{where}: duplicate id")
        seen.add(entry["id"])
        for key in ("nodeid", "rule", "property", "link"):
            if key in entry and (not isinstance(entry[key], str) or not entry[key]):
                raise FindingsError(f"{where}: key {key!r} must be a non-empty string")
        when = entry.get("when", {})
        if not isinstance(when, dict):
            raise FindingsError(f"{where}: key 'when' must be a table of Case fields")
        facts = {}
        for name, value in when.items():
            if name not in FACTS:
                raise FindingsError(f"{where}: 'when' key {name!r} is not a Case field")
            try:
                facts[name] = coerce_fact(name, value)
            except CaseFileError as e:
                raise FindingsError(f"{where}: 'when' {e}") from None
        if "nodeid" in entry:
            if {"rule", "property", "when"} & set(entry):
                raise FindingsError(f"{where}: 'nodeid' selects tests; it cannot be combined with 'rule'/'property'/'when'")
        elif "rule" not in entry and not ("property" in entry and facts):
            # A bare property would hide every failure of it: too broad to be a finding.
            raise FindingsError(f"{where}: needs 'nodeid', 'rule', or 'property' with a non-empty 'when'")
        out.append(Finding(entry["id"], entry["reason"], entry.get("nodeid"), entry.get("rule"), entry.get("property"), facts, entry.get("link")))
    return out


def load(path) -> List[Finding]:
    """Read a findings file (.toml, else JSON)."""
    path = os.fspath(path)
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise FindingsError(f"{path}: cannot read known findings ({e.strerror})") from None
    try:
        if path.endswith(".json"):
            doc = json.loads(raw)
        else:
            doc = _toml().loads(raw.decode("utf-8"))
    except ValueError as e:  # JSONDecodeError and TOMLDecodeError are ValueErrors
        raise FindingsError(f"{path}: not valid {'JSON' if path.endswith('.json') else 'TOML'}: {e}") from None
    return parse(doc, path)


def _toml():
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        try:
            import tomli as tomllib
        except ModuleNotFoundError:
            raise FindingsError("reading a TOML findings file on Python 3.10 needs 'tomli' (or use a .json file)") from None
    return tomllib


# ---------------------------------------------------- the run's active entries
_active: List[Finding] = []


def activate(findings: List[Finding]) -> List[Finding]:
    """Make ``findings`` the ones match() consults; returns the previous list."""
    global _active
    previous, _active = _active, list(findings)
    return previous


def active() -> List[Finding]:
    return list(_active)


def match(property: str, case: Case) -> Optional[Finding]:
    """The known finding that explains ``property`` failing on ``case``, or None."""
    for f in _active:
        if f.matches(property, case):
            return f
    return None


def match_node(nodeid: str) -> List[Finding]:
    """Node-id entries selecting this test (the plugin marks it xfail)."""
    return [f for f in _active if f.matches_node(nodeid)]
