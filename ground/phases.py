"""Where a worker's time goes: named phases of an example, timed exclusively.

``timed(name)`` wraps the few functions every example passes through (input
generation, the adapter call, the reference, the error model's bounds, the
judging, the recording); a phase nested in another is charged to itself
only. ``take()`` hands the seconds accumulated since the last take to the
example's Observation (``Observation.phases``), and the report sums them per
property and per worker (the per-worker profile of docs/throughput.md).

GPU work is asynchronous. By default a phase times the host's issuing
alone, and the device work lands in the phase that waits for it (the
inputs' upload, the judging): on a GPU that 16 processes share, a sync at
every phase's end waits for this process's turn on the device, and cost the
warm ci gate 2.4 s of 62 on an H100 and 3.7 s of 75 on an H200
(docs/measurements.md). ``SDPA_PHASE_SYNC=1`` (``SYNC``) synchronizes the
device at each phase's end, so each phase's seconds are its own: for
profiling. Which mode timed a run is in its report's environment (``mode()``).
"""

from __future__ import annotations

import functools
import os
import time
from collections import defaultdict
from contextlib import contextmanager
from typing import Dict, List

import torch

PHASES = ("inputs", "launch", "compile", "reference", "bounds", "judge", "record")
SYNC_ENV = "SDPA_PHASE_SYNC"
SYNC = os.environ.get(SYNC_ENV, "0") != "0"  # phase ends synchronize the device (read once, at import)
_stack: List[list] = []  # [name, seconds spent in nested phases]
_totals: Dict[str, float] = defaultdict(float)


@contextmanager
def phase(name: str):
    assert name in PHASES, name
    start = time.perf_counter()
    _stack.append([name, 0.0])
    try:
        yield
    finally:
        if SYNC and torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.synchronize()
        elapsed = time.perf_counter() - start
        _, nested = _stack.pop()
        _totals[name] += elapsed - nested
        if _stack:
            _stack[-1][1] += elapsed


def timed(name: str):
    """Decorator: every call of the function is phase ``name``."""

    def wrap(fn):
        @functools.wraps(fn)
        def run(*args, **kwargs):
            with phase(name):
                return fn(*args, **kwargs)

        return run

    return wrap


def mode() -> str:
    """How this process times its phases, for the report's environment."""
    return f"device synchronized at each phase's end ({SYNC_ENV}=1)" if SYNC else f"host issue time only (the default; {SYNC_ENV}=1 syncs each phase)"


def take(compile_seconds: float = 0.0) -> Dict[str, float]:
    """The seconds per phase since the last take (and reset). The adapters
    measure their compile step inside the launch call: ``compile_seconds``
    moves from "launch" to "compile"."""
    out = dict(_totals)
    _totals.clear()
    if compile_seconds:
        out["compile"] = out.get("compile", 0.0) + compile_seconds
        out["launch"] = max(0.0, out.get("launch", 0.0) - compile_seconds)
    return {k: round(v, 6) for k, v in out.items() if v}
