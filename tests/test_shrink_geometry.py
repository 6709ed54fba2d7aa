"""repro --shrink-geometry: a failure found in a geometry pool shrinks further,
over every fact, to the truly minimal case (stand-in property, CPU)."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings

from conformance import cli
from ground.case import Case, load_case_file
from ground.contracts import broken_rules
from ground.outcome import Observation, PropertyFailure
from properties.shrink import shrink_geometry
from reports import casefile
from strategies import cases, geometry

FIXED = dict(derandomize=True, database=None, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@settings(max_examples=40, **FIXED)
@given(cases(geometry="free"))
def test_simpler_cases_are_valid_and_different(c):
    from kernels.specialize import specialize

    seen = set()
    for s in geometry.simpler(c):
        assert s != c and s not in seen and s.structural_problem() is None and broken_rules(s) == ()
        seen.add(s)
        try:
            specialize(s)
        except ValueError:
            pass  # the shrinker skips what the kernels' validators refuse


def _bug(case, adapter=None, **params):
    """A stand-in property: fails on GQA/MQA with more than one KV tile."""
    if not case.is_thd and case.h_q > case.h_kv and case.s_kv > 64:
        raise PropertyFailure("toy", case, f"O wrong with {case.h_q}/{case.h_kv} heads over {case.s_kv} keys")
    return Observation("toy", case)


# A pool row of llama bf16: batch 2, GQA 8/2, q>kv, band_br, sinks, negative scale, padding on KV, off-envelope d_v.
POOLED = geometry.dense_pool("llama", "bfloat16")[17].case("bfloat16", seed=321, seq_kv_lens=(7, 0))
MINIMAL = Case(h_q=2, h_kv=1, s_q=1, s_kv=65)


def test_shrink_leaves_the_pool_for_the_minimal_case():
    with pytest.raises(PropertyFailure) as first:
        _bug(POOLED)
    heard = []
    result = shrink_geometry(_bug, POOLED, first.value, log=lambda state: heard.append(state.case))
    assert result.case == MINIMAL and result.complete and result.steps == heard and len(heard) > 3
    assert result.runs <= 300


def test_shrink_stops_at_max_runs():
    with pytest.raises(PropertyFailure) as first:
        _bug(POOLED)
    result = shrink_geometry(_bug, POOLED, first.value, max_runs=3)
    assert not result.complete and result.runs == 3 and result.case != MINIMAL


def test_repro_shrink_geometry_writes_the_minimal_case_file(tmp_path, capsys, monkeypatch):
    import kernels
    import properties

    monkeypatch.setitem(properties.PROPERTIES, "toy", properties.Property("toy", _bug, {}, cold_seconds=1.0, directions=("fwd",), doc="a stand-in property"))
    monkeypatch.setattr(kernels, "get_adapter", lambda name=None, **kw: type("A", (), {"name": "prepared"})())
    path = casefile.write(
        tmp_path,
        property="toy",
        case=POOLED.to_dict(),
        summary="was bad",
        nodeid="t.py::test_toy",
        environment={"mode": "compile-only (no GPU)", "adapter": "prepared"},
        needs_gpu=False,
    )
    assert cli.main(["repro", str(path), "--shrink-geometry"]) == 1
    out = capsys.readouterr().out
    minimal = path.with_name(path.stem + "-min.json")
    case, doc = load_case_file(minimal)
    assert case == MINIMAL and doc["shrunk_from"] == str(path) and doc["property"] == "toy"
    assert "simplest failing case" in out and str(minimal.name) in out and "dense B=1 S=1x65" in out
    assert json.loads(minimal.read_text())["repro"].endswith(minimal.name)
    # The written case replays (and, already minimal, shrinks no further).
    assert cli.main(["repro", str(minimal), "--shrink-geometry"]) == 1
    assert "already minimal" in capsys.readouterr().out
