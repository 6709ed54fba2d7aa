"""Family selection (conformance.family_select): ``--family`` / ``$SDPA_FAMILY``
choose which kernel families a run judges, the default follows the GPU,
the header names the selection and its mode, and the gate carries it."""

from __future__ import annotations

import argparse

import pytest
import torch  # noqa: F401 - imported before the in-process runs (pytester's module snapshot must keep it)

from conformance import family_select, gate
from ground.families import FAMILY_NAMES
from tests.toy_project import toy_project

pytest_plugins = ["pytester"]

TESTS = """
import pytest

@pytest.mark.family("sm80")
def test_judges_sm80():
    pass

@pytest.mark.family("sm90")
def test_judges_sm90():
    pass

def test_the_suites_own():
    pass
"""
H100, A100, B200 = (9, 0), (8, 0), (10, 0)


# ------------------------------------------------------------- the rules
@pytest.mark.parametrize(
    "capability, families, mode",
    [
        (None, ("sm80", "sm90"), "compile sm80, compile sm90"),
        (A100, ("sm80",), "native sm80"),
        (H100, ("sm80", "sm90"), "sm80 code on sm_90, native sm90"),
        (B200, ("sm80",), "sm80 code on sm_100"),
    ],
)
def test_the_default_is_what_the_gpu_runs(capability, families, mode):
    assert family_select.default(capability) == families
    assert family_select.mode(families, capability) == mode


def test_a_chosen_family_the_gpu_cannot_launch_is_its_compile_tier():
    assert family_select.mode(("sm90",), A100) == "compile sm90" and family_select.mode(("sm90",), H100) == "native sm90"


def test_values_parse_and_unknown_ones_are_refused():
    assert family_select.parse(None) is None and family_select.parse("") is None
    assert family_select.parse("sm90") == ("sm90",) and family_select.parse("all") == FAMILY_NAMES
    with pytest.raises(ValueError, match=r"\$SDPA_FAMILY='sm70': expected one of sm80, sm90, all"):
        family_select.parse("sm70", "$SDPA_FAMILY")


# ------------------------------------------------------------- the plugin
@pytest.fixture
def project(pytester, monkeypatch):
    yield from toy_project(pytester, monkeypatch, test_toy_families=TESTS)


def _run(pytester, *args):
    return pytester.runpytest("-p", "no:cacheprovider", "-p", "no:benchmark", "-v", *args)


def _ran(result) -> set:
    return {name for name in ("test_judges_sm80", "test_judges_sm90", "test_the_suites_own") if f"::{name} PASSED" in result.stdout.str()}


@pytest.mark.parametrize(
    "args, env, ran, header",
    [
        ([], None, {"test_judges_sm80", "test_judges_sm90", "test_the_suites_own"}, "families sm80+sm90 | mode: compile sm80, compile sm90"),
        (["--family", "sm90"], None, {"test_judges_sm90", "test_the_suites_own"}, "families sm90 | mode: compile sm90"),
        (["--family=all"], None, {"test_judges_sm80", "test_judges_sm90", "test_the_suites_own"}, "families sm80+sm90"),
        ([], "sm80", {"test_judges_sm80", "test_the_suites_own"}, "families sm80 | mode: compile sm80"),
        (["--family", "sm90"], "sm80", {"test_judges_sm90", "test_the_suites_own"}, "families sm90"),  # the option wins
    ],
)
def test_the_selection_deselects_other_families(project, monkeypatch, args, env, ran, header):
    if env is not None:
        monkeypatch.setenv(family_select.FAMILY_ENV, env)
    monkeypatch.setattr(family_select, "default", lambda capability: FAMILY_NAMES)  # this machine's default, whatever its GPU
    result = _run(project, *args)
    assert result.ret == 0 and _ran(result) == ran
    assert header in result.stdout.str()
    deselected = 3 - len(ran)
    assert (f"{deselected} deselected" in result.stdout.str()) == bool(deselected) and "skipped" not in result.stdout.str()


@pytest.mark.parametrize(
    "args, env, message",
    [
        (["--family", "sm70"], None, "invalid choice: 'sm70'"),
        ([], "hopper", "$SDPA_FAMILY='hopper': expected one of sm80, sm90, all"),
    ],
)
def test_unknown_values_are_usage_errors(project, monkeypatch, args, env, message):
    if env is not None:
        monkeypatch.setenv(family_select.FAMILY_ENV, env)
    result = _run(project, *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR and message in result.stderr.str()


def test_a_marker_naming_no_family_is_a_usage_error(project):
    project.makepyfile(test_toy_bad_marker='import pytest\n\n@pytest.mark.family("sm70")\ndef test_x():\n    pass\n')
    result = _run(project)
    assert result.ret == pytest.ExitCode.USAGE_ERROR and "family marker 'sm70'" in result.stderr.str()


def test_the_suites_family_tests_are_marked():
    """The sm90 tests judge the sm90 family, the sm80 compile tier the sm80 one (so --family picks them)."""
    import importlib
    from pathlib import Path

    gpu = sorted(f"conformance.{p.stem}" for p in (Path(__file__).parents[1] / "conformance").glob("test_sm90_*.py"))
    assert len(gpu) >= 5, gpu  # every sm90 module under conformance/, found by name
    for module, name in (
        *((m, "sm90") for m in gpu),
        ("test_compile_tier_sm90", "sm90"),
        ("test_contracts_sm90", "sm90"),
        ("test_sm90_specialize", "sm90"),
        ("test_compile_tier", "sm80"),
    ):
        marks = importlib.import_module(module).pytestmark
        marks = marks if isinstance(marks, list) else [marks]
        assert [m.args[0] for m in marks if m.name == "family"] == [name], module


# --------------------------------------------------------------- the gate
def _gate_args(*argv):
    p = argparse.ArgumentParser()
    gate.add_arguments(p)
    return p.parse_args(list(argv))


def test_the_gate_carries_the_family_and_its_tests(tmp_path):
    def has_tests(cmd):
        return all(any(c.endswith(t) for c in cmd) for t in family_select.GATE_TESTS["sm90"])

    sm90 = gate.command(_gate_args("--family", "sm90", "--cpu-tier", "--report-dir", str(tmp_path)), 1, None)
    assert "--family=sm90" in sm90 and has_tests(sm90)
    sm80 = gate.command(_gate_args("--family", "sm80", "--cpu-tier"), 1, None)
    assert "--family=sm80" in sm80 and not any(c.endswith(t) for c in sm80 for t in family_select.GATE_TESTS["sm90"])
    default = gate.command(_gate_args("--cpu-tier"), 1, None)
    assert not any(c.startswith("--family") for c in default) and has_tests(default)
    # The family's own tests are all CPU tier (tests/test_cpu_tier.py): without --cpu-tier none is collected.
    assert not any(c.endswith(t) for c in gate.command(_gate_args("--family", "sm90"), 1, None) for t in family_select.GATE_TESTS["sm90"])


def test_the_gate_refuses_an_unknown_family(capsys):
    with pytest.raises(SystemExit) as e:
        _gate_args("--family", "sm70")
    assert e.value.code == 2 and "invalid choice: 'sm70'" in capsys.readouterr().err
