"""The pristine replay of a kill (the mutant harness): a kill's Cases
replayed on the pristine kernels, in this process or a fresh one (also on a
mutant's kernels: a crash's or a hang's Case); the hang bounds; a worker's
process state."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import unittest
from typing import Optional, Sequence

from conformance.kill.catalogue import CONTROLS, adapter_for
from conformance.kill.kinds import KINDS, Kind, check_property
from ground.case import Case
from ground.families import DEFAULT_FAMILY
from kernels.mutants import Mutant
from properties.watchdog import EXAMPLE_S

REPLAY_S = 900.0  # a fresh process' replay of a kill's Cases: start-up, compiles, two examples (the large tier's too)
# A worker's example still running past HANG_S (properties.watchdog.EXAMPLE_S, the pytest run's bound
# too) ends the worker with watchdog.EXIT_HANG: its in-flight Case is replayed like a crash's, each
# replay bounded by HANG_REPLAY_S: a fresh process' start-up, the Case's compiles and the example alone
# on the device (the slowest example measured, a large-tier one, took 77 s among 16 workers). A slow
# example that overran HANG_S among 16 workers ends within it; a hung kernel does not. The harness
# waits on these replays (as on a crash's), so the bound is what a hang costs a run's wall.
HANG_S = EXAMPLE_S
HANG_REPLAY_S = 180.0


def pristine_failure(kind: Kind, cases: Sequence[Case], pristine, check, fresh: Optional[dict] = None) -> Optional[dict]:
    """Replay a kill's ``cases`` (the shrunk one and the first) with ``check``
    on the pristine kernels (``pristine()``: the control's adapter): None when
    none fails there (rejected or refused: no failure), else the first that
    does, as record fields. In this process while its CUDA context works,
    else (a crash killed it) in a fresh one made from ``fresh`` (a worker's
    options); ``{"unknown": why}`` when no replay could run."""
    from properties.watchdog import probe

    if probe() is None:
        return _replay(kind, cases, pristine(), check)
    if fresh is None:
        return {"unknown": "the CUDA context is dead and no fresh process was asked for"}
    return _replay_fresh(kind, cases, fresh)


def _replay(kind: Kind, cases: Sequence[Case], adapter, check) -> Optional[dict]:
    """Each Case as one explicit Hypothesis example (a property may reject it, as in its search)."""
    from hypothesis import HealthCheck, Phase, example, given, settings
    from hypothesis import strategies as st

    for case in cases:

        @settings(database=None, deadline=None, phases=[Phase.explicit], suppress_health_check=list(HealthCheck), report_multiple_bugs=False)
        @example(c=case)
        @given(c=st.just(case))
        def replay(c):
            check(kind, c, adapter)

        try:
            replay()
        except unittest.SkipTest:  # refused on the pristine kernels: no failure there
            continue
        except Exception as e:  # noqa: BLE001 - any failure on the pristine kernels: the kill is not the mutant's
            return {"case": case.to_dict(), "case_text": case.describe(), "failure": f"{type(e).__name__}: {str(e).strip()[:300]}"}
    return None


def _replay_fresh(kind: Kind, cases: Sequence[Case], opts: dict, mutant: Optional[Mutant] = None, timeout: float = REPLAY_S) -> Optional[dict]:
    """``_replay`` in a fresh Python process (a worker, a daemon, may not start
    a multiprocessing child), on the pristine kernels or (``mutant``) on that
    mutant's; ``{"died": signal number, "signal": name}`` when the process
    was killed by a signal, ``{"hung": seconds}`` when it ran past ``timeout``
    (then killed)."""
    import base64
    import pickle

    keep = {k: opts.get(k) for k in ("kernels_source", "findings", "adapter_factory", "check", "family")}
    job = base64.b64encode(pickle.dumps((kind.name, [c.to_dict() for c in cases], keep, mutant)))
    code = "import sys; from conformance.kill.replay import _replay_main; _replay_main(sys.stdin.read())"
    env = os.environ | {"PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    try:
        done = subprocess.run([sys.executable, "-c", code], input=job.decode(), capture_output=True, text=True, timeout=timeout, env=env)
        if done.returncode < 0:
            return {"died": -done.returncode, "signal": _signal_name(-done.returncode)}
        return json.loads(done.stdout.strip().splitlines()[-1])["pristine"]
    except subprocess.TimeoutExpired:
        return {"hung": timeout}
    except (OSError, subprocess.SubprocessError, ValueError, IndexError, KeyError) as e:
        return {"unknown": f"the fresh process' replay gave no answer ({type(e).__name__}: {e})"}


def _replay_main(job: str) -> None:
    """The fresh process of ``_replay_fresh``: prints {"pristine": ...} as its last line."""
    import base64
    import pickle

    name, cases, opts, mutant = pickle.loads(base64.b64decode(job))
    _setup(opts)
    kind = next(k for k in KINDS if k.name == name)
    adapter = adapter_for(mutant or CONTROLS[opts.get("family") or DEFAULT_FAMILY], opts.get("adapter_factory"))
    result = _replay(kind, [Case.from_dict(c) for c in cases], adapter, opts.get("check") or check_property)
    print(json.dumps({"pristine": result}))


def _setup(opts: dict) -> None:
    """A worker's process state: the kernels' source, torch's threads, the known findings."""
    from kernels.source import use_kernels_source

    use_kernels_source(opts.get("kernels_source"))
    import torch

    torch.set_num_threads(opts.get("threads") or 1)
    if opts.get("findings"):
        from ground import findings
        from properties import CHECKS

        findings.activate(findings.load(opts["findings"], checks=CHECKS))


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return "?"
