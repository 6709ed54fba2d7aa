"""Fault and hang isolation (conformance.isolation) proven on CPU.

A stand-in "kernel launch" works on a process-wide fake CUDA context: the
guilty shape kills it (a sticky error: every later launch in that process
fails) or never returns (a hang). The watchdog's probe is pointed at the
fake context. Runs go through pytester in subprocesses (the isolation ends
processes), with pytest-xdist and without it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import settings

from conformance import cli
from ground.case import Case, load_case_file
from properties import watchdog

pytest_plugins = ["pytester"]
ROOT = Path(__file__).resolve().parents[1]

CONFTEST = """
import fakecuda  # noqa: F401  (points the watchdog's probe at the fake context)

def pytest_addhooks(pluginmanager):
    if not pluginmanager.has_plugin("sdpa_conformance"):
        import conformance.plugin
        pluginmanager.register(conformance.plugin, "sdpa_conformance")
"""

# A fake CUDA context per process: dead once the guilty shape ran (sticky), or
# a launch that never returns.
FAKECUDA = """
import time
from properties import watchdog

DEAD = []

def probe():
    return DEAD[0] if DEAD else None

watchdog.probe = probe

def launch(case):
    if DEAD:
        raise RuntimeError(f"CUDA error: {DEAD[0]} (this process's context died earlier)")
    if case.s_q > 3 and case.s_kv == 99:
        DEAD.append("an illegal memory access was encountered")
        raise RuntimeError("CUDA error: an illegal memory access was encountered")
    if case.s_q > 3 and case.s_kv == 77:
        time.sleep(120)
"""

TESTS = """
import pytest
from hypothesis import given, settings, strategies as st

import fakecuda
from ground.case import Case
from ground.outcome import Observation
from properties import recorder


def check(case):
    recorder.begin("toy", case)
    fakecuda.launch(case)
    recorder.observe(Observation("toy", case))


def test_a_first_innocent():
    check(Case(s_q=2, s_kv=5))


@settings(max_examples=30, database=None, derandomize=True)
@given(st.integers(1, 50))
def test_guilty(s):
    check(Case(s_q=s, s_kv=KV))


@pytest.mark.parametrize("i", range(5))
def test_innocent(i):
    for s in (1, 2, 3, 9):
        check(Case(s_q=s, s_kv=5, seed=i))
"""


@pytest.fixture
def project(pytester, monkeypatch):
    for var in ("SDPA_ADAPTER", "SDPA_SM80_COMPAT", "SDPA_KERNELS_SOURCE", "SDPA_PLANT_MUTANT", "SDPA_TIMEOUT", "PYTEST_TIMEOUT", "PYTEST_ADDOPTS"):
        monkeypatch.delenv(var, raising=False)
    # The workers and subprocesses import this checkout's packages and the generated project's modules.
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), str(pytester.path)]))
    profile = settings.get_current_profile_name()
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(fakecuda=FAKECUDA)
    yield pytester
    settings.load_profile(profile)


def _run(pytester, kv, *args, timeout=240):
    pytester.makepyfile(test_toy=TESTS.replace("KV", str(kv)))
    start = time.monotonic()
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:benchmark", "-p", "no:randomly", *args, timeout=timeout)
    result.wall = time.monotonic() - start
    return result


def _begins(pytester, nodeid):
    out = []
    for path in (pytester.path / "sdpa-report" / "shards").glob("*/*.jsonl"):
        for line in path.read_text().splitlines():
            rec = json.loads(line)
            if rec.get("kind") == "begin" and rec.get("test") == nodeid:
                out.append(Case.from_dict(rec["case"]))
    return out


def _case_files(pytester):
    return [load_case_file(p) for p in (pytester.path / "sdpa-report" / "cases").glob("toy-*.json")]


def _report(pytester) -> dict:
    return json.loads((pytester.path / "sdpa-report" / "report.json").read_text())


# ------------------------------------------------------------ lost context
def test_a_lost_context_fails_its_example_and_ends_only_its_worker(project):
    # One worker: every innocent after the guilty test would run in the same
    # process, on the dead context, were it not replaced.
    result = _run(project, 99, "-n", "1")
    out = result.stdout.str() + result.stderr.str()
    result.assert_outcomes(passed=6, failed=1)  # every innocent passes: none ran on the dead context
    assert (
        "CUDA context lost: RuntimeError: CUDA error: an illegal memory access was encountered; this worker exits; "
        "the following tests run in a fresh worker" in out
    )
    assert "replacing crashed worker" in out
    # The case file is the example that killed the context, not a "shrunk" one from the dead context.
    ((case, doc),) = _case_files(project)
    guilty = [c for c in _begins(project, "test_toy.py::test_guilty") if c.s_q > 3]
    assert guilty == [case] and doc["nodeid"] == "test_toy.py::test_guilty" and doc["summary"].startswith("CUDA context lost: ")
    assert doc["detail"]["fault"] == "context lost"
    result.stdout.fnmatch_lines([f"*sdpa-conformance repro sdpa-report/cases/{Path(doc['repro'].split()[-1]).name}*"])
    s = _report(project)
    assert [f["fault"] for f in s["faults"]] == ["context lost"] and s["tests"]["failed"] == 1 and s["tests"]["passed"] == 6
    assert [f["nodeid"] for f in s["failures"]] == ["test_toy.py::test_guilty"]


def test_without_isolation_the_dead_context_poisons_the_worker(project):
    """The control: the same run with the isolation plugin blocked: every
    later test of the worker fails for the guilty test's fault, and leaves a
    case file that is not the kernel's verdict."""
    result = _run(project, 99, "-n", "1", "-p", "no:sdpa_conformance_isolation")
    result.assert_outcomes(failed=6, passed=1)
    # Every innocent test after the guilty one fails on the dead context, each with a case file of its own.
    innocent = [doc["nodeid"] for _, doc in _case_files(project) if doc["nodeid"] != "test_toy.py::test_guilty"]
    assert len(innocent) == 5 and all(n.startswith("test_toy.py::test_innocent") for n in innocent)


