"""Contract rejections: every rule of conformance.ground.contracts, at every entry
point it targets, raises the stated exception naming the argument, and a
rejected call compiles, launches and writes nothing. Where the kernels break
a rule, a known finding (known_findings.toml, ``rule`` + ``entry``) excuses
exactly the check it names; a finding that stops reproducing fails the run."""

import pytest
from hypothesis import given, settings, strategies as st

from conformance.ground.contracts import CONFIG, PREPARED, RULES, WRAPPER
from conformance.properties import check_rejection
from strategies import examples, violating_cases


def _rules(entry):
    return [r.name for r in RULES if entry in r.expect]


@pytest.mark.parametrize("rule", _rules(CONFIG))
@settings(max_examples=examples("contracts"))
@given(data=st.data())
def test_config_rejects(rule, data):
    check_rejection(data.draw(violating_cases([rule]), label="case"), entry=CONFIG)


@pytest.mark.compile
@pytest.mark.parametrize("rule", _rules(PREPARED))
@settings(max_examples=examples("compile"))
@given(data=st.data())
def test_prepared_rejects_before_compiling(rule, data, prepared_adapter):
    check_rejection(data.draw(violating_cases([rule]), label="case"), prepared_adapter, entry=PREPARED, launch=False)


@pytest.mark.gpu
@pytest.mark.parametrize("rule", _rules(PREPARED))
@settings(max_examples=examples("contracts"))
@given(data=st.data())
def test_prepared_rejects(rule, data, prepared_adapter, gpu):
    check_rejection(data.draw(violating_cases([rule]), label="case"), prepared_adapter, entry=PREPARED)


@pytest.mark.gpu
@pytest.mark.parametrize("rule", _rules(WRAPPER))
@settings(max_examples=examples("contracts"))
@given(data=st.data())
def test_wrapper_rejects(rule, data, wrapper_adapter, gpu):
    check_rejection(data.draw(violating_cases([rule]), label="case"), wrapper_adapter, entry=WRAPPER)
