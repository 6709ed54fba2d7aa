"""Facts declare their roles (ground/case.py ``fact(direction=, compiled=,
feature=, simplest=, needs=, kernel=, distinct=)``) and the suite's fact
lists derive from the declarations: the forward-/backward-only facts, the
compile-key facts per direction, the runtime facts and their compile_reuse
variants, the kernels' degrees of freedom (feature_space.DRAWN), the
compile_distinct families, the geometry pools' feature column, the free
draws, the shrink candidates. A fact planted in a copy of the project
(declaration and realisation: two files) is picked up by every list, drawn,
placed on the pools and passes the facts, coverage and pool tests there."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

from ground import case as gc
from ground import feature_space as fs
from ground.case import FACTS, Case
from properties.compile_cache import COMPILED_FACTS, runtime_variants
from strategies import backward_cases, cases, geometry
from strategies.features import HAND_DRAWN, generic_features

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("conformance", "reports", "properties", "kernels", "strategies", "reference", "ground")
FIXED = dict(derandomize=True, database=None, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# ------------------------------------------------------------ (a) derived lists
def test_direction_lists_are_the_declared_directions():
    assert gc.BACKWARD_FACTS == tuple(n for n, f in FACTS.items() if f.direction == ("bwd",))
    assert gc.FORWARD_ONLY_FACTS == tuple(n for n, f in FACTS.items() if f.direction == ("fwd",))
    assert gc.BACKWARD_FACTS[0] == "direction" and not set(gc.BACKWARD_FACTS) & set(gc.FORWARD_ONLY_FACTS)


@pytest.mark.parametrize("name", [n for n, f in FACTS.items() if len(f.direction) == 1 and n != "direction"])
def test_a_fact_of_one_pass_is_refused_on_the_other(name):
    f = FACTS[name]
    wrong = "fwd" if f.direction == ("bwd",) else "bwd"
    problem = Case(direction=wrong).replace(**{name: f.other_values()[0]}).structural_problem()
    assert problem and f"'{name}'" in problem and ("backward-only" if wrong == "fwd" else "forward-only") in problem


def test_compiled_and_runtime_facts_are_the_declared_ones():
    for d in gc.DIRECTIONS:
        assert gc.compiled_facts(d) == tuple(n for n, f in FACTS.items() if f.compiled is True and d in f.direction)
        assert gc.feature_facts(d) == tuple(n for n, f in FACTS.items() if f.feature and d in f.direction)
    assert gc.runtime_facts() == tuple(n for n, f in FACTS.items() if f.compiled is False)
    assert {f.compiled for f in FACTS.values()} <= {True, False, None}
    assert "deterministic" in gc.compiled_facts("bwd") and "deterministic" not in gc.compiled_facts("fwd")
    assert "has_lse" in gc.compiled_facts("fwd") and "has_lse" not in gc.compiled_facts("bwd")
    assert "seed" in gc.runtime_facts() and "seed" not in gc.compiled_facts("fwd")
    with pytest.raises(ValueError, match="direction"):
        gc.compiled_facts("sideways")


def test_drawn_is_the_inverse_of_the_kernel_role():
    pairs = {(tuple(e.split(".", 1)), f.name) for f in FACTS.values() for e in f.kernel}
    assert pairs == {(key, name) for key, names in fs.DRAWN.items() for name in names}
    assert all(len(set(names)) == len(names) for names in fs.DRAWN.values())


def test_compiled_fact_rows_are_the_distinct_declarations():
    declared = [n for n, f in FACTS.items() if f.distinct]
    assert list(COMPILED_FACTS) == declared
    for name, row in COMPILED_FACTS.items():
        f = FACTS[name]
        assert f.compiled and row.source == f.distinct and dict(row.options) == {n: True for n in f.needs}


@pytest.mark.parametrize("name", list(COMPILED_FACTS))
def test_a_compiled_fact_row_gives_a_valid_case_at_another_value(name):
    """The other value (ground.case.varied) differs in the fact, is valid on
    the Cases its family draws, and changes nothing else but facts reset to
    their defaults (base-2 Stats gain their Stats output)."""
    row = COMPILED_FACTS[name]
    strategy = (backward_cases if name in gc.BACKWARD_FACTS else cases)(layouts=("dense",), **row.options)

    @settings(max_examples=30, **FIXED)
    @given(strategy)
    def check(c):
        other = row.other(c)
        assert getattr(other, name) != getattr(c, name) and other.structural_problem() is None
        changed = {n for n in FACTS if getattr(other, n) != getattr(c, n)} - {name}
        assert all(getattr(other, n) == FACTS[n].default for n in changed), changed

    check()


def test_the_pools_feature_column_is_every_forward_feature_without_a_column():
    columns = geometry._columns()
    assert set(geometry.FEATURE_DEFAULTS) == {n for n, f in FACTS.items() if f.feature and "fwd" in f.direction} - columns
    assert geometry.FEATURE_DEFAULTS == {n: FACTS[n].default for n in geometry.FEATURE_DEFAULTS}
    assert {"bias", "sinks", "lse_log2"} <= columns


def test_generic_features_are_the_features_no_code_draws_by_hand():
    assert set(HAND_DRAWN) <= {n for n, f in FACTS.items() if f.feature}
    for d in gc.DIRECTIONS:
        expect = {n for n, f in FACTS.items() if f.feature and n not in HAND_DRAWN and f.coverage == gc.AUTO}
        expect = {n for n in expect if ("fwd" in FACTS[n].direction if d == "fwd" else FACTS[n].direction == ("bwd",))}
        assert {f.name for f in generic_features(d)} == expect


@pytest.mark.parametrize("flavor,dtype", [("gptoss", "bfloat16"), ("llama", "float16")])
def test_the_shrinker_turns_every_feature_off_with_the_facts_it_needs(flavor, dtype):
    """Every forward feature off its simplest value has a candidate at its
    simplest, with the facts that need it (``needs``) at theirs too."""
    pool = [g.case(dtype) for g in geometry.dense_pool(flavor, dtype)] + [g.case(flavor, dtype) for g in geometry.thd_pool(flavor, dtype)]
    seen = set()
    for c in pool:
        candidates = list(geometry.simpler(c))
        for name in gc.feature_facts("fwd"):
            f = FACTS[name]
            if getattr(c, name) != f.simplest:
                off = c.replace(**{name: f.simplest}, **{d: FACTS[d].simplest for d in gc.dependents(name)})
                assert off in candidates or off.structural_problem() is not None, (name, c.describe())
                seen.add(name)
        assert all(c.replace(**{n: FACTS[n].simplest}) in candidates for n in gc.runtime_facts() if getattr(c, n) != FACTS[n].simplest)
    assert seen == set(gc.feature_facts("fwd"))  # every stratum's pool switches every feature on somewhere
    assert gc.dependents("sinks") == ("sink_log2", "sink_dtype", "sink_layout") and gc.dependents("sched") == ("sched_l2_mib",)


def test_runtime_variants_change_no_compile_only_fact():
    """A compile_reuse variant differs from its Case in runtime facts, or in
    facts with a runtime part (lengths, padding values, the scale's magnitude)."""
    with_runtime_part = {"q_lens", "kv_lens", "seq_q_lens", "seq_kv_lens", "scale"}
    for c in (Case(seq_q_lens=(1,), seq_kv_lens=(1,), scale=0.5), Case(layout="thd", q_lens=(3, 1), kv_lens=(2, 5))):
        for _, v in runtime_variants(c):
            changed = {n for n in FACTS if getattr(v, n) != getattr(c, n)}
            assert changed <= set(gc.runtime_facts()) | with_runtime_part, changed


def test_the_modules_whose_lists_derive_name_no_feature():
    """The lists that derive from the declarations are not spelled out again."""
    names = [n for n, f in FACTS.items() if f.feature and f.since > 1]
    for path in ("ground/feature_space.py", "ground/coverage.py", "properties/compile_cache.py", "properties/shrink.py", "conformance/test_compile.py"):
        text = (ROOT / path).read_text()
        assert [n for n in names if re.search(rf"\b{n}\b", text)] == [], path


# ------------------------------------------------------------ (b) a planted fact
# Two facts a later schema adds: a compiled forward-only feature the prepared
# entry alone takes (with a compile_distinct family), and a runtime feature.
PLANTED = """    softcap: bool = fact(
        False,
        "planted: logits soft-capped by 30 tanh(s / 30) before the softmax (TemplateParams.has_softcap)",
        adapters=("prepared",),
        since=5,
        direction=("fwd",),
        feature=True,
        kernel=("TemplateParams.has_softcap",),
        distinct="TemplateParams.has_softcap (planted)",
    )
    pdl: bool = fact(False, "planted: programmatic dependent launch (a launch attribute)", since=5, compiled=False, feature=True)
"""
REALISED = '''

def softcap_of(case: Case):
    """planted: the cap the adapter hands the kernel and the reference applies."""
    return 30.0 if case.softcap else None


def launch_attributes(case: Case) -> dict:
    """planted: the launch attributes of a Case."""
    return {"programmatic_dependent_launch": case.pdl}
'''
# Run in the copy: every list, draw, pool and candidate named in the module doc.
PROBE = r"""
import json
from hypothesis import HealthCheck, find, settings
from ground import case as gc, coverage, feature_space as fs
from ground.case import FACTS, Case, facts_markdown
from ground.contracts import broken_rules
from ground.tables import STRATA
from properties.compile_cache import COMPILED_FACTS, runtime_variants
from properties.matrix import FAMILIES
from strategies import backward_cases, cases, geometry
from strategies.features import generic_features
import conformance.test_compile as bound

quick = settings(database=None, derandomize=True, max_examples=400, suppress_health_check=list(HealthCheck))
pools = {f"{f}/{d}": [g.case(d) for g in geometry.dense_pool(f, d)] + [g.case(f, d) for g in geometry.thd_pool(f, d)] for f, d in STRATA}
out = {
    "schema": gc.SCHEMA_VERSION,
    "forward_only": "softcap" in gc.FORWARD_ONLY_FACTS and "pdl" not in gc.FORWARD_ONLY_FACTS,
    "compiled_fwd": "softcap" in gc.compiled_facts("fwd") and "pdl" not in gc.compiled_facts("fwd"),
    "compiled_bwd": "softcap" not in gc.compiled_facts("bwd"),
    "runtime": "pdl" in gc.runtime_facts(),
    "drawn": fs.DRAWN.get(("TemplateParams", "has_softcap")) == ("softcap",),
    "required": {"softcap:no", "softcap:yes", "pdl:no", "pdl:yes"} <= coverage.REQUIRED,
    "markdown": "`softcap`" in facts_markdown() and "`pdl`" in facts_markdown(),
    "compiled_family": "softcap" in COMPILED_FACTS and "test_softcap_compiles_its_own_kernel" in FAMILIES
    and hasattr(bound, "test_softcap_compiles_its_own_kernel"),
    "runtime_variant": "new pdl" in dict(runtime_variants(Case())),
    "generic": [f.name for f in generic_features("fwd")],
    "pool_column": {"softcap", "pdl"} <= set(geometry.FEATURE_DEFAULTS),
    "pools_valid": all(c.structural_problem() is None and not broken_rules(c) for p in pools.values() for c in p),
    "pools_place": all(any(c.softcap for c in p) and any(c.pdl for c in p) for p in pools.values()),
    "row0_plain": all(not (p[0].softcap or p[0].pdl) for p in pools.values()),
    "free_draws": bool(find(cases(geometry="free"), lambda c: c.softcap and c.pdl, settings=quick)),
    "pool_draws": all(find(cases(geometry="pool"), lambda c: getattr(c, n), settings=quick) for n in ("softcap", "pdl")),
    "backward_keeps_default": not find(backward_cases(), lambda c: True, settings=quick).softcap,
    "shrinks": {Case(pdl=True), Case(softcap=True)} <= set(geometry.simpler(Case(softcap=True, pdl=True))),
    "refused_on_bwd": "'softcap'" in (Case(direction="bwd", softcap=True).structural_problem() or ""),
    "unexpressible": "'softcap'" in (Case(softcap=True).unexpressible("wrapper") or ""),
    "describe": "softcap" in Case(softcap=True).describe(),
    "old_files_read": Case.from_dict({k: v for k, v in Case().to_dict().items() if FACTS[k].since <= 4}, 4) == Case(),
}
print("PROBE " + json.dumps(out))
"""


def _plant(root: Path) -> list:
    """Add the planted facts to the copy at ``root``: the declaration (with the
    schema bump) and its realisation, nothing else. Returns the files touched."""
    case_py = root / "ground" / "case.py"
    text = case_py.read_text()
    text = re.sub(r"^SCHEMA_VERSION = 4$", "SCHEMA_VERSION = 5", text, count=1, flags=re.M)
    anchor = "    scale: Optional[float] = fact("
    assert text.count(anchor) == 1
    case_py.write_text(text.replace(anchor, PLANTED + anchor))
    data_py = root / "ground" / "data.py"
    data_py.write_text(data_py.read_text() + REALISED)
    return [case_py, data_py]


def _sources(root: Path) -> dict:
    return {p.relative_to(root).as_posix(): p.read_bytes() for pkg in PACKAGES for p in (root / pkg).rglob("*.py") if "__pycache__" not in p.parts}


def _naming(root: Path, name: str) -> list:
    """The source files (outside tests/ and docs/) that name ``name``."""
    return sorted(p for p, text in _sources(root).items() if re.search(rf"\b{name}\b", text.decode()))


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    root = tmp_path_factory.mktemp("planted")
    for name in PACKAGES + ("tests",):
        shutil.copytree(ROOT / name, root / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for name in ("pyproject.toml", "conftest.py", "known_findings.toml"):
        shutil.copy(ROOT / name, root / name)
    shutil.copytree(ROOT / "findings", root / "findings")
    before = _sources(root)
    touched = _plant(root)
    return root, before, touched


def _run(root: Path, *args, timeout=600) -> subprocess.CompletedProcess:
    env = {"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin", "HOME": str(root), "SDPA_GEOMETRY": ""}
    return subprocess.run([sys.executable, *args], cwd=root, capture_output=True, text=True, timeout=timeout, env=env)


def test_a_planted_fact_touches_two_files(planted):
    root, before, touched = planted
    changed = sorted(p for p, text in _sources(root).items() if before.get(p) != text)
    assert changed == ["ground/case.py", "ground/data.py"] == sorted(p.relative_to(root).as_posix() for p in touched)
    for name in ("softcap", "pdl"):
        assert len(_naming(root, name)) <= 4 and _naming(root, name) == ["ground/case.py", "ground/data.py"], name


def test_every_list_picks_the_planted_fact_up(planted):
    root, _, _ = planted
    done = _run(root, "-c", PROBE)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    probe = json.loads(next(line for line in done.stdout.splitlines() if line.startswith("PROBE "))[len("PROBE ") :])
    assert probe.pop("schema") == 5 and probe.pop("generic") == ["softcap", "pdl"]
    assert [k for k, ok in probe.items() if not ok] == []


def test_the_suites_own_tests_pass_with_the_planted_fact(planted):
    """The facts tests (round trip, adapters' refusal, coverage axes), the
    pools' coverage of every feature per stratum and the free and pooled
    draws' coverage of every required value, in the copy, untouched."""
    root, _, _ = planted
    tests = [
        "tests/test_facts.py",
        "tests/test_geometry.py::test_each_stratum_pool_covers_every_feature",
        "tests/test_geometry.py::test_pools_are_valid_and_simplest_first",
        "tests/test_strategies.py::test_every_feature_is_exercised",
    ]
    done = _run(root, "-m", "pytest", "-v", "-p", "no:cacheprovider", "-p", "no:xdist", f"--report-dir={root / 'report'}", *tests, timeout=900)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    for planted_id in ("test_a_case_file_missing_any_fact_is_refused_naming_it[softcap]", "test_adapters_refuse_what_they_cannot_express[softcap]"):
        assert f"{planted_id} PASSED" in done.stdout, planted_id
