"""The contract table: what each entry point must refuse, as data.

One ``Rule`` per contract. ``transform`` turns a valid Case into the violating
one (``case.violation = rule.name``); ``expect`` maps each targeted entry point
to the exception it must raise and a message fragment naming the offending
argument: the contract, not what the installed kernels do. Where they break
it, a known finding in known_findings.toml (``rule`` + ``entry``) says what
happens instead, citing the installed source (ground.findings).
``unsafe_launch`` marks rules the kernels accept where a launch would
address memory out of bounds or mis-map tiles: the rejection property checks
acceptance by compiling only, never launching them.

Entry points:
- ``wrapper``: ``cudnn.sdpa.fwd.api_dsl.sdpa_fwd_wrapper_sm80``.
- ``prepared``: the compile entry points ``compile_host``/``compile_thd_host``
  in ``cudnn/sdpa/fwd/kernels/sm80/prepared_host.py``. They are pointer-only
  and check nothing themselves; the prepared adapter specializes first, so a
  rule whose Case facts the config validators reject is rejected there
  identically (listed with the same Expect). Rules stated only as
  TemplateParams overrides (``Rule.params``) target ``config`` alone.
- ``config``: the plan-time validators, runnable on CPU: ``config_sm80.
  validate_params``/``params_for_flavor`` and the flavor pick
  (``api_dsl._sm80_pick_flavor``), reached through ``kernels.specialize`` or
  directly (``Rule.params`` overrides, ``Rule.flavor``); see ``kernels.config.run_config``.

Some violations cannot be stated as Case facts; ``tamper`` names what the
adapter must do to the call (see ``TAMPERS``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Mapping, Optional, Tuple

from .case import Case

WRAPPER, PREPARED, CONFIG = "wrapper", "prepared", "config"
ENTRY_POINTS = {
    WRAPPER: "cudnn.sdpa.fwd.api_dsl.sdpa_fwd_wrapper_sm80",
    PREPARED: "cudnn.sdpa.fwd.kernels.sm80.prepared_host.compile_host / compile_thd_host",
    CONFIG: "cudnn.sdpa.fwd.config_sm80.validate_params / params_for_flavor (+ api_dsl._sm80_pick_flavor)",
}

# What a tamper name asks the adapter to do (the Case cannot say it).
TAMPERS = {
    "cu_k_missing": "wrapper THD call with cum_seqlen_k_tensor=None",
    "cu_k_length": "wrapper THD call with cum_seqlen_k_tensor one entry longer than cum_seqlen_q_tensor (last offset repeated)",
    "cu_q_short": "wrapper THD call with cum_seqlen_q_tensor cut to its first entry (shape (1,))",
    "scale_output": "wrapper call with scale_output=2.0",
    "rope_freqs": "wrapper THD call with rope_freqs = any fp32 [max_s_q, d_qk // 2] tensor",
    "scheduler": 'wrapper THD call with scheduler="lpt"',
    "thd_bias": "wrapper THD call with a [1, H_q, max_s_q, max_s_kv] bias of dtype case.bias (ground.data makes no THD bias)",
    "thd_seq_lens": "wrapper THD call with seq_kv_lens / seq_len_q = int32 tensors of case.seq_kv_lens / case.seq_q_lens (ground.data makes none for THD)",
    "raw_right_bound": "prepared: pass case.window_right as right_bound (kernels.specialize.mask_runtime drops a band without causal); wrapper: window_size=(window_left, window_right) as the Case says",
}

_API = "cudnn/sdpa/fwd/api_dsl.py"
_CFG = "cudnn/sdpa/fwd/config_sm80.py"


@dataclass(frozen=True)
class Expect:
    exception: type
    fragment: str  # names the offending argument
    unsafe_launch: bool = False  # accepted by the kernels and unsafe to launch: compile only


@dataclass(frozen=True)
class Rule:
    name: str
    layout: Optional[str]  # the base Case's layout ("dense", "thd"; None: either)
    facts: Callable[[Case], Case]  # valid Case -> violating facts (label added by transform)
    expect: Mapping[str, Expect]
    # Facts that break this rule; None: only the label can tell (tamper/params rules).
    detect: Optional[Callable[[Case], bool]] = None
    tamper: Optional[str] = None
    params: Mapping[str, Any] = field(default_factory=dict)  # TemplateParams overrides (config)
    flavor: Optional[str] = None  # params_for_flavor argument (config)
    why: str = ""

    @property
    def targets(self) -> Tuple[str, ...]:
        return tuple(self.expect)

    def transform(self, case: Case) -> Case:
        return self.facts(case).replace(violation=self.name)

    def broken_by(self, case: Case) -> bool:
        if self.detect is None:
            return case.violation == self.name
        return self.detect(case)


# ------------------------------------------------------------------ transforms
def _same(case: Case) -> Case:
    return case


def _set(**changes) -> Callable[[Case], Case]:
    return lambda case: case.replace(**changes)


def _batched_bias(case: Case) -> Case:
    # A per-batch bias [B, H, SQ, SKV] with B >= 2, so using batch 0's slice
    # everywhere is observable.
    changes: Dict[str, Any] = {}
    if case.batch == 1:
        changes["batch"] = 2
        for name in ("seq_q_lens", "seq_kv_lens"):
            lens = getattr(case, name)
            if lens is not None:
                changes[name] = lens + lens[-1:]
    b = changes.get("batch", case.batch)
    return case.replace(bias=case.bias or case.dtype, bias_batch=b, **changes)


def _other_half(case: Case) -> Case:
    return case.replace(bias="bfloat16" if case.dtype == "float16" else "float16", bias_batch=1)


def _non_integral_gqa(case: Case) -> Case:
    h_kv = max(2, case.h_kv)
    return case.replace(h_kv=h_kv, h_q=h_kv * (case.h_q // case.h_kv) + 1)


def _right_band_alone(case: Case) -> Case:
    return case.replace(
        causal=False,
        window_right=case.window_right if case.window_right >= 0 else 1,
        bottom_right=case.bottom_right and case.window_left >= 0,
    )


def _bottom_right_alone(case: Case) -> Case:
    return case.replace(causal=False, window_left=-1, window_right=-1, bottom_right=True)


def _is_dense(case: Case) -> bool:
    return not case.is_thd


def _ve(fragment: str, **kw) -> Expect:
    return Expect(ValueError, fragment, **kw)


def _nie(fragment: str, **kw) -> Expect:
    return Expect(NotImplementedError, fragment, **kw)


def _thd_params_rule(name, tamper, params, wrapper_fragment, config_fragment, facts=_same, detect=None, why=""):
    # Only TemplateParams can state these on the compile side: config, not prepared.
    return Rule(
        name,
        "thd",
        facts,
        {WRAPPER: _nie(wrapper_fragment), CONFIG: _ve(config_fragment)},
        detect=detect,
        tamper=tamper,
        params=params,
        why=why,
    )


def _params_rule(name, params, fragment, **kw) -> Rule:
    return Rule(name, None, _same, {CONFIG: _ve(fragment, **kw)}, params=params, why=f"validate_params with {params}")


_SCHED_LPT = 1  # cudnn.frost.tile_dsl.constants.SCHED_LPT (kept literal: no cudnn import here)

RULES: Tuple[Rule, ...] = (
    # ---- bias
    Rule(
        "bias_batch_gt_1",
        "dense",
        _batched_bias,
        {WRAPPER: _ve("bias"), PREPARED: _ve("bias")},
        detect=lambda c: c.bias is not None and c.bias_batch > 1,
        why="the kernels apply one [1, H, SQ, SKV] bias to every batch entry",
    ),
    Rule(
        "bias_dtype_float64",
        "dense",
        _set(bias="float64", bias_batch=1),
        {WRAPPER: _ve("bias"), PREPARED: _ve("bias")},
        detect=lambda c: c.bias == "float64",
        why="bias must be fp32 or the I/O dtype; the native binder raises 'sdpa_fwd_sm80: bias must be <dtype>'",
    ),
    Rule(
        "bias_dtype_int32",
        "dense",
        _set(bias="int32", bias_batch=1),
        {WRAPPER: _ve("bias"), PREPARED: _ve("bias")},
        detect=lambda c: c.bias == "int32",
        why="as bias_dtype_float64",
    ),
    Rule(
        "bias_dtype_other_half",
        "dense",
        _other_half,
        {WRAPPER: _ve("bias"), PREPARED: _ve("bias")},
        detect=lambda c: c.bias in ("float16", "bfloat16") and c.bias != c.dtype,
        why="an fp16 bias on bf16 inputs (or the reverse) is neither fp32 nor the I/O dtype",
    ),
    Rule(
        "thd_bias",
        "thd",
        lambda c: c.replace(bias=c.dtype),
        {WRAPPER: _nie("bias"), CONFIG: _ve("bias"), PREPARED: _ve("bias")},
        detect=lambda c: c.is_thd and c.bias is not None,
        tamper="thd_bias",
        why=f"varlen has no single [1,H,SQ,SKV] bias ({_API}:7098; {_CFG}:147)",
    ),
    # ---- THD cumulative offsets (tensor tampering)
    Rule(
        "thd_cu_k_missing",
        "thd",
        _same,
        {WRAPPER: _ve("cu_seqlens_k")},
        tamper="cu_k_missing",
        why=f"'cu_seqlens_q / cu_seqlens_k length mismatch' ({_API}:7130)",
    ),
    Rule(
        "thd_cu_k_length",
        "thd",
        _same,
        {WRAPPER: _ve("cu_seqlens_k")},
        tamper="cu_k_length",
        why=f"'cu_seqlens_q / cu_seqlens_k length mismatch' ({_API}:7130)",
    ),
    Rule(
        "thd_cu_q_short",
        "thd",
        _same,
        {WRAPPER: _ve("cu_seqlens_q")},
        tamper="cu_q_short",
        why=f"'cu_seqlens_q must have >= 2 entries' ({_API}:7128)",
    ),
    # ---- heads
    Rule(
        "gqa_non_integral",
        "dense",
        _non_integral_gqa,
        {WRAPPER: _ve("H_kv"), PREPARED: _ve("H_kv", unsafe_launch=True)},
        detect=lambda c: _is_dense(c) and c.h_q % c.h_kv != 0,
        why=f"'H_q (..) must be divisible by H_kv (..)' in check_support ({_API}:6613)",
    ),
    Rule(
        "thd_gqa_non_integral",
        "thd",
        _non_integral_gqa,
        {WRAPPER: _ve("integral GQA"), PREPARED: _ve("H_kv", unsafe_launch=True)},
        detect=lambda c: c.is_thd and c.h_q % c.h_kv != 0,
        why=f"'... and integral GQA' in _sm80_thd_forward ({_API}:7105)",
    ),
    # ---- head dims (no envelope covers > 256)
    Rule(
        "head_dim_qk_over_256",
        None,
        _set(d_qk=264),
        {WRAPPER: _ve("D_QK"), CONFIG: _ve("D_QK"), PREPARED: _ve("D_QK")},
        detect=lambda c: c.d_qk > 256,
        why=f"dense: check_support envelope check ({_API}:6620); THD and specialize: the flavor pick ({_API}:6446)",
    ),
    Rule(
        "head_dim_v_over_256",
        None,
        _set(d_v=264),
        {WRAPPER: _ve("D_V"), CONFIG: _ve("D_V"), PREPARED: _ve("D_V")},
        detect=lambda c: c.d_v > 256,
        why="as head_dim_qk_over_256",
    ),
    # ---- masks
    Rule(
        "window_right_without_causal",
        "dense",
        _right_band_alone,
        {WRAPPER: _nie("window_size_right"), PREPARED: _nie("window_size_right")},
        detect=lambda c: _is_dense(c) and c.window_right >= 0 and not c.causal,
        tamper="raw_right_bound",
        why=f"a right band widens the causal diagonal; without causal there is none ({_API}:7293)",
    ),
    Rule(
        "thd_window_right_without_causal",
        "thd",
        _right_band_alone,
        {
            WRAPPER: _nie("window_size_right"),
            PREPARED: _nie("window_size_right"),
        },
        detect=lambda c: c.is_thd and c.window_right >= 0 and not c.causal,
        tamper="raw_right_bound",
        why="as window_right_without_causal, on the THD path",
    ),
    Rule(
        "bottom_right_without_causal_or_window",
        None,
        _bottom_right_alone,
        {WRAPPER: _ve("causal_bottom_right"), CONFIG: _ve("causal_bottom_right"), PREPARED: _ve("causal_bottom_right")},
        detect=lambda c: c.bottom_right and not (c.causal or c.window_left >= 0),
        why=(
            f"nothing to align: dense check_support ({_API}:6745, after the SM80 capability check at 6730), "
            f"THD wrapper ({_API}:7248), validate_params ({_CFG}:145)"
        ),
    ),
    # ---- wrapper arguments the Case cannot state
    Rule(
        "scale_output_not_one",
        None,
        _same,
        {WRAPPER: _nie("scale_output")},
        tamper="scale_output",
        why=f"'scale_output != 1.0 is not supported yet' ({_API}:7242)",
    ),
    _thd_params_rule("thd_rope", "rope_freqs", {"has_rope": True}, "rope_freqs", "rope", why=f"{_API}:7250-7257; {_CFG}:147"),
    _thd_params_rule(
        "thd_seq_kv_lens",
        "thd_seq_lens",
        {"has_seq_kv_lens": True},
        "seq_kv_lens",
        "seq-lens",
        facts=lambda c: c.replace(seq_kv_lens=c.kv_lens),
        detect=lambda c: c.is_thd and c.seq_kv_lens is not None,
        why=f"THD carries lengths in cu_seqlens ({_API}:7250-7257; {_CFG}:147)",
    ),
    _thd_params_rule(
        "thd_seq_q_lens",
        "thd_seq_lens",
        {"has_seq_q_lens": True},
        "seq_len_q",
        "seq-lens",
        facts=lambda c: c.replace(seq_q_lens=c.q_lens),
        detect=lambda c: c.is_thd and c.seq_q_lens is not None,
        why="as thd_seq_kv_lens",
    ),
    Rule(
        "thd_scheduler",
        "thd",
        _same,
        {
            WRAPPER: _nie("scheduler"),
            CONFIG: _ve("sched_policy", unsafe_launch=True),
        },
        tamper="scheduler",
        params={"sched_policy": _SCHED_LPT},
        why=f"the varlen grid is 3-D: natural scheduler only ({_API}:7250-7257)",
    ),
    # ---- config: flavor table and TemplateParams
    Rule(
        "flavor_unknown",
        None,
        _same,
        {CONFIG: _ve("flavor")},
        flavor="mistral",
        why="params_for_flavor('mistral') should name the supported flavors",
    ),
    _params_rule("params_tile_n", {"tile_n": 32}, "tile_n"),
    _params_rule("params_num_warps", {"num_warps": 2}, "num_warps"),
    _params_rule("params_tile_m", {"tile_m": 96}, "tile_m"),
    _params_rule("params_tile_m_zero", {"tile_m": 0}, "tile_m"),
    _params_rule("params_d_qk", {"d_qk": 72}, "d_qk"),
    _params_rule("params_d_v", {"d_v": 72}, "d_v"),
    _params_rule("params_envelope", {"d_qk": 64, "d_v": 128}, "(d_qk, d_v)"),
    _params_rule("params_score_sign", {"score_sign": 2}, "score_sign"),
    _params_rule("params_sched_policy", {"sched_policy": 7}, "sched_policy"),
    _params_rule("params_sched_l2_mib", {"sched_l2_mib": 0}, "sched_l2_mib"),
)

RULES_BY_NAME: Dict[str, Rule] = {r.name: r for r in RULES}


def rule(name: str) -> Rule:
    try:
        return RULES_BY_NAME[name]
    except KeyError:
        raise ValueError(f"contract rule {name!r}: unknown (known: {', '.join(RULES_BY_NAME)})") from None


def broken_rules(case: Case) -> Tuple[str, ...]:
    """Names of the rules ``case`` breaks (fact-detectable ones, plus its label)."""
    return tuple(r.name for r in RULES if r.broken_by(case))


# ------------------------------------------------------------ the backward
# What the SM80 backward's entry points refuse, one row per rule.
# ``sdpa_bwd_wrapper_sm80`` (cudnn/sdpa/bwd/api_dsl.py) reaches every one of
# them; the prepared entry (SdpaBwdDslSm80 driven directly) shares those of
# check_support and build_spec. Every row is refused before anything is
# compiled or launched, most before any device is consulted, so the
# rejection runs on the CPU (properties.backward.check_backward_rejection).
BWD_WRAPPER = "cudnn.sdpa.bwd.api_dsl.sdpa_bwd_wrapper_sm80"
_BWD_API = "cudnn/sdpa/bwd/api_dsl.py"
# What a BwdRule's ``change`` asks the call to do beyond its Case, by kind:
BWD_CHANGES = {
    "none": "the Case as it stands (its facts break the rule)",
    "kwarg": "one wrapper keyword set to a value: ('kwarg', (name, value)); value 'rope' is an fp32 [max_s, d_qk // 2] table, "
    "'bias' a [1, H_q, max_s_q, max_s_kv] bias of the I/O dtype, 'lens' int32 per-sequence lengths",
    "dtype": "one operand cast to a dtype: ('dtype', (role, dtype)), role one of q k v o do lse bias",
    "bias_heads": "the bias with one head, [bias_batch, 1, SQ, SKV] (the backward serves per-head bias only)",
    "drop_cu_k": "THD call with cum_seqlen_k_tensor=None",
}


@dataclass(frozen=True)
class BwdRule:
    name: str
    base: Mapping[str, Any]  # Case facts (direction "bwd") of the call
    change: Tuple[str, Any]  # a BWD_CHANGES kind and its argument
    expect: Expect
    where: str  # the installed source that refuses it

    def case(self) -> Case:
        return Case(**{"direction": "bwd", **self.base, "violation": self.name})


_BWD_DENSE = dict(d_qk=64, d_v=64, s_q=17, s_kv=33, h_q=2, h_kv=2)
_BWD_THD = dict(layout="thd", d_qk=64, d_v=64, q_lens=(5, 9), kv_lens=(7, 3), h_q=2, h_kv=1)
BWD_RULES: Tuple[BwdRule, ...] = (
    BwdRule("bwd_thd_bias", _BWD_THD, ("kwarg", ("bias_tensor", "bias")), Expect(NotImplementedError, "bias_tensor"), f"{_BWD_API}:1667-1674"),
    BwdRule("bwd_thd_rope", _BWD_THD, ("kwarg", ("rope_freqs", "rope")), Expect(NotImplementedError, "rope_freqs"), f"{_BWD_API}:1667-1674"),
    BwdRule("bwd_thd_seq_kv_lens", _BWD_THD, ("kwarg", ("seq_kv_lens", "lens")), Expect(NotImplementedError, "seq_kv_lens"), f"{_BWD_API}:1667-1674"),
    BwdRule("bwd_thd_seq_len_q", _BWD_THD, ("kwarg", ("seq_len_q", "lens")), Expect(NotImplementedError, "seq_len_q"), f"{_BWD_API}:1667-1674"),
    BwdRule("bwd_thd_cu_k_missing", _BWD_THD, ("drop_cu_k", None), Expect(AssertionError, "cu_seqlens_k"), f"{_BWD_API}:905"),
    BwdRule("bwd_hint_kv_without_cu_seqlens", _BWD_DENSE, ("kwarg", ("max_s_kv", 33)), Expect(ValueError, "max_s_kv"), f"{_BWD_API}:1699-1700"),
    BwdRule("bwd_hint_q_without_cu_seqlens", _BWD_DENSE, ("kwarg", ("max_s_q", 17)), Expect(ValueError, "max_s_q"), f"{_BWD_API}:1699-1700"),
    BwdRule("bwd_gqa_not_divisible", dict(_BWD_DENSE, h_q=3, h_kv=2), ("none", None), Expect(ValueError, "H_kv"), f"{_BWD_API}:1229"),
    BwdRule("bwd_d_qk_below_d_v", dict(_BWD_DENSE, d_qk=64, d_v=128), ("none", None), Expect(ValueError, "D_QK >= D_V"), f"{_BWD_API}:1233"),
    BwdRule(
        "bwd_head_dim_past_envelopes", dict(_BWD_DENSE, d_qk=288, d_v=64), ("none", None), Expect(ValueError, "exceeds supported"), f"{_BWD_API}:1234-1239"
    ),
    BwdRule("bwd_fp32_io", _BWD_DENSE, ("dtype", ("q", "float32")), Expect(ValueError, "Q"), f"{_BWD_API}:1241"),
    BwdRule("bwd_mixed_io_dtypes", _BWD_DENSE, ("dtype", ("k", "bfloat16")), Expect(ValueError, "must match Q dtype"), f"{_BWD_API}:1242-1243"),
    BwdRule("bwd_lse_not_fp32", _BWD_DENSE, ("dtype", ("lse", "float16")), Expect(ValueError, "stats"), f"{_BWD_API}:1244"),
    BwdRule(
        "bwd_right_band_alone", dict(_BWD_DENSE, window_right=4), ("none", None), Expect(NotImplementedError, "window_size_right"), f"{_BWD_API}:1368-1372"
    ),
    BwdRule("bwd_bottom_right_alone", dict(_BWD_DENSE, bottom_right=True), ("none", None), Expect(ValueError, "causal_bottom_right"), f"{_BWD_API}:1375-1378"),
    BwdRule(
        "bwd_bias_one_head",
        dict(_BWD_DENSE, bias="float32"),
        ("bias_heads", None),
        Expect(ValueError, "bias must have shape"),
        "cudnn/sdpa/bwd/prepared_sm80.py:56-63",
    ),
    BwdRule(
        "bwd_bias_other_half_dtype",
        dict(_BWD_DENSE, bias="bfloat16"),
        ("none", None),
        Expect(ValueError, "float32 or Q's dtype"),
        "cudnn/sdpa/bwd/prepared_sm80.py:56-63",
    ),
)
BWD_RULE_NAMES = tuple(r.name for r in BWD_RULES)
assert len(set(BWD_RULE_NAMES)) == len(BWD_RULES) and all(r.change[0] in BWD_CHANGES for r in BWD_RULES)


# ------------------------------------------------------------ the sm90 family
# What the sm90 family's entry points refuse (ground.families.FAMILIES["sm90"]),
# one row per rule: the planner SdpaFwdDslSm90.check_support (what the public
# sdpa_fwd_wrapper_dsl_sm90 and the suite's sm90 adapter plan through), the
# template's validator config_sm90.validate_params (also run when the template
# is loaded) and the template's compile() (its head-dim check, before
# compiling). Every row is refused before anything compiles or launches, with
# no device consulted but the planner's arch probe (kernels.sm90.specialize
# answers it on the CPU): tests/test_contracts_sm90.py runs them all on the CPU
# (kernels.sm90.rules.run_rule). The SM80 rows above (RULES) are the sm80
# family's; broken_rules reads a Case's own family's rows.
SM90_PLAN, SM90_CONFIG, SM90_COMPILE = "sm90_plan", "sm90_config", "sm90_compile"
SM90_ENTRY_POINTS = {
    SM90_PLAN: "cudnn.sdpa.fwd.api_dsl.SdpaFwdDslSm90.check_support (kernels.sm90.specialize.plan)",
    SM90_CONFIG: "cudnn.sdpa.fwd.config_sm90.validate_params, on the planned TemplateParams with fields replaced",
    SM90_COMPILE: "cudnn.sdpa.fwd.kernels.sm90.prefill_d512_f16.compile, on the plan of the base Case with the changed head dims",
}
# Descriptor stand-ins a plan-argument row may name ("desc:<role>"): kernels.sm90.rules builds them.
SM90_DESCRIPTORS = {
    "bias": "a [1, H_q, S_q, S_kv] additive bias of the I/O dtype",
    "score_max": "a (B, H_q, S_q) fp32 row-max output",
}
_SM90_API = "cudnn/sdpa/fwd/api_dsl.py"
_SM90_CFG = "cudnn/sdpa/fwd/config_sm90.py"
_SM90_PF = "cudnn/sdpa/fwd/kernels/sm90/prefill_d512_f16.py"
ACCEPTED_BY_INSTALLED = "accepted"  # Sm90Rule.observed: the installed entry point accepts what the contract refuses


@dataclass(frozen=True)
class Sm90Rule:
    """One sm90 contract rule. ``base``: the facts of a valid sm90 Case (the
    family added); ``facts``: the Case facts that break the rule (the
    planner and the compile entry read them); ``plan``: planner constructor
    arguments replaced; ``params``: TemplateParams fields replaced on the
    base Case's plan (the config entry). ``expect``: entry -> the exception
    and a fragment of its message naming what is wrong. ``observed``:
    ``ACCEPTED_BY_INSTALLED`` where the installed entry accepts it instead
    (a candidate finding the GPU has yet to judge: the test checks the
    acceptance, so a fix upstream shows). ``where``: the source that refuses."""

    name: str
    base: Mapping[str, Any]
    expect: Mapping[str, Expect]
    where: str
    facts: Mapping[str, Any] = field(default_factory=dict)
    plan: Mapping[str, Any] = field(default_factory=dict)
    params: Mapping[str, Any] = field(default_factory=dict)
    observed: Optional[str] = None

    def valid_case(self) -> Case:
        return Case(**{"family": "sm90", **self.base})

    def case(self) -> Case:
        return self.valid_case().replace(**self.facts, violation=self.name)

    @property
    def targets(self) -> Tuple[str, ...]:
        return tuple(self.expect)


_SM90_DENSE = dict(d_qk=64, d_v=64, s_q=64, s_kv=128, h_q=2, h_kv=2)
_SM90_THD = dict(layout="thd", d_qk=64, d_v=64, q_lens=(5, 9), kv_lens=(7, 3), h_q=4, h_kv=2)


def _sm90_params(name, fragment, params, base=_SM90_DENSE, where=f"{_SM90_CFG}:95-121") -> Sm90Rule:
    return Sm90Rule(name, base, {SM90_CONFIG: _ve(fragment)}, where, params=params)


SM90_RULES: Tuple[Sm90Rule, ...] = (
    # ---- head dims: multiples of 8 up to the 512-column tile (the planner and the template's compile())
    Sm90Rule(
        "sm90_head_dim_not_multiple_of_8",
        _SM90_DENSE,
        {SM90_PLAN: _nie("D_QK=60"), SM90_COMPILE: _ve("D_QK=60")},
        f"{_SM90_CFG}:37-45 via {_SM90_API}:5223-5224 and {_SM90_PF}:1520-1522",
        facts=dict(d_qk=60),
    ),
    Sm90Rule(
        "sm90_head_dim_qk_over_512",
        _SM90_DENSE,
        {SM90_PLAN: _nie("D_QK=520"), SM90_COMPILE: _ve("D_QK=520")},
        f"{_SM90_CFG}:37-45 via {_SM90_API}:5223-5224 and {_SM90_PF}:1520-1522",
        facts=dict(d_qk=520),
    ),
    Sm90Rule(
        "sm90_head_dim_v_over_512",
        _SM90_DENSE,
        {SM90_PLAN: _nie("D_V=520"), SM90_COMPILE: _ve("D_V=520")},
        f"{_SM90_CFG}:37-45 via {_SM90_API}:5223-5224 and {_SM90_PF}:1520-1522",
        facts=dict(d_v=520),
    ),
    # ---- heads
    Sm90Rule("sm90_gqa_non_integral", _SM90_DENSE, {SM90_PLAN: _ve("H_kv")}, f"{_SM90_API}:5184", facts=dict(h_q=3, h_kv=2)),
    Sm90Rule(
        "sm90_pack_gqa_ratio",
        _SM90_DENSE,
        {SM90_PLAN: _nie("PackGQA"), SM90_CONFIG: _ve("PackGQA")},
        f"{_SM90_API}:5306-5308; {_SM90_CFG}:99-100",
        facts=dict(h_q=6, h_kv=2, pack_gqa=True),
        params=dict(pack_gqa=True, qh_per_kh=3),
    ),
    Sm90Rule("sm90_thd_pack_gqa", _SM90_THD, {SM90_PLAN: _nie("THD PackGQA")}, f"{_SM90_API}:5282-5288", facts=dict(pack_gqa=True)),
    # ---- masks and lengths
    Sm90Rule("sm90_window_right_without_causal", _SM90_DENSE, {SM90_PLAN: _ve("window_size_right")}, f"{_SM90_API}:5198", facts=dict(window_right=4)),
    Sm90Rule(
        "sm90_bottom_right_without_causal",
        _SM90_DENSE,
        {SM90_PLAN: _ve("causal_bottom_right")},
        f"{_SM90_API}:5199 (the SM80 family aligns a window alone bottom-right)",
        facts=dict(window_left=8, bottom_right=True),
    ),
    Sm90Rule(
        "sm90_q_lens_without_kv_lens",
        _SM90_DENSE,
        {SM90_PLAN: _ve("Q and KV lengths")},
        f"{_SM90_API}:5195",
        facts=dict(seq_q_lens=(30,)),
    ),
    Sm90Rule(
        "sm90_unpadded_bottom_right_sq_gt_skv",
        _SM90_DENSE,
        {SM90_PLAN: _nie("bottom-right S_q > S_kv")},
        f"{_SM90_API}:5282-5288",
        facts=dict(causal=True, bottom_right=True, s_q=128, s_kv=64),
    ),
    Sm90Rule(
        "sm90_unpadded_window_sq_gt_skv",
        _SM90_DENSE,
        {SM90_PLAN: _nie("sliding-window S_q > S_kv")},
        f"{_SM90_API}:5282-5288 (the declared window, a vacuous one included)",
        facts=dict(window_left=8, s_q=128, s_kv=64),
    ),
    Sm90Rule("sm90_negative_window", _SM90_DENSE, {SM90_PLAN: _ve("window_size_left")}, f"{_SM90_API}:5196-5197", plan=dict(window_size_left=-2)),
    # ---- the scheduler
    Sm90Rule(
        "sm90_thd_scheduler",
        _SM90_THD,
        {SM90_PLAN: _nie("SCHED_LPT"), SM90_CONFIG: _ve("THD")},
        f"{_SM90_API}:5302-5305; {_SM90_CFG}:103-104",
        plan=dict(sched_policy=1),
        params=dict(sched_policy=1),
    ),
    # ---- planner arguments the Case cannot state
    Sm90Rule("sm90_tile_m", _SM90_DENSE, {SM90_PLAN: _nie("tiles other than 64/64")}, f"{_SM90_API}:5215", plan=dict(tile_m=128)),
    Sm90Rule("sm90_split_kv", _SM90_DENSE, {SM90_PLAN: _nie("split-KV")}, f"{_SM90_API}:5214", plan=dict(split_kv=2)),
    Sm90Rule("sm90_dense_cu_lengths", _SM90_DENSE, {SM90_PLAN: _nie("THD-only")}, f"{_SM90_API}:5225", plan=dict(cu_seq_q_lens=True)),
    Sm90Rule("sm90_thd_stats_padded", _SM90_THD, {SM90_PLAN: _nie("THD Stats must stay packed")}, f"{_SM90_API}:5226", plan=dict(thd_stats_padded=True)),
    Sm90Rule("sm90_dense_stats_padded", _SM90_DENSE, {SM90_PLAN: _ve("thd_stats_padded requires thd")}, f"{_SM90_API}:5191", plan=dict(thd_stats_padded=True)),
    # ---- optional operands the planner should decline and accepts (candidate findings, api_dsl.py:956-958)
    Sm90Rule(
        "sm90_bias_operand",
        _SM90_DENSE,
        {SM90_PLAN: _nie("bias")},
        f"{_SM90_API}:956-958 ('a concrete implementation that cannot lower one raises NotImplementedError from check_support'); "
        f"check_support ({_SM90_API}:5156-5309) never reads sample_bias",
        plan=dict(sample_bias="desc:bias"),
        observed=ACCEPTED_BY_INSTALLED,
    ),
    Sm90Rule(
        "sm90_score_max_output",
        _SM90_DENSE,
        {SM90_PLAN: _nie("score")},
        f"{_SM90_API}:956-958, as sm90_bias_operand (sample_score_max)",
        plan=dict(sample_score_max="desc:score_max"),
        observed=ACCEPTED_BY_INSTALLED,
    ),
    Sm90Rule(
        "sm90_use_pdl",
        _SM90_DENSE,
        {SM90_PLAN: _nie("use_pdl")},
        f"{_SM90_API}:871-875 ('a kernel without it is a typed decline at compile()'); the SM90 compile() has no such knob",
        plan=dict(use_pdl=True),
        observed=ACCEPTED_BY_INSTALLED,
    ),
    # ---- the template's own validator (TemplateParams the planner never builds)
    _sm90_params("sm90_params_dtype", "FP16 or BF16", dict(dtype_qkv=0)),
    _sm90_params("sm90_params_head_ratio", "positive head ratio", dict(qh_per_kh=0)),
    _sm90_params("sm90_params_sched_policy", "NATURAL/LPT/LPT_L2", dict(sched_policy=7)),
    _sm90_params("sm90_params_scale_mode", "scale mode", dict(scale_mode=2)),
    _sm90_params("sm90_params_thd_without_kv_lens", "seq_kv_lens_present", dict(seq_kv_lens_present=False), base=_SM90_THD),
    _sm90_params("sm90_params_thd_q_lens", "seq_q_lens_present", dict(seq_q_lens_present=True), base=_SM90_THD),
    _sm90_params("sm90_params_causal_and_window_right", "plain causal", dict(causal=True, window_right=4)),
    _sm90_params("sm90_params_window_left_negative", "window_left", dict(window_left=-1)),
    _sm90_params("sm90_params_window_right_zero", "window_right", dict(window_right=0)),
    _sm90_params("sm90_params_window_left_bool", "window_left", dict(window_left=True)),
    _sm90_params("sm90_params_bottom_right_without_band", "diagonal alignment needs a band", dict(bottom_right=True)),
    _sm90_params("sm90_params_bottom_right_repeats_causal", "bottom_right repeats", dict(causal=True, bottom_right=True)),
)
SM90_RULES_BY_NAME: Dict[str, Sm90Rule] = {r.name: r for r in SM90_RULES}
assert len(SM90_RULES_BY_NAME) == len(SM90_RULES) and not set(SM90_RULES_BY_NAME) & set(RULES_BY_NAME)
assert all(set(r.targets) <= set(SM90_ENTRY_POINTS) and (r.observed in (None, ACCEPTED_BY_INSTALLED)) for r in SM90_RULES)
