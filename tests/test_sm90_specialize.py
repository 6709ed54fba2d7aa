"""kernels.sm90.specialize on the Cases strategies.sm90 draws: the kernels'
own planner (SdpaFwdDslSm90.check_support) takes every one (valid by
construction: nothing is filtered), its TemplateParams say what the Case
says, and the compile key moves with compiled facts only. Planning only:
nothing compiles here (the compile tier is tests/test_compile_tier_sm90.py)."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, find, given, settings

from ground.case import Case
from kernels.sm90.specialize import SCHED_POLICY, compile_key, specialize
from strategies.sm90 import sm90_cases

pytestmark = [pytest.mark.family("sm90"), pytest.mark.cpu_tier]
FIXED = dict(derandomize=True, database=None, deadline=None, suppress_health_check=[HealthCheck.too_slow])
DTYPE_CODES = {"float16": 3, "bfloat16": 2}  # cudnn.frost.tile_dsl.constants DTYPE_FP16 / DTYPE_BF16
NATURAL, LPT, LPT_L2 = 0, 1, 2


def declared_lengths(c: Case):
    """(S_q, S_kv) a plan declares: the tensors' S, or THD's longest sequences."""
    return (max(1, max(c.q_lens)), max(1, max(c.kv_lens))) if c.is_thd else (c.s_q, c.s_kv)


def mapping_problems(c: Case, spec) -> list:
    """Where the planned TemplateParams / compile arguments differ from what ``c`` says."""
    p, out = spec.params, []
    s_q, s_kv = declared_lengths(c)
    unpadded = not c.is_thd and c.seq_q_lens is None and c.seq_kv_lens is None
    scale = c.softmax_scale
    expect = dict(
        dtype_qkv=DTYPE_CODES[c.dtype],
        thd_varlen=c.is_thd,
        has_lse=c.has_lse,
        stats_log2=c.lse_log2,
        pack_gqa=c.pack_gqa,
        qh_per_kh=c.h_q // c.h_kv,
        has_sink=c.sinks,
        scale_mode=(scale > 0) - (scale < 0),
        seq_q_lens_present=c.seq_q_lens is not None,
        seq_kv_lens_present=c.is_thd or c.seq_kv_lens is not None,
    )
    out += [f"{k}: {getattr(p, k)!r} != {v!r}" for k, v in expect.items() if getattr(p, k) != v]
    # The band: a bound at or past S_q + S_kv masks nothing; the right bound of a causal Case is R (0: the diagonal).
    envelope = s_q + s_kv
    left = c.window_left if 0 <= c.window_left < envelope else None
    right = max(c.window_right, 0) if c.causal else None
    right = right if right is not None and right < envelope else None
    planned = (p.window_left, 0 if p.causal else p.window_right)
    if planned != (left, right):
        out.append(f"band (left, right) {planned} != {(left, right)}")
    if left is None and right is None:
        if p.causal or p.bottom_right is not None:
            out.append("no band, yet causal / an alignment")
    elif not (unpadded and s_q == s_kv):  # square unpadded: top-left is bottom-right
        aligned = p.causal if p.bottom_right is None else p.bottom_right
        if aligned != c.bottom_right:
            out.append(f"alignment bottom-right {aligned} != {c.bottom_right}")
    if c.sched == "auto":
        want = {NATURAL} if c.is_thd or not c.causal else {LPT, LPT_L2}  # auto: natural unless causal
    else:
        want = {SCHED_POLICY[c.sched]}
    if p.sched_policy not in want:
        out.append(f"sched_policy {p.sched_policy} not in {want}")
    geometry = (spec.batch, spec.h_q, spec.h_kv, spec.s_q, spec.s_kv, spec.d_qk, spec.d_v)
    if geometry != (c.n_seq, c.h_q, c.h_kv, s_q, s_kv, c.d_qk, c.d_v):
        out.append(f"geometry {geometry}")
    if (spec.lse_stride is None) == c.has_lse:
        out.append(f"lse_stride {spec.lse_stride} with has_lse={c.has_lse}")
    if spec.scale != scale:
        out.append(f"scale {spec.scale} != {scale}")
    return out


def runtime_variant(c: Case) -> Case:
    """``c`` with runtime facts changed (data seed, the scale's magnitude,
    dense padding lengths, the K/V side of a THD pack)."""
    out = c.replace(seed=c.seed + 1, scale=None if c.scale is None else c.scale * 2.0)
    if c.seq_kv_lens is not None:
        out = out.replace(seq_q_lens=tuple(c.s_q - n for n in c.seq_q_lens), seq_kv_lens=tuple(c.s_kv - n for n in c.seq_kv_lens))
    if c.is_thd:
        out = out.replace(kv_lens=tuple(reversed(c.kv_lens)), kv_slack=c.kv_slack + 3)
    return out


def compiled_variants(c: Case):
    """``c`` with one compiled fact changed, each keeping the Case valid."""
    yield c.replace(dtype="bfloat16" if c.dtype == "float16" else "float16")
    yield c.replace(sinks=not c.sinks)
    yield c.replace(d_v=c.d_v + 8 if c.d_v < 512 else c.d_v - 8)
    yield c.replace(has_lse=False, lse_log2=False, lse_layout="compact") if c.has_lse else c.replace(has_lse=True)
    if c.scale not in (None, 0.0):
        yield c.replace(scale=-c.scale)


DRAWS = sm90_cases() | sm90_cases(head_dims="free")


def assert_planned_as_it_says(c: Case) -> None:
    assert c.structural_problem() is None
    spec = specialize(c)  # raises what check_support raises
    assert mapping_problems(c, spec) == [], c.describe()
    assert runtime_variant(c) != c and compile_key(runtime_variant(c)) == spec.key, c.describe()
    for other in compiled_variants(c):
        assert compile_key(other) != spec.key, (c.describe(), other.describe())


@settings(max_examples=200, **FIXED)
@given(DRAWS)
def test_the_planner_takes_every_drawn_case_as_the_case_says(c):
    assert_planned_as_it_says(c)


# Every value of every mapped fact, as a predicate on a drawn Case.
REACH = {
    **{
        f"{name}={value!r}": (lambda c, n=name, v=value: getattr(c, n) == v)
        for name, values in dict(
            layout=("dense", "thd"),
            dtype=("float16", "bfloat16"),
            causal=(False, True),
            bottom_right=(False, True),
            has_lse=(False, True),
            lse_log2=(False, True),
            pack_gqa=(False, True),
            sinks=(False, True),
            sched=tuple(SCHED_POLICY),
        ).items()
        for value in values
    },
    "window_left>=0": lambda c: c.window_left >= 0,
    "window_right>0": lambda c: c.window_right > 0,
    "padded": lambda c: c.seq_q_lens is not None,
    "gqa": lambda c: c.h_q != c.h_kv,
    "scale<=0": lambda c: (c.scale or 1.0) <= 0,
    "d_qk!=d_v": lambda c: c.d_qk != c.d_v,
}


@pytest.mark.parametrize("fact", REACH)
def test_the_draws_reach_every_mapped_value(fact):
    """The strategy reaches every value of every mapped fact, and the plan of
    that draw says what it says: searched for (find), so the verdict does not
    hang on which draws one engine's derandomized order happens to make."""
    assert_planned_as_it_says(find(DRAWS, REACH[fact], settings=settings(max_examples=2000, **FIXED)))


