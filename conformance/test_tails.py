"""NaN-poisoned capacity tails: output storage outside the live rows ends as
the contract says (zeroed by the THD host's initialisation, untouched
otherwise), every live output was written, and NaN poisoned into all input
storage outside the live tokens never reaches an output the contract defines."""

import pytest
from hypothesis import given, settings, strategies as st

from conformance.properties import check_tails
from conformance.ground.tables import STRATA, STRATA_IDS
from strategies import dense_cases, examples, thd_cases

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("initialize_outputs", [True, False], ids=["init", "no-init"])
@pytest.mark.parametrize("flavor,dtype", STRATA, ids=STRATA_IDS)
@settings(max_examples=examples("tails"))
@given(data=st.data())
def test_tails_thd(flavor, dtype, initialize_outputs, data, adapter, gpu):
    case = data.draw(thd_cases(flavors=(flavor,), dtypes=(dtype,)), label="case")
    check_tails(case, adapter, initialize_outputs=initialize_outputs)


@pytest.mark.parametrize("flavor,dtype", STRATA, ids=STRATA_IDS)
@settings(max_examples=examples("tails"))
@given(data=st.data())
def test_tails_dense(flavor, dtype, data, adapter, gpu):
    case = data.draw(dense_cases(flavors=(flavor,), dtypes=(dtype,), memory=("bshd_padded",), padding=False), label="case")
    check_tails(case, adapter)


# Which padding operand the NaN sits behind: Q rows past seq_q_lens, or K/V
# rows past seq_kv_lens (the other operand absent).
PADDED = {"q": "seq_kv_lens", "kv": "seq_q_lens"}


@pytest.mark.parametrize("padded", list(PADDED))
@pytest.mark.parametrize("flavor,dtype", STRATA, ids=STRATA_IDS)
@settings(max_examples=examples("tails"))
@given(data=st.data())
def test_padding_poison(padded, flavor, dtype, data, adapter, gpu):
    case = data.draw(dense_cases(flavors=(flavor,), dtypes=(dtype,), padding=True), label="case")
    check_tails(case.replace(**{PADDED[padded]: None}), adapter)
