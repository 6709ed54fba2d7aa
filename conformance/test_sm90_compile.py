"""The sm90 family's compile-cache property launched (the GPU variant of
tests/test_compile_cache_sm90.py): after a dense sm90 Case ran once through
``Sm90Adapter.run``, its runtime variants (data, the scale's magnitude,
padding-length values) run asking the compiled cache for no entry the Case
did not ask for, compiling nothing, every launch's guard bands intact.

Launches on a Hopper GPU (SM 9.0) only; elsewhere it skips, naming it (the
CPU tier runs the same property through compile_only)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings

from conformance.test_sm90_numerics import _judged, sm90  # noqa: F401  (the Hopper-gated adapter fixture)
from strategies.sm90 import sm90_cases

pytestmark = pytest.mark.family("sm90")


@pytest.mark.gpu
@pytest.mark.property("compile_reuse")
@settings(deadline=None, max_examples=10)
@given(case=sm90_cases(layouts=("dense",)))
def test_sm90_runtime_facts_mint_no_compile(sm90, case):  # noqa: F811
    from properties.compile_cache_sm90 import check_sm90_compile_reuse

    _judged(check_sm90_compile_reuse, case, sm90, launch=True)
