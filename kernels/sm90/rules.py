"""The sm90 rows of the contract table (``ground.contracts.SM90_RULES``), run
on their entry points: all three refuse before compiling or launching, so
they run on any machine."""

from __future__ import annotations

import dataclasses

from ground.contracts import SM90_COMPILE, SM90_CONFIG, SM90_DESCRIPTORS, SM90_PLAN, Sm90Rule
from kernels.sm90.adapter import template_module
from kernels.sm90.specialize import plan, specialize


def _descriptor(rule: Sm90Rule, role: str):
    """The stand-in declaration a plan-argument row names ("desc:<role>")."""
    import torch

    from kernels.sm90.specialize import _desc

    case = rule.case()
    shapes = {
        "bias": ((1, case.h_q, case.s_q, case.s_kv), torch.float16 if case.dtype == "float16" else torch.bfloat16),
        "score_max": ((case.batch, case.h_q, case.s_q), torch.float32),
    }
    shape, dtype = shapes[role]
    with torch.device("meta"):
        return _desc(torch.empty(shape, dtype=dtype), role)


def plan_overrides(rule: Sm90Rule) -> dict:
    """The rule's planner arguments, descriptor stand-ins built (``SM90_DESCRIPTORS``)."""
    out = {}
    for name, value in rule.plan.items():
        if isinstance(value, str) and value.startswith("desc:"):
            role = value[len("desc:") :]
            assert role in SM90_DESCRIPTORS, role
            value = _descriptor(rule, role)
        out[name] = value
    return out


def run_rule(rule: Sm90Rule, entry: str):
    """Drive ``entry`` (``SM90_ENTRY_POINTS``) for ``rule``: returns what it
    returned, or raises what it raised.

    plan: the planner on the violating Case with the rule's arguments.
    config: ``validate_params`` on the valid base Case's planned params with
    the rule's fields replaced. compile: the template's ``compile()`` for the
    valid base Case's plan with the violating Case's head dims (its head-dim
    check raises before anything compiles)."""
    from cudnn.sdpa.fwd import config_sm90

    if entry == SM90_PLAN:
        return plan(rule.case(), **plan_overrides(rule))
    if entry == SM90_CONFIG:
        params = dataclasses.replace(specialize(rule.valid_case()).params, **rule.params)
        config_sm90.validate_params(params)
        return params
    if entry == SM90_COMPILE:
        bad = rule.case()
        spec = dataclasses.replace(specialize(rule.valid_case()), d_qk=bad.d_qk, d_v=bad.d_v)
        args, kwargs = spec.compile_args()
        return template_module(spec.params).compile(*args, **kwargs)
    raise ValueError(f"entry {entry!r}: not an sm90 entry point")
