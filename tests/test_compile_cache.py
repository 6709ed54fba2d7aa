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
from ground.case import Case
from ground.outcome import DELIBERATE_COMPILES, Observation
from kernels import cache
from properties import recorder
from properties.compile_cache import COLD
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
    from kernels.counters import memos_forgotten

    monkeypatch.setenv(cache.CACHE_ENV, str(tmp_path))
    with memos_forgotten():  # cold memos: an earlier test of this worker may have compiled the same key
        delta = get_adapter("prepared").compile_only(Case(layout="thd", q_lens=(3,), kv_lens=(2,), h_q=3, h_kv=1))
    assert delta.misses == 1
    assert not any(p.is_file() for p in tmp_path.rglob("*") if p.suffix in (".o", ".json"))


def _shard(report_dir, run, name, observations):
    previous = recorder.open_shard(str(report_dir / shards.SHARDS / run / f"{name}-1.jsonl"))
    try:
        recorder.set_test("t.py::test_x")
        for case, key, misses, seconds, compile_seconds, *rest in observations:
            prop, notes = rest if rest else ("numerics", {"compile_key": key})
            recorder.begin(prop, case)
            recorder.observe(
                Observation(prop, case, compile={"misses": misses, "hits": int(misses == 0), "seconds": compile_seconds}, seconds=seconds, notes=notes)
            )
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
    assert (comp["keys"], comp["compiled_keys"], comp["artifacts"], comp["repeat_compiles"], comp["compiles"]) == (3, 3, 3, 1, 4)
    assert comp["share"] == pytest.approx(7.0 / 12.0)
    md = paths["md"].read_text()
    assert "share of example time" in md and "3 distinct compile keys" in md and "3 distinct artifacts" in md and "1 repeats" in md
    assert json.loads(paths["json"].read_text())["compile"]["repeat_compiles"] == 1
    # k3's repeat: two examples of one worker (gw1): a memo lost
    assert comp["repeats"]["by_class"] == {"several workers": 0, "one worker": 1}
    assert comp["repeats"]["top"][0] | {"properties": None} == {
        "key": "k3",
        "compiles": 2,
        "artifacts": 1,
        "examples": 2,
        "workers": 1,
        "properties": None,
        "class": "one worker",
    }
    assert "Repeats by cause (several workers: a race; one worker: a memo or cache entry lost): several workers 0, one worker 1." in md
    # 3 artifacts x 1.75 s per compile (7 s over 4 compiles) / 2 workers
    assert comp["floor"]["artifacts"] == 3 and comp["floor"]["seconds"] == pytest.approx(3 * 1.75 / 2)
    assert comp["keys_floor"]["seconds"] == pytest.approx(3 * 1.75 / 2) and "keys floor" in md


def test_report_tells_a_race_from_an_example_with_several_artifacts(tmp_path):
    run, c = "20261203-000000-2", Case(s_q=3, s_kv=3)
    _shard(tmp_path, run, "gw0", [(c, "k1", 1, 3.0, 2.0), (c, "k2", 2, 3.0, 2.0)])
    _shard(tmp_path, run, "gw1", [(c, "k1", 1, 3.0, 2.0)])
    s, _ = reports.build(tmp_path, run)
    comp = s["compile"]
    # k2's two compiles in one example are its artifacts (a chain), not a repeat; k1 on gw1 is a race
    assert (comp["artifacts"], comp["repeat_compiles"]) == (3, 1)
    assert comp["repeats"]["by_class"] == {"several workers": 1, "one worker": 0}
    assert comp["floor"]["artifacts"] == 3 and comp["keys_floor"]["artifacts"] == 2


