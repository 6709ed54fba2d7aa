"""The contract table: well-formed, transforms break exactly their rule, and
the ``config`` rules (plus the CPU-checkable wrapper claims) hold for real."""

from __future__ import annotations

import dataclasses
import math
import pathlib
import re

import pytest
from hypothesis import HealthCheck, given, settings

from ground import contracts, findings
from ground.case import Case
from ground.contracts import CONFIG, ENTRY_POINTS, RULES, TAMPERS, WRAPPER, Rule, broken_rules
from kernels.config import run_config
from properties import CHECKS
from strategies import cases, violating_cases
from strategies.violations import KEY_KEEPING_BASES
from strategies.violations import _base as rule_base

FIXED = dict(derandomize=True, database=None, deadline=None, suppress_health_check=[HealthCheck.too_slow])
IDS = [r.name for r in RULES]


def _base(r: Rule):
    return cases(layouts=(r.layout,) if r.layout else ("dense", "thd"))


ROOT = pathlib.Path(__file__).resolve().parents[1]
FINDINGS = findings.load(ROOT / "known_findings.toml", checks=CHECKS)


def _rejects_finding(name: str, entry: str):
    """The known finding of what ``entry`` does instead of rejecting rule ``name`` (None: it conforms)."""
    found = [f for f in FINDINGS if f.rule == name and f.entry == entry and f.check == "rejects"]
    assert len(found) <= 1, [f.id for f in found]
    return found[0] if found else None


# ---------------------------------------------------------------- well-formed
def test_names_are_unique_and_lookup_works():
    assert len(IDS) == len(set(IDS))
    assert contracts.rule(IDS[0]) is RULES[0]
    with pytest.raises(ValueError, match="unknown"):
        contracts.rule("no_such_rule")


def test_required_rules_are_present():
    required = {
        "bias_batch_gt_1",
        "bias_dtype_float64",
        "bias_dtype_int32",
        "bias_dtype_other_half",
        "thd_bias",
        "thd_cu_k_missing",
        "thd_cu_k_length",
        "thd_cu_q_short",
        "gqa_non_integral",
        "head_dim_qk_over_256",
        "head_dim_v_over_256",
        "window_right_without_causal",
        "bottom_right_without_causal_or_window",
        "scale_output_not_one",
        "thd_rope",
        "thd_seq_kv_lens",
        "thd_scheduler",
        "flavor_unknown",
        "params_tile_n",
        "params_tile_m",
        "params_num_warps",
        "params_envelope",
        "params_score_sign",
        "params_sched_policy",
    }
    assert required <= set(IDS)


@pytest.mark.parametrize("r", RULES, ids=IDS)
def test_rule_is_well_formed(r: Rule):
    from cudnn.sdpa.fwd.config_sm80 import TemplateParams

    assert re.fullmatch(r"[a-z0-9_]+", r.name)
    assert r.layout in (None, "dense", "thd")
    assert r.targets and set(r.targets) <= set(ENTRY_POINTS)
    for target, e in r.expect.items():
        assert isinstance(e.exception, type) and issubclass(e.exception, Exception), target
        assert e.fragment.strip(), f"{target}: empty fragment"
        if e.unsafe_launch:  # only what the kernels accept is unsafe to launch
            f = _rejects_finding(r.name, target)
            assert f is not None and f.observed == findings.ACCEPTED, f"{target}: unsafe_launch without an 'accepted' known finding"
    assert r.tamper is None or r.tamper in TAMPERS
    assert set(r.params) <= {f.name for f in dataclasses.fields(TemplateParams)}
    if r.params or r.flavor:
        assert CONFIG in r.targets
    # A rule that only a label can detect must be stated outside the facts.
    if r.detect is None:
        assert r.tamper or r.params or r.flavor


def test_contract_findings_cite_their_source():
    contract = [f for f in FINDINGS if f.rule is not None]
    assert len(contract) >= 19
    for f in contract:
        assert len(f.reason) > 40 and re.search(r"cudnn/[\w/]+\.py[^:]*:\d+", f.reason), f"{f.id}: cites no source"


