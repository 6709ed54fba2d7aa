"""Numerics: O and LSE against the fp32 reference under the error model,
with every input position outside the live tokens poisoned with NaN."""

import pytest
from hypothesis import given, settings, strategies as st, target

from conformance.properties import check_numerics
from conformance.ground.tables import STRATA, STRATA_IDS
from strategies import dense_cases, examples, thd_cases

pytestmark = pytest.mark.gpu


def _run(case, adapter):
    obs = check_numerics(case, adapter)
    for quantity, ratio in obs.ratios.items():
        target(ratio, label=f"error/bound {quantity}")


@pytest.mark.parametrize("flavor,dtype", STRATA, ids=STRATA_IDS)
@settings(max_examples=examples("numerics"))
@given(data=st.data())
def test_numerics_dense(flavor, dtype, data, adapter, gpu):
    _run(data.draw(dense_cases(flavors=(flavor,), dtypes=(dtype,)), label="case"), adapter)


@pytest.mark.parametrize("flavor,dtype", STRATA, ids=STRATA_IDS)
@settings(max_examples=examples("numerics"))
@given(data=st.data())
def test_numerics_thd(flavor, dtype, data, adapter, gpu):
    _run(data.draw(thd_cases(flavors=(flavor,), dtypes=(dtype,)), label="case"), adapter)
