"""Fault and hang isolation: every verdict of a run is about the test that got it.

A sticky CUDA error (illegal address, unspecified launch failure, ...) kills
the CUDA context of the process that launched the faulting kernel; a kernel
that never finishes blocks its process in a C call. Either way, whatever the
process would run next is not judged on its own merits. So the process that
sees one ends, after leaving the case that did it on disk:

- Before every launch the case is on disk: ``recorder.begin`` appends the
  example's ``begin`` line (property, Case, params, adapter) to the
  process's shard and flushes it before the property touches the kernel.
  ``sdpa-conformance repro SHARD[:LINE]`` replays such a line (default: the
  shard's last ``begin``), so even a process killed from outside leaves a
  replayable case; the end-of-run merge also turns it into a case file.
- Each example runs armed (``properties.watchdog``): Hypothesis'
  test function is wrapped for the duration of the test, a plain test that
  uses the ``gpu`` fixture as a whole. After the example the device is
  synchronized, so an asynchronous fault surfaces in the example that
  launched it.
- An example that raises is followed by a probe (synchronize + a one-element
  allocation). A context the probe finds dead is lost: the example fails
  with "CUDA context lost: <error>; this worker exits; the following tests
  run in a fresh worker"; its case file, a ``failure`` record and a
  ``fatal`` record are written and the worker ends (``os._exit``) before
  Hypothesis could shrink on the dead context. pytest-xdist reports the
  test as crashed (this plugin puts the message and the repro command into
  that report) and starts a fresh worker for the rest. Without xdist the
  example raises ``ContextLost`` (not shrunk either), the test fails with
  the message, and the session ends after it (``pytest.exit``).
- An example with no verdict after ``--sdpa-timeout`` seconds (default 300:
  compiles included) is a hang: the watchdog thread writes the same records
  and ends the process; xdist reports the test as crashed and carries on.
- A whole test is bounded by pytest-timeout (``timeout``, method ``thread``:
  the signal method cannot interrupt a C call) with a default scaled to the
  Hypothesis profile; when it expires the same records are written before
  pytest-timeout dumps the stacks and ends the process.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import sys
import threading
import time
from pathlib import Path
from typing import Callable, Optional

import pytest

from properties import recorder, watchdog
from reports import casefile, shards

TIMEOUT_ENV = "SDPA_TIMEOUT"
DEFAULT_EXAMPLE_TIMEOUT = watchdog.EXAMPLE_S  # one example: compiles (seconds each) + launches + reference + judging
TEST_TIMEOUT_PER_EXAMPLE = 10.0  # a whole test: this per example of the profile...
TEST_TIMEOUT_MIN = 1800.0  # ...and never less

LOST = "CUDA context lost: {error}; this worker exits; the following tests run in a fresh worker"
LOST_ALONE = "CUDA context lost: {error}; this process exits after this test (run with -n to have a fresh worker take over)"
HUNG = "no verdict within {seconds:g} s ({what}): a hung kernel? {tail}"
TIMED_OUT = "the test ran past its {seconds:g} s pytest-timeout (all its examples together): {tail}"
TAIL = {True: "this worker exits; the following tests run in a fresh worker", False: "the run ends here"}


class ContextLost(BaseException):
    """The example's launch left the CUDA context dead (raised without xdist).

    A BaseException, not an Exception: Hypothesis re-raises it at once
    instead of shrinking on a dead context, where every example would fail
    for the same borrowed reason and the "minimal" case would be a lie."""


# --------------------------------------------------------------- settings
def addoption(group, parser) -> None:
    group.addoption(
        "--sdpa-timeout",
        type=float,
        default=None,
        metavar="SECONDS",
        help=f"most seconds one example (compile, launch, synchronize, judging) may take before it counts as a hung "
        f"kernel and its process ends (default: ${TIMEOUT_ENV}, ini sdpa_timeout, else {DEFAULT_EXAMPLE_TIMEOUT:g}; 0: no bound). "
        "A whole test is bounded by pytest-timeout's --timeout.",
    )
    parser.addini("sdpa_timeout", f"--sdpa-timeout's default (seconds; default {DEFAULT_EXAMPLE_TIMEOUT:g})")


def example_timeout(config) -> float:
    """--sdpa-timeout, then $SDPA_TIMEOUT, then the ini value, then the default."""
    for where, raw in (
        ("--sdpa-timeout", config.getoption("sdpa_timeout", default=None)),
        (f"${TIMEOUT_ENV}", os.environ.get(TIMEOUT_ENV)),
        ("ini sdpa_timeout", config.getini("sdpa_timeout")),
    ):
        if raw is None or raw == "":
            continue
        return _seconds(where, raw)
    return DEFAULT_EXAMPLE_TIMEOUT


def _seconds(where: str, raw) -> float:
    """``raw`` as a finite number of seconds >= 0 (infinity would overflow the watchdog's
    timer in every example; 0 is how a bound is turned off), else a usage error naming ``where``."""
    try:
        seconds = float(raw)
    except (TypeError, ValueError):
        seconds = float("nan")
    if not (seconds >= 0 and math.isfinite(seconds)):
        raise pytest.UsageError(f"{where}={raw!r}: expected a number of seconds, finite and >= 0 (0 turns the bound off)")
    return seconds


def default_test_timeout(max_examples: int) -> float:
    return max(TEST_TIMEOUT_MIN, TEST_TIMEOUT_PER_EXAMPLE * max_examples)


def configure_test_timeout(config, max_examples: int) -> Optional[str]:
    """pytest-timeout's settings for this suite where the user chose none
    (--timeout, $PYTEST_TIMEOUT, ini timeout; --timeout-method, ini): method
    thread, a timeout scaled to the profile. Runs before pytest-timeout's own
    pytest_configure reads them. Returns a description, None without the plugin."""
    if not config.pluginmanager.hasplugin("timeout"):
        return None
    opt = config.option
    if getattr(opt, "timeout", None) is None and not os.environ.get("PYTEST_TIMEOUT") and not config.getini("timeout"):
        opt.timeout = default_test_timeout(max_examples)
    if getattr(opt, "timeout_method", None) is None and not config.getini("timeout_method"):
        opt.timeout_method = "thread"
    given = (("--timeout", getattr(opt, "timeout", None)), ("$PYTEST_TIMEOUT", os.environ.get("PYTEST_TIMEOUT")), ("ini timeout", config.getini("timeout")))
    where, raw = next(((w, v) for w, v in given if v is not None and v != ""), ("--timeout", 0))
    timeout = _seconds(where, raw)
    method = getattr(opt, "timeout_method", None) or config.getini("timeout_method")
    return f"a test {timeout:g} s (pytest-timeout, {method})" if timeout > 0 else "a test: no bound (--timeout 0)"


# ------------------------------------------------------------------ plugin
class Isolation:
    """The hooks of one run (registered by conformance.plugin.pytest_configure).

    ``run`` has ``report_dir``, ``run_id``, ``worker`` (None outside xdist
    workers) and ``recording``; ``case_env(item)`` and ``hypothesis_of(item)``
    give the environment and Hypothesis fields of a case file."""

    def __init__(self, config, run, *, max_examples: int, case_env: Callable, hypothesis_of: Callable):
        self.config, self.run = config, run
        self.case_env, self.hypothesis_of = case_env, hypothesis_of
        self.distributed = run.worker is not None  # an xdist worker: a crash is replaced, the run goes on
        self.seconds = example_timeout(config)
        self.test_timeout = configure_test_timeout(config, max_examples)
        self.item = None
        self.lost: Optional[str] = None  # without xdist: the session ends after this test
        self._started, self._previous = False, None
        if self.seconds > 0:
            backstop = float(config.getini("faulthandler_timeout") or 0) == 0  # faulthandler's one timer is free
            self._previous = watchdog.start(self.seconds, self._example_expired, backstop=backstop)
            self._started = True

    def header(self) -> str:
        one = f"an example {self.seconds:g} s (--sdpa-timeout)" if self.seconds > 0 else "an example: no bound (--sdpa-timeout 0)"
        return (
            f"sdpa-conformance isolation: {one}, {self.test_timeout or 'a test: no bound (pytest-timeout not installed)'}; "
            "a lost CUDA context or a hang ends the process that saw it"
        )

    def pytest_unconfigure(self, config):
        if self._started:
            watchdog.stop(self._previous)
            self._started = False

    # ------------------------------------------------------------ running
    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_protocol(self, item, nextitem):
        self.item = item
        try:
            return (yield)
        finally:
            self.item = None
            if self.lost is not None and not self.distributed:
                pytest.exit(self.lost, returncode=pytest.ExitCode.TESTS_FAILED)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item):
        given = getattr(getattr(item, "obj", None), "hypothesis", None)
        inner = getattr(given, "inner_test", None)
        if inner is not None:
            # Hypothesis reads inner_test at every call: each example runs armed.
            given.inner_test = self._guarded(inner, item.nodeid)
            try:
                return (yield)
            finally:
                given.inner_test = inner
        # A plain test is one example when it launches kernels (the gpu fixture);
        # a CPU-only one (a lint, a subprocess run) is bounded by pytest-timeout alone.
        return (yield from self._armed(item.nodeid, "gpu" in getattr(item, "fixturenames", ())))

    def _armed(self, label: str, bounded: bool):
        with self._watched(label, bounded):
            return (yield)

    def _guarded(self, inner, nodeid: str):
        @functools.wraps(inner)
        def example(*args, **kwargs):
            with self._watched(f"{nodeid}: one example"):
                return inner(*args, **kwargs)

        return example

    @contextlib.contextmanager
    def _watched(self, label: str, bounded: bool = True):
        """One example (or plain test) under the watchdog: armed while it runs,
        synchronized after it (a late fault shows up in the example that launched
        it), and any exception looked at for a lost context, then re-raised."""
        if bounded:
            watchdog.arm(label)
        try:
            yield
            watchdog.settle()
        except ContextLost:
            raise
        except BaseException as e:  # noqa: BLE001 - re-raised: only looked at
            self._check(e)
            raise
        finally:
            if bounded:
                watchdog.disarm()

    def _check(self, exc: BaseException) -> None:
        """After an example's exception: end things if the context is dead."""
        if isinstance(exc, KeyboardInterrupt):
            return
        if self.lost is not None:
            raise ContextLost(self.lost)
        error = watchdog.context_lost(exc)
        if error is None:
            return
        if self.distributed:
            message = LOST.format(error=error)
            repro = self._leave_record("context lost", message, error)
            self._say(message, repro)
            watchdog.expire(lambda: None, watchdog.EXIT_LOST, grace=0)
        self.lost = LOST_ALONE.format(error=error)
        recorder.write(self._fatal("context lost", self.lost, error, None))
        raise ContextLost(self.lost) from exc

    # ------------------------------------------------------------ hangs
    def _example_expired(self, label: str, seconds: float) -> None:
        """The watchdog's handler (a helper thread; the process ends after it)."""
        self._record_and_finish("hang", HUNG.format(seconds=seconds, what=label, tail=TAIL[self.distributed]))

    @pytest.hookimpl(tryfirst=True, optionalhook=True)
    def pytest_timeout_set_timer(self, item, settings):
        """pytest-timeout's thread timer, leaving the record before its stack
        dump and os._exit (signal method: pytest-timeout's own, untouched)."""
        if settings.method != "thread":
            return None
        import pytest_timeout

        def expired():
            if not settings.disable_debugger_detection and pytest_timeout.is_debugging():
                return
            message = TIMED_OUT.format(seconds=settings.timeout, tail=TAIL[self.distributed])
            helper = threading.Thread(target=self._record_and_finish, args=("timeout", message), daemon=True)
            helper.start()
            helper.join(watchdog.HANDLER_GRACE_S)
            pytest_timeout.timeout_timer(item, settings)  # dumps the stacks, os._exit(1)

        timer = threading.Timer(settings.timeout, expired)
        timer.name, timer.daemon = f"pytest-timeout {item.nodeid}", True

        def cancel():
            timer.cancel()
            if timer.is_alive() and threading.current_thread() is not timer:
                timer.join()

        item.cancel_timeout = cancel
        timer.start()
        return True

    def _record_and_finish(self, fault: str, message: str) -> None:
        repro = self._leave_record(fault, message)
        if not self.distributed and self.run.recording:
            self._finish_alone(message)
        self._say(message, repro)

    def _finish_alone(self, message: str) -> None:
        """No xdist: this process is the whole run. Record the test and render
        the report (it says the run did not finish) before the process ends."""
        item = self.item
        if item is not None:
            recorder.write({"kind": "test", "nodeid": item.nodeid, "outcome": "failed", "duration": 0.0, "message": message[:500], "findings": []})
        try:
            import reports

            reports.build(self.run.report_dir, self.run.run_id)
        except Exception as e:  # noqa: BLE001 - the shards stay; `sdpa-conformance report` re-renders
            print(f"sdpa-conformance: rendering the report failed: {type(e).__name__}: {e}", file=sys.__stderr__)

    # --------------------------------------------------------- the record
    def _fatal(self, fault: str, message: str, error: Optional[str], repro: Optional[str]) -> dict:
        item = self.item
        return {
            "kind": "fatal",
            "fault": fault,
            "nodeid": item.nodeid if item is not None else None,
            "message": message,
            "error": error,
            "repro": repro,
            "shard": recorder.shard_path(),
            "worker": self.run.worker,
            "pid": os.getpid(),
            "t": time.time(),
        }

    def _leave_record(self, fault: str, message: str, error: Optional[str] = None) -> Optional[str]:
        """The case file of the example begun last in this test, its failure
        record and the fatal record. Returns the repro command (None when the
        test had begun no example: the fault was outside the properties)."""
        item, begun, repro = self.item, recorder.last_begun(), None
        if not self.run.recording:
            return None
        if begun is not None and item is not None:
            try:
                env, hyp = self.case_env(item), self.hypothesis_of(item)
                case = begun.case.to_dict()
                path = casefile.write(
                    self.run.report_dir,
                    property=begun.property,
                    case=case,
                    params=begun.params,
                    summary=message,
                    detail={"fault": fault, "error": error},
                    nodeid=item.nodeid,
                    environment=env,
                    hypothesis=hyp,
                    digest=casefile.inputs_digest(begun.case),
                    needs_gpu="gpu" in getattr(item, "fixturenames", ()),
                )
                repro = casefile.repro_command(path)
                recorder.write(
                    {
                        "kind": "failure",
                        "nodeid": item.nodeid,
                        "property": begun.property,
                        "case": case,
                        "params": begun.params,
                        "summary": message,
                        "case_file": str(path),
                        "repro": repro,
                        "finding": None,
                        "hypothesis": hyp,
                        "fault": fault,
                    }
                )
            except Exception as e:  # noqa: BLE001 - the begin line in the shard still names the case
                print(f"sdpa-conformance: writing the case file failed: {type(e).__name__}: {e}", file=sys.__stderr__)
        recorder.write(self._fatal(fault, message, error, repro))
        return repro

    def _say(self, message: str, repro: Optional[str]) -> None:
        """Onto the terminal, past pytest's output capture (the process is about
        to end: what is captured now would be lost). In an xdist worker the
        controller's crash report carries the message instead."""
        item = self.item
        where = f"{item.nodeid}: " if item is not None else ""
        text = f"sdpa-conformance: {where}{message}" + (f"\n  {repro}" if repro else "")
        try:
            capman = self.config.pluginmanager.getplugin("capturemanager")
            if capman is not None:
                capman.suspend_global_capture(in_=True)
            sys.stderr.write("\n" + text + "\n")
            sys.stderr.flush()
        except Exception:  # noqa: BLE001 - no terminal: the records say it
            pass

    # ------------------------------------------------- controller (xdist)
    @pytest.hookimpl(optionalhook=True)
    def pytest_handlecrashitem(self, crashitem, report, sched):
        """xdist's report for a test whose worker died: say why, and how to replay it."""
        fatal, begun = records_of(self.run.report_dir, self.run.run_id, crashitem)
        if fatal is not None:
            report.longrepr = "\n".join(x for x in (fatal["message"], fatal.get("repro"), f"({report.longrepr})") if x)
        elif begun is not None:
            shard, line = begun
            report.longrepr = (
                f"{report.longrepr}: the worker died without a verdict (segfault, abort, killed?) during the example begun at "
                f"{casefile.display_path(shard)}:{line}\nsdpa-conformance repro {casefile.display_path(shard)}:{line}"
            )


def records_of(report_dir, run_id: str, nodeid: str) -> tuple:
    """(the last fatal record of ``nodeid``, (shard, line) of its last begin) in one run's shards."""
    fatal, begun = None, None
    for path in sorted((Path(report_dir) / shards.SHARDS / run_id).glob("*.jsonl")):
        try:
            lines = path.read_text(encoding="utf-8").split("\n")
        except OSError:
            continue
        for n, line in enumerate(lines, 1):
            if nodeid not in line:
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue
            if rec.get("kind") == "fatal" and rec.get("nodeid") == nodeid:
                fatal = rec
            elif rec.get("kind") == "begin" and rec.get("test") == nodeid:
                begun = (path, n)
    return fatal, begun
