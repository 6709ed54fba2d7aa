"""rejection: a contract-violating Case is refused with the stated exception
naming the argument, before anything is compiled, launched or written."""

from __future__ import annotations

import time

import torch

from conformance.ground.case import Case
from conformance.ground.data import body_storage, make_inputs, make_outputs
from conformance.ground.outcome import Observation, PropertyFailure
from conformance.properties import judge, recorder
from conformance.properties.common import device, entry_adapter, finish, launched_buffers


def _attempt(call):
    try:
        call()
    except Exception as e:  # noqa: BLE001 - the property judges it
        return e
    return None


def check_rejection(case: Case, adapter=None, *, entry: str, launch: bool = True) -> Observation:
    """A contract-violating Case is refused by ``entry`` ("wrapper",
    "prepared" or "config") with the stated exception naming the argument,
    before anything is compiled, launched or written (no guard band of a
    buffer touched either; ``launch=False``:
    through compile_only, the CPU tier; nothing can be written then). Rules the installed
    kernels are known to break (``known_finding`` in conformance.ground.contracts)
    must behave exactly as the finding says (strict: a finding that no longer
    reproduces fails, so the table is kept honest)."""
    from conformance.ground import contracts
    from kernels.config import run_config
    from kernels.counters import NO_COMPILE_REQUEST, forget_memos, measure

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
        # unsafe_launch: accepting it is the finding; a launch would read out of bounds.
        call = lambda: adapter.compile_only(case, tamper=rule.tamper)  # noqa: E731
    else:
        dev = device()
        inputs = make_inputs(case, dev, poison=True)
        outputs = make_outputs(case, dev)
        call = lambda: accepted.append(adapter.run(case, inputs, outputs, tamper=rule.tamper))  # noqa: E731
    forget_memos()
    with measure() as box:
        error = _attempt(call)
    finding_id = f"contract:{rule.name}@{entry}"
    compiles_first = expect.compiles_first_for(case)

    def judged():
        if outputs is not None:  # before the verdict: a call accepted as a known finding wrote nothing out of bounds either
            judge.guards_intact("rejection", case, launched_buffers(inputs, outputs, accepted[0] if accepted else None))
        if expect.known_finding:
            observed = "accepted" if error is None else f"{type(error).__name__}: {error}"
            reproduces = error is None if expect.observed is None else isinstance(error, expect.observed)
            if reproduces:
                raise PropertyFailure("rejection", case, f"known finding {finding_id}: {expect.known_finding} (observed: {observed[:200]})", {"finding": finding_id})
            if not (isinstance(error, expect.exception) and expect.fragment.lower() in str(error).lower()):
                raise PropertyFailure("rejection", case, f"{finding_id}: neither the finding nor the contract holds; observed {observed[:300]}", {"observed": observed})
            raise PropertyFailure("rejection", case, f"{finding_id} no longer reproduces: the entry point now conforms; remove the known_finding", {"stale_finding": finding_id})
        judge.raises_contract("rejection", case, lambda: _reraise(error), expect.exception, expect.fragment)
        if outputs is not None:
            for quantity, buf in zip(("o", "lse"), outputs):
                flat = body_storage(buf)
                judge.exactly("rejection", case, quantity, flat, torch.full_like(flat, float("nan")), torch.ones_like(flat, dtype=torch.bool), "caller output storage after a rejection")
        asked = any(getattr(box.delta, k) > 0 for k in NO_COMPILE_REQUEST)
        if compiles_first and asked:
            raise PropertyFailure("rejection", case, f"known finding {finding_id}:compiles-first: {compiles_first}", {"finding": f"{finding_id}:compiles-first"})
        if compiles_first:
            raise PropertyFailure("rejection", case, f"{finding_id}:compiles-first no longer reproduces (no compile asked for); remove it from the table", {"stale_finding": finding_id})
        judge.compile_delta("rejection", case, box.delta, NO_COMPILE_REQUEST, "a rejected call")
        return {}

    return finish(
        "rejection",
        case,
        start,
        judged,
        finding_of=lambda f: f.detail.get("finding"),  # the table's findings, not the file's
        compile=box.delta.to_dict(),
        notes={"entry": entry, "rule": rule.name, "adapter": getattr(adapter, "label", entry)},
    )


def _reraise(error):
    if error is not None:
        raise error

