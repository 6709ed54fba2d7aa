"""Contract-violating Cases: a valid Case with exactly one rule applied.

The rule is drawn first (shrinking moves toward the first rule of the table),
then a valid base Case of the layout the rule needs, then the rule's
transform, which labels the Case with ``violation = rule.name``.
"""

from __future__ import annotations

from typing import Iterable, Optional, Union

from hypothesis import strategies as st

from ground.case import Case
from ground.contracts import RULES, Rule
from ground.contracts import rule as rule_named

from .facts import cases


def violating_cases(rules: Optional[Iterable[Union[str, Rule]]] = None, **options) -> st.SearchStrategy[Case]:
    """Violating Cases for ``rules`` (names or Rules; default: the whole table).

    ``options`` restrict the valid base Case as in ``strategies.cases``; a rule
    whose layout those options exclude is left out."""
    table = RULES if rules is None else tuple(r if isinstance(r, Rule) else rule_named(r) for r in rules)
    per_rule = []
    for r in table:
        layouts = (r.layout,) if r.layout else ("dense", "thd")
        try:
            base = cases(layouts=layouts, **options)
        except ValueError:
            continue  # the options leave no base Case for this rule
        per_rule.append((r, base))
    if not per_rule:
        raise ValueError(f"violating_cases: no rule of {[r.name for r in table]} has a base Case under {options}")
    bases = dict((r.name, b) for r, b in per_rule)
    return st.sampled_from([r for r, _ in per_rule]).flatmap(lambda r: bases[r.name].map(r.transform))
