"""NaN-poisoned capacity tails: output storage outside the live rows ends as
the contract says (zeroed by the THD host's initialisation, untouched
otherwise), and every live output was written."""

import pytest
from hypothesis import given, strategies as st

from conformance.properties import check_tails
from conformance.strata import STRATA, STRATA_IDS
from strategies import dense_cases, thd_cases

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("initialize_outputs", [True, False], ids=["init", "no-init"])
@pytest.mark.parametrize("flavor,dtype", STRATA, ids=STRATA_IDS)
@given(data=st.data())
def test_tails_thd(flavor, dtype, initialize_outputs, data, adapter, gpu):
    case = data.draw(thd_cases(flavors=(flavor,), dtypes=(dtype,)), label="case")
    check_tails(case, adapter, initialize_outputs=initialize_outputs)


@pytest.mark.parametrize("flavor,dtype", STRATA, ids=STRATA_IDS)
@given(data=st.data())
def test_tails_dense(flavor, dtype, data, adapter, gpu):
    case = data.draw(dense_cases(flavors=(flavor,), dtypes=(dtype,), memory=("bshd_padded",)), label="case")
    check_tails(case, adapter)
