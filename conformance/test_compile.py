"""Compile-cache deltas and the CPU compile tier.

Runtime data never mints a compile: after a Case compiled once, variants that
differ only in runtime facts (data, addresses, THD token totals, capacities,
first offsets, padding lengths, the scale's magnitude) mint no compile and no
template module; a new THD sequence count mints at most one and returning to
a seen count is a pure hit. The counters are read around every single call.
The disk cache serves a second process (CUDNN_FRONTEND_COMPILED_CACHE); every
valid Case compiles for sm_80 (CPU tier); a compile-key fact gets a kernel
per value (CPU tier, COMPILED_FACTS: derived from the declarations, every
fact that changes the specialization on each pass and layout it applies to).

Declared in properties.matrix."""

from conformance.testgen import matrix_test
from properties.compile_cache import COMPILED_FACTS

test_valid_cases_compile_for_sm80 = matrix_test("test_valid_cases_compile_for_sm80")
test_runtime_facts_mint_no_compile_cpu = matrix_test("test_runtime_facts_mint_no_compile_cpu")
test_runtime_facts_mint_no_compile = matrix_test("test_runtime_facts_mint_no_compile")
test_disk_cache_serves_a_second_process = matrix_test("test_disk_cache_serves_a_second_process")
# One compile_distinct family per compile-key fact with a place (test_window_left_compiles_its_own_kernel[fwd-thd],
# ...): bound from the declarations (properties.compile_cache.compiled_fact_rows).
globals().update(
    {f"test_{fact}_compiles_its_own_kernel": matrix_test(f"test_{fact}_compiles_its_own_kernel") for fact, row in COMPILED_FACTS.items() if row.places}
)
