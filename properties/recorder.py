"""The recorder: every example a property checks, appended to this process's shard.

Properties call, for every example:

    recorder.begin(property, case, **params)   # before touching the kernel
    recorder.observe(observation)              # with the verdict: passed,
                                               # xfailed, or failed (before raising)

``params`` are the property's keyword arguments (JSON values), so a case file
replays the exact call. The last begun case matters: Hypothesis replays the
shrunk failing example last, so for a failing test it is the minimal case,
and for a worker that dies mid-example the shard's last ``begin`` line names
the case that killed it.

No pytest here: the plugin opens a shard per process (one JSON object per
line, flushed per line so a crash loses nothing already checked); the repro
command and a mutant harness use the same calls with no shard open, and then
only the last begun case is kept, in memory.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from typing import IO, Optional

from ground.case import Case
from ground.outcome import Observation
from ground.phases import timed


@dataclass(frozen=True)
class Begun:
    property: str
    case: Case
    params: dict
    test: Optional[str]


@dataclass
class _State:
    shard: Optional[IO[str]] = None
    path: Optional[str] = None
    test: Optional[str] = None
    context: dict = field(default_factory=dict)  # how the current test runs the property (adapter, ...)
    last: Optional[Begun] = None
    failures: int = 0  # examples of the current test whose check raised (a failure or a crash)
    mark: Optional[float] = None  # perf_counter where the next rejected example's seconds start (``rejected``)
    draw_seconds: Optional[float] = None  # the current example's draw (``drawing`` to ``drawn``), for its verdict's record


_state = _State()


# ------------------------------------------------------------- for properties
def begin(property: str, case: Case, **params) -> None:
    """A property starts checking ``case`` (one Hypothesis example)."""
    _state.last = Begun(property, case, dict(params), _state.test)
    write({"kind": "begin", "test": _state.test, "property": property, "case": case.to_dict(), "params": params, "context": _state.context, "t": time.time()})


@timed("record")  # charged to the next example's phases (taken before this runs)
def observe(observation: Observation) -> None:
    """The verdict of the example begun last (passed / xfailed / failed)."""
    last = _state.last
    params = last.params if last is not None and last.property == observation.property else {}
    drew = {"draw_seconds": round(_state.draw_seconds, 6)} if _state.draw_seconds is not None else {}
    write({"kind": "obs", "test": _state.test, **observation.to_dict(), "params": params, "context": _state.context, "t_end": time.time(), **drew})
    _state.mark, _state.draw_seconds = time.perf_counter(), None


def drawing() -> None:
    """An example's Case is about to be drawn (conformance.testgen): a
    rejection of this example counts its seconds from here."""
    _state.mark, _state.draw_seconds = time.perf_counter(), None


def drawn() -> None:
    """The example's Case is drawn and served (conformance.testgen): its
    verdict's record carries the draw's seconds (Hypothesis and the
    strategies; before the example's own seconds start)."""
    if _state.mark is not None:
        _state.draw_seconds = time.perf_counter() - _state.mark


def rejected(reason: str) -> None:
    """The current example was rejected (a refusal whose policy rejects:
    ``properties.common.refusal_policy``), ``reason`` its refusal: no
    verdict, so no Observation. Its seconds run from its draw (``drawing``)
    or, where none was marked, from the previous verdict, rejection or test
    start in this process: the report shows what rejected draws cost each
    test (time between verdicts that no phase names)."""
    now = time.perf_counter()
    last = _state.last
    write(
        {
            "kind": "rejected",
            "test": _state.test,
            "property": last.property if last is not None else None,
            "seconds": round(now - _state.mark, 6) if _state.mark is not None else None,
            "reason": (reason.splitlines() or [""])[0][:200],
            "t": time.time(),
        }
    )
    _state.mark, _state.draw_seconds = now, None


def steered(finding: str, property: str, case: Case, entries) -> None:
    """A drawn ``case`` that the crash finding ``finding`` steered before
    ``property`` ran (conformance.testgen): the report counts these per finding."""
    write(
        {
            "kind": "steered",
            "test": _state.test,
            "finding": finding,
            "property": property,
            "entries": list(entries),
            "case": case.to_dict(),
            "context": _state.context,
            "t": time.time(),
        }
    )


def failed_here() -> None:
    """An example of the current test raised out of its check (properties.common.served)."""
    _state.failures += 1


def failures_in_test() -> int:
    """How many examples of the current test raised so far: once one has, a
    refusal of a later example (Hypothesis shrinking toward a Case the adapter
    refuses) is that example's rejection, not the test's skip."""
    return _state.failures


def last_begun() -> Optional[Begun]:
    """The case begun last in the current test (None if none was)."""
    return _state.last


# ----------------------------------------------------------- for the harness
def open_shard(path: str) -> _State:
    """Append this process's records to ``path`` from now on. Returns the
    previous state for close_shard (a pytester run inside a pytest run nests)."""
    global _state
    previous = _state
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    _state = _State(shard=open(path, "a", encoding="utf-8"), path=path)
    return previous


def close_shard(previous: Optional[_State] = None) -> None:
    global _state
    if _state.shard is not None:
        _state.shard.close()
    _state = previous if previous is not None else _State()


def shard_path() -> Optional[str]:
    return _state.path


def set_test(nodeid: Optional[str], **context) -> None:
    """The test now running (None between tests) and how it drives the
    kernels (e.g. adapter="wrapper"), recorded with its examples so a case
    file can be replayed the same way; forgets the last begun case."""
    _state.test = nodeid
    _state.context = context
    _state.last = None
    _state.failures = 0
    _state.mark = time.perf_counter()


def write(record: dict) -> None:
    """Append one record to the shard (dropped when none is open)."""
    if _state.shard is None:
        return
    _state.shard.write(json.dumps(record, default=jsonable) + "\n")
    _state.shard.flush()


def jsonable(value):
    """json.dumps fallback for what properties put in notes/detail (tensors,
    tuples of numpy scalars, dtypes): a plain value, else its str."""
    if hasattr(value, "tolist"):
        return value.tolist()
    if hasattr(value, "to_dict"):
        return value.to_dict()
    if isinstance(value, (set, frozenset)):
        return sorted(value, key=str)
    return str(value)
