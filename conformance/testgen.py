"""The pytest tests of the test matrix (conformance.properties.matrix).

A test module binds each of its families by name::

    test_tails_thd = matrix_test("test_tails_thd")

The test takes the family's axis arguments (one parametrization, ids as the
matrix declares them), Hypothesis' ``data`` (drawn families), the family's
adapter fixture and, for ``gpu`` families, the ``gpu`` fixture (which skips
without a device). It carries the family's markers and its ``property``
marker, which the plugin reads to attribute the test to its property.
"""

from __future__ import annotations

import inspect

import pytest
from hypothesis import given, settings, strategies as st, target

from conformance.properties.matrix import FAMILIES, Family
from strategies import examples


def matrix_test(test: str):
    """The pytest test function of the family named ``test``."""
    fam: Family = FAMILIES[test]
    argnames = fam.argnames()
    fixtures = ([fam.adapter] if fam.adapter else []) + (["gpu"] if "gpu" in fam.marks else [])

    names = argnames + ([] if fam.strategy is None else ["data"]) + fixtures

    def run(*args, **kw):  # Hypothesis passes the arguments positionally, in ``names`` order
        kw.update(zip(names, args))
        values = {a: kw[a] for a in argnames}
        adapter = kw[fam.adapter] if fam.adapter else None
        if fam.strategy is None:
            fam.check(fam.fixed_case(values), adapter, values)
            return
        case = fam.apply(kw["data"].draw(fam.strategy_for(values), label="case"), values)
        obs = fam.check(case, adapter, values)
        if fam.target:
            for quantity, ratio in obs.ratios.items():
                target(ratio, label=f"error/bound {quantity}")

    run.__signature__ = inspect.Signature([inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD) for n in names])
    run.__name__ = run.__qualname__ = test
    run.__doc__ = fam.doc or None
    fn = run
    if fam.strategy is not None:
        # Hypothesis keys derandomized seeds and its example database on the
        # test's source, which every generated test shares: add the family.
        run._hypothesis_internal_add_digest = f"{fam.module}::{test}".encode()
        fn = settings(max_examples=examples(fam.examples))(given(data=st.data())(run))
    if fam.axes:
        params = [pytest.param(*(values[a] for a in argnames), id=pid) for values, pid in fam.parameters()]
        fn = pytest.mark.parametrize(argnames, params)(fn)
    for mark in fam.marks:
        fn = getattr(pytest.mark, mark)(fn)
    return pytest.mark.property(fam.property)(fn)
