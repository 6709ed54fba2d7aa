"""Geometry pools (strategies/geometry.py): every stratum's pools are valid,
simplest first and cover every feature on their own; the suite's own option
sets keep drawing from them; runtime draws never reach a compile key; and the
ci profile's GPU examples buy at least five examples per compile.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

from ground.case import BIAS_DTYPES, MEMORY_ORDERS, Case
from ground.contracts import broken_rules
from ground.coverage import REQUIRED, labels
from ground.tables import STRATA
from strategies import cases, dense_cases, geometry, pools
from strategies.features import Common

ROOT = Path(__file__).resolve().parents[1]
FIXED = dict(derandomize=True, database=None, deadline=None, suppress_health_check=[HealthCheck.too_slow])
# Labels only a runtime draw reaches (lengths, offsets, values): not a pool's job.
# Coverage values that runtime facts give (drawn per example, not by a pool row).
RUNTIME_LABELS = {
    "scale:positive",
    "padding:dense: a zero length",
    "padding:thd: Q capacity slack",
    "padding:thd: K/V capacity slack",
    "padding:thd: first offset > 0",
} | {f"thd lengths:{x}" for x in ("a length of 1", "a long sequence (> 2 Q tiles)", "a tile-edge length", "a zero length")}
# Mask families of the report's coverage matrix (reports/coverage.py MASKS).
MASK_NAMES = {"none", "causal", "causal_br", "swa", "swa_br", "causal+swa", "causal_br+swa", "causal+band", "causal_br+band"}


def _stratum_cases(flavor, dtype):
    dense = [g.case(dtype) for g in geometry.dense_pool(flavor, dtype)]
    thd = [g.case(flavor, dtype) for g in geometry.thd_pool(flavor, dtype)]
    return dense, thd


# ------------------------------------------------------------------ the pools
@pytest.mark.parametrize("flavor,dtype", STRATA)
def test_pools_are_valid_and_simplest_first(flavor, dtype):
    from kernels.specialize import specialize

    dense, thd = _stratum_cases(flavor, dtype)
    # The hand rows, then the covering rows (strategies.covering): every row distinct.
    assert len(dense) == len(set(dense)) >= len(geometry.DENSE_ROWS) and len(thd) == len(set(thd)) >= len(geometry.THD_ROWS)
    assert geometry.dense_pool(flavor, dtype)[: len(geometry.DENSE_ROWS)] == geometry.hand_dense_pool(flavor, dtype)
    for c in dense + thd:
        assert c.structural_problem() is None and broken_rules(c) == (), c
        assert specialize(c).flavor == flavor, c
    env = pools.FLAVOR_ENVELOPES[flavor]
    assert dense[0] == Case(dtype=dtype, d_qk=env[0], d_v=env[1])  # B=1 H=1 S=1x1, no feature
    assert thd[0] == Case(layout="thd", dtype=dtype, d_qk=env[0], d_v=env[1], q_lens=(1,), kv_lens=(1,))


@pytest.mark.parametrize("flavor,dtype", STRATA)
def test_each_stratum_pool_covers_every_feature(flavor, dtype):
    """Every (flavor, dtype) sees every feature, not only the run as a whole."""
    dense, thd = _stratum_cases(flavor, dtype)
    seen = set().union(*(labels(c) for c in dense + thd))
    other = {f"flavor:{f}" for f in pools.FLAVORS if f != flavor} | {f"dtype:{d}" for d in ("float16", "bfloat16") if d != dtype}
    other |= {f"bias:{d}" for d in BIAS_DTYPES if d not in (dtype, "float32")}
    assert sorted(REQUIRED - RUNTIME_LABELS - other - seen) == []
    assert MASK_NAMES <= {c.mask_name() for c in dense}
    dims = {pools.FLAVOR_ENVELOPES[flavor][0] == c.d_qk for c in dense} | {"v" + str(pools.FLAVOR_ENVELOPES[flavor][1] == c.d_v) for c in dense}
    assert dims == {True, False, "vTrue", "vFalse"}  # d_qk and d_v each on and off the envelope
    assert {c.memory for c in dense} == set(MEMORY_ORDERS)
    assert {(c.seq_q_lens is not None, c.seq_kv_lens is not None) for c in dense} == {(False, False), (True, False), (False, True), (True, True)}


def _lpt_l2_blocks(c: Case, mib: int):
    """(groups per L2 block, block count, q tiles) as prefill_f16.py's
    SCHED_LPT_L2 decode sizes them (envelope dims, 2 bytes, TILE_M 128), written
    here from the kernel's comment, not imported."""
    from ground.tables import flavor_of

    d_qk, d_v = pools.FLAVOR_ENVELOPES[flavor_of(c.d_qk, c.d_v)]
    groups = c.batch * c.h_kv
    active = min(max((mib << 20) // (c.s_kv * (d_qk + d_v) * 2), 1), groups)
    return active, -(-groups // active), -(-c.s_q // pools.TILE_M)


@pytest.mark.parametrize("flavor,dtype", STRATA)
def test_every_stratum_has_an_lpt_l2_row_with_a_partial_last_block(flavor, dtype):
    """The L2 scheduler's last-block decode differs from a full block's only
    when the groups do not fill the last block and a group has two q tiles or
    more: every stratum's pool holds such a row (sched_lpt_l2_full_last_block
    is killed by draws of it)."""
    rows = [g.case(dtype) for g in geometry.dense_pool(flavor, dtype) if g.case(dtype).sched == "lpt_l2"]
    split = []
    for c in rows:
        active, blocks, q_tiles = _lpt_l2_blocks(c, c.sched_l2_mib or 1 << 30)
        if blocks > 1 and (c.batch * c.h_kv) % active and q_tiles > 1:
            split.append(c)
    assert split, rows


@pytest.mark.parametrize("flavor,dtype", STRATA)
def test_every_stratum_has_a_rope_row_whose_queries_see_past_the_first_kv_tile(flavor, dtype):
    """RoPE's K positions differ from tile-local ones only at keys >= TILE_N
    (64): some RoPE row of each stratum has a query that sees such a key and at
    least one other (one visible key has softmax weight 1 whatever its score)."""
    import torch

    from reference.masks import visibility

    def reaches(c):
        lens = torch.tensor([c.s_q]), torch.tensor([c.s_kv])
        vis = visibility(c.s_q, c.s_kv, *lens, causal=c.causal, bottom_right=c.bottom_right, window_left=c.window_left, window_right=c.window_right)[0, 0]
        return bool((vis[:, pools.TILE_N :].any(1) & (vis.sum(1) > 1)).any())

    # ... with a scale: at scale 0 no q.k reaches a logit (the H200 probe: the mutant passes those rows)
    assert any(reaches(c) for c in (g.case(dtype) for g in geometry.dense_pool(flavor, dtype)) if c.rope and c.scale != 0)


@pytest.mark.parametrize("flavor,dtype", STRATA)
def test_the_rows_padded_on_both_sides_carry_both_bias_dtypes(flavor, dtype):
    """The padding-poison test and the backward's dense tails draw only rows
    padded on both sides; each stratum's hand rows among them carry a bias in
    the I/O dtype and an fp32 one, so dead bias cells and dBias under padding
    are judged in every stratum (with none there, 3 of 160 ci backward tails
    draws had a bias)."""
    both = [g.case(dtype) for g in geometry.hand_dense_pool(flavor, dtype) if g.pad_q and g.pad_kv]
    assert {c.bias for c in both} >= {dtype, "float32"}, [c.bias for c in both]


def test_pools_differ_across_strata():
    """The rotation spreads tile edges and window sizes over the strata."""
    lengths = {(c.s_q, c.s_kv) for f, d in STRATA for c in _stratum_cases(f, d)[0]}
    assert {n for pair in lengths for n in pair} >= set(pools.EDGE_LENGTHS)
    windows = {c.window_left for f, d in STRATA for c in sum(_stratum_cases(f, d), [])}
    assert windows >= set(pools.WINDOWS)
    bands = {c.window_right for f, d in STRATA for c in _stratum_cases(f, d)[0]}
    assert bands >= set(pools.RIGHT_BANDS)


@pytest.mark.parametrize("flavor,dtype", STRATA)
def test_the_suites_option_sets_draw_from_the_pool(flavor, dtype):
    """The tails tests' options filter the pool (never empty it, so they share
    the numerics' compiles): pad columns on 5 rows, padding on 4."""
    opts = Common(flavors=(flavor,), dtypes=(dtype,))
    base = dict(bias=None, bias_dtypes=("input", "float32"), padding=None, memory=MEMORY_ORDERS, edges=True, max_batch=3, max_tokens=None)
    rows = geometry.dense_pool(flavor, dtype)
    tails = [g for g in rows if geometry.dense_allowed(g, flavor, opts, **{**base, "memory": ("bshd_padded",), "padding": False})]
    poison = [g for g in rows if geometry.dense_allowed(g, flavor, opts, **{**base, "padding": True})]
    hand = geometry.hand_dense_pool(flavor, dtype)
    assert len(set(tails) & set(hand)) == 5 and len(set(poison) & set(hand)) == 4  # the covering rows may add to either
    assert {g.causal for g in tails} == {True, False} and any(g.window_left >= 0 for g in tails) and any(g.window_right >= 0 for g in tails)
    assert {g.bias for g in tails} >= {"input", "float32"} and any(g.sinks for g in tails)
    assert any(g.bottom_right and g.causal and g.s_q < g.s_kv for g in poison) and any(g.batch > 1 for g in poison)
    assert all(geometry.thd_allowed(g, opts, max_seqs=pools.THD_MAX_SEQS) for g in geometry.thd_pool(flavor, dtype))


def test_options_that_empty_a_pool_draw_free_geometry():
    @settings(max_examples=30, **FIXED)
    @given(
        dense_cases(
            geometry="pool",
            flavors=("llama",),
            dtypes=("bfloat16",),
            bias=True,
            bias_dtypes=("float32",),
            causal=False,
            memory=("bshd",),
            padding=False,
            off_envelope=False,
        )
    )
    def check(c):
        assert (c.bias, c.causal, c.memory, c.d_qk, c.seq_q_lens, c.seq_kv_lens) == ("float32", False, "bshd", 128, None, None)

    check()


@settings(max_examples=100, **FIXED)
@given(dense_cases(geometry="pool", padding=True))
def test_pool_mode_honours_forced_padding(c):
    assert c.seq_q_lens is not None and c.seq_kv_lens is not None


# ------------------------------------------------------------------- modes
def test_mode_follows_option_env_and_profile(monkeypatch):
    monkeypatch.delenv(geometry.GEOMETRY_ENV, raising=False)
    previous = settings._current_profile
    try:
        for profile, expected in (("ci", "pool"), ("dev", "pool"), ("nightly", "mixed")):
            settings.load_profile(profile)
            assert geometry.mode() == expected
        monkeypatch.setenv(geometry.GEOMETRY_ENV, "pool")
        assert geometry.mode() == "pool" and geometry.mode("free") == "free"
        monkeypatch.setenv(geometry.GEOMETRY_ENV, "nope")
        with pytest.raises(ValueError, match="SDPA_GEOMETRY"):
            geometry.mode()
    finally:
        settings.load_profile(previous)


# ------------------------------------------------------------ compile keys
def _pool_keys():
    from kernels.prepared import compile_key

    keys = set()
    for f, d in STRATA:
        dense, thd = _stratum_cases(f, d)
        keys |= {compile_key(c) for c in dense + thd}
    return keys


@pytest.fixture(scope="module")
def pool_keys():
    return _pool_keys()


def test_runtime_draws_never_reach_a_compile_key(pool_keys):
    """Whatever a pool-mode example draws per example (seed, padding values,
    THD lengths/offsets/dims/band, the scale's magnitude), its compile key is
    the key of its geometry: the distinct compiles of a run are bounded by the
    pools, 18 dense + 10 THD per stratum (x2 THD output modes, +8 dense for the
    padding-poison tests' one-sided variants)."""
    from kernels.prepared import compile_key

    @settings(max_examples=300, **FIXED)
    @given(cases(geometry="pool"))
    def check(c):
        assert compile_key(c) in pool_keys, c

    check()


@pytest.mark.compile
def test_equal_keys_compile_once(tmp_path, monkeypatch):
    """compile_key is the compile: two examples of one geometry compile once,
    a geometry one fact away compiles again (CPU compile tier)."""
    from kernels import get_adapter
    from kernels.prepared import compile_key

    monkeypatch.setenv("CUDNN_FRONTEND_COMPILED_CACHE", str(tmp_path))
    g = geometry.dense_pool("gptoss", "bfloat16")[8]  # padding on Q, sinks, off-envelope d_v
    a = g.case("bfloat16", seq_q_lens=(3,), seed=4)
    b = g.case("bfloat16", seq_q_lens=(0,), seed=9, scale=0.5)
    c = g.case("bfloat16", memory="bhsd")
    assert compile_key(a) == compile_key(b) != compile_key(c)
    adapter = get_adapter("prepared")
    assert adapter.compile_only(a).misses >= 1
    assert adapter.compile_only(b).misses == 0
    assert adapter.compile_only(c).misses >= 1


def test_ci_examples_per_compile_key():
    """tools/count_compile_keys.py on one stratum of the ci profile's GPU tests:
    the examples pytest draws there (derandomized) and their compile keys.
    The whole run (8 strata): see docs/throughput.md."""
    out = ROOT / "sdpa-report" / "keys-gptoss-bf16.json"
    out.parent.mkdir(exist_ok=True)
    done = subprocess.run(
        [sys.executable, "tools/count_compile_keys.py", "--profile", "ci", "-k", "gptoss-bf16", "--json", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
        env={**__import__("os").environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    counts = json.loads(out.read_text())
    nt = counts["numerics+tails"]
    # numerics dense+THD 2 x 140 (the THD ones also judge the initialized
    # tails: one launch, both checks), tails THD no-init 70, dense 70,
    # padding poison 2 x 70.
    assert nt["examples"] == 560
    assert nt["keys"] <= nt["examples"] / 5
    dense, thd = geometry.dense_pool("gptoss", "bfloat16"), geometry.thd_pool("gptoss", "bfloat16")
    poison = [g for g in dense if g.pad_q and g.pad_kv]  # each also compiles its two one-sided variants
    assert nt["dense_keys"] <= len(dense) + 2 * len(poison) and nt["thd_keys"] <= 2 * len(thd)
