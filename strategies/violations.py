"""Contract-violating Cases: a valid Case with exactly one rule applied.

The rule is drawn first (shrinking moves toward the first rule of the table),
then a valid base Case of the layout the rule needs, then the rule's
transform, which labels the Case with ``violation = rule.name``.
"""

from __future__ import annotations

from typing import Iterable, Mapping, Optional, Union

from hypothesis import strategies as st

from ground.case import Case
from ground.contracts import RULES, Rule
from ground.contracts import rule as rule_named

from .facts import cases

# Base Cases whose compile key a rule's transform leaves as it was, where
# there are such: the violated fact does not reach the prepared entry's key
# (kernels.prepared.compile_key), so an entry point that compiles before (or
# instead of) refusing asks for a key the pooled valid Cases compile anyway,
# and not one per example. Options of ``strategies.cases``; the transform
# still makes every Case violate its rule (no filtering).
# - the bias dtype: the pointer ABI declares the bias as the I/O dtype unless
#   it is fp32, so a float64, int32 or other-half bias keys as an I/O one;
# - the bias batch: the bias is declared [1, H, SQ, SKV] whatever its batch
#   (a base of several batch entries: from one, the transform adds one);
# - a THD right band: a launch argument (the key holds the mask family),
#   so a base already without causal keys as it was.
KEY_KEEPING_BASES: Mapping[str, Mapping] = {
    "bias_dtype_float64": {"bias": True, "bias_dtypes": ("input",)},
    "bias_dtype_int32": {"bias": True, "bias_dtypes": ("input",)},
    "bias_dtype_other_half": {"bias": True, "bias_dtypes": ("input",)},
    "bias_batch_gt_1": {"bias": True, "min_batch": 2},
    "thd_window_right_without_causal": {"causal": False},
}


def _base(r: Rule, layouts, options: Mapping):
    """The base Cases of rule ``r``: ``options`` with its key-keeping ones
    (``KEY_KEEPING_BASES``) where the caller sets none of them and they
    leave a Case to draw; raises ValueError when ``options`` leave none."""
    keeping = KEY_KEEPING_BASES.get(r.name, {})
    if keeping and not set(keeping) & set(options):
        try:
            return cases(layouts=layouts, **keeping, **options)
        except ValueError:
            pass
    return cases(layouts=layouts, **options)


def violating_cases(rules: Optional[Iterable[Union[str, Rule]]] = None, **options) -> st.SearchStrategy[Case]:
    """Violating Cases for ``rules`` (names or Rules; default: the whole table).

    ``options`` restrict the valid base Case as in ``strategies.cases``; a rule
    whose layout those options exclude is left out."""
    table = RULES if rules is None else tuple(r if isinstance(r, Rule) else rule_named(r) for r in rules)
    per_rule = []
    for r in table:
        layouts = (r.layout,) if r.layout else ("dense", "thd")
        try:
            base = _base(r, layouts, options)
        except ValueError:
            continue  # the options leave no base Case for this rule
        per_rule.append((r, base))
    if not per_rule:
        raise ValueError(f"violating_cases: no rule of {[r.name for r in table]} has a base Case under {options}")
    bases = dict((r.name, b) for r, b in per_rule)
    return st.sampled_from([r for r, _ in per_rule]).flatmap(lambda r: bases[r.name].map(r.transform))
