"""Compile-cache deltas and the CPU compile tier.

Runtime data never mints a compile: after a Case compiled once, variants that
differ only in runtime facts (data, addresses, THD token totals, capacities,
first offsets, padding lengths, the scale's magnitude) mint no compile and no
template module; a new THD sequence count mints at most one and returning to
a seen count is a pure hit. The counters are read around every single call.
The disk cache serves a second process (CUDNN_FRONTEND_COMPILED_CACHE); every
valid Case compiles for sm_80 (CPU tier); a compiled-in fact gets a kernel
per value (CPU tier, COMPILED_FACTS).

Declared in properties.matrix."""

from conformance.testgen import matrix_test

test_valid_cases_compile_for_sm80 = matrix_test("test_valid_cases_compile_for_sm80")
test_runtime_facts_mint_no_compile_cpu = matrix_test("test_runtime_facts_mint_no_compile_cpu")
test_runtime_facts_mint_no_compile = matrix_test("test_runtime_facts_mint_no_compile")
test_disk_cache_serves_a_second_process = matrix_test("test_disk_cache_serves_a_second_process")
test_lse_log2_compiles_its_own_kernel = matrix_test("test_lse_log2_compiles_its_own_kernel")
test_deterministic_compiles_its_own_kernel = matrix_test("test_deterministic_compiles_its_own_kernel")
test_dbias_dtype_compiles_its_own_kernel = matrix_test("test_dbias_dtype_compiles_its_own_kernel")
