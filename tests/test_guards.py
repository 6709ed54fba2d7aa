"""Guard bands and poison (ground.data), the guard check every
launching property runs (judge.guards_intact), and adapter capabilities
(Unsupported), all on the CPU: fake kernels that write or read out of bounds
prove that the properties see it, with the buffer and the range named."""

from __future__ import annotations

import hashlib

import pytest
import torch  # noqa: F401 - imported before the in-process pytester run (a C extension cannot be imported twice)
from hypothesis import settings

from ground.case import Case
from ground.data import (
    FINITE_PAD,
    GUARD_ALIGN,
    GUARD_MAX_BYTES,
    GUARD_MIN_BYTES,
    INT_SENTINEL,
    bias_dead,
    flat_storage,
    guard_bands,
    guard_bits,
    make_inputs,
    make_outputs,
    relocate,
)
from ground.outcome import PropertyFailure, Unsupported
from ground.tables import TILE_M
from kernels.base import CompileDelta, KernelResult
from tests.standins import ReferenceKernel as FakeKernel
from tests.standins import device_users

pytest_plugins = ["pytester"]

DENSE = [
    Case(s_q=5, s_kv=7, memory="bshd", bias="float16", sinks=True, seq_q_lens=(3,), seq_kv_lens=(4,)),
    Case(batch=2, h_q=4, h_kv=2, s_q=3, s_kv=9, d_qk=72, d_v=40, memory="bshd_padded", bias="float32", seq_kv_lens=(9, 2)),
    Case(dtype="bfloat16", s_q=4, s_kv=4, memory="bhsd"),
]
THD = [Case(layout="thd", q_lens=(3, 0, 5), kv_lens=(2, 4, 1), q_base=2, kv_slack=3, sinks=True)]


def _intact(t: torch.Tensor) -> bool:
    front, back, want = guard_bits(t)
    return bool((front == want).all()) and bool((back == want).all())


