"""The large tier and the upstream-parity families on the CPU: what the
shapes draw (validity, the production-scale targets, sizes, compile keys),
the big-capacity inputs with their 32-bit-wrap decoys (and that a wrapped
read is caught), the replay variant, the host-touch guard, the tier's
selection, and the compile tier for two large geometries."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from hypothesis import HealthCheck, given, settings

from ground import data
from ground.case import Case
from ground.contracts import broken_rules
from ground.data import make_inputs, wrapped_span
from ground.tolerances import kernel_bounds
from kernels.prepared import compile_key
from properties.launch import host_touches, replay_variant
from properties.matrix import FAMILIES
from reference.attention import reference_for_case
from strategies import large
from strategies.large import REPLAY_ROWS, SHAPES, input_bytes, large_cases, reference_pairs, replay_cases

FIXED = dict(derandomize=True, database=None, deadline=None, suppress_health_check=[HealthCheck.too_slow])
# Per example: the float64 reference's (row, key) pairs (an estimated 10-30 s per 1e9 on an H200,
# docs/large_tier.md) and the device bytes of Q, K, V and O (each example under ~20 GB).
MAX_PAIRS = 1.1e9
MAX_BYTES = 18e9


def _draws(strategy, n: int = 12):
    out = []

    @settings(max_examples=n, **FIXED)
    @given(strategy)
    def collect(case):
        out.append(case)

    collect()
    return out


# ---------------------------------------------------------------- shapes
@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_shapes_draw_valid_bounded_cases(shape):
    cases = _draws(large_cases(shape))
    keys = set()
    for c in cases:
        assert c.structural_problem() is None, (shape, c.structural_problem())
        assert broken_rules(c) == (), (shape, c.describe(), broken_rules(c))
        assert reference_pairs(c) <= MAX_PAIRS and input_bytes(c) <= MAX_BYTES, (shape, c.describe())
        keys.add(compile_key(c))
    # Runtime facts never reach a key: a shape costs one compile per geometry row.
    assert len(keys) <= len(SHAPES[shape].rows), shape


def test_the_tier_reaches_production_scale():
    """The tier's production-scale targets, each drawn by some shape of the tier."""
    drawn = {name: _draws(large_cases(name), 8) for name in SHAPES}
    tier = [c for n in large.LARGE_SHAPES + large.OFFSET_SHAPES for c in drawn[n]]
    assert max(c.s_kv for c in tier if not c.is_thd) >= 32768 and max(c.s_q for c in tier if not c.is_thd) >= 32768
    assert any(not c.is_thd and c.s_q == 1 and c.s_kv >= 16384 for c in tier)  # decode rows against long KV
    assert any(c.h_q == 64 and c.h_q // c.h_kv == 8 for c in tier)
    assert any(c.is_thd and c.n_seq >= 64 and sum(c.q_lens) >= 65536 and sum(c.kv_lens) >= 65536 for c in drawn["thd_seqs"])
    assert all(c.n_seq >= 64 and sum(c.q_lens) >= 65536 for c in drawn["thd_seqs"])
    ctas = lambda c: c.batch * c.h_q * -(-c.s_q // 128)  # noqa: E731  (dense: one CTA per Q tile per head and batch)
    assert max(ctas(c) for c in tier if not c.is_thd) >= 1024
    # element offsets past 2^32 (decoys below) and in [2^31, 2^32)
    offsets = [c.kv_base * c.h_kv * c.d_qk for c in drawn["offsets"]]
    assert any(o >= 2**32 for o in offsets) and any(2**31 <= o < 2**32 for o in offsets)
    assert any(data.decoy_spans(c) for c in drawn["offsets"])
    groups = {(c.h_q, c.h_kv) for n in large.GQA_SHAPES for c in drawn[n]}
    assert groups == {(8, 4), (8, 2), (8, 1)}
    pads = {(c.d_qk, c.s_q % 128 == 0) for n in large.LSE_PAD_SHAPES for c in drawn[n]}
    assert pads == {(64, True), (64, False), (256, True), (256, False)} and all(c.seq_q_lens for n in large.LSE_PAD_SHAPES for c in drawn[n])


def test_large_families_are_marked_and_budgeted():
    for name in ("test_large", "test_large_offsets"):
        assert "large" in FAMILIES[name].marks and FAMILIES[name].examples == "large"
    assert "large" not in FAMILIES["test_large_slice"].marks  # the ci slice
    from strategies.profiles import examples

    assert examples("large", "ci") <= 3 and examples("large", "nightly") <= 4


def test_restricted_shape_without_a_row_says_so():
    with pytest.raises(ValueError, match="no geometry"):
        large_cases("long", flavors=("qwen",))


# ------------------------------------------------- big capacities, decoys
def test_wrapped_span_arithmetic():
    assert wrapped_span(0, 10, 64) is None
    assert wrapped_span(2**26, 2**26 + 3, 64) == (0, 192)  # everything past 2^32: moved down by 2^32
    assert wrapped_span(2**26 - 1, 2**26 + 1, 64) == (0, 64)  # only the part past 2^32
    assert wrapped_span(2**25, 2**25 + 5, 64) is None  # [2^31, 2^32): a wrap goes negative, out of the allocation


SMALL = Case(layout="thd", h_q=2, h_kv=1, d_qk=8, d_v=8, q_lens=(3, 0, 5), kv_lens=(4, 2, 6), q_base=1, kv_base=70, kv_slack=3, causal=True, seed=4)


def test_span_drawn_inputs_hold_live_values_poison_and_decoys(monkeypatch):
    """With the threshold and the wrap shrunk (so a small Case stands for a
    2^32 one): live K/V tokens hold a draw, dead storage the poison, and the
    elements a 32-bit offset reaches hold finite decoys unlike the live ones."""
    monkeypatch.setattr(data, "SPAN_DRAW_ELEMS", 0)
    monkeypatch.setattr(data, "WRAP", 512)  # kv_base 70 x 8 = 560 >= 512: every live K/V element wraps
    t = make_inputs(SMALL)
    assert data.span_drawn(SMALL)
    cu = SMALL.cu_seqlens("kv")
    live = t.k[cu[0] : cu[-1]]
    assert torch.isfinite(live).all()
    lo, hi = wrapped_span(cu[0], cu[-1], 8)
    flat = t.k.reshape(-1)
    assert torch.isfinite(flat[lo:hi]).all() and not torch.equal(flat[lo:hi], live.reshape(-1))
    dead = torch.ones(flat.numel(), dtype=torch.bool)
    dead[cu[0] * 8 : cu[-1] * 8] = False
    dead[lo:hi] = False
    assert torch.isnan(flat[dead]).all()
    assert data.guard_bands(t.k) is not None and data.guard_bands(t.cu_kv) is not None
    again = make_inputs(SMALL)  # regenerated bit for bit
    assert torch.equal(data.flat_storage(again.k).view(torch.int16), data.flat_storage(t.k).view(torch.int16))


def test_a_wrapped_read_is_caught_by_the_model(monkeypatch):
    """A kernel reading K/V 2^32 elements too low (the decoys) gives outputs
    far outside the error model: the offsets family can fail."""
    monkeypatch.setattr(data, "SPAN_DRAW_ELEMS", 0)
    monkeypatch.setattr(data, "WRAP", 512)
    t = make_inputs(SMALL)
    ref_o, _, model = reference_for_case(SMALL, t, torch.float64, extra=lambda it: kernel_bounds(it, SMALL.dtype))
    cu = SMALL.cu_seqlens("kv")
    lo, hi = wrapped_span(cu[0], cu[-1], 8)
    wrapped = SimpleNamespace(**vars(t))
    for name in ("k", "v"):
        x = getattr(t, name).clone()
        x[cu[0] : cu[-1]] = getattr(t, name).reshape(-1)[lo:hi].view(cu[-1] - cu[0], 1, 8)
        setattr(wrapped, name, x)
    got_o, _ = reference_for_case(SMALL, wrapped, torch.float32)
    live = torch.isfinite(ref_o)
    assert ((got_o.double() - ref_o).abs()[live] > model["o"][live]).any()


def test_small_cases_keep_their_bits():
    """Below SPAN_DRAW_ELEMS nothing changed: the whole capacity is drawn in order."""
    assert not data.span_drawn(SMALL)
    g = torch.Generator().manual_seed(SMALL.seed)
    q = torch.randn(SMALL.t_q, SMALL.h_q, SMALL.d_qk, generator=g).to(torch.float16)
    t = make_inputs(SMALL, poison=False)
    assert torch.equal(t.q, q)


# ----------------------------------------------------------------- replay
@pytest.mark.parametrize("layout", sorted(REPLAY_ROWS))
def test_replay_variant_changes_runtime_inputs_only(layout):
    for c in _draws(replay_cases(layout), 8):
        v = replay_variant(c)
        assert compile_key(v) == compile_key(c) and v.seed != c.seed and v.softmax_scale == c.softmax_scale
        if c.is_thd:
            assert (v.t_q, v.t_kv, v.max_s_q, v.n_seq) == (c.t_q, c.t_kv, c.max_s_q, c.n_seq)
            assert v.cu_seqlens("q") != c.cu_seqlens("q") or len(set(c.q_lens)) == 1
        assert data.make_inputs(v, "meta").q.shape == data.make_inputs(c, "meta").q.shape


def test_host_touch_guard_catches_reads_and_syncs():
    x = torch.ones(3)
    with host_touches() as caught:
        with pytest.raises(RuntimeError):
            x.sum().item()
        with pytest.raises(RuntimeError):
            torch.cuda.synchronize()
    assert caught == ["Tensor.item", f"{torch.cuda.__name__}.synchronize"]
    assert x.sum().item() == 3.0  # restored


# -------------------------------------------------------------- selection
@pytest.mark.parametrize(
    "opts, env, want",
    [
        ({}, None, False),
        ({"large": True}, None, True),
        ({"markexpr": "large"}, None, True),
        ({"markexpr": "gpu and not large"}, None, False),
        ({"hypothesis_profile": "nightly"}, None, True),
        ({}, "1", True),
    ],
)
def test_large_tier_selection(opts, env, want, monkeypatch):
    from conformance.plugin import LARGE_ENV, large_tier_selected

    monkeypatch.delenv(LARGE_ENV, raising=False)
    monkeypatch.delenv("SDPA_HYPOTHESIS_PROFILE", raising=False)
    monkeypatch.delenv("CI", raising=False)
    if env:
        monkeypatch.setenv(LARGE_ENV, env)
    config = SimpleNamespace(getoption=lambda name, default=None: opts.get(name, default))
    assert large_tier_selected(config) is want


# ----------------------------------------------------------- compile tier
@pytest.mark.compile
@pytest.mark.parametrize("shape", ["long", "decode", "gqa64", "thd_seqs"])
def test_large_geometries_compile_for_sm80(shape, tmp_path, monkeypatch):
    from kernels.prepared import PreparedAdapter

    monkeypatch.setenv("CUDNN_FRONTEND_COMPILED_CACHE", str(tmp_path / "compiled"))
    case = _draws(large_cases(shape), 1)[0]
    delta = PreparedAdapter(rewrites=()).compile_only(case)
    assert delta.misses >= 1


# ------------------------------------------- the property, chunked, on CPU
def test_numerics_with_a_chunked_reference_judges_the_emulated_kernel(monkeypatch):
    """The numerics property with the reference cut into chunks of rows (as a
    32k case is) passes the emulated kernel and fails a planted bug."""
    from unittest import mock

    from ground.outcome import PropertyFailure
    from properties import numerics as properties
    from reference import attention
    from tests.kernel_emulation import EmulatedAdapter, Plant, drop_key

    case = Case(batch=2, h_q=2, h_kv=1, s_q=20, s_kv=70, d_qk=16, d_v=16, causal=True, bottom_right=True, seq_kv_lens=(70, 33), seed=3)
    monkeypatch.setattr(attention, "REF_CHUNK_ELEMS", 3 * case.batch * case.h_q * case.s_kv)  # 3 rows per call
    with mock.patch.object(properties, "device", lambda: torch.device("cpu")):
        properties.check_numerics(case, EmulatedAdapter())
        with pytest.raises(PropertyFailure):
            properties.check_numerics(case, EmulatedAdapter(plant=Plant(drop=drop_key(0))))
