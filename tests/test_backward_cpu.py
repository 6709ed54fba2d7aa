"""The backward properties on the CPU: the emulated backward (its arithmetic
as the SM80 kernel does it, tests/kernel_emulation.py) passes the error
model on every feature, from reference O/LSE and from the emulated forward;
each planted bug fails it (the property's power); determinism fails on a
launch that is not bitwise repeatable; the backward strategies reach every
backward-only value."""

from __future__ import annotations

import pathlib
from contextlib import contextmanager
from unittest import mock

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ground.case import Case
from ground.coverage import BACKWARD_REQUIRED, labels
from ground.outcome import PropertyFailure
from properties import backward as bwd_prop
from strategies import backward_cases
from tests.kernel_emulation import BwdPlant, EmulatedBackward


@contextmanager
def on_cpu():
    with mock.patch.object(bwd_prop, "device", lambda: torch.device("cpu")):
        yield


def _bwd(**kw):
    return Case(direction="bwd", **{"d_qk": 64, "d_v": 64, "seed": 7, **kw})


CASES = [
    _bwd(s_q=70, s_kv=130, h_q=2, h_kv=2),
    _bwd(dtype="bfloat16", s_q=65, s_kv=64, causal=True, h_q=4, h_kv=2),
    _bwd(s_q=40, s_kv=90, causal=True, bottom_right=True, window_left=16, h_q=3, h_kv=1, d_qk=128, d_v=128),
    _bwd(batch=2, s_q=33, s_kv=70, seq_q_lens=(33, 5), seq_kv_lens=(70, 0), causal=True, bottom_right=True),
    _bwd(batch=2, s_q=20, s_kv=30, bias="float32", bias_batch=1, h_q=2, h_kv=1),
    _bwd(batch=2, s_q=20, s_kv=30, bias="float16", bias_batch=2, memory="bshd_padded"),
    _bwd(batch=2, s_q=50, s_kv=17, sinks=True, causal=True, scale=0.3, d_qk=96, d_v=64),
    _bwd(dtype="bfloat16", s_q=64, s_kv=64, sinks=True, bias="float32", window_left=3, causal=True, window_right=2, memory="bhsd"),
    # scale 6: P down to 2^-126 (ex2.ftz) and dS' below it, where atom.add.f32 flushes dBias to 0 (seen on the H200)
    _bwd(dtype="bfloat16", batch=2, s_q=40, s_kv=65, bias="float32", bias_batch=2, scale=6.0),
    # dBias in the I/O dtype: the fp32 accumulator cast once (prepared_host.py:183)
    _bwd(batch=3, s_q=20, s_kv=30, bias="float16", bias_batch=1, dbias_dtype="io", causal=True),
    _bwd(dtype="bfloat16", batch=2, s_q=33, s_kv=40, bias="float32", bias_batch=2, dbias_dtype="io", scale=0.3),
]


# THD packs: the emulated backward per sequence (a sequence with no Q row, one with no key, GQA, sinks, windows).
THD_CASES = [
    _bwd(layout="thd", batch=2, q_lens=(65, 1), kv_lens=(3, 0), q_base=5, kv_base=8, q_slack=8, kv_slack=6),
    _bwd(layout="thd", batch=3, q_lens=(40, 0, 70), kv_lens=(90, 5, 64), h_q=4, h_kv=2, causal=True, bottom_right=True, sinks=True),
    _bwd(layout="thd", batch=2, q_lens=(33, 12), kv_lens=(20, 40), dtype="bfloat16", window_left=8, causal=True, scale=0.3),
]


def backward(case, bwd=BwdPlant()):
    with on_cpu():
        return bwd_prop.check_backward(case, EmulatedBackward(bwd=bwd))


@pytest.mark.parametrize("source", ["reference", "kernel"])
@pytest.mark.parametrize("case", CASES + THD_CASES, ids=lambda c: c.describe())
def test_emulated_backward_is_within_the_model(case, source):
    obs = backward(case.replace(inputs_from=source))
    assert obs.outcome == "passed" and obs.ratios and all(r <= 1.0 for r in obs.ratios.values()), obs.ratios


# (plant, a case that reaches it, the gradient that must fail)
POWER = [
    (BwdPlant(gqa_one_head=True), CASES[1], "dk"),
    (BwdPlant(mask_off=True), CASES[1], "dq"),
    (BwdPlant(mask_off=True), CASES[2], "dq"),
    (BwdPlant(ds_unscaled=True), CASES[0], "dq"),
    (BwdPlant(dsink_log2=True), CASES[6], "dsink"),
    (BwdPlant(dsink_exp2_natural=True), CASES[6], "dsink"),  # bwd_dsink_log2_units' arithmetic
    (BwdPlant(dbias_batch0=True), CASES[4], "dbias"),
    (BwdPlant(dbias_per_batch=True), CASES[4], "dbias"),
    (BwdPlant(dbias_io=True), CASES[4], "dbias"),
    (BwdPlant(dbias_io=True), CASES[8], "dbias"),
    (BwdPlant(dbias_p_io=True), CASES[5], "dbias"),
    (BwdPlant(dbias_from_ds=True), CASES[4], "dbias"),
    (BwdPlant(dbias_scaled=True), CASES[7], "dbias"),
    (BwdPlant(dbias_per_batch=True), CASES[9], "dbias"),
    (BwdPlant(dbias_scaled=True), CASES[10], "dbias"),
    (BwdPlant(dq_relay_drop=True), CASES[0], "dq"),
    (BwdPlant(gqa_one_head=True), THD_CASES[1], "dk"),
    (BwdPlant(mask_off=True), THD_CASES[1], "dq"),
    (BwdPlant(dsink_log2=True), THD_CASES[1], "dsink"),
    (BwdPlant(ds_unscaled=True), THD_CASES[2], "dq"),
]


