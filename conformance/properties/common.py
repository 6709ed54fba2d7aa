"""What every property shares: the device, the verdict/recording step, and
where an output row sits (for failure reports)."""

from __future__ import annotations

import functools
import time
from typing import Callable

import torch

from conformance.ground.case import Case, Unexpressible
from conformance.ground.outcome import Observation, PropertyFailure
from conformance.ground.tables import NO_GPU, TILE_M
from conformance.properties import recorder


class NoGPU(RuntimeError):
    """Raised by properties that launch kernels when no CUDA device exists."""


def device() -> torch.device:
    if not torch.cuda.is_available():
        raise NoGPU(NO_GPU)
    return torch.device("cuda", torch.cuda.current_device())


def finish(name: str, case: Case, start: float, run, *, finding_of=None, **fields) -> Observation:
    """Run ``run()`` (the judging), turning a failure on a known finding into
    an xfailed Observation; record the Observation either way. ``finding_of``
    maps a failure to a finding id (default: the known-findings file)."""
    from conformance.ground import findings

    obs = Observation(name, case, **fields)
    try:
        obs.ratios = run() or {}
    except PropertyFailure as failure:
        if finding_of is not None:
            known = finding_of(failure)
        else:
            entry = findings.match(name, case)
            known = entry.id if entry is not None else None
            if entry is not None:
                recorder.note_finding(entry.id, "example")
        obs.notes["summary"] = failure.summary
        obs.seconds = time.perf_counter() - start
        if known is None:
            failure.observation = obs
            obs.outcome = "failed"
            recorder.observe(obs)
            raise
        obs.outcome, obs.finding = "xfailed", known
    obs.seconds = time.perf_counter() - start
    recorder.observe(obs)
    return obs



# ------------------------------------------------------------------ regions
def row_regions(case: Case, inputs) -> Callable[[dict], str]:
    """coords -> the region an output row sits in, for failure reports. The
    visible-key counts are computed on the first call only: passing examples
    never pay for them."""
    from functools import cache

    from reference.attention import visible_counts

    counts = cache(lambda: visible_counts(case, inputs))  # dense (B, H, SQ) / THD (H, T_q)

    def region(c: dict) -> str:
        if case.is_thd:
            if "sequence" not in c:
                return "capacity tail (no sequence)"
            n = int(counts()[c["head"], c["packed_token"]])
            seq_len = case.q_lens[c["sequence"]]
            tile_edge = c["token"] // TILE_M == (seq_len - 1) // TILE_M and seq_len % TILE_M
        else:
            if c["token"] >= case.q_lengths()[c["batch"]]:
                return "padded Q row (past seq_q_len)"
            n = int(counts()[c["batch"], c["head"], c["token"]])
            tile_edge = c["token"] // TILE_M == (case.s_q - 1) // TILE_M and case.s_q % TILE_M
        if n == 0:
            return "row with no visible key"
        return "last partial Q tile" if tile_edge else "interior row"

    return region


def row_mask(case: Case, inputs, quantity: str, shape) -> torch.Tensor:
    """Rows the contract defines a value for: dense every row (padded rows
    are 0 / -inf by contract), THD the live packed rows."""
    if not case.is_thd:
        return torch.ones(shape, dtype=torch.bool, device=inputs.q.device)
    live = inputs.q_live.to(inputs.q.device)
    return live[:, None, None].expand(shape) if quantity == "o" else live[None, :].expand(shape)



def served(check):
    """``check`` that skips a Case its adapter cannot express (a fact value
    the entry point has no argument for: ``Case.unexpressible``, from the fact
    declarations). Inside a Hypothesis test the example is rejected (no
    verdict: there is nothing to ask the entry point); a direct call (repro)
    raises Unexpressible. The adapter is the rejection property's ``entry``
    where it names one, else ``adapter``."""

    @functools.wraps(check)
    def run(case: Case, adapter=None, **params):
        name = params.get("entry") or getattr(adapter, "name", None)
        why = case.unexpressible(name) if name else None
        if why:
            from hypothesis import currently_in_test_context, reject

            if currently_in_test_context():
                reject()
            raise Unexpressible(why)
        return check(case, adapter, **params)

    return run


def entry_adapter(entry: str):
    """The adapter serving a contract's entry point. Off SM80 the public dense
    wrapper refuses the device before it reads any other contract, so the
    wrapper runs in its explicit SM80-compatibility mode there (the
    observation notes record the mode)."""
    from kernels import get_adapter
    from kernels.environment import detect

    if entry == "wrapper":
        return get_adapter("wrapper", sm80_compat=not detect().native)
    return get_adapter(entry)