def test_without_xdist_the_session_ends_after_the_guilty_test(project):
    result = _run(project, 99)
    out = result.stdout.str() + result.stderr.str()
    result.assert_outcomes(passed=1, failed=1)  # the innocents after it did not run on a dead context
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert "CUDA context lost: RuntimeError: CUDA error: an illegal memory access was encountered; this process exits after this test" in out
    ((case, doc),) = _case_files(project)
    assert case.s_q > 3 and doc["nodeid"] == "test_toy.py::test_guilty" and "ContextLost: CUDA context lost" in doc["summary"]
    assert [c for c in _begins(project, "test_toy.py::test_guilty") if c.s_q > 3] == [case]  # no shrinking on the dead context
    assert _report(project)["tests"]["failed"] == 1


# ------------------------------------------------------------------- hangs
def test_a_hung_example_is_ended_by_the_watchdog_and_the_rest_pass(project):
    result = _run(project, 77, "-n", "1", "--sdpa-timeout=3")
    out = result.stdout.str() + result.stderr.str()
    result.assert_outcomes(passed=6, failed=1)
    assert result.wall < 100  # the launch sleeps 120 s
    assert "no verdict within 3 s (test_toy.py::test_guilty: one example): a hung kernel? this worker exits" in out
    ((case, doc),) = _case_files(project)
    assert case.s_q > 3 and case.s_kv == 77 and doc["detail"]["fault"] == "hang"
    assert "an example 3 s (--sdpa-timeout)" in out  # the header says what bounds a run


def test_a_hang_without_xdist_leaves_the_case_and_a_report(project):
    result = _run(project, 77, "--sdpa-timeout=3")
    assert result.ret == watchdog.EXIT_HANG and result.wall < 100
    assert "no verdict within 3 s" in result.stderr.str() and "the run ends here" in result.stderr.str()
    ((case, doc),) = _case_files(project)
    assert case.s_kv == 77 and case.s_q > 3
    s = _report(project)
    assert not s["run"]["complete"] and s["tests"]["passed"] == 1 and s["tests"]["failed"] == 1
    assert s["failures"][0]["nodeid"] == "test_toy.py::test_guilty"


def test_a_whole_test_past_pytest_timeout_ends_its_worker_with_a_record(project):
    """The per-example bound off: pytest-timeout (method thread, set by the
    suite) ends the stuck test; its record is written first."""
    result = _run(project, 77, "-n", "1", "--sdpa-timeout=0", "--timeout=4")
    out = result.stdout.str() + result.stderr.str()
    result.assert_outcomes(passed=6, failed=1)
    assert "the test ran past its 4 s pytest-timeout (all its examples together)" in out and "a test 4 s (pytest-timeout, thread)" in out
    ((case, doc),) = _case_files(project)
    assert case.s_kv == 77 and doc["detail"]["fault"] == "timeout"


