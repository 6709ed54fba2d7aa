"""A property is one object (``properties.registry.Property``): its name, its
served check, the checks its failures (and known findings) may name, its
schedule weight, the directions it judges and its doc. Nothing else holds a
table of per-property facts: the findings vocabulary is the union of the
properties' checks, the schedule reads their weights, the test matrix names
them, and the docs list exactly them."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

import conformance.schedule
from ground import findings
from ground.case import DIRECTIONS
from properties import CHECKS, PROPERTIES, REGISTRY, Property
from properties.common import served
from properties.matrix import MATRIX
from properties.registry import KINDS

ROOT = Path(__file__).resolve().parents[1]
# Launch checks every property that launches the backward has, and the guard bands every launching
# property checks: docs/known_findings.md states them once, above its table of the other checks.
SHARED = {"guards", "launch"}


def test_every_property_owns_its_facts():
    assert list(PROPERTIES) == [p.name for p in REGISTRY] and all(isinstance(p, Property) for p in REGISTRY)
    served_code = served(lambda case, adapter=None: None).__code__
    for name, prop in PROPERTIES.items():
        assert prop.name == name and prop.doc and "\n" not in prop.doc, name
        assert prop.check.__code__ is served_code, f"{name}: its check runs under the refusal policy (properties.common.served)"
        assert all(kind in KINDS and what for kind, what in prop.checks.values()), name
        assert prop.cold_seconds > 0 and set(prop.directions) <= set(DIRECTIONS) and prop.directions, name
    # Every property names its checks (compiles: any exception, or a call that asks for no kernel).
    assert [p.name for p in REGISTRY if not p.checks] == []
    with pytest.raises(TypeError):
        PROPERTIES["numerics"].checks["new"] = ("plain", "x")  # a property's checks are its own


def test_no_other_module_keeps_a_table_of_them():
    assert not hasattr(findings, "CHECKS") and not hasattr(conformance.schedule, "COLD_SECONDS")
    assert dict(CHECKS) == {p.name: p.checks for p in REGISTRY}


def test_findings_take_their_vocabulary_from_the_caller():
    entry = {"id": "a", "reason": "r", "property": "speed", "check": "fast", "when": {"causal": True}}
    with pytest.raises(findings.FindingsError, match="key 'property': 'speed' is not one of numerics"):
        findings.parse({"finding": [entry]}, checks=CHECKS)
    (f,) = findings.parse({"finding": [entry]}, checks={"speed": {"fast": (findings.PLAIN, "it is fast")}})
    assert (f.property, f.check) == ("speed", "fast")


def test_every_property_serves_test_families_of_its_directions():
    # determinism rides on the backward tests (check_backward judges every deterministic draw by both).
    assert set(PROPERTIES) - {f.property for f in MATRIX} == {"determinism"}
    for f in MATRIX:
        values, _ = next(f.parameters())
        if f.strategy is None:
            direction = f.fixed_case(values).direction
        else:
            seen = []

            @settings(max_examples=1, database=None, deadline=None, suppress_health_check=list(HealthCheck))
            @given(f.strategy_for(values))
            def draw(case):
                seen.append(case.direction)

            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                draw()
            (direction,) = set(seen)
        assert direction in PROPERTIES[f.property].directions, (f.test, direction)


def _table_rows(path: Path, columns: int) -> list:
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and len(cells) == columns and not set(cells[0]) <= set("-: "):
            rows.append(cells)
    return rows


def test_the_docs_list_exactly_the_properties_and_their_checks():
    listed = [name for name, _ in _table_rows(ROOT / "docs" / "properties.md", 2) if name != "property"]
    assert sorted(listed) == sorted(PROPERTIES)
    documented = {(p, c.strip("`")): (kind, what) for p, c, kind, what in _table_rows(ROOT / "docs" / "known_findings.md", 4) if p in PROPERTIES}
    declared = {(p.name, c): spec for p in REGISTRY for c, spec in p.checks.items() if c not in SHARED}
    assert documented == declared
    text = (ROOT / "docs" / "known_findings.md").read_text(encoding="utf-8")
    assert all(re.search(rf"`{c}`", text) for c in SHARED)
