"""The kernel families table (ground.families) against the installed wheel:
every path it names imports, the sm90 envelope is config_sm90's and the
planner's, and a planted wrong entry is caught (``problems``)."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import pathlib
import re

import cudnn
import pytest

from ground.families import DEFAULT_FAMILY, FAMILIES, FAMILY_NAMES, KernelFamily, family

KERNELS = pathlib.Path(cudnn.__file__).parent / "sdpa" / "fwd" / "kernels"
SITE = pathlib.Path(cudnn.__file__).parent.parent
SOURCE_LINE = re.compile(r"(cudnn/[\w/]+\.py):(\d+)")


def resolve(dotted: str):
    """The object a dotted path names: the longest importable module prefix, then attributes."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            obj = getattr(obj, name)
        return obj
    raise ImportError(dotted)


def entry_paths(entry: str):
    """The dotted paths a compile_entry text names: "mod.fn", "mod.fn / other"
    (``other`` in mod), "mod.fn (sibling.fn)" (``sibling`` a module next to mod)."""
    head, _, rest = entry.partition(" ")
    module, package = head.rsplit(".", 1)[0], head.rsplit(".", 2)[0]
    out = [head]
    out += [f"{module}.{name}" for name in re.findall(r"/ (\w+)", rest)]
    out += [f"{package}.{name}" for name in re.findall(r"\(([\w.]+)\)", rest)]
    return out


def problems(fam: KernelFamily) -> list:
    """What is wrong with ``fam`` against the installed kernels (empty: consistent)."""
    out = []
    for t in fam.templates:
        if not (KERNELS / t).is_file():
            out.append(f"template {t}: no such file under {KERNELS}")
    for what, path in [("params", fam.params), ("planner", fam.planner), ("wrapper", fam.wrapper)] + [
        ("compile_entry", p) for p in entry_paths(fam.compile_entry)
    ]:
        try:
            obj = resolve(path)
        except (ImportError, AttributeError) as e:
            out.append(f"{what} {path}: does not import ({e})")
            continue
        if what == "params" and not dataclasses.is_dataclass(obj):
            out.append(f"params {path}: not a dataclass")
    for reason in fam.absent.values():
        for path, line in SOURCE_LINE.findall(reason):
            lines = (SITE / path).read_text().count("\n") + 1 if (SITE / path).is_file() else 0
            if lines < int(line):
                out.append(f"absent reason cites {path}:{line}: the file has {lines} lines")
    if fam.name == "sm90" and not out:  # the envelope checks read what the paths name
        out += sm90_problems(fam)
    return out


def sm90_problems(fam: KernelFamily) -> list:
    """The sm90 row against config_sm90 and the template's compile()."""
    from cudnn.frost.tile_dsl import constants
    from cudnn.sdpa.fwd import config_sm90

    out = []
    if fam.head_dims != (config_sm90.D_ALIGN, config_sm90.D_TILE):
        out.append(f"head_dims {fam.head_dims} != (D_ALIGN, D_TILE) {(config_sm90.D_ALIGN, config_sm90.D_TILE)}")
    if fam.tile != (config_sm90.TILE_M, config_sm90.TILE_N):
        out.append(f"tile {fam.tile} != (TILE_M, TILE_N) {(config_sm90.TILE_M, config_sm90.TILE_N)}")
    if fam.pack_gqa_tile != config_sm90.TILE_M:
        out.append(f"pack_gqa_tile {fam.pack_gqa_tile} != TILE_M {config_sm90.TILE_M}")
    served = inspect.signature(resolve(entry_paths(fam.compile_entry)[0])).parameters["target"].default
    if fam.arch != served:
        out.append(f"arch {fam.arch} != the template compile()'s target {served}")
    fields = {f.name for f in dataclasses.fields(resolve(fam.params))}
    for fact, word in (("bias", "bias"), ("rope", "rope")):
        if fact in fam.absent and any(word in f for f in fields):
            out.append(f"absent {fact}: TemplateParams has a {word} field")
    if "pack_gqa" in fam.absent or fam.pack_gqa_tile is None or "pack_gqa" not in fields:
        out.append("sm90 PackGQA: TemplateParams.pack_gqa is a field, the family must serve it")
    codes = {"float16": constants.DTYPE_FP16, "bfloat16": constants.DTYPE_BF16}
    for dtype in fam.dtypes:
        try:
            config_sm90.validate_params(config_sm90.TemplateParams(dtype_qkv=codes[dtype]))
        except (KeyError, ValueError) as e:
            out.append(f"dtype {dtype}: not a dtype validate_params takes ({e})")
    return out


