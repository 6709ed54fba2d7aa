"""The sm90 family's mutants (kernels/mutants_sm90.py) on the CPU: the
catalogue is well formed, every rewrite matches its installed file exactly
once, every probe is a Case the planner accepts, and (compile tier) every
mutant's probe compiles for sm_90a through ``Sm90Adapter(rewrites)`` (the path
a run takes: ``kernels.source.sm90_sources``) into a kernel (device PTX,
host IR) that differs from the pristine one: a mutant whose rewrite never
reaches the probe's kernel fails. One compile per mutant plus one pristine compile per probe."""

from __future__ import annotations

import re
from contextlib import contextmanager
from pathlib import Path

import pytest

from conformance.kill import kinds as K
from conformance.kill_sm90 import PENDING
from ground.case import Case
from kernels import mutants as catalogue
from kernels import mutants_sm90
from kernels.mutants import CATALOGUE, MUTANTS, SM90_MUTANTS
from kernels.source import SM90_TARGETS, TARGETS, Rewrite, check_rewrites, package_root, sm90_template_file

# What the sm90 catalogue must keep covering.
REQUIRED_SM90_CLASSES = (
    "bottom_right",
    "causal_diagonal",
    "sliding_window",
    "right_band",
    "pack_gqa",
    "scheduler",
    "lse_units",
    "lse_layout",
    "sink_units",
    "cu_seqlens",
    "head_dim_tail",
    "large_offsets",
    "length_clamp",
)
DOC = Path(__file__).resolve().parents[1] / "docs" / "mutants.md"


def test_sm90_catalogue_is_well_formed():
    from kernels.sm90.specialize import specialize

    names = [m.name for m in CATALOGUE]
    assert len(SM90_MUTANTS) >= 10 and len(names) == len(set(names))
    assert all(m.family == "sm90" for m in SM90_MUTANTS) and all(m.family == "sm80" for m in MUTANTS)
    assert set(REQUIRED_SM90_CLASSES) <= {m.bug_class for m in SM90_MUTANTS} <= set(catalogue.BUG_CLASSES)
    for m in SM90_MUTANTS:
        assert m.rewrites and m.why.strip() and m.scope.strip() and (m.expected_killer in K.KIND_NAMES or m.expected_killer in PENDING), m.name
        assert m.expected_killer.startswith("sm90_"), m.name  # an sm90 kind: the SM80 kinds never run the sm90 kernels
        assert set(m.targets) <= set(SM90_TARGETS) and all(rw.pattern != rw.replacement for rw in m.rewrites), m.name
        probe = Case(**m.probe)
        assert probe.family == "sm90" and probe.structural_problem() is None, m.name
        specialize(probe)  # the planner accepts it (raises what it refuses)


def test_sm90_mutants_are_not_planted_in_the_sm80_adapters():
    with pytest.raises(ValueError, match="an sm90 mutant"):
        catalogue.by_name(SM90_MUTANTS[0].name)


@pytest.mark.parametrize("mutant", SM90_MUTANTS, ids=lambda m: m.name)
def test_every_sm90_rewrite_applies_exactly_once(mutant):
    check_rewrites(mutant.rewrites)
    # The loadable template: the rewrites, plus the import of each rewritten sibling.
    text = sm90_template_file(mutant.rewrites).read_text(encoding="utf-8")
    for target in set(mutant.targets) - {"sm90"}:
        assert f"._rewritten_{target}_" in text, target


def _line(mutant) -> str:
    """file:line of the mutant's first rewrite in the installed source."""
    rw = mutant.rewrites[0]
    text = (package_root() / TARGETS[rw.target]).read_text(encoding="utf-8")
    at = text.index(rw.pattern) + len(rw.pattern) - len(rw.pattern.lstrip())
    return f"{Path(TARGETS[rw.target]).name}:{text.count(chr(10), 0, at) + 1}"


def test_the_doc_table_names_every_sm90_mutant_where_it_is():
    rows = {r[0]: r for r in (tuple(c.strip(" `") for c in line.strip("|").split("|")) for line in DOC.read_text().splitlines() if line.startswith("| `sm90_"))}
    assert set(rows) == {m.name for m in SM90_MUTANTS}
    for m in SM90_MUTANTS:
        assert rows[m.name][1:4] == (m.bug_class, _line(m), m.expected_killer), rows[m.name]


# ------------------------------------------------------------ compile tier
# The name of the template module a kernel was loaded as (cudnn.frost._templates.<tag>_<n>),
# part of the symbols of the kernel, its parameters and the host function (each cut to a
# fixed length: a longer <n> shortens its tail), and the device binary embedded in the host module.
_MODULE_NAME = re.compile(r"cudnn\.?frost\.?_templates\.?\w+?_\d+(?=[A-Z.])")
_SYMBOL = re.compile(r"\w*TEMPLATE\w*")
_BINARY = re.compile(r'@kernels_binary\("(?:[^"\\]|\\.)*"\)')


