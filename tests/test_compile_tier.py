"""The CPU compile tier: PreparedAdapter.compile_only compiles for sm_80 from
a Case's facts, and the counters see compiles, hits and template modules.

Each test uses shapes no other test compiles, so a compile cached in this
process by another test cannot turn an expected miss into a hit."""

import pytest

from conformance.ground.case import Case
from kernels import get_adapter
from kernels.source import Rewrite

pytestmark = pytest.mark.compile

DENSE = Case(d_qk=64, d_v=64, s_q=136, s_kv=72, h_q=2, h_kv=1, memory="bshd")
THD = Case(layout="thd", q_lens=(5, 7, 3), kv_lens=(5, 9, 1), h_q=6, h_kv=2)


@pytest.fixture(autouse=True)
def cold_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDNN_FRONTEND_COMPILED_CACHE", str(tmp_path / "compiled"))


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


def test_rewritten_host_never_aliases_the_pristine_compile():
    get_adapter("prepared").compile_only(DENSE)
    rw = Rewrite("host", "# Reuse the template configuration", "# (rewritten) Reuse the template configuration")
    delta = get_adapter("prepared", rewrites=[rw]).compile_only(DENSE)
    assert delta.misses >= 1 and delta.modules == 0
