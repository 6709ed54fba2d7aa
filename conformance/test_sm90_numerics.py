"""The numerics and tails properties on the sm90 family (the native Hopper
D512 forward) through ``kernels.sm90.Sm90Adapter.run``: dense Cases drawn by
``strategies.sm90.sm90_cases``, judged by the same property code as the SM80
templates, the error model selected by the Case's ``family``
(``ground.tolerances.bounds_for``: ``sm90_kernel_bounds``).

They launch only on a Hopper GPU (SM 9.0: the family compiles for sm_90a);
anywhere else they skip, saying so. Unverified here: written on a machine
without one. What of this runs on the CPU runs in tests/: the sm90 model
against an emulation of the template's arithmetic
(tests/test_error_model_sm90.py), the adapter's compile (kernels/sm90 tests).
"""

from __future__ import annotations

from typing import Optional, Tuple

import pytest
from hypothesis import given, settings

from ground.outcome import Unsupported
from ground.tables import NO_GPU
from properties.common import refusal_policy
from strategies.sm90 import sm90_cases

pytestmark = pytest.mark.family("sm90")  # --family selects it (conformance.family_select)
HOPPER = (9, 0)


def hopper_refusal(capability: Optional[Tuple[int, int]]) -> Optional[str]:
    """Why the sm90 properties cannot launch on a device of this compute
    capability (None: no CUDA device), or None where they can."""
    if capability is None:
        return f"{NO_GPU}: the sm90 family needs a Hopper GPU (SM 9.0)"
    if tuple(capability) != HOPPER:
        return f"the sm90 family needs a Hopper GPU (SM 9.0): its artifacts are sm_90a; this GPU is SM {capability[0]}.{capability[1]}"
    return None


@pytest.fixture(scope="module")
def sm90():
    """The sm90 adapter, on a Hopper GPU; elsewhere refused (the test skips with the reason)."""
    import torch

    from kernels.sm90.adapter import Sm90Adapter

    why = hopper_refusal(torch.cuda.get_device_capability() if torch.cuda.is_available() else None)
    if why:
        raise Unsupported.machine(why, adapter="sm90")
    return Sm90Adapter()


def _judged(check, case, adapter, **kw):
    """One property example; a refusal takes the refusal policy (a Case the
    adapter cannot express is rejected, anything else skips)."""
    try:
        return check(case, adapter, **kw)
    except Unsupported as refusal:
        refusal_policy(refusal)


@pytest.mark.gpu
@settings(deadline=None)
@given(case=sm90_cases(layouts=("dense",)))
def test_sm90_numerics_dense(sm90, case):
    """O and LSE of dense sm90 Cases within the sm90 error model of the float64
    reference; rows the contract fixes bit for bit; no guard band touched."""
    from properties.numerics import check_numerics

    _judged(check_numerics, case, sm90)


@pytest.mark.gpu
@settings(deadline=None)
@given(case=sm90_cases(layouts=("dense",)))
def test_sm90_tails_dense(sm90, case):
    """Dense sm90 Cases: O pad columns never written, no NaN poisoned into dead
    inputs (rows past the padding lengths included) in a defined output, the
    LSE buffer untouched without Stats."""
    from properties.tails import check_tails

    _judged(check_tails, case, sm90)


@pytest.mark.parametrize(
    "capability, why",
    [(None, "no CUDA GPU found"), ((8, 0), "this GPU is SM 8.0"), ((10, 0), "this GPU is SM 10.0"), ((9, 0), None)],
)
def test_the_gate_launches_on_hopper_only(capability, why):
    """The gate the two properties skip by (runs on any machine): a reason naming
    Hopper off SM 9.0, none on it."""
    got = hopper_refusal(capability)
    if why is None:
        assert got is None
    else:
        assert why in got and "Hopper GPU (SM 9.0)" in got