def test_a_repeated_chain_counts_its_artifacts_once(tmp_path):
    # Planted: key k's chain is 3 artifacts. gw0 compiles it, loses its memo and
    # compiles all 3 again; gw1 races and compiles all 3 too. The 6 further
    # compiles are repeats (3 memo lost, 3 race), never artifacts: artifacts 3.
    run, c = "20261203-000000-3", Case(s_q=3, s_kv=3)
    _shard(tmp_path, run, "gw0", [(c, "k", 3, 4.0, 3.0), (c, "k", 3, 4.0, 3.0), (c, "k", 0, 1.0, 0.0)])
    _shard(tmp_path, run, "gw1", [(c, "k", 3, 4.0, 3.0)])
    comp = reports.build(tmp_path, run)[0]["compile"]
    assert (comp["compiles"], comp["compiled_keys"], comp["artifacts"], comp["repeat_compiles"]) == (9, 1, 3, 6)
    assert comp["repeats"]["by_class"] == {"several workers": 3, "one worker": 3}
    assert comp["repeats"]["top"][0]["artifacts"] == 3 and comp["repeats"]["top"][0]["compiles"] == 9
    assert comp["floor"]["seconds"] == pytest.approx(3 * 1.0 / 2)  # 9 s over 9 compiles, 2 workers


def test_deliberate_and_unkeyed_compiles_are_counted_apart(tmp_path):
    # A compile check's deliberate cold compiles (a warm run makes them too) are no
    # run key's work and stay out of the floor; a keyless example's compiles count
    # as artifacts of the floor, apart from the keyed ones.
    run, c = "20261203-000000-4", Case(s_q=3, s_kv=3)
    cold = ("disk_reuse", {DELIBERATE_COMPILES: "a fresh cache"})
    _shard(tmp_path, run, "gw0", [(c, None, 2, 4.0, 4.0, *cold), (c, None, 1, 2.0, 2.0, "rejection", {}), (c, "k", 1, 2.0, 2.0)])
    s, paths = reports.build(tmp_path, run)
    comp = s["compile"]
    assert comp["deliberate"] == {"compiles": 2, "seconds": 4.0, "by_property": {"disk_reuse": 2}}
    assert (comp["keys"], comp["artifacts"], comp["unkeyed_compiles"], comp["unkeyed"], comp["repeat_compiles"]) == (1, 1, 1, {"rejection": 1}, 0)
    assert comp["floor"]["artifacts"] == 2 and comp["floor"]["seconds"] == pytest.approx(2 * 2.0)  # 8 s over 4 compiles, 1 worker
    md = paths["md"].read_text()
    assert "2 deliberate compiles (disk_reuse 2" in md and "1 compiles of examples naming no key (rejection 1)" in md


def test_a_warm_run_of_deliberate_compiles_has_no_floor(tmp_path):
    run, c = "20261203-000000-5", Case(s_q=3, s_kv=3)
    _shard(tmp_path, run, "gw0", [(c, None, 1, 2.0, 2.0, "compiles", {DELIBERATE_COMPILES: "sm_80"}), (c, "k", 0, 1.0, 0.0)])
    comp = reports.build(tmp_path, run)[0]["compile"]
    assert (comp["compiles"], comp["artifacts"], comp["deliberate"]["compiles"], comp["floor"]["seconds"], comp["floor"]["ratio"]) == (1, 0, 1, 0.0, None)


# ------------------------------------------------------------ compile_reuse
# The frontend's compiled cache with the compile faked: compile_cached, its
# memo, record_entries() and the lrus in front of it are the real ones; only
# the trip to the compiler (and the files) is replaced. The fake adapter asks
# for what the THD wrappers' packed copy asks for (packed_copy_sm80._plan ->
# staged_copy.compile_gather -> compile_cached), in gather shapes no real Case
# uses: one keyed by the sequence count (a host's key), and, when the Case has
# more than one Q token, one more (an operand a [1, 1, H, D] view hides: torch
# counts a T = 1 view contiguous whatever its strides, packed_copy_sm80.py:58).
GATHER = "frost_sdpa_sm80_staged_gather"
FAKE_MANIFEST = {"schema": "v2", "cudnn_frontend": "fake", "device_name": "fake sm_80", "compute_capability": "8.0"}


