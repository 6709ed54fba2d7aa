"""The pytest tests of the test matrix (properties.matrix).

A test module binds each of its families by name::

    test_tails_thd = matrix_test("test_tails_thd")

The test takes the family's axis arguments (one parametrization, ids as the
matrix declares them), Hypothesis' ``data`` (drawn families), the family's
adapter fixture and, for ``gpu`` families, the ``gpu`` fixture (which skips
without a device). It carries the family's markers and its ``property``
marker, which the plugin reads to attribute the test to its property.

Every drawn Case is served to the adapters its example launches (``drawn``,
``Family.serve``): facts an adapter cannot express go to their defaults (a
projection, never a filter: strategies bound dependent values by
construction), and a Case an in-force crash finding selects is replaced by
its steered Case. Both are Hypothesis events (``--hypothesis-show-statistics``)
and every steered example is recorded for the report. A parameter whose fixed
facts an adapter cannot express skips, naming fact and adapter.
"""

from __future__ import annotations

import inspect

import pytest
from hypothesis import event, given, settings, target
from hypothesis import strategies as st

from ground.case import Case
from properties import recorder
from properties.matrix import FAMILIES, Family
from strategies import examples


def skip_unservable(fam: Family, values, entries) -> None:
    """Skip (pytest.skip, with the reason) a parameter whose fixed facts one of
    ``entries`` cannot express (``Family.unservable``)."""
    why = fam.unservable(values, entries)
    if why:
        pytest.skip(why)


def drawn(fam: Family, values, data, adapter=None) -> Case:
    """One example's Case: drawn from the family's strategy, transformed,
    then served to the adapters it launches (``Family.serve``). Each
    projection and each steer is a Hypothesis event; each steer is also
    recorded (a ``steered`` record: the report counts them per crash finding)."""
    entries = fam.launches(values, adapter)
    skip_unservable(fam, values, entries)
    recorder.drawing()
    case = fam.apply(data.draw(fam.strategy_for(values), label="case"), values)
    served = fam.serve(case, values, entries)
    for entry, names in served.projected:
        for name in names:
            event(f"projected for the {entry} adapter: {name} -> its default")
    for finding in served.steered:
        event(f"steered by crash finding {finding.id}")
        recorder.steered(finding.id, fam.property, case, entries)
    recorder.drawn()
    return served.case


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
            skip_unservable(fam, values, fam.launches(values, adapter))
            fam.check(fam.fixed_case(values), adapter, values)
            return
        case = drawn(fam, values, kw["data"], adapter)
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
