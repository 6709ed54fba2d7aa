"""The Case facts are declared once (ground/case.py) and every
consumer derives from the declarations: case-file reading and validation, the
findings file's ``when``, the describer, the coverage vocabulary, the
adapters' refusal of facts they cannot express. Each test runs over every
declared fact, so a new fact is checked here without editing this file."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from ground import coverage, findings
from ground.case import AUTO, FACTS, SCHEMA_VERSION, Case, CaseFileError, coerce_fact, facts_markdown, load_case_file
from ground.outcome import Unsupported
from ground.tables import ADAPTERS
from properties import CHECKS

ROOT = Path(__file__).resolve().parents[1]
BASE = Case(s_q=5, s_kv=7, h_q=2, h_kv=1, seed=11)


def other_value(f):
    """A valid value of fact ``f`` other than its default (for generic checks)."""
    if f.type is bool:
        return not f.default
    if f.choices is not None:
        return next(c for c in f.choices if c != f.default)
    return None


OTHERS = {name: other_value(f) for name, f in FACTS.items() if other_value(f) is not None}


def test_the_declarations_are_the_dataclass():
    assert list(FACTS) == [f.name for f in dataclasses.fields(Case)]
    for f in FACTS.values():
        assert f.doc and f.since <= SCHEMA_VERSION, f.name
        assert Case().to_dict()[f.name] == (list(f.default) if isinstance(f.default, tuple) else f.default)
    assert all(f"`{name}`" in facts_markdown() for name in FACTS)


@pytest.mark.parametrize("name", list(FACTS))
def test_a_case_file_missing_any_fact_is_refused_naming_it(name):
    doc = BASE.to_dict()
    del doc[name]
    with pytest.raises(CaseFileError, match=f"case field '{name}': missing"):
        Case.from_dict(doc)


@pytest.mark.parametrize("name", list(FACTS))
def test_every_fact_reads_back_with_its_type(name):
    case = BASE.replace(**{name: OTHERS[name]}) if name in OTHERS else BASE
    if case.structural_problem() is not None:  # e.g. layout="thd" needs length lists
        case = BASE
    assert Case.from_json(case.to_json()) == case
    with pytest.raises(CaseFileError, match=f"case field '{name}': expected"):
        coerce_fact(name, {"not": "a fact value"})


def test_facts_of_a_later_schema_take_their_defaults_in_older_files():
    for schema in range(1, SCHEMA_VERSION + 1):
        doc = {k: v for k, v in BASE.to_dict().items() if FACTS[k].since <= schema}
        assert Case.from_dict(doc, schema) == BASE, schema
    with pytest.raises(CaseFileError, match="'schema'"):
        Case.from_json(json.dumps({"schema": SCHEMA_VERSION + 1, "case": BASE.to_dict()}))


@pytest.mark.parametrize("path", sorted(ROOT.glob("findings/*.json")), ids=lambda p: p.name)
def test_saved_finding_case_files_still_load(path):
    case, doc = load_case_file(path)
    assert doc["schema"] <= SCHEMA_VERSION and case.structural_problem() is None


def test_findings_when_reads_facts_through_the_declarations():
    entry = {
        "id": "x",
        "reason": "r",
        "property": "tails",
        "check": "no nan",
        "quantity": "o",
        "region": "padded_q_rows",
        "when": {name: json.loads(json.dumps(v)) for name, v in OTHERS.items()},
    }
    (f,) = findings.parse({"finding": [entry]}, checks=CHECKS)
    assert f.when == OTHERS
    with pytest.raises(findings.FindingsError, match="'when': case field 'causal': expected true/false"):
        findings.parse({"finding": [{**entry, "when": {"causal": 1}}]}, checks=CHECKS)


@pytest.mark.parametrize("name", [n for n, f in FACTS.items() if f.shown is None and n in OTHERS])
def test_the_describer_shows_every_plain_fact_when_not_default(name):
    assert name not in BASE.describe()
    assert name in BASE.replace(**{name: OTHERS[name]}).describe()


def test_coverage_axes_come_from_the_declarations():
    names = {a.name for a in coverage.AXES}
    for f in FACTS.values():
        if f.coverage == AUTO:
            axis = next(a for a in coverage.AXES if a.name == f.name)
            assert set(axis.values) == ({"no", "yes"} if f.type is bool else set(map(str, f.choices)))
            assert f"{f.name}:{axis.values[0]}" in coverage.REQUIRED
        else:
            assert set(f.coverage or ()) <= names, f.name
    assert {f.name for f in FACTS.values() if f.coverage is None} == {"seed", "violation"}


def _refused_by_the_others(name):
    """An adapter without the fact's argument refuses a non-default value; the
    properties skip such examples (a Hypothesis rejection) instead of judging."""
    from hypothesis import given, settings
    from hypothesis import strategies as st
    from hypothesis.errors import Unsatisfiable

    from properties import PROPERTIES

    f = FACTS[name]
    case = BASE.replace(**{name: OTHERS[name]})
    assert BASE.unexpressible("wrapper") is None and BASE.unexpressible("prepared") is None
    for adapter in ADAPTERS:
        why = case.unexpressible(adapter)
        assert (why is None) == (adapter in f.adapters), adapter
        if why is None:
            continue
        assert f"'{name}'" in why
        stand_in = type("StandIn", (), {"name": adapter})()
        with pytest.raises(Unsupported, match=name) as refused:
            PROPERTIES["numerics"].check(case, stand_in)
        assert (refused.value.scope, refused.value.adapter, refused.value.hint) == ("case", adapter, "--adapter picks another")
        with pytest.raises(Unsupported, match=name):
            PROPERTIES["rejection"].check(case, None, entry=adapter)
        ran = []

        @settings(max_examples=5, database=None)
        @given(st.just(case))
        def skipped(c):
            ran.append(PROPERTIES["numerics"].check(c, stand_in))

        with pytest.raises(Unsatisfiable):
            skipped()
        assert ran == []


@pytest.mark.parametrize("name", [n for n, f in FACTS.items() if f.adapters is not None])
def test_adapters_refuse_what_they_cannot_express(name):
    _refused_by_the_others(name)


def test_a_restricted_fact_is_refused_and_skipped(monkeypatch):
    """The mechanism on a planted restriction (sinks: prepared only)."""
    from kernels.wrapper import WrapperAdapter

    monkeypatch.setitem(FACTS, "sinks", dataclasses.replace(FACTS["sinks"], adapters=("prepared",)))
    _refused_by_the_others("sinks")
    with pytest.raises(Unsupported, match="'sinks' = True: the wrapper adapter"):
        WrapperAdapter().run(BASE.replace(sinks=True), None)


def test_repro_of_an_unexpressible_case_exits_2(monkeypatch, tmp_path, capsys):
    from conformance import cli

    monkeypatch.setitem(FACTS, "sinks", dataclasses.replace(FACTS["sinks"], adapters=("prepared",)))
    path = tmp_path / "case.json"
    path.write_text(json.dumps({"schema": SCHEMA_VERSION, "case": BASE.replace(sinks=True).to_dict(), "property": "numerics", "needs_gpu": False}))
    assert cli.main(["repro", str(path), "--adapter", "wrapper"]) == 2
    assert "case field 'sinks' = True: the wrapper adapter" in capsys.readouterr().err
