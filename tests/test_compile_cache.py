"""One on-disk compiled cache per run (kernels/cache.py, the plugin's
--compile-cache), and the report's compile section: distinct keys, repeat
compiles, the compile share of example time.

What the cache does on CPU is checked too: without a device the frontend's
cache persists nothing (every compile is "bypassed"), so on a CPU-only
machine the processes of a run cannot share compiles; on a GPU they do (the
disk_reuse property, GPU)."""

from __future__ import annotations

import json
import os

import pytest

import reports
from conformance.ground.case import Case
from conformance.ground.outcome import Observation
from conformance.properties import recorder
from kernels import cache
from reports import shards

pytest_plugins = ["pytester"]

CONFTEST = """
def pytest_addhooks(pluginmanager):
    if not pluginmanager.has_plugin("sdpa_conformance"):
        import conformance.plugin
        pluginmanager.register(conformance.plugin, "sdpa_conformance")
"""

WHERE = """
import os, pytest

@pytest.mark.parametrize("i", range(6))
def test_where(i, tmp_path_factory):
    out = os.path.join(os.environ["OUT_DIR"], f"{os.environ.get('PYTEST_XDIST_WORKER', 'main')}-{i}")
    open(out, "w").write(os.environ["CUDNN_FRONTEND_COMPILED_CACHE"])
"""


def test_resolve_order(monkeypatch, tmp_path):
    for var in (cache.OPTION_ENV, cache.CACHE_ENV, "XDG_CACHE_HOME"):
        monkeypatch.delenv(var, raising=False)
    assert cache.resolve() == cache.default_dir() and cache.default_dir().parts[-2:] == ("cudnn_frontend", "compiled_plans")
    monkeypatch.setenv(cache.CACHE_ENV, str(tmp_path / "inherited"))
    assert cache.resolve() == tmp_path / "inherited"
    monkeypatch.setenv(cache.OPTION_ENV, str(tmp_path / "suite"))
    assert cache.resolve() == tmp_path / "suite"
    assert cache.resolve("rel", base=tmp_path) == tmp_path / "rel"
    previous = cache.use(tmp_path / "new")
    assert os.environ[cache.CACHE_ENV] == str(tmp_path / "new") and (tmp_path / "new").is_dir()
    cache.restore(previous)
    assert os.environ[cache.CACHE_ENV] == str(tmp_path / "inherited")


def test_every_worker_of_a_run_shares_one_cache(pytester, monkeypatch, tmp_path):
    pytest.importorskip("xdist")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(pytester.path.parent), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("OUT_DIR", str(tmp_path))
    monkeypatch.delenv(cache.CACHE_ENV, raising=False)
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_where=WHERE)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-n", "2", "--compile-cache=shared-cache")
    result.assert_outcomes(passed=6)
    seen = {p.name: p.read_text() for p in tmp_path.iterdir()}
    assert len(seen) == 6 and {n.split("-")[0] for n in seen} == {"gw0", "gw1"}
    assert set(seen.values()) == {str(pytester.path / "shared-cache")}
    assert any("compiled cache" in line and "shared-cache" in line for line in result.outlines)  # the header says where


@pytest.mark.compile
def test_without_a_device_the_cache_persists_nothing(tmp_path, monkeypatch):
    """What a CPU-only run gets: every compile bypasses the files (the
    environment manifest names no device), so nothing is shared."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("checks the CPU-only behaviour")
    from kernels import get_adapter

    monkeypatch.setenv(cache.CACHE_ENV, str(tmp_path))
    delta = get_adapter("prepared").compile_only(Case(layout="thd", q_lens=(3,), kv_lens=(2,), h_q=3, h_kv=1))
    assert delta.misses == 1
    assert not any(p.is_file() for p in tmp_path.rglob("*") if p.suffix in (".o", ".json"))


def _shard(report_dir, run, name, observations):
    previous = recorder.open_shard(str(report_dir / shards.SHARDS / run / f"{name}-1.jsonl"))
    try:
        recorder.set_test("t.py::test_x")
        for case, key, misses, seconds, compile_seconds in observations:
            recorder.begin("numerics", case)
            recorder.observe(Observation("numerics", case, compile={"misses": misses, "hits": 1 - misses, "seconds": compile_seconds},
                                         seconds=seconds, notes={"compile_key": key}))
        recorder.set_test(None)
    finally:
        recorder.close_shard(previous)


def test_report_counts_keys_repeats_and_the_compile_share(tmp_path):
    run, c = "20261203-000000-1", Case(s_q=3, s_kv=3)
    # gw0 compiles k1 and k2; gw1 loads k1 from the shared cache, then compiles k3 twice (a repeat).
    _shard(tmp_path, run, "gw0", [(c, "k1", 1, 3.0, 2.0), (c, "k1", 0, 1.0, 0.0), (c, "k2", 1, 3.0, 2.0)])
    _shard(tmp_path, run, "gw1", [(c, "k1", 0, 1.0, 0.01), (c, "k3", 1, 3.0, 2.0), (c, "k3", 1, 1.0, 0.99)])
    s, paths = reports.build(tmp_path, run)
    comp = s["compile"]
    assert (comp["keys"], comp["compiled_keys"], comp["repeat_compiles"], comp["compiles"]) == (3, 3, 1, 4)
    assert comp["share"] == pytest.approx(7.0 / 12.0)
    md = paths["md"].read_text()
    assert "share of example time" in md and "3 distinct compile keys" in md and "1 compiles of a key already compiled" in md
    assert json.loads(paths["json"].read_text())["compile"]["repeat_compiles"] == 1
    # k3's repeat: two examples of one worker (gw1)
    assert comp["repeats"]["by_class"] == {"one example, several artifacts": 0, "several workers": 0, "one worker": 1}
    assert comp["repeats"]["top"][0] | {"properties": None} == {"key": "k3", "compiles": 2, "examples": 2, "workers": 1, "properties": None, "class": "one worker"}
    assert "Repeat compiles by where they come from: one example, several artifacts 0, several workers 0, one worker 1." in md


def test_report_tells_a_race_from_an_example_with_several_artifacts(tmp_path):
    run, c = "20261203-000000-2", Case(s_q=3, s_kv=3)
    _shard(tmp_path, run, "gw0", [(c, "k1", 1, 3.0, 2.0), (c, "k2", 2, 3.0, 2.0)])
    _shard(tmp_path, run, "gw1", [(c, "k1", 1, 3.0, 2.0)])
    s, _ = reports.build(tmp_path, run)
    assert s["compile"]["repeat_compiles"] == 2
    assert s["compile"]["repeats"]["by_class"] == {"one example, several artifacts": 1, "several workers": 1, "one worker": 0}
