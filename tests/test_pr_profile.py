"""The pr profile (strategies.profiles, properties.matrix.PROFILE_TESTS,
geometry mode "few"): its compile keys, every family's, stay within its
budget, it still reaches every template flavor, both dtypes and both
directions, and it collects only what its table names."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ground.case import Case
from ground.pairs import values_of
from ground.tables import FLAVORS, STRATA, flavor_of
from properties.matrix import FAMILIES, PROFILE_TESTS, in_profile
from strategies import geometry
from strategies.profiles import MAX_EXAMPLES, PR_BACKWARD_KEY_SLOTS, PR_COMPILE_SLOTS, PR_SM90_KEY_SLOTS

ROOT = Path(__file__).resolve().parents[1]


def _count(out: Path, *extra: str) -> dict:
    """tools/count_compile_keys.py's counts of the pr profile's draws."""
    done = subprocess.run(
        [sys.executable, "tools/count_compile_keys.py", "--profile", "pr", "--compile-tier", "--json", str(out), *extra],
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def pr_keys(tmp_path_factory):
    return _count(tmp_path_factory.mktemp("pr") / "keys.json")


def _slots(counts: dict) -> int:
    every = counts["all"]  # launches, rejections and the compile tier's tests the profile runs
    return every["dense_keys"] + every["thd_keys"] + PR_BACKWARD_KEY_SLOTS * every["backward_keys"]


def _sm90_keys(profile: str = "pr") -> int:
    """The sm90 compile keys of the sm90 tests ``profile`` runs (their strategies' draws)."""
    from conformance.pairs_sm90 import draws as sm90_draws
    from kernels.sm90.specialize import compile_key

    runs = PROFILE_TESTS[profile]
    return len({compile_key(c) for name, cases in sm90_draws(profile).items() if name in runs for c in cases})


def test_pr_compile_keys_stay_within_the_budget(pr_keys):
    sm90 = _sm90_keys()
    assert 0 < sm90 <= 8  # the dense few rows: a handful (strategies.sm90.few_rows)
    assert _slots(pr_keys) + PR_SM90_KEY_SLOTS * sm90 <= PR_COMPILE_SLOTS, (pr_keys["all"], sm90)
    # and every forward stratum has keys: each flavor in each dtype (numerics runs them all)
    assert set(pr_keys["keys_per_stratum"]) == {f"{f}-{d}" for f, d in STRATA}


def test_the_budget_fails_pr_over_the_full_pools(tmp_path):
    # planted: pr's tests over every pool row (geometry pool, not few) pass the budget
    assert _slots(_count(tmp_path / "keys.json", "--geometry", "pool")) > PR_COMPILE_SLOTS


def test_pr_is_a_profile_everywhere(pr_keys):
    from conformance.gate import PROFILES

    assert "pr" in MAX_EXAMPLES and "pr" in PROFILES and pr_keys["profile"] == "pr"
    assert geometry.PROFILE_MODES["pr"] == "few"


@pytest.fixture(scope="module")
def pr_draws():
    from conformance.pairs import draw

    return draw("pr")


def test_pr_reaches_every_flavor_and_both_directions(pr_draws):
    cases = [c for cs in pr_draws.values() for c in cs]
    for direction in ("fwd", "bwd"):
        mine = [c for c in cases if c.direction == direction]
        assert {c.layout for c in mine} == {"dense", "thd"}, direction
        assert {c.dtype for c in mine} == {"float16", "bfloat16"}, direction
    assert {flavor_of(c.d_qk, c.d_v) for c in cases if c.direction == "fwd"} >= set(FLAVORS)
    # the backward's two kernels: bprop_d64_f16 (gptoss) and bprop_f16 (the others)
    bwd = {flavor_of(c.d_qk, c.d_v) for c in cases if c.direction == "bwd"}
    assert "gptoss" in bwd and bwd - {"gptoss"}
    assert set(pr_draws) == {t for t in PROFILE_TESTS["pr"] if t in FAMILIES} - {"test_config_rejects", "test_backward_wrapper_rejects"}


def test_in_profile_selects_tests_and_strata():
    assert in_profile("ci", "test_metamorphic_dense", {"flavor": "qwen", "dtype": "float16"})
    assert not in_profile("pr", "test_metamorphic_dense", {"flavor": "qwen", "dtype": "float16"})
    assert not in_profile("pr", "test_large", {})
    assert in_profile("pr", "test_numerics_thd", {"flavor": "qwen", "dtype": "float16"})
    assert in_profile("pr", "test_backward_dense", {"flavor": "gptoss", "dtype": "float16"})
    assert not in_profile("pr", "test_backward_dense", {"flavor": "qwen", "dtype": "bfloat16"})
    assert in_profile("pr", "test_sm90_numerics_dense", {"entry": "compile"}) and not in_profile("pr", "test_sm90_numerics_dense", {"entry": "wrapper"})
    assert not in_profile("pr", "test_finding_reproduces_exactly", {}) and in_profile("ci", "test_finding_reproduces_exactly", {})
    # a matrix entry may name ids of its other axes too: pr keeps the THD backward tails' init mode
    tails_thd = {"flavor": "gptoss", "dtype": "float16", "initialize_outputs": True}
    assert in_profile("pr", "test_backward_tails_thd", tails_thd) and in_profile("ci", "test_backward_tails_thd", {**tails_thd, "initialize_outputs": False})
    assert not in_profile("pr", "test_backward_tails_thd", {**tails_thd, "initialize_outputs": False})
    assert not in_profile("pr", "test_backward_tails_thd", {**tails_thd, "flavor": "qwen"})


def test_fewest_rows_hold_every_factor_value_of_the_pool():
    for f, d in STRATA:
        for pool, case_of in ((geometry.hand_dense_pool(f, d), lambda g: g.case(d)), (geometry.hand_thd_pool(f, d), lambda g: g.case(f, d))):
            few = geometry.fewest(pool, case_of)
            assert len(few) < len(pool) and few[0] == pool[0]
            assert set().union(*(values_of(case_of(g)) for g in few)) == set().union(*(values_of(case_of(g)) for g in pool))


def test_fewest_drops_a_row_that_adds_no_value():
    # planted: a row equal in its factor values to the first is never kept
    a, b = Case(s_q=3, s_kv=3), Case(s_q=3, s_kv=3, causal=True)
    rows = (a, a.replace(seed=1), b)
    assert geometry.fewest(rows, lambda c: c) == (a, b)


def test_the_kill_harness_searches_what_pr_runs_over_its_rows():
    from conformance.kill import kinds as K
    from conformance.kill import search as S

    by_name = {k.name: k for k in K.KINDS}
    assert len(S.profile_strata(by_name["numerics_dense"], FLAVORS, "pr")) == len(STRATA)
    assert S.profile_strata(by_name["backward_dense"], FLAVORS, "pr") == [("gptoss", "float16"), ("llama", "bfloat16")]
    assert S.profile_strata(next(k for k in K.KINDS if k.name.startswith("metamorphic_dense")), FLAVORS, "pr") == []
    assert S.profile_strata(next(k for k in K.KINDS if k.name.startswith("metamorphic_dense")), FLAVORS, "ci")
    with S._geometry_of("pr"):
        assert geometry.mode() == "few"
    assert geometry.mode() != "few"


def test_pr_collects_only_what_its_table_names():
    """Collected as the gate on a Hopper GPU collects it (every family, the
    sm90 gate's own test files too): a kernel family's test runs under pr only
    where PROFILE_TESTS names it (the findings' replays, the sm90 compile tier,
    metamorphic and parity tests and the public sm90 wrapper's entry are
    ci's); the suite's own tests are not a family's and stay."""
    from conformance.family_select import GATE_TESTS

    def collected(profile: str) -> set:
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", f"--hypothesis-profile={profile}", "--family", "all"]
            + ["conformance", *GATE_TESTS["sm90"], "tests/test_pr_profile.py"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        return {line.strip() for line in done.stdout.splitlines() if "::" in line}

    pr, ci = collected("pr"), collected("ci")
    names = {i.split("::")[1].split("[")[0] for i in pr if i.startswith(("conformance/", *GATE_TESTS["sm90"]))}
    assert names == set(PROFILE_TESTS["pr"]), names ^ set(PROFILE_TESTS["pr"])
    assert "conformance/test_sm90_numerics.py::test_sm90_numerics_dense[compile]" in pr
    assert "conformance/test_sm90_numerics.py::test_sm90_numerics_dense[wrapper]" not in pr
    assert any("test_finding_reproduces_exactly" in i for i in ci) and any(i.startswith(GATE_TESTS["sm90"]) for i in ci)
    assert any(i.startswith("tests/test_pr_profile.py") for i in pr)  # the suite's own tests: no family, every profile