# ------------------------------------------------------------------ layout
@pytest.mark.parametrize("case", DENSE + THD, ids=lambda c: f"{c.layout}-{c.memory}")
def test_every_buffer_sits_inside_guard_bands(case):
    inputs = make_inputs(case)
    o, lse = make_outputs(case)
    buffers = {**inputs.buffers(), "o": o, "lse": lse}
    assert {"q", "k", "v", "o", "lse"} <= set(buffers)
    for name, t in buffers.items():
        bands = guard_bands(t)
        assert bands is not None, name
        g, n, total = bands
        size = t.element_size()
        assert g * size >= GUARD_MIN_BYTES and (g * size) % GUARD_ALIGN == 0, name
        assert g * size <= GUARD_MAX_BYTES and g >= min(TILE_M, GUARD_MAX_BYTES // size), name
        # The body keeps the allocation's own alignment (16-byte vectors need it).
        assert (t.data_ptr() - flat_storage(t).data_ptr()) % GUARD_ALIGN == 0 and t.data_ptr() % 16 == 0, name
        assert _intact(t), name
        if not t.dtype.is_floating_point:
            assert guard_bits(t)[2] == INT_SENTINEL


def test_a_band_holds_tile_m_token_rows():
    case = Case(h_q=2, h_kv=2, s_q=3, s_kv=3, d_qk=64, d_v=64, memory="bshd")
    q = make_inputs(case).q  # BSHD: a token row is H * D elements
    assert guard_bands(q)[0] == TILE_M * 2 * 64
    lse = make_outputs(case)[1]
    assert guard_bands(lse)[0] * 4 == max(GUARD_MIN_BYTES, TILE_M * 4)


def test_inputs_still_regenerate_bit_for_bit_from_the_seed():
    case = DENSE[0]
    digest = lambda t: hashlib.sha256(b"".join(x.contiguous().view(-1).view(torch.uint8).numpy().tobytes() for x in t.buffers().values())).hexdigest()  # noqa: E731
    assert digest(make_inputs(case)) == digest(make_inputs(case))
    # The values are the seeded draws, whatever the storage around them.
    g = torch.Generator().manual_seed(case.seed)
    want_q = torch.randn(1, 1, 5, 64, generator=g).to(torch.float16)
    got = make_inputs(case, poison=False).q
    assert torch.equal(got.view(torch.int16), want_q.view(torch.int16))


@pytest.mark.parametrize("pad_fill", [float("nan"), FINITE_PAD])
def test_the_bias_is_poisoned_where_every_batch_entry_is_padded(pad_fill):
    case = Case(batch=2, s_q=6, s_kv=9, bias="float32", seq_q_lens=(2, 4), seq_kv_lens=(3, 5))
    assert bias_dead(case) == (4, 5)
    bias = make_inputs(case, pad_fill=pad_fill).bias
    dead = torch.zeros(bias.shape, dtype=torch.bool)
    dead[:, :, 4:, :] = True
    dead[:, :, :, 5:] = True
    fill = torch.full_like(bias, pad_fill)
    assert torch.equal(bias[dead].isnan(), fill[dead].isnan()) and bool(torch.isfinite(bias[~dead]).all())
    if pad_fill == FINITE_PAD:
        assert bool((bias[dead] == FINITE_PAD).all())
    clean = make_inputs(case, poison=False).bias
    assert torch.equal(bias[~dead], clean[~dead]) and bool(torch.isfinite(clean).all())
    # Without padding no cell is dead.
    assert bool(torch.isfinite(make_inputs(case.replace(seq_q_lens=None, seq_kv_lens=None)).bias).all())


def test_a_per_batch_bias_is_poisoned_past_each_entrys_own_lengths():
    """The backward's [B, H, SQ, SKV] bias: slice b serves entry b alone, so
    its cells past entry b's lengths are dead (a broadcast bias: only the
    cells dead in every entry)."""
    case = Case(batch=2, s_q=6, s_kv=9, bias="float32", bias_batch=2, seq_q_lens=(2, 6), seq_kv_lens=(3, 9), direction="bwd")
    bias = make_inputs(case).bias
    dead = torch.zeros(bias.shape, dtype=torch.bool)
    dead[0, :, 2:, :] = True
    dead[0, :, :, 3:] = True
    assert bool(bias[dead].isnan().all()) and bool(torch.isfinite(bias[~dead]).all())


def test_the_reference_ignores_the_poisoned_bias_cells():
    from reference.attention import reference_for_case

    case = Case(batch=2, s_q=6, s_kv=9, bias="float16", seq_q_lens=(2, 4), seq_kv_lens=(3, 5), causal=True, bottom_right=True)
    o, lse = reference_for_case(case, make_inputs(case))
    o_clean, lse_clean = reference_for_case(case, make_inputs(case, poison=False))
    assert torch.equal(o, o_clean) and torch.equal(lse, lse_clean)


# ------------------------------------------------------------- moving
def test_guards_survive_moving_the_tensors():
    inputs = make_inputs(THD[0])
    for name, t in inputs.buffers().items():
        moved = relocate(t, "cpu")  # the copy CaseTensors.to makes for another device
        assert moved.untyped_storage().data_ptr() != t.untyped_storage().data_ptr()
        assert guard_bands(moved) == guard_bands(t) and _intact(moved), name
        assert torch.equal(flat_storage(moved).view(torch.uint8), flat_storage(t).view(torch.uint8)), name
    meta = make_inputs(DENSE[1]).to("meta")
    for name, t in meta.buffers().items():
        assert guard_bands(t) == guard_bands(getattr(make_inputs(DENSE[1]), name)), name


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU found")
def test_guards_survive_the_move_to_the_gpu():
    for case in DENSE + THD:
        inputs = make_inputs(case).to("cuda")
        o, lse = make_outputs(case, "cuda")
        for name, t in {**inputs.buffers(), "o": o, "lse": lse}.items():
            assert t.is_cuda and _intact(t), name
            assert t.data_ptr() % 16 == 0, name


# ------------------------------------------------------- staging copies
def test_staging_copies_sit_inside_guard_bands():
    from kernels.prepared import _stage_contiguous, _stage_dense, _stage_packed

    case = Case(s_q=3, s_kv=3, d_qk=20, d_v=20, memory="bshd")
    q = make_inputs(case).q
    staged = _stage_dense(q, 24)
    assert staged is not q and guard_bands(staged) is not None and _intact(staged)
    assert torch.equal(staged[..., :20], q) and bool((staged[..., 20:] == 0).all())
    t = make_inputs(THD[0]).v
    packed = _stage_packed(t, 128)
    assert guard_bands(packed) is not None and _intact(packed)
    lse = make_outputs(THD[0])[1]
    assert _stage_contiguous(lse) is lse
    copy = _stage_contiguous(lse.t().contiguous().t())
    assert guard_bands(copy) is not None and _intact(copy)


# ------------------------------------------------------------ fake kernels
@pytest.fixture
def on_cpu(monkeypatch):
    """The launching properties on the CPU (their device() refuses otherwise)."""
    from properties import compile_cache, numerics, rejection, tails  # noqa: F401 - loaded, so device_users finds them

    for module in device_users():
        monkeypatch.setattr(module, "device", lambda: torch.device("cpu"))


NUMERIC_CASES = [Case(s_q=3, s_kv=5, memory="bshd_padded", bias="float32", seq_kv_lens=(4,)), Case(layout="thd", q_lens=(2, 3), kv_lens=(4, 1), q_slack=2)]
EMPTY_PACK = Case(layout="thd", q_lens=(0,), kv_lens=(0,))  # T_q = 0: no row at all, the capacity count too


@pytest.mark.parametrize("case", [*NUMERIC_CASES, EMPTY_PACK], ids=["dense", "thd", "thd-empty"])
def test_an_honest_fake_kernel_passes(case, on_cpu):
    from properties import check_numerics, check_tails

    assert check_numerics(case, FakeKernel()).outcome == "passed"
    assert check_tails(case, FakeKernel()).outcome == "passed"


@pytest.mark.parametrize("case", NUMERIC_CASES, ids=["dense", "thd"])
def test_a_write_one_element_past_o_is_named(case, on_cpu):
    from properties import check_numerics, check_tails

    n = guard_bands(make_outputs(case)[0])[1]
    for check in (check_numerics, check_tails):
        with pytest.raises(PropertyFailure) as failure:
            check(case, FakeKernel("write past O"))
        f = failure.value
        assert f"out-of-bounds write: o: 1 element(s) after the end in elements [{n}, {n + 1})" in f.summary
        (hit,) = f.detail["guards"]
        assert hit["buffer"] == "o" and hit["elements"] == [n, n + 1] and hit["bytes"] == [2 * n, 2 * n + 2]
        assert hit["found_bits"] == ["0x0"] and hit["sentinel_bits"] == "0x7e00"


def test_a_write_before_lse_is_named(on_cpu):
    from properties import check_numerics

    with pytest.raises(PropertyFailure, match=r"lse: 1 element\(s\) before the start in elements \[-1, 0\) \(bytes -4\.\.\+0, 0x"):
        check_numerics(NUMERIC_CASES[0], FakeKernel("write before LSE"))


def test_a_read_past_k_picks_up_the_guard_nan(on_cpu):
    from properties import check_numerics

    case = Case(s_q=3, s_kv=5, memory="bhsd")
    assert check_numerics(case, FakeKernel()).outcome == "passed"
    with pytest.raises(PropertyFailure, match="exceeds its bound") as failure:
        check_numerics(case, FakeKernel("read past K"))
    assert any(w["got"] != w["got"] for w in failure.value.detail["worst"])  # NaN reached O


def test_compile_reuse_and_rejection_check_the_guards(on_cpu):
    from ground.contracts import PREPARED, RULES_BY_NAME
    from properties import check_compile_reuse, check_rejection

    class Writes(FakeKernel):
        def run(self, case, inputs, outputs=None, **kw):
            result = super().run(case, inputs, outputs, **kw)
            result.compile = CompileDelta()
            return result

    check_compile_reuse(NUMERIC_CASES[1], Writes())
    with pytest.raises(PropertyFailure, match="out-of-bounds write: o"):
        check_compile_reuse(NUMERIC_CASES[1], Writes("write past O"))

    class RefusesAfterWriting(FakeKernel):
        name = "prepared"

        def run(self, case, inputs, outputs=None, **kw):
            flat_storage(outputs[0])[guard_bands(outputs[0])[0] - 1] = 0.0
            raise ValueError("refused")

    rule = RULES_BY_NAME["head_dim_qk_over_256"]  # the prepared entry conforms to it (no known finding)
    case = rule.transform(Case(s_q=3, s_kv=5))
    with pytest.raises(PropertyFailure, match=r"out-of-bounds write: o: 1 element\(s\) before the start"):
        check_rejection(case, RefusesAfterWriting(), entry=PREPARED)


def test_a_buffer_without_guard_bands_is_a_suite_bug():
    from properties import judge

    with pytest.raises(ValueError, match="buffer 'x'.*no guard bands"):
        judge.guards_intact("numerics", Case(), {"x": torch.zeros(4)})


# ------------------------------------------------------------ capabilities
class OwnsItsOutputs(FakeKernel):
    """Like the public wrapper: allocates and returns its own O/LSE, THD always initialized."""

    supports = frozenset()
    lacks = {"no-init": "always zero-initializes", "caller-outputs": "returns its own buffers"}

    def __init__(self, tail=0.0):
        super().__init__()
        self.tail = tail

    def run(self, case, inputs, outputs=None, *, initialize_outputs=True, tamper=None):
        own = make_outputs(case, fill=0.0)
        result = super().run(case, inputs, own, initialize_outputs=True)
        outputs[0].copy_(own[0]), outputs[1].copy_(own[1])  # a copy for the caller: NOT what tails judges
        own[0][~inputs.q_live] = self.tail  # what the entry point itself left in its capacity tail
        return KernelResult(own[0], own[1], CompileDelta(), result.notes, {k: v for k, v in result.handed.items() if k not in ("o", "lse")})


def test_tails_refuses_a_mode_the_adapter_lacks_before_launching(on_cpu, monkeypatch):
    from properties import check_tails, recorder

    case = NUMERIC_CASES[1]
    adapter = OwnsItsOutputs()
    monkeypatch.setattr(adapter, "run", lambda *a, **k: pytest.fail("launched"))
    with pytest.raises(Unsupported, match="adapter 'fake' cannot run the THD tails with initialize_outputs=False: no 'no-init'.*always zero-initializes"):
        check_tails(case, adapter, initialize_outputs=False)
    assert recorder.last_begun() is None or recorder.last_begun().property != "tails"


def test_tails_never_substitutes_the_mode_an_adapter_ran(on_cpu):
    from properties import check_tails

    class Liar(FakeKernel):
        def run(self, case, inputs, outputs=None, *, initialize_outputs=True, tamper=None):
            return super().run(case, inputs, outputs, initialize_outputs=True)

    with pytest.raises(RuntimeError, match="ran initialize_outputs=True when asked for False"):
        check_tails(NUMERIC_CASES[1], Liar(), initialize_outputs=False)


def test_tails_judges_the_memory_the_entry_point_returned(on_cpu):
    from properties import check_tails

    assert check_tails(NUMERIC_CASES[1], OwnsItsOutputs(tail=0.0)).outcome == "passed"
    # The caller's copy is clean; the returned buffer's tail is not zeroed.
    with pytest.raises(PropertyFailure, match="O capacity outside the live tokens"):
        check_tails(NUMERIC_CASES[1], OwnsItsOutputs(tail=5.0))


def test_the_real_adapters_declare_their_capabilities():
    from ground.tables import CAPABILITIES
    from kernels.prepared import PreparedAdapter
    from kernels.wrapper import WrapperAdapter

    assert PreparedAdapter.supports == set(CAPABILITIES)
    assert not WrapperAdapter.supports and set(WrapperAdapter.lacks) == set(CAPABILITIES)
    # The wrapper refuses THD no-init itself, before it needs a device.
    with pytest.raises(Unsupported, match="adapter 'wrapper' cannot run THD with initialize_outputs=False"):
        WrapperAdapter().run(NUMERIC_CASES[1], make_inputs(NUMERIC_CASES[1]), initialize_outputs=False)


CONFTEST = """
def pytest_addhooks(pluginmanager):
    if not pluginmanager.has_plugin("sdpa_conformance"):
        import conformance.plugin
        pluginmanager.register(conformance.plugin, "sdpa_conformance")
"""

SKIPPING = """
from hypothesis import given, strategies as st
from ground.outcome import Unsupported

CALLS = []

@given(st.integers())
def test_no_init(i):
    CALLS.append(i)
    assert len(CALLS) == 1, "Hypothesis retried or shrank an Unsupported example"
    raise Unsupported.lacking("wrapper", "no-init", "the THD tails with initialize_outputs=False", "always zero-initializes")
"""


def test_unsupported_skips_the_test_with_the_reason(pytester, monkeypatch):
    for var in ("SDPA_ADAPTER", "SDPA_SM80_COMPAT", "SDPA_KERNELS_SOURCE"):
        monkeypatch.delenv(var, raising=False)
    profile = settings.get_current_profile_name()
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_skip=SKIPPING)
    try:
        result = pytester.runpytest("-p", "no:cacheprovider", "-p", "no:benchmark", "-rs")
    finally:
        settings.load_profile(profile)
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*adapter 'wrapper' cannot run the THD tails with initialize_outputs=False: no 'no-init'*always zero-initializes*"])


