"""The valid-fact strategies: validity, coverage, options, shrinking, profiles.

Every Hypothesis run here is derandomized with no example database, so the
same examples are drawn on every machine and run.
"""

from __future__ import annotations

import pathlib
import re

import pytest
from hypothesis import HealthCheck, find, given, settings

from ground.case import Case
from ground.contracts import broken_rules
from ground.coverage import REQUIRED, labels
from ground.tables import flavor_of
from strategies import cases, dense_cases, examples, geometry, load_profile, pools, profiles, thd_cases

FIXED = dict(derandomize=True, database=None, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# ------------------------------------------------------------ tables vs kernels
def test_flavor_tables_match_the_kernels():
    from cudnn.sdpa.fwd import api_dsl

    assert tuple(pools.FLAVOR_ENVELOPES) == api_dsl._SM80_SUPPORTED_FLAVORS
    assert pools.FLAVOR_ENVELOPES == api_dsl._SM80_FLAVOR_DIMS
    for flavor, (tile_m, _warps, tile_n) in api_dsl._SM80_FLAVOR_KNOBS.items():
        assert (tile_m, tile_n) == (pools.TILE_M, pools.TILE_N), flavor


def test_off_envelope_dims_are_picked_for_their_flavor():
    from kernels.specialize import pick_flavor

    for flavor, pairs in pools.OFF_ENVELOPE_DIMS.items():
        assert pairs, flavor
        assert pick_flavor(*pools.FLAVOR_ENVELOPES[flavor]) == flavor
        for d_qk, d_v in pairs:
            assert d_qk % 8 == 0 and d_v % 8 == 0
            assert (d_qk, d_v) != pools.FLAVOR_ENVELOPES[flavor]
            assert pick_flavor(d_qk, d_v) == flavor, (d_qk, d_v)


# ------------------------------------------------------------------- validity
def _wrapper_contracts_hold(c: Case):
    """The wrapper's own contracts for valid calls (api_dsl.sdpa_fwd_wrapper_sm80,
    SdpaFwdDslSm80.check_support)."""
    assert c.h_q % c.h_kv == 0
    assert c.window_right < 0 or c.causal
    assert not c.bottom_right or c.causal or c.window_left >= 0
    if c.is_thd:
        assert c.bias is None and c.seq_q_lens is None and c.seq_kv_lens is None
    elif c.bias is not None:
        assert c.bias in (c.dtype, "float32") and c.bias_batch == 1


@pytest.mark.parametrize("geometry", ["pool", "free"])
def test_drawn_cases_are_valid(geometry):
    @settings(max_examples=400, **FIXED)
    @given(cases(geometry=geometry))
    def check(c):
        _valid(c)

    check()


def _valid(c):
    from kernels.specialize import specialize

    assert c.structural_problem() is None
    assert c.violation is None and broken_rules(c) == ()
    _wrapper_contracts_hold(c)
    spec = specialize(c)  # the kernels' flavor pick + validate_params: must not raise
    assert spec.flavor == flavor_of(c.d_qk, c.d_v)
    assert Case.from_json(c.to_json()) == c


# ------------------------------------------------------------------- coverage
@pytest.mark.parametrize("geometry", ["pool", "free"])
def test_every_feature_is_exercised(geometry):
    seen = set()

    @settings(max_examples=600, **FIXED)
    @given(cases(geometry=geometry))
    def collect(c):
        seen.update(labels(c))

    collect()
    assert sorted(REQUIRED - seen) == []


def test_pool_edges_are_the_vocabularys_tile_edges():
    from ground.coverage import on_tile_edge

    assert [n for n in pools.EDGE_LENGTHS if on_tile_edge(n)] == [n for n in pools.EDGE_LENGTHS if n > 1]
    assert all(on_tile_edge(n) for n in pools.THD_EDGES) and not any(on_tile_edge(n) for n in pools.SMALL_LENGTHS + pools.THD_SMALL)


# -------------------------------------------------------------------- options
@settings(max_examples=60, **FIXED)
@given(
    dense_cases(
        flavors=("llama",),
        dtypes=("bfloat16",),
        bias=True,
        bias_dtypes=("float32",),
        sinks=False,
        causal=True,
        windows=False,
        scales=False,
        padding=False,
        memory=("bhsd",),
        max_tokens=64,
        off_envelope=False,
    )
)
def test_dense_options_restrict(c):
    assert (c.layout, c.dtype, c.d_qk, c.d_v, c.bias, c.memory) == ("dense", "bfloat16", 128, 128, "float32", "bhsd")
    assert c.causal and not c.sinks and c.scale is None and c.window_left == c.window_right == -1
    assert c.seq_q_lens is None and c.seq_kv_lens is None
    assert c.batch * c.s_q <= 64 and c.batch * c.s_kv <= 64


@settings(max_examples=60, **FIXED)
@given(thd_cases(max_tokens=20, max_seqs=2, zeros=False, offsets=True, flavors=("qwen",), off_envelope=True, max_heads=2))
def test_thd_options_restrict(c):
    assert c.is_thd and flavor_of(c.d_qk, c.d_v) == "qwen" and (c.d_qk, c.d_v) != (256, 256)
    assert 1 <= c.n_seq <= 2 and sum(c.q_lens) <= 20 and sum(c.kv_lens) <= 20
    assert 0 not in c.q_lens + c.kv_lens
    assert min(c.q_base, c.kv_base, c.q_slack, c.kv_slack) > 0
    assert c.h_q <= 2


@pytest.mark.parametrize("mode", ["pool", "free"])
def test_min_batch_bounds_the_batch(mode):
    @settings(max_examples=30, **FIXED)
    @given(dense_cases(min_batch=2, bias=True, geometry=mode))
    def check(c):
        assert c.batch >= 2 and c.bias is not None

    check()


@settings(max_examples=30, **FIXED)
@given(cases(bias=True))
def test_forcing_a_dense_only_feature_leaves_thd_out(c):
    assert not c.is_thd and c.bias is not None


@pytest.mark.parametrize(
    "make",
    [
        lambda: dense_cases(flavors=("mistral",)),
        lambda: dense_cases(dtypes=("float32",)),
        lambda: dense_cases(memory=("sbhd",)),
        lambda: dense_cases(bias_dtypes=("float64",)),
        lambda: dense_cases(min_batch=4),
        lambda: thd_cases(max_tokens=0),
        lambda: cases(layouts=("thd",), bias=True),
    ],
)
def test_bad_options_are_refused(make):
    with pytest.raises(ValueError, match="option"):
        make()


def test_unknown_option_is_a_type_error():
    with pytest.raises(TypeError):
        dense_cases(no_such_option=1)


# ------------------------------------------------------------------ shrinking
_SHRINK = settings(database=None, derandomize=True, max_examples=2000, suppress_health_check=list(HealthCheck))


def test_shrinks_bias_and_causal_to_the_smallest_case():
    c = find(cases(geometry="free"), lambda c: c.bias is not None and c.causal, settings=_SHRINK)
    assert c == Case(
        layout="dense",
        dtype="float16",
        batch=1,
        h_q=1,
        h_kv=1,
        d_qk=64,
        d_v=64,
        s_q=1,
        s_kv=1,
        causal=True,
        bias="float16",
    )


def test_shrinks_to_the_first_tile_edge_past_a_tile():
    c = find(dense_cases(geometry="free"), lambda c: c.s_q > pools.TILE_N, settings=_SHRINK)
    assert (c.batch, c.h_q, c.s_q, c.s_kv, c.bias, c.sinks, c.causal) == (1, 1, pools.TILE_N + 1, pools.TILE_N + 1, None, False, False)


def test_shrinks_thd_to_one_short_sequence_pair():
    """One sequence pair of everyday lengths and nothing else. Not the exact
    pair: (1, 0) sits behind another branch of the length draw (a zero-length
    sequence), which the shrinker reaches or not depending on the draws before
    it, so pinning it would break on any new drawn fact."""
    c = find(thd_cases(geometry="free"), lambda c: c.causal and c.bottom_right and any(q > kv for q, kv in zip(c.q_lens, c.kv_lens)), settings=_SHRINK)
    assert (c.h_q, c.n_seq, c.q_base, c.q_slack, c.kv_base, c.kv_slack, c.sinks, c.window_left) == (1, 1, 0, 0, 0, 0, False, -1)
    assert c.q_lens[0] > c.kv_lens[0] and c.q_lens[0] <= max(pools.THD_SMALL)


# Pool geometry: a failure shrinks to the smallest geometry of its stratum's
# pool that still fails (gptoss fp16: flavor and dtype shrink first), runtime
# facts minimal; `sdpa-conformance repro --shrink-geometry` goes on from there.
def test_pool_shrinks_bias_and_causal_to_the_pools_smallest():
    c = find(cases(geometry="pool"), lambda c: c.bias is not None and c.causal, settings=_SHRINK)
    first = next(g for g in geometry.dense_pool("gptoss", "float16") if g.bias and g.causal)
    assert c == first.case("float16")


def test_pool_shrinks_past_a_tile_to_the_pools_smallest():
    c = find(dense_cases(geometry="pool"), lambda c: c.s_q > pools.TILE_N, settings=_SHRINK)
    first = next(g for g in geometry.dense_pool("gptoss", "float16") if g.s_q > pools.TILE_N)
    assert c == first.case("float16", seq_q_lens=_ones(first.pad_q, first.batch), seq_kv_lens=_ones(first.pad_kv, first.batch))


def test_pool_shrinks_thd_to_a_row_no_smaller_row_fails_with():
    """Where the predicate also reads runtime facts (here the lengths), the
    row is minimal for the example's runtime draws: no smaller row of the pool
    fails with them (Hypothesis' shrinker stops at such a local minimum; a row
    keeps the last n_seq of the drawn sequences)."""
    fails = lambda c: c.causal and c.bottom_right and any(q > kv for q, kv in zip(c.q_lens, c.kv_lens))  # noqa: E731
    c = find(thd_cases(geometry="pool"), fails, settings=_SHRINK)
    rows = geometry.thd_pool("gptoss", "float16")
    row = geometry.ThdGeometry(
        c.h_q,
        c.h_kv,
        c.n_seq,
        c.causal,
        c.bottom_right,
        c.window_left,
        c.sinks,
        1 if c.scale is None else (c.scale > 0) - (c.scale < 0),
        c.lse_log2,
        geometry.extra_of(c),
    )
    assert row in rows and (c.d_qk, c.d_v, c.dtype, c.window_right) == (64, 64, "float16", -1)
    assert c.q_base == c.kv_base == c.q_slack == c.kv_slack == 0 and c.seed == 0
    for smaller in rows[: rows.index(row)]:
        if smaller.n_seq <= c.n_seq:
            assert not fails(smaller.case("gptoss", "float16", q_lens=c.q_lens[-smaller.n_seq :], kv_lens=c.kv_lens[-smaller.n_seq :])), smaller


def _ones(on: bool, batch: int):
    return (1,) * batch if on else None


def test_strategies_never_filter_or_assume():
    """Validity is by construction: rejection sampling would slow generation
    and let shrinking wander into invalid facts."""
    src = pathlib.Path(__file__).resolve().parents[1] / "strategies"
    for path in src.glob("*.py"):
        text = path.read_text()
        assert not re.search(r"\.filter\(|\bassume\(|\breject\(", text), path.name


# ------------------------------------------------------------------- profiles
def test_profile_selection(monkeypatch):
    monkeypatch.delenv(profiles.ENV_VAR, raising=False)
    monkeypatch.delenv("CI", raising=False)
    assert profiles.profile_name() == "dev"
    monkeypatch.setenv("CI", "true")
    assert profiles.profile_name() == "ci"
    monkeypatch.setenv(profiles.ENV_VAR, "nightly")
    assert profiles.profile_name() == "nightly"
    assert profiles.profile_name("dev") == "dev"  # --hypothesis-profile wins
    with pytest.raises(ValueError, match="not registered"):
        profiles.profile_name("no-such-profile")


def test_profiles_settings_and_examples():
    ci = settings.get_profile("ci")
    assert ci.derandomize and ci.deadline is None and ci.print_blob
    assert HealthCheck.too_slow in ci.suppress_health_check
    assert settings.get_profile("dev").max_examples < ci.max_examples < settings.get_profile("nightly").max_examples
    previous = settings._current_profile
    try:
        assert load_profile("ci") == "ci"
        assert examples("numerics") == round(ci.max_examples * profiles.PROFILE_KIND_SCALE["ci"]["numerics"])
        assert 1 <= examples("compile") < examples("contracts") < examples("tails") < examples("numerics")
        assert examples("numerics", "nightly") == settings.get_profile("nightly").max_examples
        with pytest.raises(ValueError, match="kind"):
            examples("bogus")
    finally:
        settings.load_profile(previous)