@pytest.mark.parametrize("plant,case,quantity", POWER, ids=lambda x: repr(x)[:60] if isinstance(x, BwdPlant) else None)
def test_every_planted_backward_bug_fails(plant, case, quantity):
    with pytest.raises(PropertyFailure) as e:
        backward(case, plant)
    named = {e.value.detail.get("quantity")} | {f.detail.get("quantity") for f in getattr(e.value, "failures", [])}
    assert quantity in named, e.value.summary


def test_the_dbias_flush_term_is_load_bearing(monkeypatch):
    """The emulated kernel flushes a subnormal dS' out of dBias as atom.add.f32
    does: within the model with its flush term, over the model without it."""
    from ground import tolerances

    case = CASES[8]
    assert backward(case).ratios["dbias"] <= 1.0
    monkeypatch.setattr(tolerances, "dbias_flush", lambda p, p_err, vis: torch.zeros_like(p))
    with pytest.raises(PropertyFailure, match="(?i)dbias"):
        backward(case)


def test_determinism_holds_for_a_repeatable_launch_and_fails_otherwise():
    case = CASES[1].replace(deterministic=True)
    with on_cpu():
        assert bwd_prop.check_determinism(case, EmulatedBackward()).outcome == "passed"
        with pytest.raises(PropertyFailure, match="differ bitwise"):
            bwd_prop.check_determinism(case, EmulatedBackward(bwd=BwdPlant(noisy=True)))


def test_a_deterministic_backward_example_is_judged_bitwise_too():
    """check_backward launches a deterministic Case twice and fails a
    non-repeatable kernel under the determinism check (the ci run's only
    determinism verdicts); a default-mode Case launches once, no such check."""
    case = CASES[1].replace(deterministic=True)
    with on_cpu():
        adapter = EmulatedBackward()
        obs = bwd_prop.check_backward(case, adapter)
        assert obs.outcome == "passed" and adapter.launches == 2 and obs.notes["launches"] == 2
        with pytest.raises(PropertyFailure, match="differ bitwise") as failed:
            bwd_prop.check_backward(case, EmulatedBackward(bwd=BwdPlant(noisy=True)))
        assert failed.value.property == "determinism" and failed.value.check == "bitwise"
        noisy = EmulatedBackward(bwd=BwdPlant(noisy=True))
        bwd_prop.check_backward(case.replace(deterministic=False), noisy)
        assert noisy.launches == 1


def test_the_model_is_not_vacuous():
    """Bounds stay well below the gradients' own size: a ratio near 1 is information."""
    obs = backward(CASES[0])
    assert 0 < max(obs.ratios.values()) <= 1.0


def test_backward_strategies_reach_every_backward_value_and_are_servable():
    seen = set()

    @settings(max_examples=120, database=None, derandomize=True, suppress_health_check=list(HealthCheck))
    @given(backward_cases(geometry="pool"))
    def collect(c):
        assert c.is_bwd and c.structural_problem() is None and c.d_qk >= c.d_v and not c.lse_log2
        assert c.scale is None or c.scale > 0
        seen.update(labels(c))

    collect()
    assert sorted(BACKWARD_REQUIRED - seen) == []


def test_the_backward_strategies_leave_out_the_two_unordered_atomics_races():
    """Deterministic draws never hold what the race findings describe (a
    broadcast bias over B > 1: bwd-deterministic-dbias-broadcast; sinks with
    three or more batch entries / sequences with Q rows:
    bwd-deterministic-dsink-atomics), so every deterministic draw's bitwise
    check is live; deterministic draws with sinks remain (two units or fewer)."""
    from ground.findings import DERIVED

    kept = []

    @settings(max_examples=300, database=None, derandomize=True, suppress_health_check=list(HealthCheck))
    @given(backward_cases(geometry="pool"))
    def collect(c):
        if c.deterministic:
            assert not DERIVED["bias_broadcast_over_batch"][0](c) and not DERIVED["dsink_unordered_sum"][0](c), c.describe()
            kept.append(c.sinks)

    collect()
    assert any(kept) and not all(kept)