def _host_shapes(case: Case) -> tuple:
    return ((1, -2, 2 + case.n_seq, 40, 48),)


def _flip_shapes(case: Case) -> tuple:
    return ((1, -1, 3, 40, 48),) if case.t_q > 1 else ()


class GatherAdapter:
    """compile_only(case): the packed-copy plans ``shapes_of(case)`` names, counters around them."""

    name = "fake-gather"

    def __init__(self, *shapes_of):
        self.shapes_of = shapes_of

    def compile_only(self, case: Case):
        from cudnn.sdpa import packed_copy_sm80

        from kernels.counters import measure

        with measure() as box:
            for shapes_of in self.shapes_of:
                if shapes_of(case):
                    packed_copy_sm80._plan(shapes_of(case))
        return box.delta


@pytest.fixture
def frontend(monkeypatch, tmp_path):
    """The real compiled cache with a fake compile; ``frontend("entries")``
    gives it a device manifest and a cache directory (what a GPU has:
    record_entries() records), ``frontend("keys")`` leaves the CPU's (none).
    Afterwards the memo and the front lrus hold nothing of the fakes."""
    import types

    from cudnn.frost import compiled_cache as cc
    from cudnn.sdpa import packed_copy_sm80
    from cudnn.sdpa.fwd.kernels.sm80 import staged_copy

    memo = dict(cc._MEMO)
    lrus = (packed_copy_sm80._plan, staged_copy.compile_gather)

    def artifact():
        return types.SimpleNamespace(_compiled_cache_raw=lambda *args: None)

    def compile_persistent(fn, args, kwargs, *, cache_key, symbol, options):
        manifest = cc.environment_manifest()
        if not cc.enabled() or any(v == "unknown" for v in manifest.values()):
            cc._count("bypassed")
            return artifact()
        entry = cc._entry_dir(cc.get_cache_dir(), manifest, f"{cache_key}|{symbol}|{options}")
        if (entry / "entry.json").is_file():
            cc._count("hits")
            return artifact()
        entry.mkdir(parents=True)
        (entry / "kernel.o").write_bytes(b"fake")
        (entry / "entry.json").write_text(json.dumps({"schema": cc._SCHEMA, "key": cache_key, "symbol": symbol}))
        cc._count("misses")
        return artifact()

    def use(mode: str):
        monkeypatch.setattr(cc, "_compile_persistent", compile_persistent)
        monkeypatch.delenv("CUDNN_FRONTEND_DISABLE_COMPILED_CACHE", raising=False)
        if mode == "entries":
            monkeypatch.setattr(cc, "environment_manifest", lambda device=None: dict(FAKE_MANIFEST))
            monkeypatch.setattr(cc, "_dir_override", tmp_path / "compiled")
        for lru in lrus:
            lru.cache_clear()
        return cc

    yield use
    for lru in lrus:
        lru.cache_clear()
    with cc._LOCK:
        cc._MEMO.clear()
        cc._MEMO.update(memo)


def _verdict(case: Case, adapter):
    from ground.outcome import PropertyFailure
    from properties import check_compile_reuse

    try:
        return check_compile_reuse(case, adapter, launch=False), None
    except PropertyFailure as failure:
        return None, failure


THD_ONE = Case(layout="thd", q_lens=(1,), kv_lens=(1,))


def _cold_then_warm_failures() -> list:
    """compile_reuse's failures of THD_ONE under a gather per new token total: in a cold
    process, then in one where an earlier example compiled the variant's keys."""
    adapter = GatherAdapter(_host_shapes, _flip_shapes)
    failures = []
    for warm in (False, True):
        if warm:
            adapter.compile_only(THD_ONE.replace(q_lens=(2,), kv_lens=(4,)))
        failures.append(_verdict(THD_ONE, adapter)[1])
    return failures