def test_cited_source_lines_exist():
    import cudnn

    site = pathlib.Path(cudnn.__file__).resolve().parents[1]
    texts = [r.why for r in RULES] + [f.reason for f in FINDINGS]
    cited = {(m[0], int(m[1])) for t in texts for m in re.findall(r"(cudnn/[\w/]+\.py)[^:]*?:(\d+)", t)}
    assert cited
    for path, line in cited:
        lines = (site / path).read_text().splitlines()
        assert line <= len(lines), (path, line)


# ---------------------------------------------------------------- transforms
@pytest.mark.parametrize("r", RULES, ids=IDS)
def test_transform_breaks_exactly_its_rule(r: Rule):
    @settings(max_examples=12, **FIXED)
    @given(_base(r))
    def check(valid):
        assert broken_rules(valid) == ()
        bad = r.transform(valid)
        assert bad.violation == r.name
        assert bad.structural_problem() is None
        assert broken_rules(bad) == (r.name,)
        assert bad.layout == valid.layout
        assert r.transform(bad) == bad  # idempotent: a repro replays the same facts

    check()


@settings(max_examples=150, **FIXED)
@given(violating_cases())
def test_violating_cases_carry_one_rule(c):
    assert c.violation in contracts.RULES_BY_NAME
    assert broken_rules(c) == (c.violation,)
    r = contracts.rule(c.violation)
    assert r.layout in (None, c.layout)


@settings(max_examples=40, **FIXED)
@given(violating_cases(rules=["thd_bias", "bias_batch_gt_1"], flavors=("gptoss",), off_envelope=False))
def test_violating_cases_honour_rules_and_options(c):
    assert c.violation in ("thd_bias", "bias_batch_gt_1") and (c.d_qk, c.d_v) == (64, 64)


def test_violating_cases_refuse_impossible_options():
    with pytest.raises(ValueError, match="no rule"):
        violating_cases(rules=["thd_bias"], bias=True)


# ------------------------------------------------------------- config, for real
CONFIG_RULES = [r for r in RULES if CONFIG in r.expect]


@pytest.mark.parametrize("r", CONFIG_RULES, ids=[r.name for r in CONFIG_RULES])
def test_config_rule_on_cpu(r: Rule):
    e = r.expect[CONFIG]
    finding = _rejects_finding(r.name, CONFIG)

    @settings(max_examples=6, **FIXED)
    @given(_base(r))
    def check(valid):
        bad = r.transform(valid)
        if finding is not None and finding.observed == findings.ACCEPTED:
            run_config(r, bad)  # the finding: accepted
            return
        with pytest.raises(Exception) as info:
            run_config(r, bad)
        if finding is not None:  # the finding: this exception type instead
            assert type(info.value).__name__ == finding.observed
        else:
            assert isinstance(info.value, e.exception) and e.fragment in str(info.value)

    check()


@pytest.mark.parametrize("r", CONFIG_RULES, ids=[r.name for r in CONFIG_RULES])
def test_config_rule_base_case_is_accepted(r: Rule):
    """The config call itself is sound: on the valid case (no violation
    applied) it accepts, so the raise above is the rule's doing."""
    if r.flavor is not None:
        from cudnn.sdpa.fwd.config_sm80 import params_for_flavor

        params_for_flavor("llama")
        return

    @settings(max_examples=3, **FIXED)
    @given(_base(r))
    def check(valid):
        run_config(dataclasses.replace(r, params={}), valid)

    check()


