"""The CPU half of the sm90 launch properties (conformance/test_sm90_parity.py):

- ``Sm90Adapter.prepare`` binds ``SdpaFwdDslSm90.execute``'s arguments to the
  caller's buffers (dense and THD: ``staged`` empty, so a change in place
  reaches the kernel), once: ``launch()`` is ``execute()`` alone with the same
  arguments each time (the THD workspace allocated in ``prepare``), and
  ``run()`` is prepare + launch + result on that one path. The device gate,
  the template compile and ``execute`` itself are stubbed (they need a
  Hopper GPU); the plan, the argument binding and the THD geometry check
  (``thd.binding_problems``) are the real ones.
- ``replay_variant`` of every replay Case keeps the plan the capture froze
  (the planner's compile arguments, the longest sequence of each side
  included, and the scale).

Each check fails on a planted fault: a prepare handing a copy is refused by
``_require_unstaged``; a variant that moves a compiled fact is caught.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, find, given, settings
from hypothesis import strategies as st

from ground.data import make_inputs, make_outputs
from kernels.sm90 import adapter as sm90_adapter
from kernels.sm90.adapter import Sm90Adapter, template_module
from kernels.sm90.specialize import specialize
from kernels.sm90.thd import PLAN_OVERRIDES, ThdLaunch, binding_problems
from properties.launch import _require_unstaged, replay_variant
from strategies.sm90 import HAND_ROWS, replay_cases

pytestmark = pytest.mark.family("sm90")
FIXED = dict(derandomize=True, database=None, deadline=None, suppress_health_check=[HealthCheck.too_slow])
# A padded dense row with batch 2 and a three-sequence THD row (strategies.sm90.HAND_ROWS).
CASES = {"dense": HAND_ROWS["dense"][3], "thd": HAND_ROWS["thd"][2].replace(sinks=True)}


def overrides(case) -> dict:
    return PLAN_OVERRIDES if case.is_thd else {}


@pytest.fixture
def stubbed(monkeypatch):
    """The launch's GPU steps stubbed: the Hopper gate hands the caller's CPU
    buffers through, ``compile()`` loads the template module and compiles
    nothing, ``execute()`` records its call. Yields (compiles, calls)."""
    from cudnn.sdpa.fwd.api_dsl import SdpaFwdDslSm90

    compiles, calls = [], []

    def compile(api):
        compiles.append(api)
        api._k_mod, api._compiled_kernel = template_module(api.params), "stub"

    monkeypatch.setattr(sm90_adapter, "hopper_launch", lambda adapter, case, inputs, outputs, **kw: (inputs, *outputs))
    monkeypatch.setattr(SdpaFwdDslSm90, "compile", compile)
    monkeypatch.setattr(SdpaFwdDslSm90, "execute", lambda api, *args, **kwargs: calls.append((api, args, kwargs)))
    yield compiles, calls


def same_view(a, b) -> bool:
    """``a`` and ``b`` are one view of one memory (None both, or equal address, shape and strides)."""
    if a is None or b is None:
        return a is b
    return (a.data_ptr(), a.shape, a.stride()) == (b.data_ptr(), b.shape, b.stride())


def same_call(one, other) -> bool:
    """Two execute() calls on the same arguments (the THD workspace compared by view too)."""
    (_, args, kwargs), (_, args2, kwargs2) = one, other
    return kwargs.keys() == kwargs2.keys() and all(
        same_view(a, b) if not isinstance(a, (float, type(None))) else a == b for a, b in zip(args + tuple(kwargs.values()), args2 + tuple(kwargs2.values()))
    )


def buffers(case):
    return make_inputs(case, "cpu", poison=True), make_outputs(case, "cpu")


@pytest.mark.parametrize("layout", sorted(CASES))
def test_prepare_binds_the_callers_buffers_once(stubbed, layout):
    compiles, calls = stubbed
    case = CASES[layout]
    inputs, outputs = buffers(case)
    prepared = Sm90Adapter().prepare(case, inputs, outputs)
    assert prepared.staged == [] and not calls  # prepare launches nothing
    _require_unstaged(prepared, case)
    prepared.launch()
    prepared.launch()
    assert len(compiles) == 1 and len(calls) == 2
    (api, args, kwargs), again = calls
    assert again[0] is api and all(a is b for a, b in zip(args + tuple(kwargs.values()), again[1] + tuple(again[2].values())))  # bound once
    q, k, v, o, lse = args
    assert (q, k, v, o) == (inputs.q, inputs.k, inputs.v, outputs[0]) and kwargs["sinks"] is inputs.sinks
    assert kwargs["scale_softmax"] == case.scale
    if case.is_thd:  # the cu prefixes, the Stats view of the caller's storage, the workspace allocated once
        assert (kwargs["seq_q_lens"], kwargs["seq_kv_lens"]) == (inputs.cu_q, inputs.cu_kv)
        assert lse.untyped_storage().data_ptr() == outputs[1].untyped_storage().data_ptr()
        assert kwargs["workspace"].numel() == api.scratch_workspace_bytes()
        launch = ThdLaunch(q, k, v, o, lse, kwargs["seq_q_lens"], kwargs["seq_kv_lens"], kwargs["sinks"])
        assert binding_problems(api, specialize(case), launch) == []
    else:
        assert lse is outputs[1] and (kwargs["seq_q_lens"], kwargs["seq_kv_lens"]) == (inputs.seq_q_lens, inputs.seq_kv_lens)
    inputs.q.fill_(3.0)  # a change in place is what the next launch reads
    assert bool((args[0] == 3.0).all())
    result = prepared.result()
    assert result.o is outputs[0] and result.lse is outputs[1] and result.notes["staged"] == []
    assert result.handed["lse"] is outputs[1] and result.handed["q"] is inputs.q


@pytest.mark.parametrize("layout", sorted(CASES))
def test_run_is_prepare_then_one_launch(stubbed, layout):
    """run() hands execute() exactly what prepare() binds: one path."""
    _, calls = stubbed
    case = CASES[layout]
    inputs, outputs = buffers(case)
    adapter = Sm90Adapter()
    adapter.prepare(case, inputs, outputs).launch()
    result = adapter.run(case, inputs, outputs)
    by_prepare, by_run = calls
    workspace = [c[2].pop("workspace", None) for c in calls]  # each prepare allocates its own
    assert same_call(by_prepare, by_run) and [w is None for w in workspace] == [not case.is_thd] * 2
    assert result.o is outputs[0]


PLANTED_COPIES = {
    "q copied": lambda bound: {**bound, "q": bound["q"].clone()},
    "o copied": lambda bound: {**bound, "o": bound["o"].clone()},
    "cu_kv copied (THD) / K/V lengths copied (dense)": lambda bound: {
        **bound,
        **{r: bound[r].clone() for r in ("cu_kv", "seq_kv_lens") if bound.get(r) is not None},
    },
}


@pytest.mark.parametrize("plant", sorted(PLANTED_COPIES))
@pytest.mark.parametrize("layout", sorted(CASES))
def test_a_prepare_handing_a_copy_is_refused(stubbed, monkeypatch, layout, plant):
    """The launch properties refuse a prepared launch whose operands are copies (a change in place would not reach the kernel)."""
    real = sm90_adapter.bound_operands
    monkeypatch.setattr(sm90_adapter, "bound_operands", lambda *a: PLANTED_COPIES[plant](real(*a)))
    case = CASES[layout]
    prepared = Sm90Adapter().prepare(case, *buffers(case))
    assert len(prepared.staged) == 1
    with pytest.raises(ValueError, match="staged copies"):
        _require_unstaged(prepared, case)


REPLAY = st.one_of(replay_cases("dense"), replay_cases("thd"))


def frozen(case):
    """What a captured launch of ``case`` froze: the planner's compile arguments and scale."""
    return specialize(case, **overrides(case))


