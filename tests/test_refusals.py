"""The one refusal type and its one policy (ground.outcome.REFUSALS): every
"cannot run this" is an ``Unsupported`` whose scope decides what happens to
it: "machine" and "adapter" skip the test with the reason (at once inside a
Hypothesis example: neither retried nor shrunk), "case" rejects the example
(no verdict), and the command-line front ends exit 2 with the message."""

from __future__ import annotations

import pickle
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable

from conformance import cli
from ground.case import Case
from ground.outcome import REFUSALS, Unsupported
from properties import recorder
from properties.common import served
from reports import casefile

REFUSED = {
    "machine": lambda: Unsupported.machine("no CUDA GPU found: launching the kernels under test needs one", adapter="prepared"),
    "adapter": lambda: Unsupported.lacking("wrapper", "no-init", "THD with initialize_outputs=False", "its THD host always zero-initializes"),
    "case": lambda: Unsupported.case("case field 'lse_log2' = True: the wrapper adapter cannot express it", adapter="wrapper", hint="--adapter picks another"),
}


def _refusing(scope):
    def check(case, adapter=None, **params):
        raise REFUSED[scope]()

    return check


def test_the_policy_is_declared_once_per_scope():
    assert set(REFUSALS) == set(REFUSED)
    assert {s: p.in_example for s, p in REFUSALS.items()} == {"machine": "skip", "adapter": "skip", "case": "reject"}
    assert all(p.cli_exit == 2 for p in REFUSALS.values())
    with pytest.raises(ValueError, match="refusal scope 'elsewhere'"):
        Unsupported("elsewhere", "nothing")


@pytest.mark.parametrize("scope", list(REFUSED))
def test_a_refusal_names_what_and_why_and_travels_whole(scope):
    refusal = REFUSED[scope]()
    assert refusal.scope == scope and refusal.exit_status == 2 and str(refusal) == refusal.reason
    again = pickle.loads(pickle.dumps(refusal))
    assert (type(again), again.scope, str(again), again.adapter, again.capability, again.hint) == (
        Unsupported,
        scope,
        str(refusal),
        refusal.adapter,
        refusal.capability,
        refusal.hint,
    )
    if scope == "adapter":  # the capability, its meaning (ground.tables.CAPABILITIES) and why the adapter lacks it
        assert "adapter 'wrapper' cannot run THD with initialize_outputs=False: no 'no-init' (THD without" in str(refusal)
        assert str(refusal).endswith("; its THD host always zero-initializes")
    if scope == "case":
        assert refusal.usage().endswith("cannot express it (--adapter picks another)")


@pytest.mark.parametrize("scope", list(REFUSED))
def test_served_applies_the_policy(scope):
    check = served(_refusing(scope))
    with pytest.raises(Unsupported) as outside:  # outside an example: raised as it is, whatever the scope
        check(Case(), None)
    assert outside.value.scope == scope
    calls = []

    @settings(max_examples=5, database=None, suppress_health_check=list(HealthCheck))
    @given(st.integers())
    def example(i):
        calls.append(i)
        check(Case(), None)

    if REFUSALS[scope].in_example == "reject":
        with mock.patch.object(recorder, "rejected") as rejected, pytest.raises(Unsatisfiable):  # every example rejected: none judged
            example()
        assert len(calls) > 1 and rejected.call_count == len(calls)  # each one recorded for the report's tally
    else:
        with pytest.raises(Unsupported):  # a skip: re-raised at once
            example()
        assert len(calls) == 1


@pytest.mark.parametrize("scope", [s for s in REFUSED if REFUSALS[s].in_example != "reject"])
def test_a_refusal_while_shrinking_a_failure_rejects_the_example(scope):
    """Once an example of the test failed, Hypothesis shrinks it: a Case the
    adapter refuses on the way is that example's rejection, never a skip of
    the test (it turned a failing test into a skipped one). A new test starts
    with no failure (recorder.set_test), where the refusal skips as before."""
    from ground.outcome import PropertyFailure
    from properties import recorder

    def check(case, adapter=None, *, x):
        if 0 < x < 5:
            raise REFUSED[scope]()
        if x >= 100:
            raise PropertyFailure("numerics", case, f"x = {x}", {})

    judged = served(check)

    @settings(max_examples=200, database=None, derandomize=True, suppress_health_check=list(HealthCheck))
    @given(st.integers(0, 1000))
    def shrinking(x):
        judged(Case(), None, x=x)

    recorder.set_test("the failing test")
    try:
        with pytest.raises(PropertyFailure, match="x = 100"):  # shrunk past the refused Cases to the smallest failure
            shrinking()
        recorder.set_test("the next test")
        with pytest.raises(Unsupported):
            judged_refused = given(st.just(3))(settings(database=None)(lambda x: judged(Case(), None, x=x)))
            judged_refused()
    finally:
        recorder.set_test(None)


def test_a_refusal_is_no_verdict_of_the_kernels():
    from properties.common import accepted
    from properties.watchdog import raised_by_kernels

    for scope in REFUSED:
        with pytest.raises(Unsupported):
            accepted("numerics", Case(), 0.0, lambda: (_ for _ in ()).throw(REFUSED[scope]()))
        assert not raised_by_kernels(REFUSED[scope]())


@pytest.mark.parametrize("scope", list(REFUSED))
def test_repro_exits_2_with_the_message(tmp_path, capsys, monkeypatch, scope):
    import kernels
    import properties

    monkeypatch.setitem(
        properties.PROPERTIES, "toy", properties.Property("toy", served(_refusing(scope)), {}, cold_seconds=1.0, directions=("fwd",), doc="a stand-in property")
    )
    monkeypatch.setattr(kernels, "get_adapter", lambda name=None, **kw: type("A", (), {"name": "prepared"})())
    path = casefile.write(
        tmp_path, property="toy", case=Case().to_dict(), params={}, summary="x", environment={"mode": "compile-only (no GPU)"}, needs_gpu=False
    )
    assert cli.main(["repro", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("sdpa-conformance repro: error: " + REFUSED[scope]().usage())


def test_repro_on_an_adapter_that_cannot_express_the_case(tmp_path, capsys):
    """The real path: a compile-only case file holding lse_log2 replayed on
    the wrapper is refused before anything runs (scope "case"), exit 2."""
    path = casefile.write(
        tmp_path,
        property="compiles",
        case=Case(lse_log2=True).to_dict(),
        params={},
        summary="x",
        environment={"mode": "compile-only (no GPU)", "adapter": "prepared"},
        needs_gpu=False,
    )
    assert cli.main(["repro", str(path), "--adapter", "wrapper"]) == 2
    err = capsys.readouterr().err
    assert "case field 'lse_log2' = True: the wrapper adapter" in err and err.rstrip().endswith("(--adapter picks another)")