def test_refilling_buffers_between_launches_keeps_the_bands_evidence():
    """graph_replay and launch_hygiene refill the inputs and outputs between
    launches: only the bodies, so a band an earlier launch wrote to is still
    judged as written (it was copied over, bands included, and passed)."""
    from properties import judge
    from properties.common import launched_buffers
    from properties.launch import _copy_in_place, _repoison

    case = Case(batch=2, s_q=65, s_kv=70, seq_kv_lens=(70, 40), sinks=True)
    inputs, outputs = make_inputs(case), make_outputs(case)
    for t in (inputs.k, outputs[0]):  # an earlier launch wrote one element past each
        g, n, _ = guard_bands(t)
        flat_storage(t)[g + n] = 0
    _copy_in_place(inputs, make_inputs(case.replace(seed=1)))
    _repoison(case, outputs, "cpu")
    with pytest.raises(PropertyFailure, match="out-of-bounds write: k: 1 element") as failed:
        judge.guards_intact("graph_replay", case, launched_buffers(inputs, outputs))
    assert "; o: 1 element(s) after the end" in str(failed.value)


def test_bands_of_every_kind_are_judged_in_a_few_launches_as_they_were_when_asked():
    """Bands of one kind (bits dtype and sentinel) are compared together: each
    written band is still named alone, with its side and count, whatever its
    kind; the comparison is the one made when the check was asked (a write
    after it is not judged); and the launches are two per kind plus two,
    not two per band."""
    from properties import judge
    from properties.common import launched_buffers
    from tools.count_model_ops import OpCount

    case = Case(layout="thd", q_lens=(5, 9), kv_lens=(7, 3), q_base=2, kv_base=1, q_slack=3, kv_slack=2, sinks=True)
    inputs, outputs = make_inputs(case), make_outputs(case)
    buffers = launched_buffers(inputs, outputs)
    writes = {"k": (-1, -2), "lse": (1, 3), "cu_q": (-1, -1)}  # (side: -1 before the start, 1 after the end; count)
    assert {n for n in writes} <= set(buffers) and len({buffers[n].dtype for n in writes}) == 3
    for name, (side, count) in writes.items():
        g, n, _ = guard_bands(buffers[name])
        at = g - 1 - torch.arange(abs(count)) if side < 0 else g + n + torch.arange(count)
        flat_storage(buffers[name])[at] = 0
    kinds = {(t.dtype.itemsize, guard_bits(t)[2]) for t in buffers.values() if t is not None}
    with judge.collecting() as failures:
        with OpCount() as launches:
            judge.guards_intact("tails", case, buffers)
        g, n, _ = guard_bands(outputs[0])
        flat_storage(outputs[0])[g + n] = 0  # after the check was asked: not judged
    assert launches.ops <= 2 * len(kinds) + 2 < 2 * len(buffers), (launches.ops, len(kinds), len(buffers))
    (failure,) = failures
    hits = {h["buffer"]: (h["side"], h["count"]) for h in failure.detail["guards"]}
    assert hits == {"k": ("before the start", 2), "lse": ("after the end", 3), "cu_q": ("before the start", 1)}, hits


