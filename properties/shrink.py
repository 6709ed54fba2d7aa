"""Shrinking a failing Case over free geometry (``sdpa-conformance repro
--shrink-geometry``).

A run draws its shape facts from small per-stratum pools
(strategies.geometry), so Hypothesis shrinks a failure to the smallest
geometry *of its pool* that still fails. This goes on from there, outside
the pools: starting from the case file's facts it asks
``strategies.geometry.simpler`` for Cases one step simpler (a feature off,
fewer batches/heads/sequences, shorter lengths, smaller head dims and
windows, then the simplest runtime facts), runs the property on each one the
kernels' validators accept, keeps the first that still fails the same way
and starts again from it, until no simpler Case fails (a local minimum over
every fact) or the budget is spent. A greedy fact shrinker, not Hypothesis:
it needs no choice sequence, only the facts a case file holds.

Each candidate with a new geometry is a compile (~2 s on a GPU) plus a
launch; ``max_runs`` bounds the property runs.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, List, Optional

from ground.case import Case
from ground.outcome import PropertyFailure, Unsupported


@dataclass
class Shrunk:
    case: Case  # the simplest Case found that still fails
    failure: BaseException  # its failure
    runs: int = 0  # property runs spent
    steps: List[Case] = field(default_factory=list)  # every accepted simplification, in order
    complete: bool = True  # False: stopped by max_runs / budget_s, a simpler failing Case may exist


def same_failure(first: BaseException, other: BaseException) -> bool:
    """A PropertyFailure of the same property, or an exception of the same type (a crash)."""
    if isinstance(first, PropertyFailure):
        return isinstance(other, PropertyFailure) and other.property == first.property
    return type(other) is type(first)


def _accepted(case: Case) -> bool:
    from kernels.specialize import specialize

    try:
        specialize(case)  # the kernels' flavor pick and validate_params
    except ValueError:
        return False
    return True


def shrink_geometry(
    check: Callable,
    case: Case,
    first: BaseException,
    *,
    max_runs: int = 300,
    budget_s: float = 3600.0,
    log: Callable[[Shrunk], None] = lambda state: None,
    **params,
) -> Shrunk:
    """Shrink ``case`` (which failed ``check`` with ``first``) over free geometry.
    ``check(case, **params)`` runs the property; ``log(state)`` hears each
    accepted step (``state.case``, ``state.failure``, ``state.runs``)."""
    from strategies.geometry import simpler

    result = Shrunk(case, first)
    deadline = time.perf_counter() + budget_s
    improved = True
    while improved:
        improved = False
        for cand in simpler(result.case):
            if result.runs >= max_runs or time.perf_counter() > deadline:
                result.complete = False
                return result
            if not _accepted(cand):
                continue
            result.runs += 1
            failure = _failure(check, cand, params)
            if failure is not None and same_failure(first, failure):
                result.case, result.failure = cand, failure
                result.steps.append(cand)
                log(result)
                improved = True
                break
    return result


def _failure(check, case: Case, params: dict) -> Optional[BaseException]:
    try:
        obs = check(case, **params)
    except Unsupported as refusal:  # no verdict: a candidate refused for itself is no failure; this machine or adapter refuses them all
        if refusal.scope == "case":
            return None
        raise
    except Exception as e:  # noqa: BLE001 - a failure (or crash) of the kernel is what is being shrunk
        return e
    if getattr(obs, "outcome", None) == "xfailed":  # a finding declared in code still reproduces
        return PropertyFailure(obs.property, case, obs.notes.get("summary", "known finding"))
    return None
