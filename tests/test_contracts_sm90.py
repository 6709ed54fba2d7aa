"""The sm90 rows of the contract table (ground.contracts.SM90_RULES) on the
CPU: every row's entry points refuse it with the named exception and a
message naming what is wrong (kernels.sm90.rules.run_rule: the planner with
the arch probe answered, validate_params, the template's compile() head-dim
check; nothing compiles). The rows marked ``observed=accepted`` are what the
installed planner accepts instead (candidate findings, docs/sm90.md): that
acceptance is asserted, so a fix upstream shows here."""

from __future__ import annotations

import dataclasses
from typing import Optional

import pytest

from ground.contracts import ACCEPTED_BY_INSTALLED, SM90_ENTRY_POINTS, SM90_RULES, SM90_RULES_BY_NAME, Expect, Sm90Rule
from kernels.sm90.rules import run_rule
from kernels.sm90.specialize import specialize

pytestmark = [pytest.mark.family("sm90"), pytest.mark.cpu_tier]
ROWS = [(r.name, entry) for r in SM90_RULES for entry in r.targets]


def verdict(rule: Sm90Rule, entry: str) -> Optional[str]:
    """None where ``entry`` treats ``rule`` as the row says (refused with its
    exception and fragment; accepted for an ``observed=accepted`` row),
    else what it did instead."""
    expect = rule.expect[entry]
    try:
        run_rule(rule, entry)
    except Exception as e:  # noqa: BLE001  (the verdict names whatever it was)
        if rule.observed == ACCEPTED_BY_INSTALLED:
            return f"refused ({type(e).__name__}: {e}); the row says the installed entry accepts it: a fix upstream? update the row"
        if type(e) is not expect.exception:
            return f"raised {type(e).__name__}: {e}; expected {expect.exception.__name__}"
        if expect.fragment not in str(e):
            return f"message {str(e)!r} lacks {expect.fragment!r}"
        return None
    return None if rule.observed == ACCEPTED_BY_INSTALLED else f"accepted; expected {expect.exception.__name__} naming {expect.fragment!r}"


@pytest.mark.parametrize("name,entry", ROWS, ids=[f"{n}-{e}" for n, e in ROWS])
def test_each_row_is_treated_as_the_table_says(name, entry):
    assert verdict(SM90_RULES_BY_NAME[name], entry) is None


@pytest.mark.parametrize("name", [r.name for r in SM90_RULES])
def test_each_rows_base_case_is_valid(name):
    """The refusal is the rule's: the row's valid base Case plans."""
    rule = SM90_RULES_BY_NAME[name]
    assert rule.valid_case().structural_problem() is None
    specialize(rule.valid_case())
    assert rule.case().violation == name


def test_the_table_is_well_formed():
    assert len(SM90_RULES) == len(SM90_RULES_BY_NAME) and all(r.targets for r in SM90_RULES)
    assert {e for r in SM90_RULES for e in r.targets} == set(SM90_ENTRY_POINTS)  # every entry point judged
    accepted = [r.name for r in SM90_RULES if r.observed == ACCEPTED_BY_INSTALLED]
    assert accepted == ["sm90_bias_operand", "sm90_score_max_output", "sm90_use_pdl"]


PLANTED = {
    "wrong fragment": lambda r, e: {e: Expect(r.expect[e].exception, "no such fragment in any message")},
    "wrong exception": lambda r, e: {e: Expect(KeyError, r.expect[e].fragment)},
}


@pytest.mark.parametrize("plant", sorted(PLANTED))
@pytest.mark.parametrize("name", ["sm90_head_dim_not_multiple_of_8", "sm90_params_scale_mode", "sm90_gqa_non_integral"])
def test_a_planted_row_fails(name, plant):
    rule = SM90_RULES_BY_NAME[name]
    for entry in rule.targets:
        planted = dataclasses.replace(rule, expect={**rule.expect, **PLANTED[plant](rule, entry)})
        assert verdict(planted, entry) is not None


def test_a_planted_accepted_mark_and_a_valid_row_fail():
    """Marking a refused row accepted fails, and so does a row whose Case breaks nothing."""
    refused = SM90_RULES_BY_NAME["sm90_negative_window"]
    assert verdict(dataclasses.replace(refused, observed=ACCEPTED_BY_INSTALLED), "sm90_plan") is not None
    assert verdict(dataclasses.replace(refused, plan={}), "sm90_plan") is not None
    accepted = SM90_RULES_BY_NAME["sm90_use_pdl"]
    assert verdict(dataclasses.replace(accepted, observed=None), "sm90_plan") is not None