@pytest.mark.parametrize("mode", ["keys", "entries"])
def test_compile_reuse_verdict_is_the_same_in_a_warm_process(frontend, mode):
    """The H200's flaky verdict: 'new token totals' asks for a gather the Case
    did not. A cold process compiles it (counters: a miss); a process that
    compiled that key before (an earlier example) serves it from the lru, and
    the counters rule passed. Judged on what each call asks for, both fail."""
    frontend(mode)
    failures = _cold_then_warm_failures()
    verdicts = ["passed" if f is None else f.summary.split(":")[0] for f in failures]
    assert verdicts == ["new token totals", "new token totals"]  # cold, warm
    for failure in failures:
        assert GATHER in failure.summary and failure.check == "capacity budget"  # the token totals change the packed capacity
        assert failure.detail["rule"] == mode and [n["symbol"] for n in failure.detail["new"]] == [GATHER]


def test_compile_reuse_names_a_new_entry_already_on_disk_and_in_the_memo(frontend):
    """The variant's gather is on disk and in compiled_cache's memo (and the
    lrus) before the check: no counter moves, and still the variant asked for
    an entry the Case did not: it fails, naming it."""
    cc = frontend("entries")
    adapter = GatherAdapter(_host_shapes, _flip_shapes)
    adapter.compile_only(THD_ONE.replace(q_lens=(2,), kv_lens=(4,)))  # on disk, in the memo
    assert any(GATHER in str(k) for k in cc._MEMO)
    obs, failure = _verdict(THD_ONE, adapter)
    assert failure is not None, obs.notes
    assert failure.summary.startswith("new token totals: asked the compiled cache for 1 entry the Case did not (at most 0): " + GATHER)
    assert failure.detail["delta"]["misses"] == 0  # the counters alone saw nothing
    new = failure.detail["new"][0]
    assert new["symbol"] == GATHER and "compile_gather" in new["key"] and (cc.get_cache_dir() / "v2").is_dir()
    # every failing call is one the flip reaches (more than one Q token); the new sequence count asks for two
    also = [x["summary"].split(":")[0] for x in failure.detail.get("also_failed", [])]
    assert also == ["new capacities and first offsets", "a new sequence count"]


@pytest.mark.parametrize("mode", ["keys", "entries"])
def test_compile_reuse_passes_a_case_whose_variants_ask_for_nothing_new(frontend, mode):
    """Variants that ask for the Case's entries only pass, cold or warm; a new
    sequence count asks for one new entry (allowed), back to the seen count none."""
    from kernels.prepared import named_key

    frontend(mode)
    adapter = GatherAdapter(_host_shapes)
    for _ in range(2):  # the second time every key is warm
        obs, failure = _verdict(THD_ONE, adapter)
        assert failure is None, failure
        assert obs.outcome == "passed" and obs.notes["rule"] == mode and obs.notes["case_requests"] == 1
        # the counters are the Case's own first call's: named by its key (compile_only: an sm_80 artifact)
        assert obs.notes["compile_key"] == named_key(THD_ONE, arch="sm_80") != named_key(THD_ONE)
        assert obs.notes[DELIBERATE_COMPILES] == COLD["sm80"]  # the report counts them apart: a warm run makes them too
        assert obs.notes["new_requests"] == {
            "new data and addresses": 0,
            "new token totals": 0,
            "new capacities and first offsets": 0,
            "new scale of the same sign": 0,
            "a new sequence count": 1,
            "back to a seen sequence count": 0,
        }


def test_compile_reuse_falls_back_to_counters_on_a_private_cache_where_nothing_can_be_observed(frontend, monkeypatch):
    """A frontend with neither record_entries() nor its hook: the counters
    alone, on a fresh private cache with cold memos where the Case compiles
    first, so the verdict is the same in a process that compiled the
    variant's key before (it passed unseen there)."""
    from kernels import counters

    frontend("keys")
    monkeypatch.setattr(counters, "can_observe_requests", lambda: False)
    obs, failure = _verdict(THD_ONE, GatherAdapter(_host_shapes))
    assert failure is None and obs.notes["rule"] == "counters" and "private" in obs.notes["why"]
    failures = _cold_then_warm_failures()
    assert [f is not None and f.summary.startswith("new token totals") for f in failures] == [True, True]


