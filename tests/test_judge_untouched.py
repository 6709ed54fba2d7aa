"""Storage the kernel must not write is judged by its bits (judge.untouched):
a store of a NaN with another payload than the suite's poison (what a GPU
computes from NaN, 0x7FFF in fp16) is a write, though a value comparison
(judge.exactly: NaN matches NaN) lets it through."""

from __future__ import annotations

import pytest
import torch

from ground.case import Case
from ground.data import body_storage, make_outputs
from ground.outcome import PropertyFailure
from properties import judge
from properties.common import lse_untouched

CASE = Case(s_q=3, s_kv=5, has_lse=False)
GPU_NAN = {torch.float16: 0x7FFF, torch.bfloat16: 0x7FFF, torch.float32: 0x7FFFFFFF}
INT = {2: torch.int16, 4: torch.int32}


def _written(buf: torch.Tensor, at: int) -> torch.Tensor:
    """``buf`` with element ``at`` of its storage body set to the GPU's canonical NaN."""
    out = buf.clone()
    body_storage(out).view(INT[out.element_size()])[at] = GPU_NAN[out.dtype]
    return out


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_a_nan_of_another_payload_is_a_write(dtype):
    poisoned = make_outputs(CASE, "cpu")[0].to(dtype)
    flat = body_storage(poisoned)
    everywhere = torch.ones_like(flat, dtype=torch.bool)
    judge.untouched("tails", CASE, "o", flat, everywhere, "fresh storage", check="untouched")  # the fill itself passes
    stored = body_storage(_written(poisoned, 1))
    judge.exactly("tails", CASE, "o", stored, torch.full_like(stored, float("nan")), everywhere, "by value", check="value")  # NaN matches NaN
    with pytest.raises(PropertyFailure, match="1 element") as failed:
        judge.untouched("tails", CASE, "o", stored, everywhere, "stored storage", check="untouched")
    assert failed.value.where.nonzero().flatten().tolist() == [1]
    judge.untouched("tails", CASE, "o", stored, ~(torch.arange(flat.numel()) == 1), "elsewhere", check="untouched")  # outside where: not judged


def test_the_lse_buffer_of_a_run_without_stats_is_judged_by_its_bits():
    lse = make_outputs(CASE, "cpu")[1]
    assert lse_untouched("numerics", CASE, lse) == body_storage(lse).numel()
    with pytest.raises(PropertyFailure, match="never handed"):
        lse_untouched("numerics", CASE, _written(lse, 0))
