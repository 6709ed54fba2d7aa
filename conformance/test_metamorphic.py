"""Metamorphic relations: two launches whose O and LSE must agree bit for bit
(batch, head and sequence permutations, isolation, position, V * 2^k,
determinism, the two entry points); no reference, no tolerance.

Declared in properties.matrix (relations, strata, budgets);
the relations and why each is exact: properties.metamorphic."""

from conformance.testgen import matrix_test

test_metamorphic_dense = matrix_test("test_metamorphic_dense")
test_metamorphic_thd = matrix_test("test_metamorphic_thd")