def test_a_wide_token_row_still_gets_tile_m_rows_of_band():
    """The widest drawn Q row (64 heads x 128 dims in 16-bit, the large tier's
    gqa64): a band of TILE_M rows, under the cap that bounds big bias buffers."""
    from ground.data import guarded

    row = 64 * 128
    q = guarded((1, 1, 64, 128), torch.float16, "cpu", row=row)
    assert guard_bands(q)[0] == TILE_M * row and TILE_M * row * 2 <= GUARD_MAX_BYTES


def test_a_span_drawn_thd_case_keeps_its_sink_and_prefix_facts():
    """The large tier's span-drawn THD inputs lay out sinks and cu_seqlens as
    the Case says (strided sinks with NaN between, int64 prefixes), as the
    ordinary path does: what the kernel was compiled for."""
    from ground.data import SPAN_DRAW_ELEMS

    case = Case(layout="thd", q_lens=(3,), kv_lens=(5,), sinks=True, sink_layout="strided", prefix_dtype="int64", kv_base=SPAN_DRAW_ELEMS // 64 + 10)
    x = make_inputs(case)
    assert x.sinks.stride() == (2,) and x.cu_q.dtype == x.cu_kv.dtype == torch.int64
    assert bool(torch.isnan(flat_storage(x.sinks)[guard_bands(x.sinks)[0] + 1]))  # the skipped element: poison
