"""Which facts the run exercised, counted over the examples it is given
(reports.summary: every begun example of the property tests).

The vocabulary is ``ground.coverage`` (the one the strategies'
coverage test checks): the axes list the values a complete run should reach
even when none was seen, so an empty cell or a zero row is a visible gap, not
a missing line, and ``gaps`` names every axis value no example exercised. ``pairs``: the
feasible pairs of compile-key factor values, those the examples drew and
those they missed, per direction and layout (ground.pairs).
"""

from __future__ import annotations

import importlib
from collections import Counter
from typing import Iterable, Optional

from ground import pairs
from ground.case import Case
from ground.coverage import AXES, MASK_FAMILIES, MATRIX_COLUMNS, MATRIX_LAYOUTS, REQUIRED, exercised, labels, matrix_cell
from ground.families import DEFAULT_FAMILY, FAMILIES, coverage_gaps
from ground.feature_space import OUT_OF_SCOPE, field_axes


def coverage(cases: Iterable[Case], adapter: Optional[str] = None) -> dict:
    """Counts of valid examples per (layout/mask) x (flavor/dtype) cell, per
    axis value, and of contract-violating examples per rule; and the pairs of
    compile-key factor values they made meet (ground.pairs, on ``adapter``:
    the entry point the run drew for)."""
    cases = list(cases)
    cells, facts, rules = Counter(), {a.name: Counter() for a in AXES}, Counter()
    masks = list(MASK_FAMILIES)
    total = 0
    for case in cases:
        total += 1
        if case.violation is not None:
            rules[case.violation] += 1
            continue
        m = case.mask_name()
        if m not in masks:
            masks.append(m)
        cells[matrix_cell(case)] += 1
        for axis, values in exercised(case).items():
            for v in values:
                facts[axis][v] += 1
    columns = list(MATRIX_COLUMNS)
    columns += sorted({c for _, c in cells} - set(columns))  # "none/..." (outside every envelope)
    rows = [f"{layout}/{m}" for layout in MATRIX_LAYOUTS for m in masks]
    counts = [[cells[(r, c)] for c in columns] for r in rows]
    values = {a.name: list(a.values) + sorted(set(facts[a.name]) - set(a.values)) for a in AXES}
    fact_counts = {a.name: {v: facts[a.name][v] for v in values[a.name]} for a in AXES}
    fields = kernel_fields(fact_counts)
    return {
        "examples": total,
        # The kernels' degrees of freedom (TemplateParams fields, entry-point
        # arguments: ground.feature_space) x the values of the
        # coverage axes of the facts that draw them -> examples.
        "kernel_fields": fields,
        "kernel_field_gaps": [f"{field}: {value}" for field, counts in fields.items() for value, n in counts.items() if not n],
        "out_of_scope": {f"{src}.{name}": why for (src, name), why in OUT_OF_SCOPE.items()},
        "matrix": {"rows": rows, "columns": columns, "counts": counts},
        "facts": fact_counts,
        "axes": {a.name: a.doc for a in AXES},
        "contract_rules": dict(sorted(rules.items())),
        "empty_cells": sum(1 for row in counts for n in row if n == 0),
        # Axis values a complete run reaches that no example exercised.
        "gaps": [f"{a.name}: {v}" for a in AXES for v in a.values if not facts[a.name][v]],
        # Pairs of compile-key factor values: feasible, drawn, missing, per direction and layout.
        "pairs": pairs.coverage(cases, adapter),
        # Another family's pairs over its own factors (KernelFamily.pairs), where the run drew its Cases.
        "family_pairs": family_pairs(cases),
        # Another family's coverage labels that it can exercise and none of its Cases did (KernelFamily.unreachable).
        "family_gaps": family_gaps(cases),
    }


def family_gaps(cases: list) -> dict:
    """family -> the coverage labels it can exercise (``ground.families.coverage_gaps``) that none of the run's
    valid Cases of it did, for every family other than the default that declares its unreachable labels and
    that the run drew Cases of."""
    seen: dict = {}
    for case in cases:
        if case.violation is None and case.family != DEFAULT_FAMILY and FAMILIES[case.family].unreachable:
            seen.setdefault(case.family, set()).update(labels(case))
    return {name: list(coverage_gaps(name, got, REQUIRED)) for name, got in sorted(seen.items())}


def family_pairs(cases: list) -> dict:
    """family -> its pair coverage (its ``KernelFamily.pairs`` module), for
    every family with factors of its own that the run drew Cases of."""
    drawn = {c.family for c in cases}
    return {name: importlib.import_module(f.pairs).coverage(cases) for name, f in FAMILIES.items() if f.pairs and name in drawn}


def kernel_fields(fact_counts: dict) -> dict:
    """ "source.field" -> {"axis: value": examples} over the coverage axes of
    the facts drawing that field (feature_space.field_axes)."""
    return {field: {f"{axis}: {v}": n for axis in axes for v, n in fact_counts[axis].items()} for field, axes in field_axes().items()}
