"""kernels.tampers: every operand a tamper makes sits inside guard bands,
and the wrapper adapter hands it to the guard check (``tampered``), so a
launch that writes past a tampered operand is seen as past any other."""

from __future__ import annotations

import pytest
import torch

from ground.case import Case
from ground.contracts import RULES
from ground.data import guard_bands, make_inputs
from kernels.tampers import WRAPPER_TAMPERS, apply_wrapper_tamper, tampered

BASE = {"dense": Case(s_q=5, s_kv=7), "thd": Case(layout="thd", q_lens=(2, 3), kv_lens=(4, 1), bias="float32")}
TAMPERING = [r for r in RULES if r.tamper is not None]


def _kw(case: Case, x) -> dict:
    """The adapter's keyword arguments, as kernels.wrapper builds them (the tensors that matter here)."""
    if case.is_thd:
        return dict(cum_seqlen_q_tensor=x.cu_q, cum_seqlen_k_tensor=x.cu_kv, bias_tensor=x.bias, sinks=x.sinks)
    return dict(seq_kv_lens=x.seq_kv_lens, seq_len_q=x.seq_q_lens, rope_freqs=x.rope, bias_tensor=x.bias, sinks=x.sinks)


def test_every_tamper_is_a_rule_of_the_table():
    assert {r.tamper for r in TAMPERING} == set(WRAPPER_TAMPERS)


@pytest.mark.parametrize("rule", TAMPERING, ids=lambda r: r.name)
def test_a_tampers_new_operands_are_guarded_and_handed(rule):
    case = rule.transform(BASE[rule.layout or "dense"])
    x = make_inputs(case, "cpu")
    kw = _kw(case, x)
    own = {k: v for k, v in kw.items() if v is not None}
    apply_wrapper_tamper(rule.tamper, kw, case, x)
    new = tampered(kw, own)
    for name, t in new.items():
        assert guard_bands(t) is not None, name
    # what the tamper set to a tensor of its own is exactly what tampered() hands on
    made = {k for k, v in kw.items() if isinstance(v, torch.Tensor) and all(v is not o for o in own.values())}
    assert {n.removesuffix(" (tampered)") for n in new} == made


def test_tampered_names_only_tensors_the_call_did_not_already_hand():
    a, b = torch.zeros(2), torch.ones(3)
    assert tampered({"x": a, "y": b, "z": None, "s": "lpt"}, {"q": a}) == {"y (tampered)": b}
