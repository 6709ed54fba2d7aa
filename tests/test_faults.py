"""The planted faults (kernels.mutants.FAULTS) and $SDPA_PLANT_MUTANT, on CPU.

The faults prove the run's isolation on a GPU (docs/faults.md): one kills the
CUDA context with an illegal address, one never finishes. Here: they apply
to the installed sources, compile for sm_80, reach only the f16 template,
and a pytest run plants one only when asked, says so in its header and
report, and refuses to where $CI is set.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import settings

from ground.case import Case
from kernels import mutants
from kernels.mutants import BUG_CLASSES, FAULTS, MUTANTS, PLANT_ENV
from kernels.source import check_rewrites

pytest_plugins = ["pytester"]

CONFTEST = """
def pytest_addhooks(pluginmanager):
    if not pluginmanager.has_plugin("sdpa_conformance"):
        import conformance.plugin
        pluginmanager.register(conformance.plugin, "sdpa_conformance")
"""


def test_faults_are_well_formed_and_apart_from_the_kill_rate_catalogue():
    names = [m.name for m in FAULTS]
    assert sorted(m.bug_class for m in FAULTS) == ["hang", "illegal_address"]
    assert len(set(names)) == 2 and not set(names) & {m.name for m in MUTANTS}
    for m in FAULTS:
        assert m.bug_class in BUG_CLASSES and m.targets == ("f16",) and m.scope.strip() and m.why.strip()
        assert Case(**m.probe).structural_problem() is None
        check_rewrites(m.rewrites)  # each rewrite matches the installed prefill_f16.py exactly once


@pytest.mark.compile
@pytest.mark.parametrize("fault", FAULTS, ids=lambda m: m.name)
def test_faulty_templates_compile_for_sm80(fault, tmp_path, monkeypatch):
    """A fault that does not compile would prove nothing on the GPU."""
    from kernels.prepared import PreparedAdapter

    monkeypatch.setenv("CUDNN_FRONTEND_COMPILED_CACHE", str(tmp_path / "compiled"))
    adapter = PreparedAdapter(rewrites=fault.rewrites)
    for case in (Case(**fault.probe), Case(layout="thd", q_lens=(5,), kv_lens=(200,))):
        delta = adapter.compile_only(case)
        assert delta.misses >= 1 and delta.modules <= 1


def test_planted_reads_the_environment(monkeypatch):
    monkeypatch.delenv(PLANT_ENV, raising=False)
    assert mutants.planted() is None
    monkeypatch.setenv(PLANT_ENV, "fault_kv_loop_never_ends")
    assert mutants.planted() is FAULTS[1]
    monkeypatch.setenv(PLANT_ENV, "lse_in_log2_units")
    assert mutants.planted().name == "lse_in_log2_units"
    monkeypatch.setenv(PLANT_ENV, "nope")
    with pytest.raises(ValueError, match="SDPA_PLANT_MUTANT='nope': no such mutant"):
        mutants.planted()


def test_the_prepared_adapter_plants_only_when_not_told_its_rewrites(monkeypatch):
    from kernels.prepared import PreparedAdapter

    monkeypatch.setenv(PLANT_ENV, FAULTS[0].name)
    planted = PreparedAdapter()
    assert planted.rewrites == FAULTS[0].rewrites and planted.planted == FAULTS[0].name
    assert planted.label == f"prepared (mutant {FAULTS[0].name}: 1 source rewrites)"
    assert PreparedAdapter(rewrites=()).rewrites == ()  # the kill-rate harness names its rewrites (the control: none)


@pytest.fixture
def project(pytester, monkeypatch):
    for var in ("SDPA_ADAPTER", "SDPA_SM80_COMPAT", "SDPA_KERNELS_SOURCE", PLANT_ENV, "CI", "SDPA_HYPOTHESIS_PROFILE"):
        monkeypatch.delenv(var, raising=False)
    profile = settings.get_current_profile_name()
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_x="def test_adapter(adapter):\n    print('LABEL', adapter.label)\n")
    yield pytester
    settings.load_profile(profile)


def _run(pytester, *args):
    return pytester.runpytest("-p", "no:cacheprovider", "-p", "no:benchmark", "-s", *args)


def _environment(pytester) -> dict:
    return json.loads((pytester.path / "sdpa-report" / "report.json").read_text())["environment"]


def test_a_planted_run_says_so_loudly(project, monkeypatch):
    monkeypatch.setenv(PLANT_ENV, "fault_v_stride_out_of_bounds")
    result = _run(project)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "WARNING: KERNELS DELIBERATELY BROKEN: SDPA_PLANT_MUTANT=fault_v_stride_out_of_bounds is planted in the prepared adapter*never a verdict*",
            "*LABEL prepared (mutant fault_v_stride_out_of_bounds: 1 source rewrites)",
        ]
    )
    assert _environment(project)["planted_mutant"] == "fault_v_stride_out_of_bounds"


@pytest.mark.parametrize(
    "env, message",
    [({PLANT_ENV: "fault_kv_loop_never_ends", "CI": "true"}, "refused because $CI is set"), ({PLANT_ENV: "nope"}, "SDPA_PLANT_MUTANT='nope': no such mutant")],
)
def test_a_plant_under_ci_or_unknown_is_a_usage_error(project, monkeypatch, env, message):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    result = _run(project)
    assert result.ret == pytest.ExitCode.USAGE_ERROR and message in result.stderr.str()


@pytest.mark.parametrize(
    "args, profile, seed",
    [
        (
            ["--hypothesis-profile=ci"],
            "ci (40 examples per test before per-property scaling, derandomized)",
            "derandomized: each test's examples are fixed by the test",
        ),
        (["--hypothesis-profile=dev", "--hypothesis-seed=7"], "dev (10 examples per test before per-property scaling)", "7 (--hypothesis-seed)"),
        (["--hypothesis-profile=nightly"], "nightly (1000 examples per test before per-property scaling)", "random per test and run"),
        (["--hypothesis-profile=ci", "--hypothesis-seed=7"], "ci (", "--hypothesis-seed=7 has no effect under this profile"),
    ],
)
def test_the_header_and_the_report_name_the_hypothesis_profile_and_seed(project, args, profile, seed):
    result = _run(project, *args)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([f"hypothesis: profile {profile}* | seed: *{seed}*"])
    env = _environment(project)
    assert env["hypothesis_profile"].startswith(profile) and seed in env["hypothesis_seed"]
    assert "| hypothesis_profile |" in (project.path / "sdpa-report" / "report.md").read_text()
