"""Numerics: O and LSE against the float64 reference under the error model of
the kernel's arithmetic (ground/tolerances.py), with every input
position outside the live tokens poisoned with NaN.

Declared in properties.matrix (strategies, strata, budgets)."""

from conformance.testgen import matrix_test

test_numerics_dense = matrix_test("test_numerics_dense")
test_numerics_thd = matrix_test("test_numerics_thd")
