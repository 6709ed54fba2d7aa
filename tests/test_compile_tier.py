"""The CPU compile tier: PreparedAdapter.compile_only compiles for sm_80 from
a Case's facts, and the counters see compiles, hits and template modules.

Each test uses shapes no other test compiles, so a compile cached in this
process by another test cannot turn an expected miss into a hit."""

from types import SimpleNamespace

import pytest

from ground.case import Case
from kernels import get_adapter
from kernels.source import Rewrite

pytestmark = [pytest.mark.compile, pytest.mark.family("sm80")]

DENSE = Case(d_qk=64, d_v=64, s_q=136, s_kv=72, h_q=2, h_kv=1, memory="bshd")
THD = Case(layout="thd", q_lens=(5, 7, 3), kv_lens=(5, 9, 1), h_q=6, h_kv=2)


@pytest.fixture(autouse=True)
def cold_cache(tmp_path, monkeypatch):
    """A fresh on-disk cache and cold memos: an earlier test of this worker may have compiled the same keys."""
    from kernels.counters import memos_forgotten

    monkeypatch.setenv("CUDNN_FRONTEND_COMPILED_CACHE", str(tmp_path / "compiled"))
    with memos_forgotten():
        yield


def test_dense_compiles_once_per_geometry():
    adapter = get_adapter("prepared")
    first = adapter.compile_only(DENSE)
    assert first.misses >= 1 and first.compiled and first.seconds > 0
    again = adapter.compile_only(DENSE.replace(seed=7, scale=0.3))  # runtime facts only
    assert again.misses == 0 and again.modules == 0
    # d_v under the envelope is staged to the flavor width: the same host geometry.
    padded = adapter.compile_only(DENSE.replace(d_v=48))
    assert padded.misses == 0 and padded.modules == 0


def test_thd_second_compile_with_same_heads_and_sequences_is_a_hit():
    adapter = get_adapter("prepared")
    first = adapter.compile_only(THD)
    assert first.misses >= 1
    # New token totals and capacities, same (h, h_kv, n_seq): the compiled
    # cache's memo serves it (compile_only bypasses compile_thd_host's lru).
    again = adapter.compile_only(THD.replace(q_lens=(50, 1, 8), kv_lens=(2, 2, 2), q_base=3, kv_slack=9))
    assert again.misses == 0 and again.memo_hits == 1 and again.thd_lru_misses == 0 and again.modules == 0
    # Head dims under the envelope are padded to it: still the same specialization.
    padded = adapter.compile_only(THD.replace(d_qk=40, d_v=48))
    assert padded.misses == 0 and padded.modules == 0


def test_live_compile_only_is_the_runs_compile_step(monkeypatch):
    """compile_only(live=True), as the rejection property asks on a GPU: the
    dense compile a run makes (no --gpu-arch pinned), memoised by the same
    (key, arch) as a run's, so a later run or call with the key compiles nothing.
    Here with the environment of an sm_90 device faked (nothing is loaded).
    A backward Case goes to the backward launch's own compile step, for the
    live environment (that compile needs CUDA: recorded here, not made)."""
    from kernels import backward, prepared
    from kernels.base import CompileDelta
    from kernels.environment import Environment, run_mode

    adapter = get_adapter("prepared")
    adapter._env = Environment("faked H200", (9, 0), "none", {}, run_mode((9, 0)))
    case = DENSE.replace(s_q=137, s_kv=73)
    first = adapter.compile_only(case, live=True)
    assert first.misses >= 1 and any(arch is None for (_, arch) in prepared._DENSE)
    assert adapter.compile_only(case.replace(seed=3), live=True).misses == 0
    seen = []
    monkeypatch.setattr(backward, "_compile_live", lambda adapter, env, api, case: seen.append(env) or SimpleNamespace(delta=CompileDelta()))
    adapter.compile_only(case.replace(direction="bwd"), live=True)
    assert seen == [adapter._env]


def test_rewritten_host_never_aliases_the_pristine_compile():
    get_adapter("prepared").compile_only(DENSE)
    rw = Rewrite("host", "# Reuse the template configuration", "# (rewritten) Reuse the template configuration")
    delta = get_adapter("prepared", rewrites=[rw]).compile_only(DENSE)
    assert delta.misses >= 1 and delta.modules == 0


# Every schema-3 feature value (kernel feature space) on shapes no
# other test compiles: each compiles for sm_80 and is a specialization of its
# own (the fact reaches the compile key: a new compile, never a silent hit).
FEATURES = {
    "rope": Case(d_qk=128, d_v=128, s_q=66, s_kv=130, h_q=2, h_kv=1, rope=True, causal=True),
    "lpt": Case(d_qk=64, d_v=64, batch=2, s_q=131, s_kv=67, h_q=2, h_kv=1, sched="lpt"),
    "lpt_l2 1 MiB": Case(d_qk=64, d_v=64, batch=3, s_q=66, s_kv=258, h_q=4, h_kv=2, sched="lpt_l2", sched_l2_mib=1),
    "auto": Case(d_qk=64, d_v=64, s_q=34, s_kv=18, causal=True, sched="auto"),
    "no stats (dense)": Case(d_qk=64, d_v=64, s_q=35, s_kv=19, has_lse=False),
    "token-major stats (dense)": Case(d_qk=64, d_v=64, s_q=36, s_kv=20, h_q=2, h_kv=2, lse_layout="token_major"),
    "padded stats (dense)": Case(d_qk=64, d_v=64, s_q=37, s_kv=21, lse_layout="padded"),
    "strided base-2 sinks (dense)": Case(d_qk=64, d_v=64, s_q=38, s_kv=22, h_q=2, h_kv=1, sinks=True, sink_layout="strided", sink_log2=True),
    "broadcast sinks (dense)": Case(d_qk=64, d_v=64, s_q=39, s_kv=23, h_q=2, h_kv=1, sinks=True, sink_layout="broadcast"),
    "int64 prefixes, fp16 sinks, padded stats": Case(
        layout="thd", q_lens=(5, 70), kv_lens=(9, 3), h_q=5, h_kv=1, prefix_dtype="int64", sinks=True, sink_dtype="float16", lse_layout="padded"
    ),
    "no stats, bf16 broadcast sinks (thd)": Case(
        layout="thd", q_lens=(5, 70), kv_lens=(9, 3), h_q=5, h_kv=1, has_lse=False, sinks=True, sink_dtype="bfloat16", sink_layout="broadcast"
    ),
    "token-major stats (thd)": Case(layout="thd", q_lens=(5, 70), kv_lens=(9, 3), h_q=5, h_kv=1, lse_layout="token_major"),
}


@pytest.mark.parametrize("name", sorted(FEATURES))
def test_each_feature_value_compiles_as_its_own_specialization(name):
    from kernels.prepared import compile_key

    case = FEATURES[name]
    assert case.structural_problem() is None
    plain = case.replace(
        rope=False,
        sched="natural",
        sched_l2_mib=0,
        has_lse=True,
        lse_layout="compact",
        sink_log2=False,
        sink_layout="compact",
        sink_dtype="float32",
        prefix_dtype="int32",
    )
    assert compile_key(case) != compile_key(plain)
    delta = get_adapter("prepared").compile_only(case)
    assert delta.misses >= 1 and delta.compiled
