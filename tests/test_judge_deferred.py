"""Deferred checks (judge.exactly(defer=True)) are settled in one host sync
when judge.collecting() ends: a failing one is kept in its place among the
eager failures, a passing one leaves nothing, and outside collecting() it
raises at once like any check."""

from __future__ import annotations

import pytest
import torch

from ground.case import Case
from ground.outcome import PropertyFailure
from properties import judge

CASE = Case(s_q=3, s_kv=5)


def _check(name: str, bad: bool, defer: bool) -> None:
    got = torch.tensor([1.0, float("nan"), 3.0])
    want = got.clone()
    if bad:
        want[2] = 4.0
    judge.exactly("tails", CASE, "o", got, want, torch.ones(3, dtype=torch.bool), name, check=name, defer=defer)


def test_deferred_failures_keep_their_place_and_passes_leave_nothing():
    with judge.collecting() as failures:
        _check("first deferred", True, True)
        _check("eager", True, False)
        _check("passing deferred", False, True)
        _check("last deferred", True, True)
        assert len(failures) == 4  # nothing is read before the block ends
    assert [f.check for f in failures] == ["first deferred", "eager", "last deferred"]
    assert failures[0].detail["count"] == 1 and failures[0].where.tolist() == [False, False, True]
    assert failures[0].summary == failures[1].summary.replace("eager", "first deferred")


def test_a_deferred_check_outside_collecting_raises_at_once():
    with pytest.raises(PropertyFailure, match="1 element"):
        _check("alone", True, True)
    _check("alone", False, True)


def test_nothing_is_settled_when_the_judging_raises():
    with pytest.raises(RuntimeError), judge.collecting() as failures:
        _check("deferred", True, True)
        raise RuntimeError("a suite bug")
    assert len(failures) == 1 and not isinstance(failures[0], PropertyFailure)


@pytest.mark.parametrize(
    "got,want",
    [
        (torch.tensor([0.0, float("nan"), 2.5], dtype=torch.float16), torch.tensor([-0.0, float("nan"), 2.5], dtype=torch.float16)),
        (torch.tensor([0.0, float("nan"), 2.5], dtype=torch.float32), torch.tensor([-0.0, float("nan"), 2.5], dtype=torch.float64)),
        (torch.tensor([False, True, True]), torch.tensor([False, True, True])),
        (torch.tensor([3, -1, 7], dtype=torch.int32), torch.tensor([3, -1, 7], dtype=torch.int64)),
    ],
    ids=["fp16", "fp32 vs fp64", "bool", "int32 vs int64"],
)
def test_exactly_judges_values_in_any_dtype(got, want):
    """Equal values pass (a NaN matches a NaN, -0 matches +0), in one dtype or
    two; one element off fails, named, in each."""
    everywhere = torch.ones(3, dtype=torch.bool)
    judge.exactly("tails", CASE, "o", got, want, everywhere, "values")
    off = want.clone()
    off[2] = False if off.dtype == torch.bool else 4
    with pytest.raises(PropertyFailure, match="1 element") as failed:
        judge.exactly("tails", CASE, "o", got, off, everywhere, "values")
    assert failed.value.where.tolist() == [False, False, True]
    judge.exactly("tails", CASE, "o", got, off, torch.tensor([True, True, False]), "values")  # outside where: not judged


def test_the_error_ratio_is_zero_only_where_nothing_is_off():
    """error / bound: 0 where both are 0, inf where only the bound is 0 or the
    error is infinite (a NaN output), the quotient elsewhere."""
    from properties.judge import _ratio

    err = torch.tensor([0.0, 1.0, 1.0, float("inf"), 0.0], dtype=torch.float64)
    bound = torch.tensor([0.0, 0.0, 4.0, 2.0, 3.0], dtype=torch.float64)
    assert _ratio(err, bound).tolist() == [0.0, float("inf"), 0.25, float("inf"), 0.0]
