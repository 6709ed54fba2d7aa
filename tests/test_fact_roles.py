"""Facts declare their roles (ground/case.py ``fact(direction=, compiled=,
feature=, simplest=, needs=, kernel=, distinct=, no_variant=)``) and the suite's fact
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
from hypothesis import strategies as st

from ground import case as gc
from ground import feature_space as fs
from ground.case import FACTS, Case
from properties.compile_cache import COMPILED_FACTS, runtime_variants
from strategies import geometry
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


def test_compiled_fact_rows_derive_from_the_declarations():
    """Every fact whose declaration says it changes the specialization
    (compiled, or realised by a TemplateParams field or a compile host
    argument) has a compile_distinct row, never a list: a family per pass it
    applies to, or the declared reason it has none (Fact.no_variant). A
    fact realised by a host argument is checked on that host's layout."""
    from ground import pairs
    from properties.compile_cache import specializes, specializing_facts

    assert set(COMPILED_FACTS) == {n for n, f in FACTS.items() if specializes(f)}
    for d in gc.DIRECTIONS:
        assert set(gc.compiled_facts(d)) <= set(specializing_facts(d))
    for name, row in COMPILED_FACTS.items():
        f = FACTS[name]
        excluded = dict(f.no_variant)
        assert row.excluded == f.no_variant and all(excluded.values())
        assert {d for d, _ in row.places} | set(excluded) == set(f.direction), name  # no pass left without a family or a reason
        assert not {d for d, _ in row.places} & set(excluded), name
        assert name in pairs.STRATUM_FACTS or all(name in pairs.compiled_facts(d, x) for d, x in row.places), name  # where its key reaches
        assert row.source and (f.distinct is None or row.source == f.distinct), name
    # The reasons the kernels compile them in, where declared, stay the families' doc.
    assert COMPILED_FACTS["dbias_dtype"].source.startswith("compile_host bakes the dBias dtype in")
    assert COMPILED_FACTS["lse_log2"].places == (("fwd", "dense"),) and COMPILED_FACTS["deterministic"].places == (("bwd", "dense"),)
    # Numeric compile-time facts: the left window is a constexpr of both hosts, the right band of the dense one only.
    assert COMPILED_FACTS["window_left"].places == (("fwd", "dense"), ("fwd", "thd"), ("bwd", "dense"), ("bwd", "thd"))
    assert COMPILED_FACTS["window_right"].places == (("fwd", "dense"), ("bwd", "dense"))
    assert COMPILED_FACTS["prefix_dtype"].places == (("fwd", "thd"),) and COMPILED_FACTS["layout"].places == ()


PLACES = [(name, d, x) for name, row in COMPILED_FACTS.items() for d, x in row.places]


@pytest.mark.parametrize("name,direction,layout", PLACES, ids=[f"{n}-{d}-{x}" for n, d, x in PLACES])
def test_every_compile_distinct_family_draws_cases_with_a_variant(name, direction, layout):
    """The Cases a family draws give a variant (properties.compile_cache.distinct_pair)
    often enough: valid, the fact alone changed from its base (THD length lists in
    step), specialized differently; the base is the drawn Case with at most the
    facts the fact needs switched on and, for a numeric fact, itself moved off
    its default. Nothing is compiled."""
    from properties.compile_cache import distinct_pair, serves, specialization
    from properties.matrix import _distinct_cases

    found = []

    @settings(max_examples=20, **FIXED)
    @given(_distinct_cases(direction, layout))
    def check(c):
        base, other, _ = distinct_pair(c, name)
        if other is None:
            return
        found.append(other)
        assert serves(base) and serves(other) and specialization(base) != specialization(other)
        assert getattr(other, name) != getattr(base, name)
        changed = {n for n in FACTS if getattr(other, n) != getattr(base, n)} - {name}
        assert all(FACTS[n].type == FACTS[name].type for n in changed), changed  # lists in step only
        moved = {n for n in FACTS if getattr(base, n) != getattr(c, n)} - {name}
        assert moved <= set(FACTS[name].needs), moved

    check()
    assert found, f"no drawn {direction} {layout} Case has a variant in {name}"


