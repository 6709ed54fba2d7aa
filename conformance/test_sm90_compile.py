"""The sm90 family's compile-cache property launched (the GPU variant of
tests/test_compile_cache_sm90.py): after an sm90 Case ran once through
``Sm90Adapter.run``, its runtime variants (data, the scale's magnitude,
dense padding-length values; THD K/V lengths and capacity, Q lengths at the
same Q total, and a new Q total where no Stats stride holds it) run asking
the compiled cache for no entry the Case did not ask for, compiling nothing,
every launch's guard bands intact. THD launches too, because a compile a
launch makes per packed capacity (the THD setup, the plan's workspace) is
one that compile_only cannot see.

Launches on a Hopper GPU (SM 9.0) only; elsewhere it skips, naming it (the
CPU tier runs the same property through compile_only)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conformance.test_sm90_numerics import CASES_BY_LAYOUT, _judged, sm90  # noqa: F401  (the Hopper-gated adapter fixture)

pytestmark = pytest.mark.family("sm90")


@pytest.mark.gpu
@pytest.mark.property("compile_reuse")
@pytest.mark.parametrize("layout", sorted(CASES_BY_LAYOUT))
@settings(deadline=None, max_examples=10)
@given(data=st.data())
def test_sm90_runtime_facts_mint_no_compile(sm90, layout, data):  # noqa: F811
    from properties.compile_cache_sm90 import check_sm90_compile_reuse

    _judged(check_sm90_compile_reuse, data.draw(CASES_BY_LAYOUT[layout], label="case"), sm90, launch=True)
