"""The large tier: production-scale shapes (strategies.large) against the
row-chunked float64 reference under the same error model. Selected with
``--large`` (or ``-m large``) and by the nightly profile; ``test_large_slice``
is the slice every run keeps.

Declared in properties.matrix (shapes, budgets, markers)."""

from conformance.testgen import matrix_test

test_large = matrix_test("test_large")
test_large_offsets = matrix_test("test_large_offsets")
test_large_slice = matrix_test("test_large_slice")
test_metamorphic_large_dense = matrix_test("test_metamorphic_large_dense")
test_metamorphic_large_one_batch = matrix_test("test_metamorphic_large_one_batch")
test_metamorphic_large_thd = matrix_test("test_metamorphic_large_thd")
