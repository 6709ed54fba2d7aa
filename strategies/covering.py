"""Completing the geometry pools to a pairwise covering design.

Every feasible pair of compile-key factor values (ground.pairs) must meet in
some pool row of its layout: bugs live in combinations, and most need one or
two factors to meet. The hand-written rows of strategies/geometry.py (each
tuned for a property: the tails rows, the padding-poison rows, the L2 split,
RoPE past the first KV tile, ...) are the seed; ``complete`` adds, per
stratum, the fewest rows a deterministic greedy (AETG-style) finds that make
every feasible pair meet: each new row starts from the first pair still
missing that the stratum can hold (a valid Case holding it:
``ground.pairs.witness``), then takes, factor by factor, the value that
makes the most missing pairs meet with the values already chosen (ties: the
one in most missing pairs, then declaration order), keeping the Case valid
(facts that depend on another, such as a sink's units on sinks, come after
it). Everything derives from the declarations (the factors, their values,
the exclusions), so a new compile-key fact or value gets its rows with no
edit here; geometry.py gives each row its shape facts.

The forward pairs decide: a backward Case is a forward row mapped onto what
the backward serves (strategies.backward.to_backward), which keeps every
factor the backward shares, so the rows that make the forward's pairs meet
make the backward's meet too (tests/test_pairs.py checks both).
"""

from __future__ import annotations

from collections import Counter
from typing import Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Set, Tuple

from ground import pairs
from ground.case import DIRECTIONS, Case

from .directions import backward_views, to_forward

Stratum = Tuple[str, str]  # (flavor, dtype)


def _dependent(fs: Sequence[pairs.Factor], base: Case) -> List[str]:
    """Factors with a value that no Case holds on its own (it needs another
    factor off its default: sink units need sinks): chosen after the rest."""
    out = []
    for f in fs:
        for v in f.values:
            try:
                ok = pairs.valid(f.realize(base, v))
            except (AttributeError, TypeError, KeyError, ValueError):
                ok = False
            if not ok:
                out.append(f.name)
                break
    return out


def complete(
    layout: str, strata: Sequence[Stratum], seeds: Iterable[Case], views: Callable[[Case], Sequence[Case]] = backward_views
) -> Dict[Stratum, Tuple[Case, ...]]:
    """stratum -> the Cases of the rows to add to its pool so that, with the
    ``seeds`` (forward Cases), every feasible pair of ``layout`` meets, in
    both directions: a row's forward pairs and those of the backward Cases
    the backward strategies make of it (``views``). Deterministic: the same
    declarations give the same rows."""
    fs = pairs.factors("fwd", layout)
    base = pairs.BASES["fwd", layout]
    order = [(d, p) for d in DIRECTIONS for p in pairs.universe(d, layout)]
    missing = {(d, p) for d in DIRECTIONS for p in pairs.feasible(d, layout)}
    for c in seeds:
        missing -= _covered(c, views)
    late = _dependent(fs, base)
    fill = [f for f in fs if f.name not in late] + [f for f in fs if f.name in late]
    out: Dict[Stratum, List[Case]] = {s: [] for s in strata}
    while missing:
        progressed = False
        for flavor, dtype in strata:
            if not missing:
                break
            start = _start(layout, {"flavor": flavor, "dtype": dtype}, order, missing, views)
            if start is None:
                continue
            row = _greedy(fs, fill, start, missing, views)
            new = _covered(row, views) & missing
            if new:
                out[flavor, dtype].append(row)
                missing -= new
                progressed = True
        if not progressed:
            left = sorted(f"{d} {pairs.text(p)}" for d, p in missing)
            raise ValueError(f"pairs no valid {layout} Case holds, yet not declared excluded (ground.pairs.EXCLUSIONS): {left[:10]}")
    return {s: tuple(rows) for s, rows in out.items()}


def _covered(c: Case, views) -> Set[Tuple[str, pairs.Pair]]:
    """(direction, pair) of every pair forward Case ``c`` and its backward ``views`` make meet."""
    return {("fwd", p) for p in pairs.pairs_of(c)} | {("bwd", p) for v in views(c) for p in pairs.pairs_of(v)}


def _start(layout: str, fixed: Mapping[str, str], order, missing, views) -> Optional[Case]:
    """The forward Case of the stratum ``fixed`` that holds the first missing
    pair it can: a valid Case holding it (``ground.pairs.witness``; for a
    backward pair, the forward facts it is drawn from)."""
    for d, p in order:
        if (d, p) in missing and all(fixed.get(name, v) == v for name, v in p):
            w = pairs.witness(d, layout, {**fixed, **dict(p)})
            if w is not None and d == "bwd":
                w = to_forward(w)
            if w is not None and pairs.valid(w) and (d, p) in _covered(w, views):
                return w
    return None


def _greedy(fs, fill, start: Case, missing: set, views) -> Case:
    """``start``'s values off their defaults kept, every other factor given
    the value whose row makes the most ``missing`` pairs meet (ties: the value
    in most missing pairs, then declaration order)."""
    keep = {f.name for f in fs if f.of(start) != f.default or f.name in ("flavor", "dtype")}
    reach = Counter(v for _, p in missing for v in p)
    cur = start
    for f in fill:
        if f.name in keep:
            continue
        best, best_score = cur, None
        for v in f.values:
            try:
                c = f.realize(cur, v)
                if f.of(c) != v or any(g.of(c) != g.of(cur) for g in fs if g.name in keep) or not pairs.valid(c):
                    continue
            except (AttributeError, TypeError, KeyError, ValueError):
                continue
            score = (len(_covered(c, views) & missing), reach[(f.name, v)])
            if best_score is None or score > best_score:
                best, best_score = c, score
        cur = best
        keep.add(f.name)
    return cur