def test_mapping_problems_can_fail():
    """A plan of another Case is caught: the mapping check has power."""
    c = Case(family="sm90", s_q=64, s_kv=128, h_q=4, h_kv=2, causal=True)
    assert mapping_problems(c, specialize(c)) == []
    for other in (
        c.replace(dtype="bfloat16"),
        c.replace(causal=False),
        c.replace(bottom_right=True),
        c.replace(window_left=8),
        c.replace(window_right=4),
        c.replace(has_lse=False),
        c.replace(lse_log2=True),
        c.replace(sinks=True),
        c.replace(pack_gqa=True),
        c.replace(h_q=2),
        c.replace(sched="lpt"),
        c.replace(scale=-0.5),
        c.replace(s_kv=64),
        c.replace(d_v=128),
    ):
        assert mapping_problems(c, specialize(other)) != [], other.describe()


def test_a_vacuous_band_is_no_band():
    """A window at or past S_q + S_kv masks nothing: the planner drops it, and so does the expectation."""
    c = Case(family="sm90", s_q=64, s_kv=64, window_left=128)
    p = specialize(c).params
    assert p.window_left is None and not p.causal and p.bottom_right is None and mapping_problems(c, specialize(c)) == []


def test_thd_head_major_stats_pitch_is_in_the_compile_key():
    """Observed: a THD plan's head-major Stats pitch is T_q (the (H, T_q) Stats), and the template keys its
    compile on it (its THD Stats head stride is compile-time), so a new packed Q total is a new compile
    unless the Stats are token-major or absent. The Case facts call q_slack / q_lens runtime (ground.case)."""
    c = Case(family="sm90", layout="thd", q_lens=(5, 9), kv_lens=(7, 3), h_q=4, h_kv=2)
    more = c.replace(q_slack=3)
    assert specialize(c).lse_stride == (0, c.t_q, 1) and compile_key(more) != compile_key(c)
    for stats in (dict(lse_layout="token_major"), dict(has_lse=False)):
        assert compile_key(c.replace(**stats)) == compile_key(more.replace(**stats))


