"""NaN-poisoned capacity tails: output storage outside the live rows ends as
the contract says (zeroed by the THD host's initialisation, untouched
otherwise), every live output was written, and NaN poisoned into all input
storage outside the live tokens never reaches an output the contract defines.

Declared in properties.matrix: test_tails_thd runs with and
without the host initializing outputs, test_padding_poison with the NaN
behind Q rows past seq_q_lens (``q``) or K/V rows past seq_kv_lens (``kv``)."""

from conformance.testgen import matrix_test

test_tails_thd = matrix_test("test_tails_thd")
test_tails_dense = matrix_test("test_tails_dense")
test_padding_poison = matrix_test("test_padding_poison")
