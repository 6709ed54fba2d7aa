"""Every launching property passes its own draws on an honest kernel.

A false red (a property failing a correct kernel) is the worst defect a gate
can have, and the GPU is where the suite meets its draws. Here the CPU runs
each launching property of ``tests.standins.STANDS_IN_FOR`` (forward and
backward; that list says why the rest is left out) and of the sm90 family
over a few of its test's own derandomized draws on a stand-in that computes
what a correct kernel computes and writes it where the contract says
(``tests.standins.ReferenceKernel``: the float64 reference and gradients
rounded into the caller's buffers, named ``prepared`` so the draws are
served for the default adapter; the sm90 family: the emulated kernel storing
into the caller's buffers, and the THD reference stand-in that stores as the
SM90 THD host does). Every example must pass (or be rejected by the refusal
policy, as on the GPU); a failure is the suite's, named with its Case.

Its power: the same draws fail a stand-in storing LSE in the other units,
and a backward with a wrong dQ.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from conformance.test_sm90_metamorphic import PAIRS as SM90_RELATIONS
from properties.matrix import FAMILIES
from tests.standins import STANDS_IN_FOR, ReferenceKernel, Sm90StandIn, device_users

EXAMPLES = 3  # per parameter, derandomized: the first draws of each (the simplest first)
DRAWS = settings(max_examples=EXAMPLES, derandomize=True, database=None, deadline=None, suppress_health_check=list(HealthCheck))
STANDIN = ReferenceKernel(name="prepared")


def _parameters():
    for test in STANDS_IN_FOR:
        fam = FAMILIES[test]
        for values, pid in fam.parameters():
            entries = fam.launches(values, STANDIN)
            if entries == ("prepared",) and not fam.unservable(values, entries):
                yield pytest.param(test, values, id=f"{test}[{pid}]")


def test_only_the_entry_relation_is_left_out():
    """No parameter of STANDS_IN_FOR drops out of the above but the entry relation's (its second launch is the
    public wrapper itself): a parameter served for another adapter, or unservable, would be a silent hole."""
    kept = {(p.values[0], p.id) for p in _parameters()}
    left = [(test, pid) for test in STANDS_IN_FOR for values, pid in FAMILIES[test].parameters() if (test, f"{test}[{pid}]") not in kept]
    assert left and all(pid.endswith("-entry") for _, pid in left), left


@pytest.fixture
def on_cpu(monkeypatch):
    """The properties launch on the CPU (their ``device()`` refuses without a GPU)."""
    for module in device_users():
        monkeypatch.setattr(module, "device", lambda: torch.device("cpu"))


def _judge_draws(test: str, values: dict, adapter, *, shrink: bool = True) -> None:
    fam = FAMILIES[test]
    entries = fam.launches(values, adapter)

    @settings(DRAWS, phases=DRAWS.phases if shrink else (Phase.generate,))
    @given(data=st.data())
    def run(data):
        case = fam.serve(fam.apply(data.draw(fam.strategy_for(values), label="case"), values), values, entries).case
        assert fam.check(case, adapter, values).outcome == "passed", case.describe()

    run()


@pytest.mark.parametrize("test, values", list(_parameters()))
def test_sm80_draws_pass_on_the_reference(on_cpu, test, values):
    _judge_draws(test, values, STANDIN)


# The sm90 tests that launch, as (property, layout, relation): each layout's stand-in.
SM90_JOBS = (
    ("numerics", "dense", None),
    ("tails", "dense", None),
    ("numerics", "thd", None),  # judged by the tails too, as test_sm90_numerics_thd does
    *(("metamorphic", layout, relation) for layout, relation in SM90_RELATIONS),
)


@pytest.mark.family("sm90")
@pytest.mark.parametrize("prop, layout, relation", SM90_JOBS, ids=["-".join(filter(None, job)) for job in SM90_JOBS])
def test_sm90_draws_pass_on_the_standins(on_cpu, prop, layout, relation):
    import conformance.test_sm90_numerics as t90
    from properties import PROPERTIES

    check = PROPERTIES[prop].check
    kw = {"tails": True} if (prop, layout) == ("numerics", "thd") else {"relation": relation} if relation else {}
    adapter = Sm90StandIn()

    @DRAWS
    @given(data=st.data())
    def run(data):
        case = data.draw(t90.CASES_BY_LAYOUT[layout], label="case")
        assert t90._judged(check, case, adapter, **kw).outcome == "passed", case.describe()

    run()


def test_the_draws_fail_a_kernel_storing_lse_in_the_other_units(on_cpu):
    """The power of the above: LSE stored in base 2 where the Case asks for natural log (or back)."""
    from ground.outcome import PropertyFailure

    class OtherUnits(ReferenceKernel):
        def run(self, case, inputs, outputs=None, **kw):
            result = super().run(case, inputs, outputs, **kw)
            if case.has_lse:
                result.lse.mul_(1.4426950408889634 if not case.lse_log2 else 1 / 1.4426950408889634)
            return result

    values = next(v for v, pid in FAMILIES["test_numerics_dense"].parameters() if pid == "gptoss-fp16")
    with pytest.raises(PropertyFailure, match="LSE"):
        _judge_draws("test_numerics_dense", values, OtherUnits(name="prepared"), shrink=False)


def test_the_draws_fail_a_backward_with_a_wrong_dq(on_cpu):
    """The backward half's power: dQ off by 1/16 of itself."""
    from ground.outcome import PropertyFailure

    class WrongDq(ReferenceKernel):
        def backward(self, case, inputs, o, lse, do, grads=None, **kw):
            result = super().backward(case, inputs, o, lse, do, grads, **kw)
            result.grads["dq"].mul_(1 + 2.0**-4)
            return result

    values = next(v for v, pid in FAMILIES["test_backward_dense"].parameters() if pid == "gptoss-fp16")
    with pytest.raises(PropertyFailure, match="dq|DQ"):
        _judge_draws("test_backward_dense", values, WrongDq(name="prepared"), shrink=False)