def test_the_simplest_case_is_the_plain_dense_one():
    """Under the pools (row 0 is a hand row) and over free geometry alike."""
    for mode in ("pool", "free"):
        plain = find(sm90_cases(geometry=mode), lambda c: c.layout == "dense", settings=settings(**FIXED))
        assert plain == Case(family="sm90"), mode
        causal = find(sm90_cases(geometry=mode), lambda c: c.causal, settings=settings(**FIXED))
        assert causal == Case(family="sm90", causal=True), mode


def test_pooled_draws_keep_their_rows_compile_keys():
    """A pooled Case is a row with runtime facts drawn: its compile key is the row's, so a run compiles at most the rows."""
    from strategies.sm90 import pool_rows

    keys = {compile_key(r) for layout in ("dense", "thd") for r in pool_rows(layout)}
    # Runtime facts do vary: padding lengths and scale magnitudes no row holds.
    row_lens = {r.seq_q_lens for r in pool_rows("dense")}
    for varied in (lambda c: c.seq_q_lens not in row_lens, lambda c: c.scale is not None and abs(c.scale) not in (0.0, 0.125)):
        assert compile_key(find(sm90_cases(geometry="pool"), varied, settings=settings(max_examples=300, **FIXED))) in keys

    @settings(max_examples=60, **FIXED)
    @given(sm90_cases(geometry="pool"))
    def every(case):
        assert compile_key(case) in keys

    every()


@pytest.mark.parametrize("bad", [dict(layouts=("paged",)), dict(dtypes=("float32",)), dict(head_dims="any"), dict(pack_gqa=True)])
def test_the_strategy_refuses_options_outside_the_family(bad):
    with pytest.raises(ValueError, match="option"):
        sm90_cases(**bad)


def test_scale_default_is_the_planners():
    c = Case(family="sm90", d_qk=128, d_v=64)
    assert specialize(c).scale == 1.0 / math.sqrt(128)


@pytest.mark.parametrize("layout", ("dense", "thd"))
def test_kill_searches_meet_every_reach_row(layout):
    """Searches of 40 draws (the sm90 numerics kinds' ci count), ten of them
    under fixed seeds, each meet the compile key of every row that reaches what
    the covering rows seldom hold (``REACH_ROWS``: Q lengths past S_kv, PackGQA
    under a causal mask and under LPT_L2, distinct THD origins) in at least 9
    of the 10. Drawn uniformly among every pooled row, a reach row was missed
    by such a search about one time in four."""
    from hypothesis import Phase
    from hypothesis import seed as fixed_seed

    from strategies.sm90 import REACH_ROWS

    met = {compile_key(row): 0 for row in REACH_ROWS[layout]}
    for run in range(10):
        keys = set()

        @fixed_seed(run)
        @settings(max_examples=40, database=None, phases=[Phase.generate], suppress_health_check=list(HealthCheck))
        @given(sm90_cases(layouts=(layout,), geometry="pool"))
        def search(case):
            keys.add(compile_key(case))

        search()
        for key in met.keys() & keys:
            met[key] += 1
    weak = {row.describe(): met[compile_key(row)] for row in REACH_ROWS[layout] if met[compile_key(row)] < 9}
    assert not weak, weak


def window_edge_is_live(c: Case) -> bool:
    """A live Q row whose left window's first key (q + delta - W) is a live key: where a window bound
    off by one changes the output (the mutant sm90_window_bound_off_by_one)."""
    if c.window_left < 0 or specialize(c).params.window_left is None:
        return False
    for q_len, kv_len in zip(c.q_lengths(), c.kv_lengths()):
        for q in range(q_len):
            key = (q + kv_len - q_len if c.bottom_right else q) - c.window_left
            if 0 <= key < kv_len:
                return True
    return False


def test_kill_searches_meet_a_live_window_edge():
    """Ten seeded 40-draw dense searches (sm90_numerics_dense's ci count) each
    draw a Case whose left window's first key is live (where a window bound
    off by one shows). Drawn uniformly among the pooled rows (4 of 30 dense
    rows hold a left window), the kill harness's own seeded search of
    sm90_numerics_dense drew no windowed Case in 40; the mask is now drawn
    first every other draw (strategies.sm90.mask_of), and that search draws 6."""
    from hypothesis import Phase
    from hypothesis import seed as fixed_seed

    edges = []
    for run in range(10):
        edge = []

        @fixed_seed(run)
        @settings(max_examples=40, database=None, deadline=None, phases=[Phase.generate], suppress_health_check=list(HealthCheck))
        @given(sm90_cases(layouts=("dense",), geometry="pool"))
        def search(case):
            edge.append(window_edge_is_live(case))

        search()
        edges.append(sum(edge))
    assert min(edges) > 0, edges
