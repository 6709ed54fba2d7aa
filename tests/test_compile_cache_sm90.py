"""The sm90 family's compile-cache properties on the CPU
(properties.compile_cache_sm90 through Sm90Adapter.compile_only, sm_90a):
runtime variants ask the compiled cache for nothing new, compiled variants
for an entry of their own; each fails on a planted adapter that keys a
runtime fact or hands a compiled variant the Case's artifact. Nine
compiles (~2-3 s each). Shapes no other test compiles (the compiled cache's
memo lives as long as the process)."""

import pytest

from ground.case import Case
from ground.outcome import PropertyFailure
from kernels.sm90.adapter import Sm90Adapter
from properties.compile_cache_sm90 import check_sm90_compile_distinct, check_sm90_compile_reuse, sm90_compiled_variants, sm90_runtime_variants

pytestmark = [pytest.mark.compile, pytest.mark.family("sm90"), pytest.mark.cpu_tier]

DENSE = Case(family="sm90", s_q=48, s_kv=80, h_q=2, h_kv=1, seq_q_lens=(40,), seq_kv_lens=(70,), scale=0.2, memory="bshd")
THD = Case(family="sm90", layout="thd", q_lens=(9, 4), kv_lens=(6, 12), h_q=2, h_kv=1)  # compact (head-major) Stats


@pytest.fixture(autouse=True)
def cold_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDNN_FRONTEND_COMPILED_CACHE", str(tmp_path / "compiled"))


@pytest.mark.parametrize("case", [DENSE, THD, THD.replace(lse_layout="token_major")], ids=["dense", "thd-head-major", "thd-token-major"])
def test_runtime_variants_ask_for_nothing_new(case):
    obs = check_sm90_compile_reuse(case, Sm90Adapter())
    asked = obs.notes["new_requests"]
    # Requests are the frontend's keys, or the recorded entries where the cache records them (a GPU machine).
    assert obs.notes["case_requests"] >= 1 and obs.notes["rule"] in ("keys", "entries")
    assert set(asked) == {w for w, _ in sm90_runtime_variants(case)} and not any(asked.values())


def test_the_q_total_is_runtime_only_without_head_major_stats():
    """The head-major Stats pitch is T_q, a compile() argument: there a new Q total is a compiled variant."""
    token = {w for w, _ in sm90_runtime_variants(THD.replace(lse_layout="token_major"))}
    assert "new Q total (token-major or no Stats)" in token
    assert "new Q total (token-major or no Stats)" in {w for w, _ in sm90_runtime_variants(THD.replace(has_lse=False))}
    assert "new Q total (token-major or no Stats)" not in {w for w, _ in sm90_runtime_variants(THD)}
    assert "a new Q total under head-major Stats" in {w for w, _ in sm90_compiled_variants(THD)}


# Several deliberate sm90 compiles each: 26-27 s (dense) and 15-16 s (THD) on the H200 among 16 workers.
@pytest.mark.parametrize("case", [pytest.param(DENSE, marks=pytest.mark.weight(26)), pytest.param(THD, marks=pytest.mark.weight(16))], ids=["dense", "thd"])
def test_compiled_variants_ask_for_an_entry_of_their_own(case):
    obs = check_sm90_compile_distinct(case, Sm90Adapter())
    asked = obs.notes["new_requests"]
    assert set(asked) == {w for w, _ in sm90_compiled_variants(case)} and all(n >= 1 for n in asked.values())


class Planted(Sm90Adapter):
    """Sm90Adapter with a planted key fault: ``swap(case)`` is what it compiles for ``case``."""

    def __init__(self, swap):
        super().__init__()
        self.swap = swap

    def compile_only(self, case, **kwargs):
        return super().compile_only(self.swap(case), **kwargs)


def test_compile_reuse_fails_a_runtime_fact_in_the_key():
    # The data seed keyed: another seed compiles another kernel (the causal one: a real, distinct key).
    planted = Planted(lambda c: c if c.seed == DENSE.seed else c.replace(causal=not c.causal))
    with pytest.raises(PropertyFailure, match="new data: asked the compiled cache for 1 entries"):
        check_sm90_compile_reuse(DENSE, planted)


def test_compile_distinct_fails_a_compiled_fact_out_of_the_key():
    # The sequence count dropped from the key: every THD Case gets the first Case's artifact.
    planted = Planted(lambda c: c.replace(q_lens=c.q_lens[:2], kv_lens=c.kv_lens[:2]) if c.is_thd else c)
    with pytest.raises(PropertyFailure, match="a new sequence count: asked the compiled cache for 0 entries of its own"):
        check_sm90_compile_distinct(THD, planted)


class CompileLaunch(Sm90Adapter):
    """A stand-in launch on the CPU: run() compiles as the planner's compile() does (the template's lru
    kept, unlike compile_only) and writes nothing."""

    def run(self, case, inputs, outputs=None, **kwargs):
        from kernels.base import KernelResult
        from kernels.counters import measure
        from kernels.sm90.adapter import template_module
        from kernels.sm90.specialize import specialize

        spec = specialize(case)
        args, kw = spec.compile_args()
        with measure() as box:  # what the planner's compile() calls (api_dsl.py:5338-5339): the template's lru first
            template_module(spec.params).compile(*args, **kw)
        return KernelResult(outputs[0], outputs[1], box.delta, {"adapter": "compile-launch"}, {})


@pytest.mark.parametrize("case", [DENSE, THD, THD.replace(lse_layout="token_major")], ids=["dense", "thd-head-major", "thd-token-major"])
def test_the_launched_variant_asks_the_cache_whatever_the_process_compiled(monkeypatch, case):
    """Launch mode forgets the template's lru before each launch: the Case (compiled by the tests above) still
    asks for its entry, and its runtime variants (THD: new K/V lengths and capacity, Q lengths at one Q total,
    a new Q total where no Stats stride holds it) for nothing new. Needs a device for nothing: no kernel runs."""
    import torch

    from properties import compile_cache_sm90

    monkeypatch.setattr(compile_cache_sm90, "device", lambda: torch.device("cpu"))
    obs = check_sm90_compile_reuse(case, CompileLaunch(), launch=True)
    assert obs.notes["case_requests"] == 1 and not any(obs.notes["new_requests"].values())
    assert set(obs.notes["new_requests"]) == {w for w, _ in sm90_runtime_variants(case)}


def test_reuse_with_nothing_observed_is_no_verdict():
    """A Case whose own call asks the compiled cache for nothing observable
    gives no base to compare with: "no entry the Case did not ask for" would
    hold of anything, so the check stops with an error, never a pass."""
    from types import SimpleNamespace

    from kernels.base import CompileDelta

    silent = SimpleNamespace(name="sm90", rewrites=(), compile_only=lambda c: CompileDelta())
    with pytest.raises(RuntimeError, match="nothing observable"):
        check_sm90_compile_reuse(DENSE, silent)
