"""The contract and compile-cache properties fail on a broken kernel side.

Each check runs a real property against a deliberately broken piece of the
kernels under test, on the CPU: a validator that accepts everything, and a
THD host whose compile key changes with every call (like the catalogue's
``thd_key_per_launch``, which the GPU mutant run kills through the lru'd
launch path; compile_only bypasses that lru, so this key varies by itself).
On a GPU: an on-disk cache whose key differs in every process.
"""

import pytest

from conformance.ground.case import Case
from conformance.ground.contracts import CONFIG, rule
from conformance.ground.outcome import PropertyFailure
from conformance.properties import DISK_CASES, check_compile_reuse, check_disk_reuse, check_rejection


@pytest.mark.parametrize("name", ["params_tile_n", "params_num_warps", "bottom_right_without_causal_or_window"])
def test_config_rejection_catches_a_validator_that_accepts_everything(name, monkeypatch):
    from cudnn.sdpa.fwd import config_sm80

    case = rule(name).transform(Case(s_q=3, s_kv=5))
    check_rejection(case, entry=CONFIG)  # the real validator rejects it
    monkeypatch.setattr(config_sm80, "validate_params", lambda params: None)
    with pytest.raises(PropertyFailure, match="returned normally"):
        check_rejection(case, entry=CONFIG)


@pytest.mark.compile
def test_compile_reuse_catches_a_compile_key_with_per_call_state():
    from kernels.prepared import PreparedAdapter
    from kernels.source import Rewrite

    case = Case(layout="thd", q_lens=(3,), kv_lens=(5,))
    check_compile_reuse(case, PreparedAdapter(), launch=False)  # pristine host: runtime facts are free
    per_call_key = Rewrite("host", "packed_init=_INIT_DIGEST,", "packed_init=_INIT_DIGEST + str(__import__('time').perf_counter_ns()),")
    with pytest.raises(PropertyFailure, match="counters over budget"):
        check_compile_reuse(case, PreparedAdapter(rewrites=(per_call_key,)), launch=False)


# Planted in both probe processes: the on-disk entry's key carries the process
# id, as a key holding a temp path, an address or a load counter would.
PER_PROCESS_DISK_KEY = """
import os
from cudnn.frost import compiled_cache as _cache
_entry_dir = _cache._entry_dir
_cache._entry_dir = lambda root, manifest, key: _entry_dir(root, manifest, key + "|pid=" + str(os.getpid()))
"""


@pytest.mark.gpu
@pytest.mark.parametrize("layout", list(DISK_CASES))
def test_disk_reuse_catches_a_per_process_cache_key(layout, adapter, gpu):
    case = DISK_CASES[layout]
    check_disk_reuse(case, adapter)  # the pristine cache serves the second process
    with pytest.raises(PropertyFailure, match="counters over budget"):
        check_disk_reuse(case, adapter, prelude=PER_PROCESS_DISK_KEY)
