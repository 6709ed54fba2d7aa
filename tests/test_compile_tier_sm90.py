"""The sm90 family's CPU compile tier: Sm90Adapter.compile_only plans a Case
with the kernels' own planner and compiles the D512 template for sm_90a
(no GPU, no CUDA call), and the counters see a compile for each new compile
key and none for a runtime variant. Seven compiles in all (~2-3 s each).

Shapes are ones no other test compiles (the compiled cache's memo lives as
long as the process), so an expected miss cannot be a hit left by another
test; a template module (one per TemplateParams) may have been loaded by
one, so module counts are bounded, not pinned. The launches are the GPU
properties' (conformance/test_sm90_*.py)."""

import pytest

from ground.case import Case
from ground.outcome import Unsupported
from kernels.sm90.adapter import Sm90Adapter
from kernels.sm90.specialize import compile_key

pytestmark = [pytest.mark.compile, pytest.mark.family("sm90"), pytest.mark.cpu_tier]

DENSE = Case(family="sm90", s_q=200, s_kv=88, h_q=2, h_kv=1, memory="bshd")
THD = Case(family="sm90", layout="thd", q_lens=(11, 3, 7), kv_lens=(5, 13, 2), h_q=6, h_kv=2)
# Every sm90 feature on, in two Cases (one compile each).
FEATURES = {
    "packed band": Case(
        family="sm90",
        dtype="bfloat16",
        d_qk=192,
        d_v=128,
        s_q=72,
        s_kv=152,
        h_q=8,
        h_kv=2,
        pack_gqa=True,
        causal=True,
        bottom_right=True,
        window_left=24,
        window_right=8,
        sinks=True,
        lse_log2=True,
        scale=-0.25,
        sched="lpt_l2",
        memory="bhsd",
    ),
    "padded 512": Case(
        family="sm90",
        d_qk=512,
        d_v=64,
        batch=2,
        s_q=40,
        s_kv=96,
        seq_q_lens=(40, 7),
        seq_kv_lens=(0, 96),
        has_lse=False,
        scale=0.0,
        sched="lpt",
        memory="bshd_padded",
    ),
}


@pytest.fixture(autouse=True)
def cold_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDNN_FRONTEND_COMPILED_CACHE", str(tmp_path / "compiled"))


def test_dense_compiles_once_per_compile_key():
    adapter = Sm90Adapter()
    first = adapter.compile_only(DENSE)
    # A template module is loaded once per TemplateParams per process: an earlier test may have loaded it.
    assert first.misses == 1 and first.modules <= 1 and first.compiled and first.seconds > 0
    runtime = DENSE.replace(seed=9, scale=0.3)  # data and the scale's magnitude: launch arguments
    assert compile_key(runtime) == compile_key(DENSE)
    again = adapter.compile_only(runtime)
    assert again.misses == 0 and again.modules == 0 and again.memo_hits == 1  # asks the cache, which has it
    causal = DENSE.replace(causal=True)  # a compiled fact: TemplateParams.causal
    assert compile_key(causal) != compile_key(DENSE)
    other = adapter.compile_only(causal)
    assert other.misses == 1 and other.modules <= 1


def test_thd_compiles_once_per_sequence_count_and_stats_pitch():
    adapter = Sm90Adapter()
    first = adapter.compile_only(THD)
    assert first.misses == 1 and first.modules <= 1
    # The K/V side of the pack (lengths, capacity) is runtime: no compile.
    again = adapter.compile_only(THD.replace(kv_lens=(1, 2, 30), kv_slack=5, seed=4))
    assert again.misses == 0 and again.modules == 0 and again.memo_hits == 1
    # Observed: a new packed Q total is a new head-major Stats pitch, which the template keys on (docs/sm90.md).
    pitch = adapter.compile_only(THD.replace(q_slack=4))
    assert pitch.misses == 1


@pytest.mark.parametrize("name", sorted(FEATURES))
def test_each_feature_case_compiles_for_sm90a(name):
    case = FEATURES[name]
    assert case.structural_problem() is None
    delta = Sm90Adapter().compile_only(case)
    assert delta.misses == 1 and delta.compiled


def test_compile_only_refuses_what_is_not_the_sm90_forward():
    """Refused before any compile: another family, the backward, a tamper."""
    adapter = Sm90Adapter()
    with pytest.raises(Unsupported, match="family"):
        adapter.compile_only(Case(s_q=8, s_kv=8))
    with pytest.raises(Unsupported, match="forward only"):
        adapter.compile_only(DENSE.replace(direction="bwd"))
    with pytest.raises(ValueError, match="tamper"):
        adapter.compile_only(DENSE, tamper="mask")
    with pytest.raises(NotImplementedError, match="D_QK=60"):
        adapter.compile_only(DENSE.replace(d_qk=60))  # the planner's refusal, before compiling


def test_a_template_module_an_earlier_test_loaded_changes_no_verdict():
    """What the H200 gate's warm run met: the Case's template module already loaded in the worker (one per
    TemplateParams): its first compile still misses once, and loads no module."""
    from kernels.sm90.adapter import template_module
    from kernels.sm90.specialize import specialize

    case = DENSE.replace(s_q=203)  # a shape no other test compiles, the TemplateParams of DENSE
    template_module(specialize(case).params)
    first = Sm90Adapter().compile_only(case)
    assert first.misses == 1 and first.modules == 0 and first.compiled
