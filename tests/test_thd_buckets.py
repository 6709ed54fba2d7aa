"""The THD reference batches sequences (``reference.attention.thd_buckets``):
each bucket is one dense call whose entries are padded to its longest
sequence and masked by their own lengths. Its O, LSE and error-model bounds
must be those of one call per sequence, and the buckets must pad within
their stated bound; a batched model that forgot the keys each entry walks
differs (the equality can fail)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from ground import tolerances
from ground.data import make_inputs
from reference import attention as A
from tests.test_reference import THD_EDGE, assert_same, cases

F64 = torch.float64
SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow])
# Sequences of unequal K/V lengths in one bucket, k16 step counts 3 and 1.
UNEVEN = THD_EDGE.replace(q_lens=(5, 2, 3), kv_lens=(40, 3, 17), window_left=-1, sinks=False)


def _model(case):
    return lambda it: tolerances.bounds_for(case.family)(it, case.dtype, parts=True)


def _per_sequence(monkeypatch):
    monkeypatch.setattr(A, "thd_buckets", lambda q_lens, kv_lens: [[s] for s in range(len(q_lens)) if q_lens[s]])


def _both(case, monkeypatch):
    t = make_inputs(case, poison=True)
    batched = A.reference_for_case(case, t, F64, extra=_model(case))
    with monkeypatch.context() as m:
        _per_sequence(m)
        alone = A.reference_for_case(case, t, F64, extra=_model(case))
    return batched, alone


def _assert_equal_calls(batched, alone):
    for b, a in zip(batched[:2], alone[:2]):
        assert_same(b, a, tol=tolerances.SAME_ARITHMETIC)
    assert batched[2].keys() == alone[2].keys()
    for name in alone[2]:  # every term of both bounds, down to the flush-to-zero counts
        torch.testing.assert_close(batched[2][name], alone[2][name], rtol=tolerances.F64_REORDERED, atol=0.0, equal_nan=True, msg=name)


@settings(max_examples=60, **SETTINGS)
@given(cases(layouts=("thd",)))
@example(THD_EDGE)
@example(UNEVEN)
def test_buckets_equal_one_call_per_sequence(case):
    with pytest.MonkeyPatch.context() as monkeypatch:
        _assert_equal_calls(*_both(case, monkeypatch))


def test_a_bucket_that_forgets_the_keys_each_entry_walks_differs(monkeypatch):
    """P@V's k16 steps counted over the padded SKV instead of each sequence's keys."""
    assert len(A.thd_buckets(UNEVEN.q_lens, UNEVEN.kv_lens)) == 1
    monkeypatch.setattr(tolerances, "_k16_steps", lambda it, s_kv: -(-s_kv // tolerances.MMA_K))
    with pytest.raises(AssertionError, match="o:ftz"):
        _assert_equal_calls(*_both(UNEVEN, monkeypatch))


@given(st.lists(st.tuples(st.integers(0, 3000), st.integers(0, 3000)), min_size=1, max_size=40))
def test_buckets_hold_each_sequence_with_rows_once_within_the_padding_bound(lens):
    q_lens, kv_lens = [q for q, _ in lens], [k for _, k in lens]
    buckets = A.thd_buckets(q_lens, kv_lens)
    assert sorted(s for b in buckets for s in b) == [s for s, n in enumerate(q_lens) if n]
    area = lambda s: q_lens[s] * max(kv_lens[s], 1)  # noqa: E731
    for b in buckets:
        padded = len(b) * max(q_lens[s] for s in b) * max(max(kv_lens[s] for s in b), 1)
        assert len(b) == 1 or padded <= A.THD_PAD_SLACK * sum(area(s) for s in b) + A.THD_PAD_FREE
        assert len(b) == 1 or len(b) * max(kv_lens[s] for s in b) <= A.THD_BUCKET_KEYS


def test_the_large_tiers_long_sequences_go_one_per_call():
    """64 sequences of 64k tokens: equal lengths pad nothing, yet one row of all of them would not fit a reference chunk."""
    assert A.thd_buckets([1 << 16] * 64, [1 << 16] * 64) == [[s] for s in range(64)]


def test_short_sequences_share_a_call_and_a_long_one_does_not():
    q_lens, kv_lens = [4096] + [3] * 30, [4096] + [5] * 30
    assert A.thd_buckets(q_lens, kv_lens) == [[0], list(range(1, 31))]