def _kernel_text(ptx: str, host_ir: str) -> str:
    """What the artifact runs, the template module's name taken out: the device
    PTX and the host module's IR (the TMA maps, the launch) without the binary."""
    text = ptx + "\n" + _BINARY.sub("@kernels_binary(...)", host_ir)
    return _SYMBOL.sub("SYMBOL", _MODULE_NAME.sub("TEMPLATE", text))


@contextmanager
def _keeping_ptx(dump_dir):
    """The DSL keeps each compile's PTX on its artifact (files in ``dump_dir``)."""
    from cutlass.cutlass_dsl import CuTeDSL

    envar = CuTeDSL._get_dsl().envar
    saved = envar.keep_ptx, envar.dump_dir
    object.__setattr__(envar, "keep_ptx", True)
    object.__setattr__(envar, "dump_dir", str(dump_dir))
    try:
        yield
    finally:
        object.__setattr__(envar, "keep_ptx", saved[0])
        object.__setattr__(envar, "dump_dir", saved[1])


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    """compile(rewrites, probe) -> (cache keys asked for, kernel text, seconds),
    through Sm90Adapter(rewrites).compile_only; pristine compiles memoized per probe."""
    import time

    from kernels.counters import asking, forget_memos
    from kernels.sm90 import adapter as sm90_adapter

    root = tmp_path_factory.mktemp("sm90-mutants")
    mp = pytest.MonkeyPatch()
    mp.setenv("CUDNN_FRONTEND_COMPILED_CACHE", str(root / "compiled"))
    artifacts = []
    real = sm90_adapter.compile_spec
    mp.setattr(sm90_adapter, "compile_spec", lambda spec: artifacts.append(real(spec)) or artifacts[-1])
    pristine = {}

    def compile_(rewrites, probe: dict):
        t0 = time.perf_counter()
        forget_memos()  # a memo would answer with an artifact compiled without its PTX
        dump = root / f"ptx{len(artifacts)}"  # the file name does not name the rewrites: one folder per compile
        dump.mkdir()
        with _keeping_ptx(dump), asking() as asked:
            sm90_adapter.Sm90Adapter(rewrites).compile_only(Case(**probe))
        ptx = artifacts[-1].artifacts.PTX  # the PTX (read back from the kept file)
        assert ptx and ".target sm_90a" in ptx, ptx[:300]
        return set(asked.keys), _kernel_text(ptx, str(artifacts[-1].ir_module)), time.perf_counter() - t0

    def control(probe: dict):
        key = repr(sorted(probe.items()))
        if key not in pristine:
            pristine[key] = compile_((), probe)
        return pristine[key]

    try:
        yield compile_, control
    finally:
        mp.undo()


def _differs(compiled, rewrites, probe):
    """(the first kernel-text lines that differ from the pristine kernel's, compile seconds)."""
    import difflib

    compile_, control = compiled
    keys, ptx, seconds = compile_(rewrites, probe)
    base_keys, base_ptx, _ = control(probe)
    assert keys and base_keys and not keys & base_keys, "a rewritten kernel must never be served a pristine artifact"
    diff = [line for line in difflib.unified_diff(base_ptx.splitlines(), ptx.splitlines(), lineterm="", n=0) if line[:1] in "+-"]
    return diff[2:8], seconds


@pytest.mark.compile
@pytest.mark.parametrize("mutant", SM90_MUTANTS, ids=lambda m: m.name)
def test_sm90_mutant_compiles_into_another_kernel(mutant, compiled):
    changed, seconds = _differs(compiled, mutant.rewrites, mutant.probe)
    assert changed, f"{mutant.name}: its probe's sm_90a kernel is the pristine one (the rewrite does not reach it)"
    print(f"{mutant.name}: {seconds:.2f} s")


# Rewrites that change no kernel of the MASK probe: comments of the template and the host,
# and a real bug in a path MASK's TemplateParams compile out (it has no sinks).
UNCHANGED = {
    "comments": (
        Rewrite("sm90", "# Dense device lengths are clamped", "# dense device lengths are clamped"),
        Rewrite("sm90_host", '"""Map binder BSH strides', '"""map binder BSH strides'),
    ),
    "unreached": {m.name: m for m in SM90_MUTANTS}["sm90_sink_as_log2_logit"].rewrites,
}


@pytest.mark.compile
@pytest.mark.parametrize("name", UNCHANGED)
def test_a_rewrite_that_changes_no_kernel_is_found(name, compiled):
    """The check's power: each of these changes the compile key but not the
    kernel, so a mutant made of it would fail the test above."""
    changed, _ = _differs(compiled, UNCHANGED[name], mutants_sm90.MASK)
    assert not changed, changed