@pytest.mark.compile
def test_the_backward_compile_key_mutant_is_killed_by_the_cpu_tier(tmp_path, monkeypatch):
    """compile_reuse (launch=False) on the backward: the pristine packed chain
    reuses its artifact across token totals; the mutant whose key carries the
    Q token capacity recompiles and fails."""
    from kernels.mutants import by_name
    from kernels.prepared import PreparedAdapter
    from properties import check_compile_reuse

    monkeypatch.setenv("CUDNN_FRONTEND_COMPILED_CACHE", str(tmp_path / "compiled"))
    mutant = by_name("bwd_thd_key_token_totals")
    probe = Case(**mutant.probe)
    assert check_compile_reuse(probe, PreparedAdapter(rewrites=()), launch=False).outcome == "passed"
    with pytest.raises(PropertyFailure, match="new token totals"):
        check_compile_reuse(probe, PreparedAdapter(rewrites=mutant.rewrites), launch=False)


@pytest.mark.compile
def test_the_backward_compile_key_is_the_frontends():
    """kernels.backward.compile_key (what reports and tools/count_compile_keys.py
    count) splits backward Cases exactly where the frontend's own cache key
    does: no key per THD head dim the flavor width absorbs (it did: 427 keys
    for the ci draws' 343), none merged, a THD Case's two output modes apart
    (the no-init chain is an artifact of its own: merged, a report counted its
    compiles as repeats), and a THD Case handed from token 0 (the
    addressing property's call) under the key of the Case's own origin, as the
    frontend keys it. Nothing is compiled."""
    from kernels import get_adapter
    from kernels.backward import compile_key, frontend_cache_keys

    adapter, ours, theirs = get_adapter("prepared"), {}, {}

    @settings(max_examples=200, derandomize=True, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(st.one_of(backward_cases(geometry="pool"), backward_cases(layouts=("thd",), flavors=("gptoss",), dtypes=("float16",), geometry="pool")))
    def collect(case):
        for init in (True, False) if case.is_thd else (True,):
            real, key = frontend_cache_keys(adapter, case, initialize_outputs=init), compile_key(case, initialize_outputs=init)
            assert real and all(real)
            ours.setdefault(key, set()).add(real)
            theirs.setdefault(real, set()).add(key)
        if case.is_thd:
            assert frontend_cache_keys(adapter, case, addressing="forward") == frontend_cache_keys(adapter, case)

    collect()
    assert all(len(v) == 1 for v in ours.values()), "compile_key merges Cases the frontend compiles apart"
    assert all(len(v) == 1 for v in theirs.values()), "compile_key splits Cases the frontend compiles once"
    assert len(theirs) > 20


def test_the_backward_model_assumes_the_installed_arithmetic():
    """The lines of the backward kernel whose arithmetic backward_bounds charges."""
    from kernels.source import TARGETS, package_root

    src = (package_root() / TARGETS["bwd_f16"]).read_text()
    for line in (
        "p0 = cute.math.exp2(s0 - lse0, fastmath=True)",  # P recomputed in fp32 from the handed LSE (ex2.approx)
        "h01 = fp32_to_fp16(p0, p1, dtype=io_dtype)",  # P rounded to the I/O dtype for the dV mma
        "db0 = (acc1[off + 0] - dd0) * p0",  # dS' in fp32, unrounded P
        "_atomic_add_f32(_dbias_ptr + bias_base + cutlass.Int64(qc0) * cutlass.Int64(SKV) + kv_a, db0)",  # dBias += dS', unscaled
        '"atom.global.add.f32 $0, [$1], $2;"',  # ... by atom.add.f32, which flushes subnormals (tolerances.dbias_flush)
        "ds0 = attn_scale * db0",  # dS = scale dS'
        "bmm2_a[nf * 2 + 0] = fp32_to_fp16(ds0, ds1, dtype=io_dtype)",  # dS rounded for the dK mma
        "_atomic_add_f32(dQ_view.data_ptr() + gaddr, val)",  # dQ across KV tiles: fp32 atomics
        "term = cute.math.exp2((sink_h - lse_q) * cutlass.Float32(_LOG2E), fastmath=True) * dd_q",  # dSink, natural units
    ):
        assert line in src, f"backward_bounds assumes `{line}`"
    assert "acc = acc + Pointer(src + in_base + cutlass.Int64(g)" in src  # GQA: io partials summed in fp32


@pytest.mark.parametrize("impostor", ["accepts", "other message", "other exception"])
def test_backward_rejection_fails_on_a_wrapper_that_does_not_refuse_as_stated(impostor):
    """Power of the contract rows: an entry that accepts the call, or refuses it
    without naming the argument, or with another exception type, fails."""
    import cudnn.sdpa.bwd as bwd_pkg

    from ground.contracts import BWD_RULES
    from properties import check_backward_rejection

    def wrapper(*args, **kwargs):
        if impostor == "other message":
            raise NotImplementedError("unsupported")
        if impostor == "other exception":
            raise RuntimeError("bias_tensor")
        return {}

    rule = next(r for r in BWD_RULES if r.name == "bwd_thd_bias")
    bwd_pkg.sdpa_bwd_wrapper_sm80  # resolve the lazy export before patching it
    with mock.patch.object(bwd_pkg, "sdpa_bwd_wrapper_sm80", wrapper), pytest.raises(PropertyFailure):
        check_backward_rejection(rule.case())


def test_backward_sources_patch_only_while_active_and_restore():
    from cudnn.sdpa.bwd import api_dsl, prepared_sm80
    from cudnn.sdpa.bwd.kernels.sm80 import prepared_host

    from kernels.mutants import by_name
    from kernels.source import backward_sources

    before = (
        api_dsl._load_sm80_bwd_module,
        prepared_host.compile_host,
        prepared_host.workspace_regions,
        prepared_sm80.build_spec,
        api_dsl._SM80_BWD_KERNEL_MOD.get("d64"),
    )
    with backward_sources(()):
        assert prepared_host.compile_host is before[1]  # no rewrites: nothing changes
    rewrites = sum((by_name(n).rewrites for n in ("bwd_gqa_fold_first_head", "bwd_causal_mask_dropped", "bwd_thd_key_token_totals", "bwd_d64_ds_unscaled")), ())
    with backward_sources(rewrites):
        assert api_dsl._load_sm80_bwd_module is not before[0] and prepared_host.compile_host is not before[1]
        assert prepared_host.workspace_regions is not before[2] and prepared_sm80.build_spec is not before[3]
        assert "ds0 = (acc_dP[off + 0] - dd_t)" in open(api_dsl._SM80_BWD_KERNEL_MOD["d64"].__file__).read()
    after = (
        api_dsl._load_sm80_bwd_module,
        prepared_host.compile_host,
        prepared_host.workspace_regions,
        prepared_sm80.build_spec,
        api_dsl._SM80_BWD_KERNEL_MOD.get("d64"),
    )
    assert after == before


def _d64_served(c: Case) -> bool:
    """The backward's own kernel selection (api_dsl._sm80_d64_fast_path_eligible) for Case ``c``."""
    from cudnn.sdpa.bwd.api_dsl import _sm80_d64_fast_path_eligible

    if c.is_thd:
        return False
    features = dict(
        seq_kv_lens=c.seq_kv_lens, seq_len_q=c.seq_q_lens, bias=c.bias, sinks=c.sinks or None, rope_freqs=c.rope or None, deterministic=c.deterministic
    )
    return _sm80_d64_fast_path_eligible(
        d_qk=c.d_qk,
        d_v=c.d_v,
        h_q=c.h_q,
        h_kv=c.h_kv,
        s_q=c.s_q,
        s_kv=c.s_kv,
        mask_token="none" if not (c.causal or c.window_left >= 0) else "masked",
        right_bound=max(c.window_right, 0),
        causal_bottom_right=c.bottom_right,
        bw_kwargs=features,
    )


@pytest.mark.parametrize("flavor, reaches", [("gptoss", True), ("llama", False)])
def test_the_backward_strategy_reaches_the_d64_kernel(flavor, reaches):
    """The dedicated d=64 backward kernel (bprop_d64_f16.py), asked of the
    kernel's own selection rule: the gptoss strata's backward draws reach it
    often (the forward pool rows alone: 3 of these 150 draws), deterministic draws
    never do (the rule refuses them)."""
    seen = {"d64": 0, "det_d64": 0}

    @settings(max_examples=150, derandomize=True, database=None, deadline=None, suppress_health_check=list(HealthCheck))
    @given(backward_cases(layouts=("dense",), flavors=(flavor,)), backward_cases(layouts=("dense",), flavors=(flavor,), deterministic=True))
    def draw(c, det):
        seen["d64"] += _d64_served(c)
        seen["det_d64"] += _d64_served(det)

    draw()
    # At least 5 of 150 (the pool alone: about 1 in 200); none off gptoss or deterministic.
    assert (seen["d64"] >= 5 if reaches else seen["d64"] == 0) and seen["det_d64"] == 0, seen


# ------------------------------------------------------------------ tails
# Dense Cases that reach every tail rule: padded rows on both sides (a zero-length
# entry on each), GQA, a broadcast and a per-batch bias, pad columns, sinks.
TAIL_CASES = [
    _bwd(
        batch=2,
        s_q=40,
        s_kv=70,
        seq_q_lens=(40, 0),
        seq_kv_lens=(33, 70),
        h_q=4,
        h_kv=2,
        bias="float32",
        bias_batch=1,
        memory="bshd_padded",
        sinks=True,
        causal=True,
    ),
    _bwd(dtype="bfloat16", batch=3, s_q=65, s_kv=30, seq_q_lens=(7, 65, 20), seq_kv_lens=(30, 1, 0), bias="bfloat16", bias_batch=3, d_qk=128, d_v=64),
]


def tails(case, adapter, **kw):
    from properties import backward_tails

    with mock.patch.object(backward_tails, "device", lambda: torch.device("cpu")):
        return backward_tails.check_backward_tails(case, adapter, **kw)


@pytest.mark.parametrize("case", TAIL_CASES, ids=lambda c: c.describe())
def test_emulated_backward_keeps_the_dense_tails(case):
    """NaN in every padded row of Q, K, V, dO, O, LSE and in dead bias cells:
    no gradient element reads it, padded rows and dead cells are 0, pad
    columns keep the caller's bytes (each region judged, none empty)."""
    obs = tails(case, EmulatedBackward())
    checked = obs.notes["checked_elements"]
    assert obs.outcome == "passed" and all(checked[f"{g} padded rows"] for g in ("dq", "dk", "dv")) and checked["dbias dead cells"]


def test_a_passing_tails_example_reads_the_device_twice_while_judged():
    """Its judging waits for the device twice, whatever the rules: once for
    the elements each check judged (notes), once for every check's verdict.
    On a GPU that 16 workers share each read waits for this process's turn;
    the eager checks and per-rule counts made 18.6 per example on the ci draws."""
    from tools.count_model_ops import judging_ops

    obs = []
    k = judging_ops(lambda: obs.append(tails(TAIL_CASES[0], EmulatedBackward())))
    assert obs[0].outcome == "passed" and k.syncs == 2, k.syncs


# (plant, the tail case that reaches it, the check that must fail, the gradient it names)
TAIL_POWER = [
    (BwdPlant(reads_padded_kv=True), TAIL_CASES[0], "no nan", "dq"),  # a padded K/V row read: NaN x 0 reaches live dQ
    (BwdPlant(reads_padded_kv=True), TAIL_CASES[1], "no nan", "dq"),
    (BwdPlant(padded_q_rows_unwritten=True), TAIL_CASES[1], "capacity", "dq"),  # a padded dQ row left as the caller's
    (BwdPlant(pad_columns_written=True), TAIL_CASES[0], "pad columns", "dq"),  # a tail it must leave, clobbered
]


@pytest.mark.parametrize("plant,case,check,quantity", TAIL_POWER, ids=lambda x: repr(x)[:60] if isinstance(x, BwdPlant) else None)
def test_every_planted_tail_bug_fails(plant, case, check, quantity):
    from ground import findings

    with findings.applied([]), pytest.raises(PropertyFailure) as e:  # the property's power, no finding in force (the H200's kernel has two)
        tails(case, EmulatedBackward(bwd=plant))
    failed = [(e.value.check, e.value.detail.get("quantity"))] + [(f.check, f.detail.get("quantity")) for f in getattr(e.value, "failures", [])]
    assert (check, quantity) in failed, e.value.summary


class _PackedChainStub:
    """A THD backward that writes what the packed chain writes, restated from
    the source (not from TAIL_RULES), on buffers handed from cu_seqlens[0]
    (kernels.backward.thd_origin: the chain addresses what it is handed from
    token 0, cudnn/frost/tile_dsl/thd.py:115-127): initialize_outputs zeroes
    the handed dQ and, for GQA, dK/dV whole (prepared_host.py:287-293); the dQ
    cast and the GQA fold write every handed row below cu[n_seq] from their
    accumulators (bprop_f16.py:1609, 1701): dQ's zeroed, the GQA partial's
    rows of no sequence ``scratch``; MHA dK/dV and every live row are stored
    at their sequence only. Live rows get finite values computed from the
    live inputs alone. ``own``: returns fresh buffers (torch.empty_like, as
    the public wrapper does) instead of writing the caller's. Plants:
    ``mha_tails_zeroed`` (a tail it must leave, zeroed), ``dq_tail_kept``
    (initialize_outputs skips dQ), ``reads_tail`` (live dQ rows add the token
    after the last sequence), ``head_written`` (rows before cu[0], never
    handed, written: a chain that ignores where it was handed its buffers)."""

    name = "packed-stub"

    def __init__(self, scratch=0.0, own=False, mha_tails_zeroed=False, dq_tail_kept=False, reads_tail=False, head_written=False):
        self.scratch, self.own, self.plants = scratch, own, (mha_tails_zeroed, dq_tail_kept, reads_tail, head_written)
        self.supports = frozenset() if own else frozenset({"caller-outputs", "no-init"})

    def backward(self, case, inputs, o, lse, do, grads=None, *, initialize_outputs=True):
        from kernels.base import KernelResult

        mha_tails_zeroed, dq_tail_kept, reads_tail, head_written = self.plants
        gqa = case.h_q != case.h_kv
        out = {n: (torch.empty_like(t).normal_() if self.own else t) for n, t in grads.items()}  # own: garbage where unwritten
        origin = {"dq": case.q_base, "dk": case.kv_base, "dv": case.kv_base}  # where the buffers were handed from
        if initialize_outputs:
            for name in ("dq",) * (not dq_tail_kept) + ("dk", "dv") * gqa:
                out[name][origin[name] :].zero_()
        for name, live, cu, x in (
            ("dq", inputs.q_live, case.cu_seqlens("q"), inputs.q),
            ("dk", inputs.kv_live, case.cu_seqlens("kv"), inputs.k),
            ("dv", inputs.kv_live, case.cu_seqlens("kv"), inputs.v),
        ):
            if mha_tails_zeroed and not gqa and name != "dq":
                out[name][origin[name] :].zero_()
            if name == "dq" or gqa:
                out[name][origin[name] : cu[-1]] = 0.0 if name == "dq" else self.scratch
            if head_written:
                out[name][: origin[name]] = 0.0
            value = x[live].float().sum(-1, keepdim=True).mean(1, keepdim=True).expand(-1, *out[name].shape[1:])
            if reads_tail and name == "dq":
                value = value + x[cu[-1] : cu[-1] + 1].float().sum()
            out[name][live] = value.to(out[name].dtype)
        if "dsink" in out:
            out["dsink"].fill_(0.25)
        return KernelResult(o, lse, notes={"adapter": self.name, "direction": "bwd"}, grads=out)


def _thd(**kw):
    return _bwd(layout="thd", batch=2, q_lens=(65, 1), kv_lens=(3, 0), q_base=5, kv_base=8, q_slack=8, kv_slack=6, **kw)


THD_TAIL = {"gqa": _thd(h_q=4, h_kv=2, sinks=True), "mha": _thd(h_q=2, h_kv=2)}


@pytest.mark.parametrize("init", [True, False], ids=["init", "no-init"])
@pytest.mark.parametrize("heads", THD_TAIL)
def test_the_packed_chains_tails_pass(heads, init):
    obs = tails(THD_TAIL[heads], _PackedChainStub(), initialize_outputs=init)
    assert obs.outcome == "passed" and all(obs.notes["checked_elements"][f"{g} {r}"] for g in ("dq", "dk", "dv") for r in ("head", "tail"))


class _LiveNoiseStub(_PackedChainStub):
    """The packed-chain stub returning its own gradients (launch-dependent
    tails, as the public wrapper's empty_like ones), whose second launch
    also changes one live dK element."""

    def __init__(self):
        super().__init__(own=True)
        self.launches = 0

    def backward(self, case, inputs, o, lse, do, grads=None, **kw):
        result = super().backward(case, inputs, o, lse, do, grads, **kw)
        if self.launches == 1:
            result.grads["dk"][int(inputs.kv_live.nonzero()[0]), 0, 0] += 1.0
        self.launches += 1
        return result


def test_determinism_compares_only_the_gradients_the_contract_defines():
    """THD: rows outside every sequence are not the kernel's output (the
    wrapper returns empty_like gradients and leaves MHA dK/dV tails,
    api_dsl.py:929-931); launch-dependent tails pass, a live element that
    differs fails, naming its gradient."""
    case = THD_TAIL["mha"].replace(deterministic=True)
    with on_cpu():
        assert bwd_prop.check_determinism(case, _PackedChainStub(own=True)).outcome == "passed"
        with pytest.raises(PropertyFailure, match="differ bitwise: dk in 1 element"):
            bwd_prop.check_determinism(case, _LiveNoiseStub())


# (stub, heads, initialize_outputs, the gradient whose tail rule must fail)
THD_POWER = [
    (_PackedChainStub(mha_tails_zeroed=True), "mha", False, "dk"),  # MHA tails are the caller's, even with init
    (_PackedChainStub(mha_tails_zeroed=True), "mha", True, "dk"),
    (_PackedChainStub(dq_tail_kept=True), "gqa", True, "dq"),  # the initialized dQ tail left as the caller's
    (_PackedChainStub(head_written=True), "gqa", True, "dk"),  # rows before cu_k[0], never handed, written
    (_PackedChainStub(head_written=True), "mha", False, "dq"),
]


@pytest.mark.parametrize("stub,heads,init,quantity", THD_POWER, ids=lambda x: None if isinstance(x, _PackedChainStub) else str(x))
def test_every_planted_thd_tail_bug_fails(stub, heads, init, quantity):
    with pytest.raises(PropertyFailure) as e:
        tails(THD_TAIL[heads], stub, initialize_outputs=init)
    failed = [(e.value.check, e.value.detail.get("quantity"))] + [(f.check, f.detail.get("quantity")) for f in getattr(e.value, "failures", [])]
    assert ("capacity", quantity) in failed, e.value.summary


def test_a_live_thd_row_that_reads_the_capacity_tail_fails():
    with pytest.raises(PropertyFailure) as e:
        tails(THD_TAIL["mha"], _PackedChainStub(reads_tail=True))
    assert (e.value.check, e.value.detail["quantity"]) == ("no nan", "dq"), e.value.summary


def test_an_adapter_with_its_own_gradients_is_judged_on_them_without_caller_bytes():
    """The public wrapper allocates its gradients (torch.empty_like): the
    caller-byte rules (MHA dK/dV tails) have nothing to judge and are skipped,
    its zeroed tails are still judged; it has no "no-init" (the test skips)."""
    from kernels.base import Unsupported

    obs = tails(THD_TAIL["mha"], _PackedChainStub(own=True))
    assert obs.outcome == "passed" and obs.notes["checked_elements"]["dk tail"] == 0 and obs.notes["checked_elements"]["dq tail"] > 0
    with pytest.raises(PropertyFailure, match="DQ"):
        tails(THD_TAIL["mha"], _PackedChainStub(own=True, dq_tail_kept=True))
    with pytest.raises(Unsupported):
        tails(THD_TAIL["mha"], _PackedChainStub(own=True), initialize_outputs=False)


def test_the_tail_rules_cover_every_region_once():
    """Per (layout, gradient, mode, heads) no region has two rules; every
    rule cites source lines."""
    from properties.backward_tails import REGIONS, TAIL_RULES

    for layout, regions in (("dense", ("padded rows", "dead cells", "pad columns")), ("thd", ("head", "tail"))):
        for init in (True, False):
            for heads in ("gqa", "mha"):
                case = _bwd(h_q=4, h_kv=2 if heads == "gqa" else 4) if layout == "dense" else _thd(h_q=4, h_kv=2 if heads == "gqa" else 4)
                for grad in ("dq", "dk", "dv", "dbias"):
                    hits = [r.region for r in TAIL_RULES if r.holds(case, grad, init)]
                    assert len(hits) == len(set(hits)) and set(hits) <= set(regions), (layout, grad, init, heads, hits)
    assert all(r.region in REGIONS or r.region == "pad columns" for r in TAIL_RULES) and all(":" in r.why for r in TAIL_RULES)


class _AddressingChain(_PackedChainStub):
    """The packed-chain stub that can be handed its buffers as the forward
    takes them (addressing="forward"). ``normalizes``: it then does what the
    1.32.0 chain does, reads and writes from token 0 whatever cu_seqlens[0]
    (cudnn/frost/tile_dsl/thd.py:115-127): the Case's rows shifted down by the
    origin. Without it, both handings give the same gradients."""

    def __init__(self, normalizes: bool):
        super().__init__()
        self.normalizes = normalizes
        self.supports = self.supports | {"thd-addressing"}

    def backward(self, case, inputs, o, lse, do, grads=None, *, initialize_outputs=True, addressing="backward"):
        import dataclasses

        if addressing == "forward" and self.normalizes:
            bq, bk = case.q_base, case.kv_base
            shifted = case.replace(q_base=0, kv_base=0, q_slack=case.q_slack + bq, kv_slack=case.kv_slack + bk)
            moved = dataclasses.replace(inputs, q_live=inputs.q_live.roll(-bq), kv_live=inputs.kv_live.roll(-bk))
            return super().backward(shifted, moved, o, lse, do, grads, initialize_outputs=initialize_outputs)
        return super().backward(case, inputs, o, lse, do, grads, initialize_outputs=initialize_outputs)


def test_the_forward_addressing_property_fails_on_a_chain_that_normalizes_cu_seqlens():
    """backward_addressing: a chain that addresses its buffers from token 0
    (the 1.32.0 backward) gives other gradients when handed the buffers as the
    forward takes them: fails naming the check; one that honours cu_seqlens[0]
    passes (the same deterministic bits both ways)."""
    from ground import findings

    case = THD_TAIL["mha"].replace(deterministic=True)
    with on_cpu():
        assert bwd_prop.check_backward_addressing(case, _AddressingChain(normalizes=False)).outcome == "passed"
        with findings.applied([]), pytest.raises(PropertyFailure) as e:
            bwd_prop.check_backward_addressing(case, _AddressingChain(normalizes=True))
    assert e.value.check == "forward addressing", e.value.summary
    with pytest.raises(ValueError, match="cu_seqlens"):
        bwd_prop.check_backward_addressing(case.replace(q_base=0, kv_base=0), _AddressingChain(normalizes=False))


# ------------------------------------------------ an entry point that refuses a valid Case
# A frame of the kernels' package: what makes an exception the kernels' own refusal is where it is raised.
_KERNEL_FRAME: dict = {}
exec(compile("def refuse(exc):\n    raise exc\n", "/opt/site/cudnn/sdpa/bwd/prepared_sm80.py", "exec"), _KERNEL_FRAME)


class _Refusing(EmulatedBackward):
    """The wrapper's THD refusal of a strided one-head Stats (finding wrapper-bwd-thd-stats-strides), as an adapter;
    ``in_suite``: the same exception raised by the adapter's own code instead."""

    def __init__(self, name="wrapper", exc=lambda: ValueError("THD stats must match the declared packed layout"), in_suite=False):
        super().__init__()
        self.name, self.exc, self.in_suite = name, exc, in_suite  # exc: a factory (a raised instance keeps its frames)

    def backward(self, *args, **kwargs):
        if self.in_suite:
            raise self.exc()
        _KERNEL_FRAME["refuse"](self.exc())


STRIDED_STATS = _bwd(layout="thd", h_q=1, h_kv=1, s_q=1, s_kv=1, q_lens=(1,), kv_lens=(1,), q_base=1, inputs_from="reference")


def _refused(case, adapter, **kw):
    from properties import PROPERTIES, backward_tails

    with mock.patch.object(backward_tails, "device", lambda: torch.device("cpu")):
        return PROPERTIES["backward_tails"].check(case, adapter, initialize_outputs=True, **kw)


def test_a_refused_valid_case_fails_the_launch_check_and_only_its_finding_excuses_it():
    from ground import findings
    from properties import CHECKS

    with findings.applied([]), pytest.raises(PropertyFailure) as e:
        _refused(STRIDED_STATS, _Refusing())
    assert (e.value.check, e.value.observed) == ("launch", "ValueError") and "THD stats must match" in e.value.summary
    repo = findings.load(str(pathlib.Path(__file__).resolve().parents[1] / "known_findings.toml"), checks=CHECKS)
    with findings.applied(repo):
        obs = _refused(STRIDED_STATS, _Refusing())
        assert obs.outcome == "xfailed" and obs.findings == ["wrapper-bwd-thd-stats-strides@backward_tails"]
        for adapter, case in (
            (_Refusing(name="prepared"), STRIDED_STATS),  # another entry point
            (_Refusing(exc=lambda: KeyError("x")), STRIDED_STATS),  # another outcome
            (_Refusing(), STRIDED_STATS.replace(q_base=0)),  # a compact Stats handed from token 0
            (_Refusing(), STRIDED_STATS.replace(h_q=2, h_kv=2)),
        ):  # two heads
            with pytest.raises(PropertyFailure) as e:
                _refused(case, adapter)
            assert e.value.check == "launch", e.value.summary


def test_a_cuda_fault_or_the_suites_own_exception_is_not_a_refusal():
    with pytest.raises(RuntimeError, match="illegal memory access"):
        _refused(STRIDED_STATS, _Refusing(exc=lambda: RuntimeError("CUDA error: an illegal memory access was encountered")))
    from ground import findings

    with findings.applied([]), pytest.raises(ValueError, match="THD stats"):  # raised by the adapter's code: a bug of the suite, not a verdict
        _refused(STRIDED_STATS, _Refusing(in_suite=True))
    from ground.outcome import Unsupported

    with pytest.raises(Unsupported):  # an adapter's missing capability still skips
        _refused(STRIDED_STATS, _Refusing(exc=lambda: Unsupported.lacking("wrapper", "no-init", "x"), in_suite=True))


@pytest.mark.parametrize("case", [CASES[0], CASES[3]], ids=lambda c: c.describe())
def test_a_wrong_forward_handed_to_the_backward_fails_it(case):
    """inputs_from "kernel": the backward's bound charges the handed O and
    LSE's own error, so a wrong forward widens it; the forward kernel's O and
    LSE are judged in the same example under the forward error model
    (check "handed forward"), and the reference-handed twin has no such check."""
    from tests.kernel_emulation import Plant

    wrong = EmulatedBackward(plant=Plant(v_offset=2.0**-6))  # V shifted before P@V: O off, LSE right
    with on_cpu():
        with pytest.raises(PropertyFailure, match="O ") as failed:
            bwd_prop.check_backward(case.replace(inputs_from="kernel"), wrong)
        assert failed.value.check == "handed forward" and failed.value.detail["quantity"] == "o"
        assert bwd_prop.check_backward(case.replace(inputs_from="reference"), wrong).outcome == "passed"


def test_a_per_batch_bias_is_handed_reference_outputs():
    """The forward kernel takes no per-batch bias (contract bias_batch_gt_1:
    the compile entry points read bias[0] for every entry), so a backward draw
    with one is handed the reference's O and LSE, never the forward kernel's
    (whose error the backward bound would charge and the handed-forward check
    would fail on)."""
    seen = []

    @settings(max_examples=300, database=None, derandomize=True, suppress_health_check=list(HealthCheck))
    @given(backward_cases(geometry="pool", inputs_from="kernel"))
    def collect(c):
        if c.bias_batch > 1:
            assert c.inputs_from == "reference", c.describe()
            seen.append(c)
        else:
            assert c.inputs_from == "kernel"

    collect()
    assert seen


class _ForwardOverruns(EmulatedBackward):
    """A forward that stages O in a copy of its own and writes past its end."""

    def run(self, case, inputs, outputs=None, **kw):
        from ground.data import flat_storage, guard_bands, guarded

        r = super().run(case, inputs, outputs, **kw)
        staged = guarded((case.batch, case.s_q, case.h_q, 72), torch.float16, "cpu", row=case.h_q * 72, fill=0)
        g, n, _ = guard_bands(staged)
        flat_storage(staged)[g + n : g + n + 64] = 0.0
        r.handed, r.notes["staged"] = {"o": staged}, ["o"]
        return r


def test_the_forward_launch_inside_a_backward_example_is_guarded_too():
    """inputs_from "kernel": the forward the backward example launches hands
    the kernel staging copies of its own; their guard bands are judged with
    the backward's (a write past the staged O fails the example)."""
    case = CASES[0].replace(inputs_from="kernel")
    with on_cpu(), pytest.raises(PropertyFailure, match="forward launch") as failed:
        bwd_prop.check_backward(case, _ForwardOverruns())
    assert failed.value.check == "guards"