@settings(max_examples=40, **FIXED)
@given(case=REPLAY)
def test_the_replay_variant_keeps_the_captured_plan(case):
    assert frozen(replay_variant(case)) == frozen(case)


def _lengths(case):
    return (case.q_lens, case.kv_lens) if case.is_thd else (case.seq_q_lens, case.seq_kv_lens)


@pytest.mark.parametrize("layout", ("dense", "thd"))
def test_the_replay_cases_move_lengths(layout):
    """The replay rows have lengths a replay moves (not only the data)."""
    found = find(replay_cases(layout), lambda c: _lengths(replay_variant(c)) != _lengths(c), settings=settings(max_examples=50, **FIXED))
    assert _lengths(replay_variant(found)) != _lengths(found)


def _longer(case):
    """A variant one token longer in the longest K/V sequence (THD) or padded K/V length (dense)."""
    if case.is_thd:
        i = case.kv_lens.index(max(case.kv_lens))
        return case.replace(kv_lens=case.kv_lens[:i] + (case.kv_lens[i] + 1,) + case.kv_lens[i + 1 :])
    return case.replace(s_kv=case.s_kv + 1)


PLANTED_VARIANTS = {
    "the longest K/V length grown": lambda case: _longer(replay_variant(case)),
    # The scale is an execute() argument the capture binds (its magnitude is in no compile key).
    "the scale changed": lambda case: replay_variant(case).replace(scale=2 * case.softmax_scale + 0.5),
}


@pytest.mark.parametrize("plant", sorted(PLANTED_VARIANTS))
@settings(max_examples=10, **FIXED)
@given(case=REPLAY)
def test_a_variant_moving_a_compiled_fact_is_caught(plant, case):
    assert frozen(PLANTED_VARIANTS[plant](case)) != frozen(case)
