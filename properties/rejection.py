"""rejection: a contract-violating Case is refused with the stated exception
naming the argument, before anything is compiled, launched or written."""

from __future__ import annotations

import time

import torch

from ground.case import Case
from ground.data import body_storage, make_inputs, make_outputs
from ground.outcome import Observation, Unsupported
from properties import judge, recorder
from properties.common import compiles_live, device, entry_adapter, finish, launched_buffers


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
    from kernels.counters import NO_COMPILE_REQUEST, asking, measure, memos_forgotten

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
        live = compiles_live()
        call = lambda: adapter.compile_only(case, tamper=rule.tamper, live=live)  # noqa: E731
    else:
        dev = device()
        inputs = make_inputs(case, dev, poison=True)
        outputs = make_outputs(case, dev)
        call = lambda: accepted.append(adapter.run(case, inputs, outputs, tamper=rule.tamper))  # noqa: E731
    with memos_forgotten(), measure() as box, asking() as asked:
        error = _attempt(call)
    notes = {"entry": entry, "rule": rule.name, "adapter": getattr(adapter, "label", entry)}
    key = _compile_key(case, rule, entry, box.delta, asked, accepted)
    if key:
        notes["compile_key"] = key

    def judged():
        if outputs is not None:  # before the verdict: a call accepted as a known finding wrote nothing out of bounds either
            judge.guards_intact("rejection", case, launched_buffers(inputs, outputs, accepted[0] if accepted else None))
        judge.raises_contract("rejection", case, lambda: _reraise(error), expect.exception, expect.fragment, check="rejects")
        if error is None:
            return {}  # accepted: nothing was rejected, so nothing after a rejection to judge
        if outputs is not None:
            for quantity, buf in zip(("o", "lse"), outputs):
                flat = body_storage(buf)
                judge.untouched(
                    "rejection",
                    case,
                    quantity,
                    flat,
                    torch.ones_like(flat, dtype=torch.bool),
                    "caller output storage after a rejection",
                    check="outputs untouched",
                    defer=False,
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
        notes=notes,
    )


def _compile_key(case: Case, rule, entry: str, delta, asked, accepted) -> str:
    """The compile key a call that asked the compiled cache for something
    compiled under (reports count the artifacts of distinct keys), "" for
    one that asked for nothing: the prepared entry's own key (the key its
    valid Cases' launches name: kernels.prepared.named_key, tampered as the
    call was; without a GPU compile_only compiles for sm_80, an artifact of
    its own), else (or where the suite cannot specialize the Case) the
    compiled-cache entries the call asked for (the public wrapper names no
    key of its own)."""
    from kernels.base import key_digest
    from kernels.prepared import named_key

    if not (delta.misses or delta.hits or delta.memo_hits):
        return ""
    if accepted and accepted[0].notes.get("compile_key"):
        return accepted[0].notes["compile_key"]
    if entry == "prepared":
        try:
            return named_key(case, tamper=rule.tamper, arch=None if compiles_live() else "sm_80")
        except (ValueError, NotImplementedError):  # the kernels' refusal of the Case: name what it asked for
            pass
    requests = sorted(asked.keys) or sorted(asked.entries)
    return key_digest(("requests", *requests)) if requests else ""


def _reraise(error):
    if error is not None:
        raise error
