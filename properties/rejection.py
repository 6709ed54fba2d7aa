"""rejection: a contract-violating Case is refused with the stated exception
naming the argument, before anything is compiled, launched or written."""

from __future__ import annotations

import time

import torch

from ground.case import Case
from ground.data import body_storage, make_inputs, make_outputs
from ground.outcome import Observation, Unsupported
from properties import judge, recorder
from properties.common import device, entry_adapter, finish, launched_buffers


def _attempt(call):
    try:
        call()
    except Unsupported:  # the adapter refused the call itself (no GPU, no compile-only entry): no rejection to judge
        raise
    except Exception as e:  # noqa: BLE001 - the property judges it
        return e
    return None


def check_rejection(case: Case, adapter=None, *, entry: str, launch: bool = True) -> Observation:
    """A contract-violating Case is refused by ``entry`` ("wrapper",
    "prepared" or "config") with the stated exception naming the argument
    (check "rejects"), and a rejected call writes nothing (no guard band of a
    buffer touched either, check "guards") to the caller's
    outputs ("outputs untouched") and asks for no compile ("compiles
    nothing"); ``launch=False``: through compile_only, the CPU tier (nothing
    can be written then). A call that is accepted has no rejection to judge
    further. Where the installed kernels break a rule, a known finding
    (known_findings.toml, ``rule`` + ``entry``) excuses exactly the check it
    names, with the outcome it observed."""
    from ground import contracts
    from kernels.config import run_config
    from kernels.counters import NO_COMPILE_REQUEST, measure, memos_forgotten

    rule = contracts.rule(case.violation)
    expect = rule.expect[entry]
    if entry != contracts.CONFIG and getattr(adapter, "name", None) != entry:
        adapter = entry_adapter(entry)  # e.g. a repro of a wrapper rule from a prepared run
    recorder.begin("rejection", case, entry=entry, launch=launch)
    start = time.perf_counter()
    outputs = inputs = None
    accepted = []  # the KernelResult of a call that was not refused
    if entry == contracts.CONFIG:
        call = lambda: run_config(rule, case)  # noqa: E731
    elif expect.unsafe_launch or not launch:
        # unsafe_launch: the kernels accept it (a known finding); a launch would read out of bounds.
        live = torch.cuda.is_available()  # on a GPU: an artifact the run's compiled cache can keep
        call = lambda: adapter.compile_only(case, tamper=rule.tamper, live=live)  # noqa: E731
    else:
        dev = device()
        inputs = make_inputs(case, dev, poison=True)
        outputs = make_outputs(case, dev)
        call = lambda: accepted.append(adapter.run(case, inputs, outputs, tamper=rule.tamper))  # noqa: E731
    with memos_forgotten(), measure() as box:
        error = _attempt(call)

    def judged():
        if outputs is not None:  # before the verdict: a call accepted as a known finding wrote nothing out of bounds either
            judge.guards_intact("rejection", case, launched_buffers(inputs, outputs, accepted[0] if accepted else None))
        judge.raises_contract("rejection", case, lambda: _reraise(error), expect.exception, expect.fragment, check="rejects")
        if error is None:
            return {}  # accepted: nothing was rejected, so nothing after a rejection to judge
        if outputs is not None:
            for quantity, buf in zip(("o", "lse"), outputs):
                flat = body_storage(buf)
                judge.exactly(
                    "rejection",
                    case,
                    quantity,
                    flat,
                    torch.full_like(flat, float("nan")),
                    torch.ones_like(flat, dtype=torch.bool),
                    "caller output storage after a rejection",
                    check="outputs untouched",
                )
        judge.compile_delta("rejection", case, box.delta, NO_COMPILE_REQUEST, "a rejected call", check="compiles nothing")
        return {}

    return finish(
        "rejection",
        case,
        start,
        judged,
        entry=entry,
        compile=box.delta.to_dict(),
        notes={"entry": entry, "rule": rule.name, "adapter": getattr(adapter, "label", entry)},
    )


def _reraise(error):
    if error is not None:
        raise error