@pytest.mark.parametrize("name", FAMILY_NAMES)
def test_family_is_consistent_with_the_installed_kernels(name):
    assert problems(FAMILIES[name]) == []


def test_the_family_names_are_the_table():
    assert FAMILY_NAMES == tuple(FAMILIES) and DEFAULT_FAMILY in FAMILIES
    assert all(FAMILIES[n].name == n for n in FAMILY_NAMES)
    with pytest.raises(ValueError, match="unknown"):
        family("sm70")


def test_sm90_head_dims_are_the_templates_envelope():
    """serves_head_dims agrees with config_sm90.head_dims_mismatch (what the planner and compile() ask) on every D up to past the tile."""
    from cudnn.sdpa.fwd import config_sm90

    fam = FAMILIES["sm90"]
    dims = range(0, config_sm90.D_TILE + 17)
    assert [fam.serves_head_dims(d, 64) for d in dims] == [config_sm90.head_dims_mismatch(d, 64) is None for d in dims]
    assert [fam.serves_head_dims(64, d) for d in dims] == [config_sm90.head_dims_mismatch(64, d) is None for d in dims]
    assert fam.serves_head_dims(192, 128) and fam.serves_head_dims(40, 512)  # D_QK != D_V served


def test_sm90_pack_gqa_ratios_are_what_validate_params_takes():
    from cudnn.sdpa.fwd import config_sm90

    def takes(g):
        try:
            config_sm90.validate_params(config_sm90.TemplateParams(pack_gqa=True, qh_per_kh=g))
        except ValueError:
            return False
        return True

    assert FAMILIES["sm90"].pack_gqa_ratios() == tuple(g for g in range(1, 65) if takes(g))
    assert FAMILIES["sm80"].pack_gqa_ratios() == ()


def test_sm90_schedulers_are_the_planners():
    """Every Case scheduler of the family maps to a policy validate_params takes ("auto": the planner's pick)."""
    from cudnn.frost.tile_dsl import constants

    from kernels.sm90.specialize import SCHED_POLICY

    assert set(SCHED_POLICY) == set(FAMILIES["sm90"].schedulers)
    assert {v for v in SCHED_POLICY.values() if v is not None} == {constants.SCHED_NATURAL, constants.SCHED_LPT, constants.SCHED_LPT_L2}


def test_sm80_has_no_pack_gqa_field():
    from cudnn.sdpa.fwd import config_sm80, config_sm90

    assert "pack_gqa" in FAMILIES["sm80"].absent
    assert "pack_gqa" not in {f.name for f in dataclasses.fields(config_sm80.TemplateParams)}
    assert "pack_gqa" in {f.name for f in dataclasses.fields(config_sm90.TemplateParams)}


PLANTED = {
    "tile": dict(tile=(128, 64)),
    "head dims": dict(head_dims=(8, 256)),
    "pack tile": dict(pack_gqa_tile=128),
    "arch": dict(arch="sm_90"),
    "params path": dict(params="cudnn.sdpa.fwd.config_sm90.TemplateParamz"),
    "planner path": dict(planner="cudnn.sdpa.fwd.api_dsl.SdpaFwdDslSm91"),
    "compile entry": dict(compile_entry="cudnn.sdpa.fwd.kernels.sm90.prefill_d512_f16.compile (prepared_host.compile_hosts)"),
    "template": dict(templates=("sm90/prefill_d1024_f16.py",)),
    "dtype": dict(dtypes=("float16", "float8_e4m3")),
    "absent bias": dict(absent={"pack_gqa": "planted"}),
    "cited line": dict(absent={"bias": "cudnn/sdpa/fwd/config_sm90.py:99999"}),
}


@pytest.mark.parametrize("what", sorted(PLANTED))
def test_a_planted_wrong_entry_fails(what):
    assert problems(dataclasses.replace(FAMILIES["sm90"], **PLANTED[what])) != []