# ------------------------------------------- wrapper bias claims, on the binder
def _bind_bias(bias_shape, bias_dtype, item):
    """Drive the wrapper's native SM80 binder (what execute_tensors and the
    staged path both call) with CUDA-typed facts and fake addresses: it
    validates and packs, nothing is dereferenced or launched."""
    from cudnn.sdpa.fwd.prepared import BufferFacts
    from cudnn.sdpa.fwd.prepared_sm80 import LaunchSpec, Operand, bind

    b, h, sq, skv, d = 2, 2, 4, 4, 64

    def contiguous(shape):
        return tuple(math.prod(shape[i + 1 :]) for i in range(len(shape)))

    def operand(shape, dtype, align):
        return Operand(shape, contiguous(shape), dtype, math.prod(shape), align, True)

    shapes = {"q": (b, h, sq, d), "k": (b, h, skv, d), "v": (b, h, skv, d), "o": (b, h, sq, d)}
    ops = [operand(s, "float16", 16) for s in shapes.values()] + [operand((b, h, sq), "float32", 4), None, None, None]
    spec = LaunchSpec(None, None, tuple(ops + [operand((1, h, sq, skv), "float16", 2)]), 0, 0.125)
    base = [0x7F0000000000]

    def facts(shape, dtype, size):
        ptr = base[0]
        base[0] += (math.prod(shape) * size // 256 + 2) * 256
        return BufferFacts(ptr, dtype, (2, 0), math.prod(shape), shape, contiguous(shape))

    f = {k: facts(s, "float16", 2) for k, s in shapes.items()}
    f.update(stats=facts((b, h, sq), "float32", 4), seq_kv=None, seq_q=None, sink=None, bias=facts(bias_shape, bias_dtype, item))
    return bind(spec, f, 0, scale=0.125)


@pytest.mark.parametrize("name,dtype,size", [("bias_dtype_float64", "float64", 8), ("bias_dtype_int32", "int32", 4), ("bias_dtype_other_half", "bfloat16", 2)])
def test_wrapper_bias_dtype_rules_on_the_binder(name, dtype, size):
    e = contracts.rule(name).expect[WRAPPER]
    assert _rejects_finding(name, WRAPPER) is None  # the wrapper rejects these (late: a compiles-first finding)
    with pytest.raises(e.exception, match=e.fragment):
        _bind_bias((1, 2, 4, 4), dtype, size)


def test_wrapper_bias_batch_finding_on_the_binder():
    assert _rejects_finding("bias_batch_gt_1", WRAPPER).observed == findings.ACCEPTED
    _bind_bias((1, 2, 4, 4), "float16", 2)  # the declared shape binds
    _bind_bias((2, 2, 4, 4), "float16", 2)  # the finding: a batch-2 bias binds too


# ------------------------------------------------- bases that keep the compile key
def _keeps_key(name: str, base) -> bool:
    """Whether rule ``name``'s transform of ``base`` asks the prepared entry
    for the key ``base`` itself compiles (kernels.prepared.named_key, tampered
    as the rejection property tampers the call)."""
    from kernels.prepared import named_key

    r = contracts.rule(name)
    return named_key(r.transform(base), tamper=r.tamper) == named_key(base)


@pytest.mark.parametrize("name", sorted(KEY_KEEPING_BASES))
def test_key_keeping_bases_keep_the_compile_key(name):
    """strategies.violations.KEY_KEEPING_BASES: the rule's violating Case asks
    for its base's own compile key (a valid pooled Case's), and still breaks
    exactly its rule."""
    r = contracts.rule(name)

    @settings(max_examples=30, **FIXED)
    @given(rule_base(r, (r.layout,), {}))
    def check(base):
        assert broken_rules(r.transform(base)) == (name,)
        assert _keeps_key(name, base), base

    check()


def test_key_check_sees_a_violation_that_reaches_the_key():
    """The check above can fail: a non-integral GQA changes the heads, which the key holds."""
    assert not _keeps_key("gqa_non_integral", Case(bias="float16"))


def test_rejection_names_the_key_it_compiled_under():
    """properties.rejection._compile_key: nothing asked, no key; the prepared
    entry's compile names its own key (sm_80 without a GPU: an artifact of
    its own); another entry names the compiled-cache entries it asked for."""
    from kernels.base import CompileDelta
    from kernels.counters import Asked
    from kernels.prepared import named_key
    from properties.rejection import _compile_key

    r = contracts.rule("gqa_non_integral")
    case = r.transform(Case())
    none, one = CompileDelta(), CompileDelta(misses=1)
    assert _compile_key(case, r, "prepared", none, Asked(), []) == ""
    assert _compile_key(case, r, "prepared", one, Asked(), []) == named_key(case, arch="sm_80") != named_key(case)
    asked = Asked(keys={"k1|sym|o": {}, "k2|sym|o": {}})
    got = _compile_key(case, r, WRAPPER, one, asked, [])
    assert got and got == _compile_key(case, r, WRAPPER, one, Asked(keys=dict(reversed(list(asked.keys.items())))), [])
    assert _compile_key(case, r, WRAPPER, one, Asked(), []) == ""
