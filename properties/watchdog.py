"""Bounds on one example, and whether this process's CUDA context survived it.

Two faults make a process's later verdicts worthless, and neither can be
handled by the code that caused it:

- a sticky CUDA error (illegal address, unspecified launch failure, ...)
  kills the process's CUDA context: every later CUDA call fails, for a
  reason that is not the later test's;
- a kernel that never finishes blocks its process inside a C call (the
  synchronize after the launch), where no Python exception reaches it.

This module offers the pieces; ``conformance.isolation`` uses them in a
pytest run (case file first, then the process ends) and ``sdpa-conformance
repro`` bounds its one example with them. No pytest here.

- ``probe()``: None while the context works (or CUDA was never initialized
  in this process), else the error a synchronize and a one-element
  allocation raise. A sticky error is exactly one that a probe still sees
  after the exception that surfaced it.
- ``context_lost(exc)``: the error to report when the context is dead after
  ``exc``, else None.
- ``settle()``: synchronize, so that an asynchronous fault surfaces in the
  example whose launch caused it (properties that read no result back, e.g.
  compile_reuse, would otherwise leave it to the next example).
- ``start(seconds, on_expire)`` / ``arm(label)`` / ``disarm()``: one daemon
  thread per process. While armed for longer than ``seconds``, it calls
  ``on_expire(label, seconds)`` (which leaves the record of the hung case)
  in a helper thread, waits at most ``HANDLER_GRACE_S`` for it, and ends the
  process with ``os._exit(EXIT_HANG)``. A C-level backstop
  (``faulthandler.dump_traceback_later``, which needs no GIL) ends the
  process ``BACKSTOP_S`` later should the Python thread never get to run.
"""

from __future__ import annotations

import faulthandler
import math
import os
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Callable, Optional

EXIT_LOST = 86  # a worker that saw its CUDA context die
EXIT_HANG = 87  # a worker whose example outlived its bound
# One example's bound: compiles (seconds each) + launches + reference + judging. The slowest
# examples measured take tens of seconds (a cold backward chain, a large-tier example), so one
# still running past this is a hung kernel. The pytest run's default and the kill harness's.
EXAMPLE_S = 300.0
HANDLER_GRACE_S = 60.0  # at most this long to write the hung case's record
BACKSTOP_S = 120.0  # after the bound: the C-level exit, should no Python thread run

# Words of the CUDA errors that leave a context unusable (a hint for the
# message; the probe decides).
STICKY_HINTS = (
    "illegal memory access",
    "illegal address",
    "unspecified launch failure",
    "illegal instruction",
    "misaligned address",
    "launch timed out",
    "hardware stack error",
    "uncorrectable ecc",
    "device-side assert",
    "cuda error",
    "cuda_error",
    "cudaerror",
)


def looks_like_cuda_error(exc: BaseException) -> bool:
    text = f"{type(exc).__name__}: {exc}".lower()
    return type(exc).__name__ == "AcceleratorError" or any(h in text for h in STICKY_HINTS)


# The suite's own packages, and the mark of the kernels under test's files (the cudnn package).
SUITE_PACKAGES = tuple(
    str(Path(__file__).resolve().parents[1] / d) + os.sep for d in ("conformance", "reports", "properties", "kernels", "strategies", "reference", "ground")
)
KERNEL_PACKAGE = os.sep + "cudnn" + os.sep


def raised_by_kernels(exc: BaseException) -> bool:
    """``exc`` came out of the kernels under test: a frame of the cudnn
    package lies below the suite's last frame (not the suite's own code, nor
    torch called by it). A refusal (``ground.outcome.Unsupported``) never
    is: only the suite says "cannot run this"."""
    from ground.outcome import Unsupported

    if isinstance(exc, Unsupported):
        return False
    files = [str(Path(f.filename).resolve()) for f in traceback.extract_tb(exc.__traceback__)]
    last_own = max((i for i, f in enumerate(files) if f.startswith(SUITE_PACKAGES)), default=-1)
    return any(KERNEL_PACKAGE in f for f in files[last_own + 1 :])


def first_line(exc: BaseException) -> str:
    """'<Type>: <the message's first non-blank line>' (for one-line verdicts)."""
    lines = [line for line in str(exc).strip().splitlines() if line.strip()]
    return f"{type(exc).__name__}: {lines[0][:400] if lines else ''}".rstrip(": ")


def _initialized_torch():
    torch = sys.modules.get("torch")  # never import torch (nor initialize CUDA) just to probe
    try:
        return torch if torch is not None and torch.cuda.is_initialized() else None
    except Exception:  # noqa: BLE001 - a half-imported torch: nothing to probe
        return None