# ------------------------------------------------------------- the pieces
def test_probe_and_context_lost_on_a_cpu_process():
    assert watchdog.probe() is None  # CUDA never initialized here: nothing to probe, nothing lost
    assert watchdog.context_lost(RuntimeError("CUDA error: an illegal memory access was encountered")) is None


def test_context_lost_names_the_surfacing_error(monkeypatch):
    monkeypatch.setattr(watchdog, "probe", lambda: "AcceleratorError: CUDA error: unspecified launch failure")
    assert (
        watchdog.context_lost(RuntimeError("CUDA error: an illegal memory access was encountered\nmore"))
        == "RuntimeError: CUDA error: an illegal memory access was encountered"
    )
    # An exception that says nothing of CUDA: the probe's error is the one to report.
    assert watchdog.context_lost(ValueError("shape mismatch")) == "AcceleratorError: CUDA error: unspecified launch failure"


def test_an_unarmed_watchdog_never_fires():
    fired = []
    dog = watchdog.Watchdog(0.2, lambda label, s: fired.append(label), backstop=False)
    dog.arm("x")
    dog.disarm()
    time.sleep(0.5)
    dog.close()
    assert fired == []


@pytest.mark.parametrize(
    "args, env, message",
    [
        (["--sdpa-timeout=-1"], {}, "--sdpa-timeout=-1.0: expected a number of seconds"),
        ([], {"SDPA_TIMEOUT": "soon"}, "$SDPA_TIMEOUT='soon': expected a number of seconds"),
    ],
)
def test_bad_sdpa_timeout_is_a_usage_error(project, monkeypatch, args, env, message):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    project.makepyfile(test_x="def test_x():\n    pass\n")
    result = project.runpytest("-p", "no:cacheprovider", *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR and message in result.stderr.str()


# ------------------------------------------------------------------ repro
def test_repro_of_a_shard_line_and_of_a_hang(tmp_path):
    """`sdpa-conformance repro SHARD[:LINE]` replays a begin record; a replay
    with no verdict within --timeout says so and exits 1."""
    from properties import recorder

    shard = tmp_path / "shards" / "20261202-120000-1" / "gw0-7.jsonl"
    previous = recorder.open_shard(str(shard))
    recorder.set_test("t.py::test_x", adapter="prepared", sm80_compat=False)
    recorder.begin("toy", Case(s_q=2, s_kv=3), scale=2.0)
    recorder.write({"kind": "obs", "property": "toy"})
    recorder.begin("toy", Case(s_q=9, s_kv=77), scale=2.0)
    recorder.close_shard(previous)
    # The controller's session record says where the run ran (here: no GPU, so no GPU is needed to replay).
    (shard.parent / "main-6.jsonl").write_text(json.dumps({"kind": "session", "environment": {"mode": "compile-only (no GPU)", "adapter": "prepared"}}) + "\n")
    script = """
import sys, time
from conformance import cli
import properties
from ground.outcome import Observation
import kernels
def toy(case, adapter=None, *, scale):
    if case.s_kv == 77:
        time.sleep(60)
    return Observation("toy", case)
properties.PROPERTIES["toy"] = properties.Property("toy", toy, {}, cold_seconds=1.0, directions=("fwd",), doc="a stand-in property")
kernels.get_adapter = lambda name=None, **kw: object()
sys.exit(cli.main(["repro", sys.argv[1], "--timeout", "2"]))
"""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    ok = subprocess.run([sys.executable, "-c", script, f"{shard}:1"], capture_output=True, text=True, timeout=120, env=env)
    assert ok.returncode == 0 and "case:      dense B=1 S=2x3" in ok.stdout and "recorded:  t.py::test_x" in ok.stdout and "PASS toy" in ok.stdout
    hung = subprocess.run([sys.executable, "-c", script, str(shard)], capture_output=True, text=True, timeout=120, env=env)
    assert hung.returncode == 1 and "S=9x77" in hung.stdout and "no verdict within 2 s: a hung kernel?" in hung.stdout


@pytest.mark.parametrize(
    "suffix, message", [(":2", "line 2: a 'obs' record, not a 'begin'"), (":99", "line 99: the shard has"), ("", "no 'begin' record in this shard")]
)
def test_repro_of_a_bad_shard_line_exits_2(tmp_path, capsys, suffix, message):
    shard = tmp_path / "gw0-1.jsonl"
    shard.write_text(json.dumps({"kind": "collected", "tests": {}}) + "\n" + json.dumps({"kind": "obs"}) + "\n")
    assert cli.main(["repro", f"{shard}{suffix}"]) == 2
    assert message in capsys.readouterr().err
