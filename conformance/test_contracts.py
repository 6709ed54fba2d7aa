"""Contract rejections: every rule of ground.contracts, at every entry
point it targets, raises the stated exception naming the argument, and a
rejected call compiles, launches and writes nothing. Where the kernels break
a rule, a known finding (known_findings.toml, ``rule`` + ``entry``) excuses
exactly the check it names; a finding that stops reproducing fails the run.

Declared in properties.matrix (one test per entry point, one
parameter per rule that targets it)."""

from conformance.testgen import matrix_test

test_config_rejects = matrix_test("test_config_rejects")
test_prepared_rejects_before_compiling = matrix_test("test_prepared_rejects_before_compiling")
test_prepared_rejects = matrix_test("test_prepared_rejects")
test_wrapper_rejects = matrix_test("test_wrapper_rejects")
