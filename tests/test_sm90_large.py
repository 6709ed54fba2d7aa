"""The sm90 large tier on the CPU (strategies.sm90_large): its batch entry 1
sits past 2^31 elements (where the 32-bit batch stride of the mutant
sm90_batch_stride_int32 wraps), the planner takes and compiles its rows for
sm_90a, a drawn Case's reference is bounded and cut exactly, its inputs are
never drawn at full size on the CPU. The launch: conformance/test_sm90_large.py."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ground import data
from ground.case import Case
from strategies.sm90_large import KV_LIVE, ROWS, batch_stride, int32, sm90_large_cases

WRAP31 = 1 << 31


def _row_case(row: dict, **runtime) -> Case:
    return Case(**row, **{"seq_q_lens": (3, 5), "seq_kv_lens": (7, 9), **runtime})


@pytest.mark.parametrize("row", ROWS, ids=lambda r: r["dtype"])
def test_batch_one_sits_past_2_31_and_an_int32_stride_wraps(row):
    """K and V of batch entry 1 start past 2^31 elements; narrowed to 32
    bits that stride goes negative (out of the allocation), Q's and O's do not matter."""
    case = _row_case(row)
    for operand in ("k", "v"):
        stride = batch_stride(case, operand)
        assert WRAP31 < stride < 2 * WRAP31
        assert int32(stride) < 0 and int32(stride) != stride
    assert batch_stride(case, "q") < WRAP31 and batch_stride(case, "o") < WRAP31


def test_int32_is_a_twos_complement_wrap():
    assert [int32(x) for x in (0, WRAP31 - 1, WRAP31, WRAP31 + 65536, 2 * WRAP31 + 5)] == [0, WRAP31 - 1, -WRAP31, -WRAP31 + 65536, 5]


@settings(max_examples=25, deadline=None)
@given(case=sm90_large_cases())
def test_drawn_cases_read_past_2_31_at_a_bounded_reference_cost(case):
    """Every drawn Case has a live Q row and a live key in batch entry 1 (so the
    launch reads past 2^31), its inputs are built on the device, and the
    reference computes at most KV_LIVE keys rounded to whole tiles per row."""
    assert case.q_lengths()[1] >= 1 and case.kv_lengths()[1] >= 1
    assert data.dense_span_drawn(case)
    keys = data.live_key_extent(case)
    assert max(case.kv_lengths()) <= keys <= KV_LIVE + data.KEY_EXTENT_ALIGN
    assert case.batch * case.h_q * case.s_q * keys <= 2 * 2 * 64 * 512  # (row, key) pairs of the float64 reference
    # The device holds K and V in full: 16 GiB and change, Q and O a few hundred KiB.
    assert 16 << 30 < 2 * case.batch * batch_stride(case, "k") * 2 < 17 << 30


def test_the_inputs_are_drawn_for_the_live_rows_only(monkeypatch):
    """Built on the meta device (no memory): the values drawn on the CPU are the
    live rows' alone, every buffer has the Case's full dense shape."""
    case = _row_case(ROWS[0], sinks=True)
    drawn = []
    real = torch.randn

    def counting(*shape, **kw):
        drawn.append(torch.Size(shape).numel())
        return real(*shape, **kw)

    monkeypatch.setattr(torch, "randn", counting)
    t = data.make_inputs(case, "meta", pad_fill=data.FINITE_PAD)
    assert t.k.shape == (2, 1, case.s_kv, 512) and t.k.device.type == "meta"
    live = case.h_q * sum(case.q_lengths()) * 512 + 2 * case.h_kv * sum(case.kv_lengths()) * 512 + case.h_q
    assert sum(drawn) == live


def test_a_forced_span_build_poisons_exactly_the_dead_rows(monkeypatch):
    """A small dense Case built the span way (the threshold lowered): live rows
    hold drawn values, dead rows the pad fill, pad columns NaN, bands intact."""
    monkeypatch.setattr(data, "DENSE_SPAN_ELEMS", 0)
    case = Case(family="sm90", batch=2, h_q=2, h_kv=1, s_q=9, s_kv=20, d_qk=8, d_v=8, memory="bshd_padded", seq_q_lens=(0, 4), seq_kv_lens=(6, 20), seed=3)
    t = data.make_inputs(case, pad_fill=data.FINITE_PAD)
    for x, live in ((t.q, t.q_live), (t.k, t.kv_live), (t.v, t.kv_live)):
        rows = live[:, None, :, None].expand_as(x)
        assert torch.isfinite(x[rows].float()).all() and (x[rows] != data.FINITE_PAD).all()
        assert (x[~rows] == data.FINITE_PAD).all()
        front, back, bits = data.guard_bits(x)
        assert (front == bits).all() and (back == bits).all()
    assert data.body_storage(t.q).isnan().sum() == 2 * 9 * 2 * 8  # the ROW_PAD columns of every (b, s, h)


@settings(max_examples=6, deadline=None)
@given(
    seed=st.integers(0, 100),
    kv=st.tuples(st.integers(0, 70), st.integers(1, 70)),
    causal=st.booleans(),
    dtype=st.sampled_from(("float16", "bfloat16")),
)
def test_the_reference_cut_to_the_live_keys_is_the_whole_one(seed, kv, causal, dtype):
    """O, LSE and the sm90 error model's bounds over the keys up to
    ``live_key_extent`` equal those over the whole key axis bit for bit (the
    cut the large tier's reference makes, forced on a small Case)."""
    import reference.attention as ref
    from ground.tolerances import bounds_for

    case = Case(
        family="sm90", dtype=dtype, batch=2, h_q=2, h_kv=1, s_q=16, s_kv=700, d_qk=32, d_v=32, seq_q_lens=(16, 5), seq_kv_lens=kv, causal=causal, seed=seed
    )
    t = data.make_inputs(case, pad_fill=data.FINITE_PAD)
    extra = lambda it: bounds_for("sm90")(it, case.dtype)  # noqa: E731
    whole = ref.reference_for_case(case, t, torch.float64, extra=extra)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(data, "DENSE_SPAN_ELEMS", 0)
        assert data.live_key_extent(case) == 256 < case.s_kv
        cut = ref.reference_for_case(case, t, torch.float64, extra=extra)
    for a, b in ((whole[0], cut[0]), (whole[1], cut[1])):
        assert torch.equal(a, b)
    assert whole[2].keys() == cut[2].keys()
    for name in whole[2]:
        assert torch.equal(whole[2][name].nan_to_num(7.0), cut[2][name].nan_to_num(7.0)), name


def test_a_cut_inside_a_kv_tile_changes_the_bounds(monkeypatch):
    """The comparison above can fail: cut at the longest kv length itself (60,
    inside a 64-key tile, KEY_EXTENT_ALIGN planted to 1) the error model walks
    other tiles and its bounds differ; whole tiles (64) agree."""
    import reference.attention as ref
    from ground.tolerances import bounds_for

    case = Case(family="sm90", batch=2, h_q=2, h_kv=1, s_q=16, s_kv=700, d_qk=32, d_v=32, seq_q_lens=(16, 5), seq_kv_lens=(60, 33), seed=1)
    t = data.make_inputs(case, pad_fill=data.FINITE_PAD)
    extra = lambda it: bounds_for("sm90")(it, case.dtype)  # noqa: E731
    whole = ref.reference_for_case(case, t, torch.float64, extra=extra)[2]["o"]
    monkeypatch.setattr(data, "DENSE_SPAN_ELEMS", 0)
    got = {}
    for align in (1, 64):
        monkeypatch.setattr(data, "KEY_EXTENT_ALIGN", align)
        got[align] = torch.equal(whole.nan_to_num(7.0), ref.reference_for_case(case, t, torch.float64, extra=extra)[2]["o"].nan_to_num(7.0))
    assert got == {1: False, 64: True}


@pytest.mark.compile
@pytest.mark.parametrize("row", ROWS, ids=lambda r: r["dtype"])
def test_the_planner_takes_and_compiles_each_row_for_sm90a(row):
    """Each row is one plan and one sm_90a compile (no launch: any machine)."""
    from kernels.sm90.adapter import Sm90Adapter
    from kernels.sm90.specialize import specialize

    case = _row_case(row)
    specialize(case)
    Sm90Adapter().compile_only(case)
