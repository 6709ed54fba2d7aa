"""The test matrix (properties.matrix) is what pytest collects:
every declared node id, in order, and nothing else in the property test
modules; each test carries its family's markers, ``property`` included;
every family names a known property, example budget, marker and fixture."""

from __future__ import annotations

import dataclasses
import importlib
import subprocess
import sys

from properties import PROPERTIES
from properties.matrix import MATRIX, STRATUM, TRANSFORM
from strategies.profiles import KIND_SCALE

MODULES = sorted({f.module for f in MATRIX})
FIXTURES = {"adapter", "prepared_adapter", "wrapper_adapter"}  # conformance/conftest.py and the plugin


def test_collected_tests_are_the_declared_ones(tmp_path):
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:xdist", f"--report-dir={tmp_path}", *MODULES],
        capture_output=True,
        text=True,
        timeout=300,
    )
    collected = [line.strip() for line in r.stdout.splitlines() if "::" in line]
    declared = [nodeid for module in MODULES for f in MATRIX if f.module == module for nodeid in f.nodeids()]
    assert collected == declared, r.stdout[-2000:] + r.stderr[-2000:]


def test_each_test_carries_its_family_markers():
    for f in MATRIX:
        fn = getattr(importlib.import_module(f.module[:-3].replace("/", ".")), f.test)
        marks = {m.name: m for m in fn.pytestmark}
        assert marks["property"].args == (f.property,), f.test
        assert set(f.marks) <= set(marks) and ("parametrize" in marks) == bool(f.axes), f.test
        assert hasattr(fn, "hypothesis") == (f.strategy is not None), f.test  # drawn families are Hypothesis tests


def test_families_are_well_formed():
    for f in MATRIX:
        assert f.property in PROPERTIES and (f.examples is None or f.examples in KIND_SCALE), f.test
        assert set(f.marks) <= {"gpu", "compile", "cpu_tier", "large"} and (f.adapter is None or f.adapter in FIXTURES), f.test
        assert len(set(f.argnames())) == len(f.argnames()), f.test
        assert f.module.startswith("conformance/test_") and f.test.startswith("test_"), f.test
        # A harness search widens strata and draws transforms: only drawn families have them.
        assert f.strategy is not None or not {STRATUM, TRANSFORM} & set(f.roles()), f.test


def test_generated_tests_call_their_property(monkeypatch):
    """Each generated test, called as pytest calls it (stand-in fixtures and
    properties), checks its family's property on the transformed Case with
    its adapter fixture and parameters (on CPU too: the GPU ones skip here)."""
    from ground.outcome import Observation
    from properties import matrix

    seen = []

    def stand_in(name):
        def check(case, adapter, **params):
            seen.append((name, case, adapter, params))
            return Observation(name, case, ratios={"o": 0.5})

        return check

    monkeypatch.setattr(matrix, "PROPERTIES", {name: dataclasses.replace(prop, check=stand_in(name)) for name, prop in PROPERTIES.items()})
    for f in MATRIX:
        fn = getattr(importlib.import_module(f.module[:-3].replace("/", ".")), f.test)
        fixtures = {**({f.adapter: f"{f.adapter} fixture"} if f.adapter else {}), **({"gpu": None} if "gpu" in f.marks else {})}
        for values, _ in list(f.parameters())[:2]:  # padding_poison: both padded operands
            seen.clear()
            fn(**values, **fixtures)
            assert seen, f.test
            for name, case, adapter, params in seen:
                assert name == f.property and params == f.params_for(values) and adapter == fixtures.get(f.adapter), f.test
                assert case == f.fixed_case(values) if f.strategy is None else case.layout in ("dense", "thd")
                if "padded" in values:
                    assert getattr(case, matrix.PADDED[values["padded"]]) is None
                if "flavor" in values:
                    assert matrix.stratum_of(case) == {"flavor": values["flavor"], "dtype": values["dtype"]}
