"""The THD launch of the sm90 compile entry (kernels.sm90.thd) on the CPU:
for every THD Case strategies.sm90 draws, the operands Sm90Adapter.run hands
``SdpaFwdDslSm90.execute`` (the caller's packed buffers, cu prefixes, Stats
in the binder's rank-2 form) are what the plan binds (the planner's own
``_thd_decl``, the binder's pure geometry rules ``_packed_role_layout`` /
``_ragged_lse_layout``) and what ``specialize`` compiled; planted argument
faults are caught. Nothing launches: the launch waits for a Hopper GPU."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import HealthCheck, find, given, settings

from ground.data import make_inputs, make_outputs
from kernels.sm90.specialize import plan, specialize
from kernels.sm90.thd import PLAN_OVERRIDES, aligned_workspace, binding_problems, thd_launch
from strategies.sm90 import sm90_cases

pytestmark = pytest.mark.family("sm90")
FIXED = dict(derandomize=True, database=None, deadline=None, suppress_health_check=[HealthCheck.too_slow])
THD_CASES = sm90_cases(layouts=("thd",), max_tokens=256)


def problems(case, plant=None) -> list:
    """``binding_problems`` of ``case``'s THD launch on CPU buffers (``plant``: a fault applied to the launch first)."""
    api = plan(case, **PLAN_OVERRIDES)
    launch = thd_launch(case, make_inputs(case, "cpu"), make_outputs(case, "cpu"))
    if plant is not None:
        launch = PLANTS[plant](launch)
    return binding_problems(api, specialize(case), launch)


@settings(max_examples=40, **FIXED)
@given(case=THD_CASES)
def test_the_thd_arguments_are_what_the_plan_binds_and_the_compile_took(case):
    assert problems(case) == []
    # The prefix form is a launch fact: the compile key is the plain plan's.
    assert specialize(case, **PLAN_OVERRIDES).key == specialize(case).key


PLANTS = {
    "K and V swapped": lambda t: dataclasses.replace(t, k=t.v, v=t.k),
    "per-sequence Q lengths": lambda t: dataclasses.replace(t, q_lens=t.q_lens[1:] - t.q_lens[:-1]),
    "Stats transposed": lambda t: t if t.lse is None else dataclasses.replace(t, lse=t.lse.T),
    "O as Q": lambda t: dataclasses.replace(t, o=t.q),
    # Head-major Stats one token short of the last head's stride (the native binder refuses it).
    "Stats short of H head strides": lambda t: t if t.lse is None else dataclasses.replace(t, lse=t.lse[:, : t.lse.shape[1] - 1]),
}


@pytest.mark.parametrize("plant", sorted(PLANTS))
def test_a_planted_argument_fault_is_caught(plant):
    """The check can fail: each planted fault shows for some drawn THD Case."""
    found = find(THD_CASES, lambda c: problems(c, plant) != [], settings=settings(max_examples=300, **FIXED))
    assert problems(found, plant)


def test_the_workspace_is_aligned_and_sized():
    for nbytes, alignment in ((640, 128), (896, 128), (1664, 128)):
        ws = aligned_workspace(nbytes, alignment, "cpu")
        assert ws.data_ptr() % alignment == 0 and ws.numel() == nbytes and ws.is_contiguous()


def test_the_thd_workspace_sits_inside_guard_bands():
    """The kernel writes its THD metadata into the adapter's workspace: it is
    a guarded buffer (bands judged after each launch) at the template's
    alignment; the CPU's 64-byte allocator, where nothing launches, may give
    an aligned unguarded one instead."""
    from ground.data import guard_bands
    from kernels.sm90.thd import WORKSPACE_FILL, guarded_workspace

    ws = guarded_workspace(1000, 64, "cpu")  # 64: what the CPU's allocator keeps
    assert guard_bands(ws) is not None and ws.numel() == 1000 and ws.data_ptr() % 64 == 0
    assert bool((ws == WORKSPACE_FILL).all())
    wide = guarded_workspace(1000, 1 << 20, "cpu")  # an alignment the bands cannot keep here
    assert wide.data_ptr() % (1 << 20) == 0 and wide.numel() == 1000
