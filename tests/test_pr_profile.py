"""The pr profile (strategies.profiles, properties.matrix.PROFILE_TESTS,
geometry mode "few"): its compile keys stay within its budget, and it still
reaches every template flavor, both dtypes and both directions."""

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
from strategies.profiles import MAX_EXAMPLES, PR_BACKWARD_KEY_SLOTS, PR_COMPILE_SLOTS

ROOT = Path(__file__).resolve().parents[1]


def _count(out: Path, *extra: str) -> dict:
    """tools/count_compile_keys.py's counts of the pr profile's draws."""
    done = subprocess.run(
        [sys.executable, "tools/count_compile_keys.py", "--profile", "pr", "--json", str(out), *extra],
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
    launching = counts["launching"]
    return launching["dense_keys"] + launching["thd_keys"] + PR_BACKWARD_KEY_SLOTS * launching["backward_keys"]


def test_pr_compile_keys_stay_within_the_budget(pr_keys):
    assert _slots(pr_keys) <= PR_COMPILE_SLOTS, pr_keys["launching"]
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
    assert set(pr_draws) == set(PROFILE_TESTS["pr"]) - {
        "test_config_rejects",
        "test_prepared_rejects_before_compiling",
        "test_prepared_rejects",
        "test_wrapper_rejects",
        "test_backward_wrapper_rejects",
    }


def test_in_profile_selects_tests_and_strata():
    assert in_profile("ci", "test_metamorphic_dense", {"flavor": "qwen", "dtype": "float16"})
    assert not in_profile("pr", "test_metamorphic_dense", {"flavor": "qwen", "dtype": "float16"})
    assert not in_profile("pr", "test_large", {})
    assert in_profile("pr", "test_numerics_thd", {"flavor": "qwen", "dtype": "float16"})
    assert in_profile("pr", "test_backward_dense", {"flavor": "gptoss", "dtype": "float16"})
    assert not in_profile("pr", "test_backward_dense", {"flavor": "qwen", "dtype": "bfloat16"})
    assert all(t in FAMILIES for t in PROFILE_TESTS["pr"])


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
    from conformance import kill_rate as M

    by_name = {k.name: k for k in M.KINDS}
    assert len(M.profile_strata(by_name["numerics_dense"], FLAVORS, "pr")) == len(STRATA)
    assert M.profile_strata(by_name["backward_dense"], FLAVORS, "pr") == [("gptoss", "float16"), ("llama", "bfloat16")]
    assert M.profile_strata(next(k for k in M.KINDS if k.name.startswith("metamorphic_dense")), FLAVORS, "pr") == []
    assert M.profile_strata(next(k for k in M.KINDS if k.name.startswith("metamorphic_dense")), FLAVORS, "ci")
    with M._geometry_of("pr"):
        assert geometry.mode() == "few"
    assert geometry.mode() != "few"