def test_forgotten_memos_cover_every_lru_in_front_of_compile_cached():
    """Every lru of the SM80 modules whose function compiles (calls compile_cached or a
    compiling function) is one forget_front_memos() clears (kernels.counters.FRONT_MEMOS)."""
    import functools
    import importlib

    from kernels.counters import FRONT_MEMOS

    modules = sorted(
        {m for m, _ in FRONT_MEMOS}
        | {"cudnn.sdpa.fwd.prepared_sm80", "cudnn.sdpa.bwd.prepared_sm80", "cudnn.sdpa.bwd.staged_sm80", "cudnn.sdpa.rope_table_sm80"}
    )
    found = set()
    for name in modules:
        for attr, value in vars(importlib.import_module(name)).items():
            compiles = (
                isinstance(value, functools._lru_cache_wrapper)
                and value.__wrapped__.__module__ == name
                and any("compile" in n.lower() or n == "_plan" for n in value.__wrapped__.__code__.co_names)
            )
            if compiles:
                found.add((name, attr))
    assert found and found <= set(FRONT_MEMOS), sorted(found - set(FRONT_MEMOS))


# ------------------------------------------------------------ compile_distinct
# The prepared adapter's dense compile through the same faked frontend: the
# template modules and the host are the real ones, so is the key
# (prepared_host.template_key of the module's digest and the host's
# arguments); only the trip to the compiler is faked.
WINDOWED = Case(s_q=16, s_kv=16, causal=True, window_left=3, window_right=2)


def _distinct(case: Case, fact: str):
    from ground.outcome import PropertyFailure
    from kernels.prepared import PreparedAdapter
    from properties import check_compile_distinct

    try:
        return check_compile_distinct(case, PreparedAdapter(rewrites=()), fact=fact), None
    except PropertyFailure as failure:
        return None, failure


def _drop_from_key(monkeypatch, argument: str) -> None:
    """A compile key that omits one argument of the dense host (cudnn-frontend#604's kind of bug)."""
    from cudnn.sdpa.fwd.kernels.sm80 import prepared_host

    real = prepared_host.template_key
    monkeypatch.setattr(prepared_host, "template_key", lambda g, args, fn="compile": real(g, {k: v for k, v in args.items() if k != argument}, fn))


@pytest.mark.parametrize("mode", ["keys", "entries", "counters"])
@pytest.mark.parametrize("fact,argument", [("window_left", "swa_window"), ("window_right", "right_bound"), ("s_kv", "geometry")])
def test_compile_distinct_fails_on_a_key_that_omits_a_compiled_fact(frontend, monkeypatch, mode, fact, argument):
    """The power test: with the frontend's key each variant (a window width,
    a band width, a K/V length: compile host arguments) asks for an entry of
    its own and passes; with a key that omits the argument the variant is
    handed the base's kernel and distinct kernel fails, whatever the rule
    (requests seen on the CPU or a device, counters where none can be)."""
    from kernels import counters

    frontend("keys" if mode == "counters" else mode)
    if mode == "counters":
        monkeypatch.setattr(counters, "can_observe_requests", lambda: False)
    obs, failure = _distinct(WINDOWED, fact)
    assert failure is None, failure
    assert obs.outcome == "passed" and obs.notes["rule"] == mode and set(obs.notes["changed"]) == {fact}
    # its compiles are the check's own (reports count them apart): a fresh cache under counters, else sm_80 artifacts
    assert obs.notes[DELIBERATE_COMPILES] == COLD["fresh" if mode == "counters" else "sm80"]
    _drop_from_key(monkeypatch, argument)
    obs, failure = _distinct(WINDOWED, fact)
    assert failure is not None and failure.check == "distinct kernel", obs and obs.notes
    assert f"{fact}={getattr(WINDOWED, fact) + 1}" in failure.summary and "handed the other value's kernel" in failure.summary