@pytest.mark.parametrize("name,direction", [(n, d) for n, f in FACTS.items() for d, _ in f.no_variant])
def test_a_declared_exclusion_has_no_variant(name, direction):
    """Fact.no_variant is true of the Cases: the family the pass would get
    (its layouts) draws no Case with a valid variant in the fact alone that
    the suite specializes differently."""
    from properties.compile_cache import _layouts, distinct_pair
    from properties.matrix import _distinct_cases

    @settings(max_examples=20, **FIXED)
    @given(st.sampled_from(_layouts(FACTS[name])).flatmap(lambda x: _distinct_cases(direction, x)))
    def check(c):
        assert distinct_pair(c, name)[1] is None, c.describe()

    check()


def test_a_planted_compiled_fact_gets_its_families(monkeypatch):
    """Declarations planted in place (no ``distinct=``): a forward feature a
    TemplateParams field realises, a THD host argument, a backward fact with
    no kernel entry and one declared without a variant each get their rows
    and families (one parameter per place) from the declarations alone."""
    from properties import compile_cache
    from properties.matrix import distinct_families

    planted = {
        "softcap": gc.Fact("softcap", bool, False, "planted", direction=("fwd",), feature=True, kernel=("TemplateParams.has_softcap",)),
        "thd_tiles": gc.Fact("thd_tiles", int, 1, "planted", minimum=1, kernel=("compile_thd_host.tiles",)),
        "relay": gc.Fact("relay", bool, False, "planted", direction=("bwd",)),
        "pinned": gc.Fact("pinned", bool, False, "planted", kernel=("TemplateParams.pinned",), no_variant=(("fwd", "planted"), ("bwd", "planted"))),
        "pdl": gc.Fact("pdl", bool, False, "planted", compiled=False),
    }
    monkeypatch.setattr(compile_cache, "FACTS", {**FACTS, **planted})
    rows = compile_cache.compiled_fact_rows()
    assert "pdl" not in rows and set(planted) - {"pdl"} <= set(rows)
    assert rows["softcap"].places == (("fwd", "dense"),) and rows["softcap"].source == "TemplateParams.has_softcap"
    assert rows["thd_tiles"].places == (("fwd", "thd"), ("bwd", "thd"))
    assert rows["relay"].places == (("bwd", "dense"),) and rows["pinned"].places == () and rows["pinned"].excluded == planted["pinned"].no_variant
    assert "softcap" in compile_cache.specializing_facts("fwd") and "softcap" not in compile_cache.specializing_facts("bwd")
    families = {fam.test: fam for fam in distinct_families(rows)}
    assert "test_pinned_compiles_its_own_kernel" not in families
    for name in ("softcap", "thd_tiles", "relay"):
        fam = families[f"test_{name}_compiles_its_own_kernel"]
        assert fam.property == "compile_distinct" and fam.params == {"fact": name} and fam.examples == "compile_distinct"
        assert [pid for _, pid in fam.parameters()] == [f"{d}-{x}" for d, x in rows[name].places]
    assert set(families) - {f"test_{n}_compiles_its_own_kernel" for n in planted} == {
        f"test_{n}_compiles_its_own_kernel" for n, row in COMPILED_FACTS.items() if row.places
    }


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
# entry alone takes (its compile_distinct family derived from its kernel entry:
# no ``distinct=``), and a runtime feature.
PLANTED = """    softcap: bool = fact(
        False,
        "planted: logits soft-capped by 30 tanh(s / 30) before the softmax (TemplateParams.has_softcap)",
        adapters=("prepared",),
        since=6,
        direction=("fwd",),
        feature=True,
        kernel=("TemplateParams.has_softcap",),
    )
    pdl: bool = fact(False, "planted: programmatic dependent launch (a launch attribute)", since=6, compiled=False, feature=True)
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
    "old_files_read": Case.from_dict({k: v for k, v in Case().to_dict().items() if FACTS[k].since <= 5}, 5) == Case(),
}
print("PROBE " + json.dumps(out))
"""


def _plant(root: Path) -> list:
    """Add the planted facts to the copy at ``root``: the declaration (with the
    schema bump) and its realisation, nothing else. Returns the files touched."""
    case_py = root / "ground" / "case.py"
    text = case_py.read_text()
    text, bumped = re.subn(r"^SCHEMA_VERSION = 5$", "SCHEMA_VERSION = 6", text, count=1, flags=re.M)
    assert bumped == 1, "the plant bumps the current schema: update it with SCHEMA_VERSION"
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
    assert probe.pop("schema") == 6 and probe.pop("generic") == ["softcap", "pdl"]
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
