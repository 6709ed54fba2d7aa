"""Entry points per kernel family: ``kernels.get_adapter(name, family=...)``
gives each family's own adapter for the same entry-point names, a failing
example's case file records the entry point the test drove (an sm90 fixture
included) and its family's mode, and repro / the finding replays rebuild that
adapter from the file. Runs on any machine (nothing launches)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

import kernels
from conformance.plugin import _adapter_used
from ground.case import Case
from ground.families import FAMILY_NAMES
from ground.tables import ADAPTERS
from reports import casefile

CLASSES = {
    ("sm80", "prepared"): "PreparedAdapter",
    ("sm80", "wrapper"): "WrapperAdapter",
    ("sm90", "prepared"): "Sm90Adapter",
    ("sm90", "wrapper"): "Sm90WrapperAdapter",
}


@pytest.mark.parametrize("family", FAMILY_NAMES)
@pytest.mark.parametrize("name", sorted(ADAPTERS))
def test_every_family_serves_every_entry_point_name(family, name):
    adapter = kernels.get_adapter(name, family=family)
    assert type(adapter).__name__ == CLASSES[family, name]
    assert getattr(adapter, "entry", adapter.name) == name  # what a case file records


def test_a_native_family_ignores_the_compat_option_and_an_unknown_family_is_refused():
    assert type(kernels.get_adapter("wrapper", family="sm90", sm80_compat=True)).__name__ == "Sm90WrapperAdapter"
    with pytest.raises(ValueError, match="unknown kernel family 'sm100'"):
        kernels.get_adapter("prepared", family="sm100")


def test_the_case_file_names_the_entry_point_an_sm90_fixture_drove():
    run = SimpleNamespace(adapter="prepared", sm80_compat=False)
    wrapper = kernels.get_adapter("wrapper", family="sm90")
    item = SimpleNamespace(funcargs={"entry": (wrapper, lambda c: c), "case": Case(family="sm90")})
    assert _adapter_used(item, run) == {"adapter": "wrapper", "sm80_compat": False}
    assert _adapter_used(SimpleNamespace(funcargs={"sm90": kernels.get_adapter("prepared", family="sm90")}), run)["adapter"] == "prepared"
    assert _adapter_used(SimpleNamespace(funcargs={}), SimpleNamespace(adapter="wrapper", sm80_compat=True)) == {"adapter": "wrapper", "sm80_compat": True}


def test_a_case_file_records_its_own_familys_mode(tmp_path):
    env = {"mode": "sm80 code on sm_90", "family_modes": {"sm90": "native sm90"}, "adapter": "prepared"}
    modes = {}
    for family in FAMILY_NAMES:
        path = casefile.write(tmp_path, property="tails", case=Case(family=family).to_dict(), params={}, summary="x", environment=env)
        modes[family] = json.loads(path.read_text())["mode"]
    assert modes == {"sm80": "sm80 code on sm_90", "sm90": "native sm90"}


def _marks(obj) -> list:
    marks = getattr(obj, "pytestmark", [])
    return [m.name for m in (marks if isinstance(marks, list) else [marks])]


def test_every_property_test_carries_its_property():
    """A known finding's status counts the examples of property-marked tests only
    (ground.findings.property_test_observations): an unmarked property test could
    neither reproduce a finding nor leave it stale. The H200 gate showed it: the
    sm90 tails examples were excused while their finding read 'not exercised'."""
    import glob
    import importlib
    import pathlib

    root = pathlib.Path(__file__).resolve().parents[1]
    unmarked = []
    for path in sorted(glob.glob(str(root / "conformance" / "test_*.py"))):
        module = importlib.import_module("conformance." + pathlib.Path(path).stem)
        for name in dir(module):
            fn = getattr(module, name)
            if name.startswith("test") and hasattr(fn, "hypothesis") and "property" not in _marks(fn) + _marks(module):
                unmarked.append(f"{pathlib.Path(path).name}::{name}")
    assert unmarked == []


def test_a_profile_table_names_another_familys_tests_by_their_parameters():
    """pr's table (properties.matrix.PROFILE_TESTS) selects the sm90 family's
    tests as it does the matrix's: by name, and by parameter value (its
    compile entry, not the public wrapper's); a table-less profile runs all."""
    from properties.matrix import in_profile

    assert in_profile("pr", "test_sm90_tails_dense", {"entry": "compile"}) and in_profile("pr", "test_numerics_dense", {})
    assert not in_profile("pr", "test_sm90_tails_dense", {"entry": "wrapper"}) and not in_profile(
        "pr", "test_sm90_metamorphic", {"layout": "dense", "relation": "head_perm"}
    )
    assert in_profile("ci", "test_sm90_tails_dense", {"entry": "wrapper"}) and in_profile(
        "ci", "test_sm90_metamorphic", {"layout": "dense", "relation": "head_perm"}
    )
    assert not in_profile("pr", "test_metamorphic_dense", {"flavor": "gptoss", "dtype": "float16", "relation": "batch_perm"})
