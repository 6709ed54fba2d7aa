"""Every degree of freedom of the SM80 forward kernels is drawn or declared
out of scope (ground.feature_space): the names come from the
kernels' own objects, so a field or argument added upstream fails here."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from ground import feature_space as fs
from ground.coverage import AXES, REQUIRED


def _template_params():
    from cudnn.sdpa.fwd.config_sm80 import TemplateParams

    return TemplateParams


def _functions():
    from cudnn.sdpa.fwd import sdpa_fwd_wrapper_sm80
    from cudnn.sdpa.fwd.kernels.sm80 import prepared_host

    # compile_thd_host is lru_cached: its signature is the wrapped function's.
    return {"wrapper": sdpa_fwd_wrapper_sm80, "compile_host": prepared_host.compile_host, "compile_thd_host": prepared_host.compile_thd_host}


def degrees_of_freedom(params_cls=None, functions=None) -> dict:
    """source -> names, read off the kernels' objects (dataclass fields, signatures)."""
    params_cls = params_cls or _template_params()
    out = {"TemplateParams": [f.name for f in dataclasses.fields(params_cls)]}
    for source, fn in (functions or _functions()).items():
        out[source] = list(inspect.signature(inspect.unwrap(fn)).parameters)
    return out


def unaccounted(params_cls=None, functions=None) -> list:
    return [f"{src}.{n}" for src, names in degrees_of_freedom(params_cls, functions).items() for n in fs.unaccounted(src, names)]


def test_every_field_and_argument_is_drawn_or_out_of_scope():
    assert set(degrees_of_freedom()) == set(fs.SOURCES)
    assert unaccounted() == [], "map each to the Case facts that draw it (feature_space.DRAWN) or give the reason it is out of scope (OUT_OF_SCOPE)"


def test_the_table_names_only_what_exists():
    """A stale row (a field upstream removed or renamed) fails too."""
    live = {(src, n) for src, names in degrees_of_freedom().items() for n in names}
    assert set(fs.DRAWN) - live == set()
    assert set(fs.OUT_OF_SCOPE) - live == set()


def test_a_field_added_upstream_fails(monkeypatch):
    """The power of the test above: a TemplateParams with one more field, and a
    wrapper with one more argument, are reported until the table names them."""
    base = _template_params()
    planted = dataclasses.make_dataclass("TemplateParams", [("has_dropout", bool, dataclasses.field(default=False))], bases=(base,), frozen=True)
    assert unaccounted(planted) == ["TemplateParams.has_dropout"]

    def wrapper_plus(q_tensor, k_tensor, v_tensor, softcap=None):
        raise AssertionError("never called")

    functions = {**_functions(), "wrapper": wrapper_plus}
    assert "wrapper.softcap" in unaccounted(functions=functions)
    # Declared out of scope, it passes; mapped to a fact, too.
    monkeypatch.setitem(fs.OUT_OF_SCOPE, ("TemplateParams", "has_dropout"), "planted")
    assert unaccounted(planted) == []


def test_drawn_fields_have_required_coverage():
    """Each drawn field's facts show on coverage axes whose values the
    strategies must reach (REQUIRED; tests/test_strategies.py draws them)."""
    names = {a.name for a in AXES}
    for key, axes in fs.field_axes().items():
        assert axes, f"{key}: its facts show on no coverage axis"
        assert set(axes) <= names, key
        assert any(label.split(":")[0] in axes for label in REQUIRED), key


@pytest.mark.parametrize("fact", ["has_lse", "lse_layout", "sched", "sched_l2_mib", "rope", "sink_log2", "sink_dtype", "sink_layout", "prefix_dtype"])
def test_new_features_are_required_axes(fact):
    from ground.case import FACTS

    f = FACTS[fact]
    values = ("no", "yes") if f.type is bool else tuple(map(str, f.choices))
    assert {f"{fact}:{v}" for v in values} <= REQUIRED
