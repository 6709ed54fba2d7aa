"""Compile-cache deltas and the CPU compile tier.

Runtime data never mints a compile: after a Case compiled once, variants that
differ only in runtime facts (data, addresses, THD token totals, capacities,
first offsets, padding lengths, the scale's magnitude) mint no compile and no
template module; a new THD sequence count mints at most one and returning to
a seen count is a pure hit. The counters are read around every single call.
"""

import pytest
from hypothesis import given, settings, strategies as st

from conformance.properties import check_compile_reuse, check_compiles
from conformance.case import Case
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


# One launch in a fresh process; prints the call's compile counters.
_PROBE = """
import json, sys
from conformance.case import Case
from conformance.data import make_inputs, make_outputs
from kernels import get_adapter
case = Case.from_json(sys.argv[1])
result = get_adapter("prepared").run(case, make_inputs(case, "cuda"), make_outputs(case, "cuda"))
print("COUNTERS " + json.dumps(result.compile.to_dict()))
"""

DISK_CASES = {
    "dense": Case(s_q=65, s_kv=129, causal=True),
    "thd": Case(layout="thd", q_lens=(3, 64), kv_lens=(65, 1), q_base=2),
}


def _launch_in_new_process(case, cache_dir):
    import json
    import os
    import subprocess
    import sys

    env = {**os.environ, "CUDNN_FRONTEND_COMPILED_CACHE": str(cache_dir)}
    done = subprocess.run([sys.executable, "-c", _PROBE, case.to_json()], env=env, capture_output=True, text=True, timeout=300)
    lines = [line for line in done.stdout.splitlines() if line.startswith("COUNTERS ")]
    assert done.returncode == 0 and lines, f"probe process failed:\n{done.stderr[-3000:]}"
    return json.loads(lines[-1][len("COUNTERS ") :])


@pytest.mark.gpu
@pytest.mark.parametrize("layout", list(DISK_CASES))
def test_disk_cache_serves_a_second_process(layout, tmp_path, gpu):
    """CUDNN_FRONTEND_COMPILED_CACHE: a second process reloads what the first
    compiled, without compiling (counters read around its one launch)."""
    from conformance import judge

    case = DISK_CASES[layout]
    first = _launch_in_new_process(case, tmp_path)
    assert first["misses"] >= 1, f"the first process found {tmp_path} warm: {first}"
    second = _launch_in_new_process(case, tmp_path)
    judge.compile_delta("compile_reuse", case, second, {"misses": 0}, "a second process on the same on-disk cache")
    assert second["hits"] >= 1, f"the second process neither compiled nor read the on-disk cache: {second}"