def test_compile_distinct_on_a_gpu_asks_the_runs_cache(frontend, monkeypatch):
    """On a GPU (stood in for: ``compiles_live`` answers yes; each
    compile made as the CPU tier's, its live flag recorded) both compiles are
    the live device's, which the run's compiled cache keeps: the check judges
    the same requests, still fails a key that omits the fact, and its compiles
    are the run's, not deliberate (a warm run asks the cache again). A
    backward Case compiles live too: the prepared adapter hands the flag to
    the backward's compile_only (its live compile itself needs the GPU)."""
    from kernels.prepared import PreparedAdapter
    from properties import compile_cache

    frontend("entries")
    monkeypatch.setattr(compile_cache, "compiles_live", lambda: True)
    lives, real = [], PreparedAdapter.compile_only

    def recording(self, case, **kw):
        lives.append(kw.pop("live", False))
        return real(self, case, **kw)

    monkeypatch.setattr(PreparedAdapter, "compile_only", recording)
    obs, failure = _distinct(WINDOWED, "window_left")
    assert failure is None and lives == [True, True] and DELIBERATE_COMPILES not in obs.notes and obs.notes["rule"] == "entries"
    _drop_from_key(monkeypatch, "swa_window")
    obs, failure = _distinct(WINDOWED, "window_left")
    assert failure is not None and failure.check == "distinct kernel"
    lives.clear()
    obs, failure = _distinct(Case(direction="bwd", d_qk=64, d_v=64, s_q=16, s_kv=16), "deterministic")
    assert failure is None and lives == [True, True], (failure, lives)
    import kernels.prepared as prepared

    handed = []
    monkeypatch.setattr(prepared, "compile_only_backward", lambda adapter, case, live=False: handed.append(live))
    real(PreparedAdapter(), Case(direction="bwd", d_qk=64, d_v=64), live=True)  # compile_only as it is
    assert handed == [True]


def test_compile_distinct_reuses_a_base_compiled_before(frontend):
    """Two facts checked on the same Case: the second compiles its variant
    alone (the base is compiled_cache's memo hit, still a request it sees)."""
    from kernels.counters import measure

    frontend("keys")
    with measure() as box:
        assert _distinct(WINDOWED, "window_left")[1] is None
    assert box.delta.misses == 2
    with measure() as box:
        obs, failure = _distinct(WINDOWED, "window_right")
    assert failure is None and box.delta.misses == 1 and box.delta.memo_hits >= 1 and obs.notes["new_requests"] == 1


def test_a_specialization_that_drops_a_fact_leaves_its_family_no_variant(monkeypatch):
    """An adapter whose specialization drops a compiled fact compiles both
    values alike, and the suite's specialization (the same code) cannot tell
    them apart: no Case has a variant, the family draws none (unsatisfiable)
    and tests/test_fact_roles.py's every-family-has-a-variant test fails."""
    import dataclasses

    from ground.outcome import Unsupported
    from kernels import prepared
    from properties import check_compile_distinct
    from properties.compile_cache import distinct_pair

    assert distinct_pair(Case(), "lse_log2")[1] is not None
    real = prepared.specialize
    monkeypatch.setattr(
        prepared, "specialize", lambda case, **kw: dataclasses.replace(s := real(case, **kw), params=dataclasses.replace(s.params, stats_log2=False))
    )
    assert distinct_pair(Case(), "lse_log2")[1] is None
    with pytest.raises(Unsupported, match="lse_log2") as refusal:
        check_compile_distinct(Case(), prepared.PreparedAdapter(rewrites=()), fact="lse_log2")
    assert refusal.value.scope == "case"


