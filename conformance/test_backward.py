"""The SM80 backward: gradients against the float64 closed form under the
backward error model, bitwise determinism, NaN-poisoned dead inputs and
gradient capacity tails, its CPU compile tier and compile reuse
(properties/backward.py, backward_tails.py, compile_cache.py).

Declared in properties.matrix (strategies, strata, budgets)."""

from conformance.testgen import matrix_test

test_backward_dense = matrix_test("test_backward_dense")
test_backward_thd = matrix_test("test_backward_thd")
test_backward_tails_dense = matrix_test("test_backward_tails_dense")
test_backward_tails_thd = matrix_test("test_backward_tails_thd")
test_backward_thd_forward_addressing = matrix_test("test_backward_thd_forward_addressing")
test_backward_cases_compile_for_sm80 = matrix_test("test_backward_cases_compile_for_sm80")
test_backward_runtime_facts_mint_no_compile_cpu = matrix_test("test_backward_runtime_facts_mint_no_compile_cpu")
test_backward_runtime_facts_mint_no_compile = matrix_test("test_backward_runtime_facts_mint_no_compile")
test_backward_wrapper_rejects = matrix_test("test_backward_wrapper_rejects")
