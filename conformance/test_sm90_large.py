"""The sm90 family's large tier: numerics of dense Cases whose K/V batch
entries lie past 2^31 elements (``strategies.sm90_large``: batch entry 1's
every key sits at an element offset a 32-bit stride wraps), through the
compile entry ``Sm90Adapter``, judged as test_sm90_numerics judges (the sm90
error model of the float64 reference, cut to the live keys).

Part of the large tier: selected by ``--large`` (or ``-m large``, the
nightly profile), skipped otherwise (conformance.plugin); 16 GiB of K/V per
example on the device, two compiles (one per dtype). It launches on a
Hopper GPU (SM 9.0) only; elsewhere it skips, saying so. Its CPU half
(offsets, compiles, reference cost and cut, the device-side inputs):
tests/test_sm90_large.py.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings

from conformance.test_sm90_numerics import _judged, sm90  # noqa: F401  (the Hopper-gated adapter fixture)
from strategies.profiles import examples
from strategies.sm90_large import sm90_large_cases

pytestmark = pytest.mark.family("sm90")


@pytest.mark.gpu
@pytest.mark.large
@pytest.mark.property("numerics")
@settings(max_examples=examples("large"), deadline=None)
@given(case=sm90_large_cases())
def test_sm90_large_offsets(sm90, case):  # noqa: F811
    """O and LSE of a batch entry whose K/V start past 2^31 elements within
    the sm90 error model; the padded rows the contract fixes bit for bit; no
    guard band touched; the dead keys (the pad fill) never reach a live row."""
    from properties.numerics import check_numerics

    _judged(check_numerics, case, sm90)
