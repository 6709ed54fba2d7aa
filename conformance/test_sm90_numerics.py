"""The numerics and tails properties on the sm90 family (the native Hopper
D512 forward) through both of its entry points (parametrized ``entry``): the
compile entry ``kernels.sm90.adapter.Sm90Adapter`` and the public wrapper
``kernels.sm90.wrapper.Sm90WrapperAdapter`` (dense Cases bounded by
construction to what the wrapper can express: ``wrapper.expressible``), plus
THD numerics through the compile entry (the wrapper has no THD), whose
launch the tails judge too (the host's one output mode: no initialisation,
nothing written outside a sequence). Cases are
drawn by ``strategies.sm90.sm90_cases`` and judged by the same property code
as the SM80 templates, the error model selected by the Case's ``family``
(``ground.tolerances.bounds_for``: ``sm90_kernel_bounds``).

They launch only on a Hopper GPU (SM 9.0: the family compiles for sm_90a);
anywhere else they skip, saying so. What of this runs on the CPU runs in
tests/: the sm90 model
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
from strategies.profiles import examples
from strategies.sm90 import sm90_cases

pytestmark = pytest.mark.family("sm90")  # --family selects it (conformance.family_select)
HOPPER = (9, 0)
# The family's Cases per layout, for the tests parametrized by layout (test_sm90_compile, test_sm90_metamorphic).
CASES_BY_LAYOUT = {layout: sm90_cases(layouts=(layout,)) for layout in ("dense", "thd")}


def hopper_refusal(capability: Optional[Tuple[int, int]]) -> Optional[str]:
    """Why the sm90 properties cannot launch on a device of this compute
    capability (None: no CUDA device), or None where they can."""
    if capability is None:
        return f"{NO_GPU}: the sm90 family needs a Hopper GPU (SM 9.0)"
    if tuple(capability) != HOPPER:
        return f"the sm90 family needs a Hopper GPU (SM 9.0): its artifacts are sm_90a; this GPU is SM {capability[0]}.{capability[1]}"
    return None


def _entries():
    """entry name -> (adapter class, the Case bound to what the entry can express)."""
    from kernels.sm90.adapter import Sm90Adapter
    from kernels.sm90.wrapper import Sm90WrapperAdapter, expressible

    return {"compile": (Sm90Adapter, lambda case: case), "wrapper": (Sm90WrapperAdapter, expressible)}


ENTRIES = ("compile", "wrapper")


def _hopper_gate():
    """Refused (the test skips with the reason) off a Hopper GPU."""
    import torch

    why = hopper_refusal(torch.cuda.get_device_capability() if torch.cuda.is_available() else None)
    if why:
        raise Unsupported.machine(why, adapter="sm90")


@pytest.fixture(scope="module", params=ENTRIES)
def entry(request):
    """(adapter, project) of one sm90 entry point, on a Hopper GPU; elsewhere refused."""
    _hopper_gate()
    cls, project = _entries()[request.param]
    return cls(), project


@pytest.fixture(scope="module")
def sm90():
    """The compile entry alone (THD), on a Hopper GPU; elsewhere refused."""
    _hopper_gate()
    return _entries()["compile"][0]()


def _judged(check, case, adapter, **kw):
    """One property example; a refusal takes the refusal policy (a Case the
    adapter cannot express is rejected, anything else skips)."""
    try:
        return check(case, adapter, **kw)
    except Unsupported as refusal:
        refusal_policy(refusal)


@pytest.mark.gpu
@pytest.mark.property("numerics")
@settings(max_examples=examples("numerics"), deadline=None)
@given(case=sm90_cases(layouts=("dense",)))
def test_sm90_numerics_dense(entry, case):
    """O and LSE of dense sm90 Cases within the sm90 error model of the float64
    reference; rows the contract fixes bit for bit; no guard band touched."""
    from properties.numerics import check_numerics

    adapter, project = entry
    _judged(check_numerics, project(case), adapter)


@pytest.mark.gpu
@pytest.mark.property("tails")
@settings(max_examples=examples("tails"), deadline=None)
@given(case=sm90_cases(layouts=("dense",)))
def test_sm90_tails_dense(entry, case):
    """Dense sm90 Cases: O pad columns never written, no NaN poisoned into dead
    inputs (rows past the padding lengths included) in a defined output, the
    LSE buffer untouched without Stats."""
    from properties.tails import check_tails

    adapter, project = entry
    _judged(check_tails, project(case), adapter)


@pytest.mark.gpu
@pytest.mark.property("numerics")
@settings(max_examples=examples("numerics"), deadline=None)
@given(case=sm90_cases(layouts=("thd",)))
def test_sm90_numerics_thd(sm90, case):
    """THD sm90 Cases through the compile entry (packed buffers, cu prefixes,
    the plan's workspace): O and LSE of the live rows within the sm90 error
    model; no guard band touched. The same launch is judged by the tails
    (``tails=True``): the host has no output initialisation, so the O and
    Stats capacity outside the live tokens and the Stats pitch keep the
    caller's poison bit for bit, and no dead input's NaN reaches a live row."""
    from properties.numerics import check_numerics

    _judged(check_numerics, case, sm90, tails=True)


def test_both_entries_take_their_projected_cases():
    """The parametrized entries are the family's two adapters, and each one's
    projection of a Case it cannot express is one it plans (no example is
    rejected by construction). Runs on any machine."""
    from ground.case import Case
    from kernels.sm90.specialize import specialize

    entries = _entries()
    assert {cls.name for cls, _ in entries.values()} == {"sm90", "sm90-wrapper"}
    every = Case(family="sm90", s_q=64, s_kv=64, h_q=4, h_kv=1, causal=True, window_right=8, has_lse=False, pack_gqa=True, sched="natural")
    specialize(entries["compile"][1](every))  # the compile entry plans it as drawn
    wrapper, expressible = entries["wrapper"]
    wrapper().plan(expressible(every))  # the wrapper plans its projection
    with pytest.raises(Unsupported, match="cannot express"):
        wrapper().plan(every)


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
