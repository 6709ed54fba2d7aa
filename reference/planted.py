"""Deliberately wrong references, for proving that the properties, the case
files and the repro command catch a wrong answer end to end (on a GPU run).

Set ``SDPA_PLANT_REFERENCE_BUG=<name>`` for a pytest run and for the
``sdpa-conformance repro`` of its case file: the numerics property then
fails where the planted bug changes the answer; unset, the same case file
passes. Never set in CI or in a gating run; the active plant is announced on
stderr at import.
"""

from __future__ import annotations

import os
import sys

from . import masks

ENV = "SDPA_PLANT_REFERENCE_BUG"
_band = masks.band

# name -> the replacement visibility predicate (same signature as masks.band).
PLANTS = {
    # Causal diagonal excluded: row i no longer sees key i (+ shift + band).
    "causal-off-by-one": lambda i, j, n_q, n_kv, **kw: (
        _band(i, j, n_q, n_kv, **kw) & ~(kw["causal"] & (j == i + ((n_kv - n_q) if kw["bottom_right"] else 0) + max(kw["window_right"], 0)))
    ),
    # Padding mask one key too wide: the first padded key joins the softmax.
    "kv-length-plus-one": lambda i, j, n_q, n_kv, **kw: _band(i, j, n_q, n_kv + 1, **kw),
}


class UnknownPlant(ValueError):
    """$SDPA_PLANT_REFERENCE_BUG names no plant (raised when ``reference`` is
    imported): an exception, not SystemExit, so that the pytest plugin and the
    repro command can report it as the usage error it is."""


def check() -> str | None:
    """The plant $SDPA_PLANT_REFERENCE_BUG names (None: unset), UnknownPlant
    for an unknown name: activate's check, for a caller that may find
    ``reference`` imported (and activate run) already."""
    name = os.environ.get(ENV)
    if name and name not in PLANTS:
        raise UnknownPlant(f"{ENV}={name!r}: unknown plant (known: {', '.join(PLANTS)})")
    return name or None


def activate() -> str | None:
    name = check()
    if name is None:
        return None
    masks.band = PLANTS[name]
    print(f"sdpa-conformance: reference deliberately broken ({ENV}={name})", file=sys.stderr)
    return name
