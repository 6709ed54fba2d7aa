"""Compile-cache deltas and the CPU compile tier.

Runtime data never mints a compile: after a Case compiled once, variants that
differ only in runtime facts (data, addresses, THD token totals, capacities,
first offsets, padding lengths, the scale's magnitude) mint no compile and no
template module; a new THD sequence count mints at most one and returning to
a seen count is a pure hit. The counters are read around every single call.
"""

import pytest
from hypothesis import given, settings, strategies as st

from conformance.properties import DISK_CASES, check_compile_reuse, check_compiles, check_disk_reuse
from strategies import cases, examples


@pytest.mark.compile
@settings(max_examples=examples("compile"))
@given(data=st.data())
def test_valid_cases_compile_for_sm80(data, prepared_adapter):
    check_compiles(data.draw(cases(), label="case"), prepared_adapter)


@pytest.mark.compile
@settings(max_examples=examples("compile"))
@given(data=st.data())
def test_runtime_facts_mint_no_compile_cpu(data, prepared_adapter):
    check_compile_reuse(data.draw(cases(), label="case"), prepared_adapter, launch=False)


@pytest.mark.gpu
@pytest.mark.parametrize("layout", ["dense", "thd"])
@settings(max_examples=examples("tails"))
@given(data=st.data())
def test_runtime_facts_mint_no_compile(layout, data, adapter, gpu):
    check_compile_reuse(data.draw(cases(layouts=(layout,)), label="case"), adapter)


@pytest.mark.gpu
@pytest.mark.parametrize("layout", list(DISK_CASES))
def test_disk_cache_serves_a_second_process(layout, adapter, gpu):
    """CUDNN_FRONTEND_COMPILED_CACHE: a second process reloads what the first
    compiled, without compiling (counters read around its one launch)."""
    check_disk_reuse(DISK_CASES[layout], adapter)
