"""The metamorphic relations exact for the sm90 family (properties.metamorphic.SM90_EXACT: batch, sequence
and head permutations, isolation, V scaled by 2^k within range, determinism) on dense and THD sm90 Cases
through ``Sm90Adapter.run``, each relation on the layouts it is stated for: two launches whose outputs must
agree bit for bit, moved as the inputs moved.

Launches on a Hopper GPU (SM 9.0) only; elsewhere it skips, naming it (the CPU runs the same
property on the emulated kernel: tests/test_metamorphic_sm90_cpu.py). A relation across families (sm80 vs sm90 on one Case) is not
bitwise: docs/sm90.md."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conformance.test_sm90_numerics import CASES_BY_LAYOUT, _judged, sm90  # noqa: F401  (the Hopper-gated adapter fixture)
from properties.metamorphic import RELATIONS, SM90_EXACT

pytestmark = pytest.mark.family("sm90")


# (layout, relation): each relation on the layouts it is stated for.
PAIRS = [(layout, r) for layout in CASES_BY_LAYOUT for r in sorted(SM90_EXACT) if layout in RELATIONS[r].layouts]


@pytest.mark.gpu
@pytest.mark.property("metamorphic")
@pytest.mark.parametrize("layout, relation", PAIRS)
@settings(deadline=None)
@given(data=st.data())
def test_sm90_metamorphic(sm90, layout, relation, data):  # noqa: F811
    from properties.metamorphic import check_metamorphic

    _judged(check_metamorphic, data.draw(CASES_BY_LAYOUT[layout], label="case"), sm90, relation=relation)
