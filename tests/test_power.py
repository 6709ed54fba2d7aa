"""The contract and compile-cache properties fail on a broken kernel side.

Each check runs a real property against a deliberately broken piece of the
kernels under test, on the CPU: a validator that accepts everything, and a
THD host whose compile key changes with every call (a clock in the key, and
the catalogue's ``thd_key_per_launch``, a launch counter of the host module).
On a GPU: an on-disk cache whose key differs in every process.
"""

import pytest

from ground.case import Case
from ground.contracts import CONFIG, rule
from ground.outcome import PropertyFailure
from properties import DISK_CASES, check_compile_reuse, check_disk_reuse, check_rejection


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


@pytest.mark.compile
def test_compile_reuse_kills_the_catalogues_per_launch_key(tmp_path, monkeypatch):
    """thd_key_per_launch keys on a launch counter of the host module: the
    cache_clear before each compile_reuse call (its verdict a function of the
    Case) cannot reset it, as it did the lru's miss count the mutant once used."""
    from kernels.mutants import by_name
    from kernels.prepared import PreparedAdapter

    monkeypatch.setenv("CUDNN_FRONTEND_COMPILED_CACHE", str(tmp_path / "compiled"))
    mutant = by_name("thd_key_per_launch")
    with pytest.raises(PropertyFailure, match="counters over budget|asked the compiled cache"):
        check_compile_reuse(Case(**mutant.probe), PreparedAdapter(rewrites=mutant.rewrites), launch=False)


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


# ------------------------------------------------ graph replay, launch hygiene
def _replay_case(layout: str) -> Case:
    from strategies.large import REPLAY_ROWS, case_of

    row = REPLAY_ROWS[layout]
    if layout == "thd":
        lens = (300, 0, 17, 512, 64, 129, 1, 255)
        return case_of(row, dict(q_lens=lens, kv_lens=tuple(n + 3 if n else 0 for n in lens), kv_base=5, seed=1))
    return case_of(row, dict(seq_q_lens=(300, 41), seq_kv_lens=(7, 700), seed=1))


def _broken_prepared(kind: str):
    """A PreparedAdapter whose prepared launch is wrong in one way:
    ``stale`` binds private copies of the inputs (a change in place never
    reaches the kernel, while it claims no staging); ``sync`` synchronizes
    the device; ``alloc`` allocates a scratch buffer per launch."""
    import torch

    from ground.data import relocate
    from kernels.prepared import PreparedAdapter

    class Broken(PreparedAdapter):
        def prepare(self, case, inputs, outputs=None, **kw):
            if kind == "stale":
                copies = type(inputs)(
                    inputs.case,
                    **{
                        n: (None if getattr(inputs, n) is None else relocate(getattr(inputs, n), getattr(inputs, n).device))
                        for n in ("q", "k", "v", "bias", "sinks", "seq_q_lens", "seq_kv_lens", "cu_q", "cu_kv", "q_live", "kv_live")
                    },
                )
                return super().prepare(case, copies, outputs, **kw)
            prepared = super().prepare(case, inputs, outputs, **kw)
            launch = prepared.launch
            if kind == "sync":
                prepared.launch = lambda: (launch(), torch.cuda.synchronize())
            else:
                prepared.launch = lambda: (launch(), torch.empty(1 << 20, device=inputs.q.device))
            return prepared

    return Broken(rewrites=())


@pytest.mark.gpu
@pytest.mark.parametrize("layout", ["dense", "thd"])
def test_graph_replay_catches_a_launch_bound_to_stale_inputs(layout, gpu):
    from kernels.prepared import PreparedAdapter
    from properties import check_graph_replay

    case = _replay_case(layout)
    check_graph_replay(case, PreparedAdapter(rewrites=()))
    with pytest.raises(PropertyFailure, match="replayed"):
        check_graph_replay(case, _broken_prepared("stale"))


@pytest.mark.gpu
@pytest.mark.parametrize("kind, match", [("sync", "synchronizes"), ("alloc", "allocated")])
def test_launch_hygiene_catches_a_sync_and_an_allocation(kind, match, gpu):
    from kernels.prepared import PreparedAdapter
    from properties import check_launch_hygiene

    case = _replay_case("thd")
    check_launch_hygiene(case, PreparedAdapter(rewrites=()))
    with pytest.raises(PropertyFailure, match=match):
        check_launch_hygiene(case, _broken_prepared(kind))