def _run_probe_prefix(code: str, case: Case):
    """Everything of the disk property's probe before its launch (imports,
    Case parsing, the adapter lookup), in a fresh process as the property
    runs it: the launch needs a GPU, its imports must not."""
    import subprocess
    import sys
    from pathlib import Path

    prefix = code.split("\ninputs, outputs =")[0].replace("#PRELUDE", "")
    root = Path(__file__).resolve().parents[1]
    return subprocess.run([sys.executable, "-c", prefix, case.to_json(), "prepared"], cwd=root, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("layout", ["dense", "thd"])
def test_the_disk_probe_imports_and_parses_its_case_on_the_cpu(layout):
    from properties import compile_cache

    done = _run_probe_prefix(compile_cache._PROBE, compile_cache.DISK_CASES[layout])
    assert done.returncode == 0, done.stderr[-2000:]
    # power: a probe naming a name the ground no longer has fails the same way
    planted = compile_cache._PROBE.replace("from ground.case import Case", "from ground.case import Case, no_such_name")
    assert planted != compile_cache._PROBE
    bad = _run_probe_prefix(planted, compile_cache.DISK_CASES[layout])
    assert bad.returncode != 0 and "ImportError" in bad.stderr


@pytest.mark.parametrize(
    "first, second, check",
    [
        ({"guards": "out-of-bounds write: o: 1 element(s) after the end", "output": "a"}, {"guards": None, "output": "a"}, "guards"),
        ({"guards": None, "output": "a"}, {"guards": "out-of-bounds write: lse", "output": "a"}, "guards"),
        ({"guards": None, "output": "a"}, {"guards": None, "output": "b"}, "same output"),
        ({"guards": None, "output": "a"}, {"guards": None, "output": "a"}, None),
    ],
)
def test_disk_reuse_judges_each_process_launch(monkeypatch, first, second, check):
    """Each probe process's guard bands, and the kernel served from disk writing the compiled one's bits:
    a cold first process and a disk hit are not enough (the probes stood in for: no GPU here)."""
    import types

    from ground.outcome import PropertyFailure
    from properties import compile_cache

    launches = iter([({"misses": 1}, first), ({"hits": 1}, second)])
    monkeypatch.setattr(compile_cache, "_launch_in_new_process", lambda *a: next(launches))
    case = compile_cache.DISK_CASES["dense"]
    if check is None:
        assert compile_cache.check_disk_reuse(case, types.SimpleNamespace(name="prepared")).outcome == "passed"
        return
    with pytest.raises(PropertyFailure) as failure:
        compile_cache.check_disk_reuse(case, types.SimpleNamespace(name="prepared"))
    assert failure.value.check == check


def test_compiles_fails_a_call_that_asks_for_no_kernel():
    """check_compiles: an entry point that raises nothing but asks the
    compiled cache for nothing (no compile, no disk or memo hit, its front
    memos forgotten) produced no kernel: a failure, not a pass."""
    from types import SimpleNamespace

    from ground.outcome import PropertyFailure
    from kernels.base import CompileDelta
    from properties.compile_cache import check_compiles

    case = Case(s_q=64, s_kv=64)
    with pytest.raises(PropertyFailure, match="asked the compiled cache for no kernel"):
        check_compiles(case, SimpleNamespace(name="prepared", compile_only=lambda c: CompileDelta()))
    assert check_compiles(case, SimpleNamespace(name="prepared", compile_only=lambda c: CompileDelta(memo_hits=1))).outcome == "passed"


def test_a_variant_of_the_same_capacity_fails_the_compile_budget_not_the_capacity_one(frontend):
    """A finding about a host that plans per packed capacity names the check
    "capacity budget": a new entry asked for by a THD variant that keeps the
    capacity (new data and addresses) fails "compile budget", which that
    finding does not excuse."""
    frontend("keys")
    adapter = GatherAdapter(_host_shapes, lambda case: ((1, -3, 3, 40, 48 + 8 * (case.seed % 4)),))  # a new seed: a new gather
    failure = _verdict(THD_ONE, adapter)[1]
    assert failure is not None and failure.summary.startswith("new data and addresses") and failure.check == "compile budget"