def probe() -> Optional[str]:
    """None while this process's CUDA context works, else the error it raises."""
    torch = _initialized_torch()
    if torch is None:
        return None
    try:
        torch.cuda.synchronize()
        x = torch.ones(1, device="cuda")
        x.add_(1)
        if float(x.item()) != 2.0:
            return "a one-element add on the device came back wrong"
    except Exception as e:  # noqa: BLE001 - any failure here means the context is unusable
        return first_line(e)
    return None


def context_lost(exc: Optional[BaseException] = None) -> Optional[str]:
    """After ``exc`` (an example's exception; None: at any time): the error to
    report when the CUDA context is dead (``exc`` itself when it names the
    CUDA error, else what the probe saw), None while it works."""
    dead = probe()
    if dead is None:
        return None
    return first_line(exc) if exc is not None and looks_like_cuda_error(exc) else dead


def settle() -> None:
    """Synchronize the device (if this process uses one): raises the CUDA
    error of an earlier asynchronous launch, if any."""
    torch = _initialized_torch()
    if torch is not None:
        torch.cuda.synchronize()


# ----------------------------------------------------------------- the timer
class Watchdog:
    """One daemon thread bounding whatever runs between ``arm`` and ``disarm``."""

    def __init__(self, seconds: float, on_expire: Callable[[str, float], None], *, backstop: bool = True, exit_code: int = EXIT_HANG):
        self.seconds = _bound(seconds)
        self.exit_code = exit_code
        self.on_expire = on_expire
        self.backstop = backstop
        self._cond = threading.Condition()
        self._deadline: Optional[float] = None
        self._label = ""
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="sdpa-conformance watchdog", daemon=True)
        self._thread.start()

    def arm(self, label: str, seconds: Optional[float] = None) -> None:
        limit = self.seconds if seconds is None else _bound(seconds)
        with self._cond:
            self._deadline, self._label = time.monotonic() + limit, label
            self._cond.notify()
        if self.backstop:
            faulthandler.dump_traceback_later(limit + BACKSTOP_S, exit=True, file=sys.__stderr__)

    def disarm(self) -> None:
        with self._cond:
            self._deadline = None
            self._cond.notify()
        if self.backstop:
            faulthandler.cancel_dump_traceback_later()

    def close(self) -> None:
        with self._cond:
            self._closed, self._deadline = True, None
            self._cond.notify()
        if self.backstop:
            faulthandler.cancel_dump_traceback_later()

    def _run(self) -> None:
        with self._cond:
            while True:
                if self._closed:
                    return
                if self._deadline is None:
                    self._cond.wait()
                    continue
                left = self._deadline - time.monotonic()
                if left > 0:
                    self._cond.wait(left)
                    continue
                label, limit = self._label, self.seconds
                break
        expire(lambda: self.on_expire(label, limit), self.exit_code)


def _bound(seconds) -> float:
    """A finite bound > 0: an infinite one overflows the deadline and faulthandler's timer at
    ``arm``, in the middle of the example (the callers turn "no bound" into no watchdog)."""
    seconds = float(seconds)
    if not (seconds > 0 and math.isfinite(seconds)):
        raise ValueError(f"watchdog bound {seconds!r}: expected a finite number of seconds > 0")
    return seconds


def expire(handler: Callable[[], None], code: int, grace: float = HANDLER_GRACE_S) -> None:
    """Run ``handler`` (it leaves the record) for at most ``grace`` seconds in
    a helper thread, then end the process: the main thread may be blocked for good."""
    helper = threading.Thread(target=handler, name="sdpa-conformance fault record", daemon=True)
    helper.start()
    helper.join(grace)
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - closed or replaced streams: nothing to keep
            pass
    os._exit(code)


_active: Optional[Watchdog] = None


def start(seconds: float, on_expire: Callable[[str, float], None], **kw) -> Optional[Watchdog]:
    """Bound every armed stretch of this process by ``seconds`` from now on.
    Returns the previous watchdog, for ``stop`` (a pytester run nests)."""
    global _active
    previous = _active
    _active = Watchdog(seconds, on_expire, **kw)
    return previous


def stop(previous: Optional[Watchdog] = None) -> None:
    global _active
    if _active is not None:
        _active.close()
    _active = previous


def active() -> Optional[Watchdog]:
    return _active


def arm(label: str, seconds: Optional[float] = None) -> None:
    """Start the bound (no-op without a started watchdog: harness and repro runs)."""
    if _active is not None:
        _active.arm(label, seconds)


def disarm() -> None:
    if _active is not None:
        _active.disarm()
