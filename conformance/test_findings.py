"""Each recorded finding still reproduces from its saved case file, exactly.

A finding is a real kernel discrepancy kept in known_findings.toml; its
shrunk case lives in findings/. Replayed with no finding in force, the
property must fail, and every check that fails must be one this finding
excuses (the finding describes the whole discrepancy of the case, nothing
else fails); replayed with the finding in force, the example is an xfailed
observation naming exactly it. When the kernel is fixed this test fails,
and the finding (entry and file) must go. (tests/test_known_findings.py
checks on CPU that each file names an entry that selects its case.)

A crash finding (check "crash") is replayed in a process of its own
(``python -m conformance.cli repro FILE`` with the recorded adapter and
mode): exit 1 with "CUDA context lost" is the fault still there; a replay
that passes means the finding is stale.
"""

import glob
import os
import subprocess
import sys

import pytest

from ground import findings
from ground.case import load_case_file
from ground.outcome import PropertyFailure
from properties import CHECKS, PROPERTIES

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FILES = sorted(glob.glob(os.path.join(ROOT, "findings", "*.json")))


def _param(path):
    """A case file's test id; one that needs a GPU (``needs_gpu``) is a gpu test; it judges its Case's family (--family)."""
    case, doc = load_case_file(path)
    marks = [pytest.mark.family(case.family)] + ([pytest.mark.gpu] if doc.get("needs_gpu", True) else [])
    return pytest.param(path, id=os.path.basename(path)[:-5], marks=marks)


@pytest.mark.parametrize("path", [_param(p) for p in FILES])
def test_finding_reproduces_exactly(path, request):
    from kernels import get_adapter

    case, doc = load_case_file(path)
    if doc.get("needs_gpu", True):
        request.getfixturevalue("gpu")  # skips without a GPU (compile-only findings replay on the CPU)
    named = [doc["finding"]] if isinstance(doc["finding"], str) else list(doc["finding"])  # one discrepancy may fail two checks
    entries = [f for f in findings.load(os.path.join(ROOT, "known_findings.toml"), checks=CHECKS) if f.id in named]
    assert sorted(f.id for f in entries) == sorted(named), named
    if any(f.crash for f in entries):
        (entry,) = entries  # a fault ends the example: one crash finding per case file
        _replay_crash(path, doc, entry, request.config)
        return
    # The entry point as recorded (the wrapper off SM80 in its compatibility mode, as the run had it).
    options = {"sm80_compat": True} if doc.get("sm80_compat") else {}
    check, adapter, params = PROPERTIES[doc["property"]].check, get_adapter(doc["adapter"], family=case.family, **options), doc["params"]

    tries = RACE_TRIES if any(f.race for f in entries) else 1  # a race: its case file is replayed until it shows (RACE_TRIES)
    failure = _first_failure(lambda: check(case, adapter, **params), tries)
    assert failure is not None, f"{', '.join(named)}: the case file passed {tries} time(s): the finding is stale (remove the entry and its file)"
    verdict = findings.judge(doc["property"], case, failure.failures, entry=params.get("entry") or adapter.name, params=params, entries=entries)
    assert verdict.excused and not verdict.unexcused, [x.summary for x in verdict.unexcused]

    obs = _first_excused(lambda: check(case, adapter, **params), entries, tries)
    assert obs.outcome == "xfailed" and obs.findings == sorted(named), (obs.outcome, obs.findings)  # each named one reproduced
    print(f"{', '.join(named)}: {failure.summary}")


# Replays a race finding's case file gets, per phase, to show its race; each
# phase stops at the first that does. The race is not certain on a busy
# machine: 5 tries with the finding in force once all agreed and turned a
# correct run red. At 64, a race shown even once in five tries is missed about
# once in 1.6 million replays (0.8 ** 64); a fixed kernel still goes stale
# here, after 64 agreeing launch pairs (seconds).
RACE_TRIES = 64


def _first_failure(replay, tries: int):
    """The PropertyFailure of the first of ``tries`` replays that fails, with no finding in force (None: all passed)."""
    for _ in range(tries):
        try:
            with findings.applied([]):
                replay()
        except PropertyFailure as failure:
            return failure
    return None


def _first_excused(replay, entries, tries: int):
    """The Observation of the first of ``tries`` replays, with ``entries`` in force, that is not a pass (else the last)."""
    for _ in range(tries):
        with findings.applied(entries):
            obs = replay()
        if obs.outcome != "passed":
            return obs
    return obs


# A replay's fault: compile and one launch, in a fresh process (a lost CUDA context cannot be recovered in this one).
CRASH_REPLAY_TIMEOUT_S = 900


def _replay_crash(path, doc, entry, config):
    """Replay a crash finding's case file in its own process, as recorded
    (adapter, SM80-compatibility mode, the run's kernels source): still a
    fault (exit 1, "CUDA context lost"), else the test fails; a pass says the
    finding is stale."""
    case, _ = load_case_file(path)
    params = doc.get("params") or {}
    assert entry.selects(doc["property"], case, doc["adapter"], params), f"{entry.id} does not select its case file {path}"
    cmd = [sys.executable, "-m", "conformance.cli", "repro", path, "--adapter", doc["adapter"]]
    if doc.get("sm80_compat"):
        cmd.append("--sm80-compat")
    source = config.getoption("kernels_source", default=None)
    if source:
        cmd += ["--kernels-source", source]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=CRASH_REPLAY_TIMEOUT_S)
    out = done.stdout + done.stderr
    tail = "\n".join(out.strip().splitlines()[-25:])
    if done.returncode == 0:
        pytest.fail(
            f"stale crash finding {entry.id!r} ({entry.source}): its case file {os.path.relpath(path, ROOT)} replays without a fault "
            f"through the {doc['adapter']} adapter (exit 0): the kernel changed; remove the entry and its case file (and the steer "
            f"around it) or correct them.\n{tail}"
        )
    assert done.returncode == 1 and "CUDA context lost" in out, (
        f"{entry.id}: the replay did not fault as recorded (exit {done.returncode}, no 'CUDA context lost'):\n{tail}"
    )
    print(f"{entry.id}: still crashes ({' '.join(cmd[1:])})")
