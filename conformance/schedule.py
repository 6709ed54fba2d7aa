"""The order a distributed run hands its tests out in: heaviest first, dealt
so that every worker's share weighs about the same.

With ``-n N`` the plugin picks xdist's ``worksteal`` (plugin._steal_work):
each worker is first given a contiguous 1/N of the collection, and an idle
worker later takes the back half of the longest queue. In collection order
the heavy tests sit together (test_backward.py is collected first), so a few
workers start with all of them: on the H200's cold ci run of 2026-12-03 (16
workers, report ci-1) the workers' spans ran from 187 s to 347 s around a
mean of 237 s, and the wall followed the longest. Dealt, each worker's
contiguous share holds its heavy tests first and cheap ones last, and what a
thief takes from the back is cheap.

A test's weight is, first, its seconds in a measured gate run of the same
profile (``durations/<profile>.json`` for a run on an empty compiled cache,
``<profile>-warm.json`` for one on a cache that holds kernels; written by
tools/store_durations.py from a run's report directory), else an estimate
(``weight_of``). The shares are filled heaviest first, each test going to the
share that weighs least so far among those with room (worksteal's split fixes
how many tests each share holds): on the stored runs' own tests this leaves
the heaviest share at the mean, or at the heaviest test where one outweighs a
mean share (tests/test_schedule.py), where dealing them in a snake left it
8-43% above.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, TypeVar

from properties import PROPERTIES

T = TypeVar("T")

OTHER_SECONDS = 0.5  # a test of no property (the suite's own tests, CPU checks)
# A compile-tier test of no property (marker ``compile``: a family's CPU tier, which the gate runs with --cpu-tier):
# its compiles are its own (a cold cache each), so it costs as much warm as cold. The 18
# compile-tier tests the gate ran on the H200 (family_select.GATE_TESTS) took 7.5 s each on average, cold and warm alike
# (docs/measurements.md); weighed as OTHER_SECONDS they were dealt last and made a warm run's tail.
COMPILE_SECONDS = 7.5
WEIGHT_MARKER = "weight(seconds): what the test costs where its property's or tier's weight is far off (conformance.schedule)"


DURATIONS_DIR = Path(__file__).resolve().parent / "durations"


def durations(profile: str, warm: bool) -> Dict[str, float]:
    """Seconds per test node id measured in a gate run of ``profile``
    (``warm``: on a compiled cache that already held kernels; without a warm
    table the cold one): {} where none is stored."""
    for name in ((f"{profile}-warm",) if warm else ()) + (profile,):
        path = DURATIONS_DIR / f"{name}.json"
        if path.is_file():
            return {node: float(s) for node, s in json.loads(path.read_text())["seconds"].items()}
    return {}


def weight_of(property: Optional[str], *, compiles: bool = False, declared: Optional[float] = None, measured: Optional[float] = None) -> float:
    """Seconds per test: ``measured`` (its seconds in a stored run,
    ``durations``) if known, else ``declared`` (the test's ``weight``
    marker), else ``property``'s ``Property.cold_seconds`` on a cold ci run
    (properties/registry.py); for a test of no property ``COMPILE_SECONDS``
    if it ``compiles`` (the ``compile`` marker), else ``OTHER_SECONDS``.
    Relative weights only: a wrong one costs balance, never a verdict."""
    if measured is not None:
        return float(measured)
    if declared is not None:
        return float(declared)
    found = PROPERTIES.get(property) if property is not None else None
    if found is not None:
        return found.cold_seconds
    return COMPILE_SECONDS if compiles else OTHER_SECONDS


def deal(items: Sequence[T], weight: Callable[[T], float], workers: int) -> List[T]:
    """``items`` reordered for ``workers`` contiguous shares of worksteal's
    sizes (share w of n items holds (n - taken) // (workers - w)): heaviest
    first (ties keep their order), each to the share that weighs least so far
    among those with room, then the shares concatenated, each heaviest first.
    Deterministic: every xdist worker must collect the same order."""
    if workers < 2 or len(items) <= workers:
        return list(items)
    n, sizes = len(items), []
    for w in range(workers):
        sizes.append((n - sum(sizes)) // (workers - w))
    weights = [weight(it) for it in items]
    shares: List[List[T]] = [[] for _ in range(workers)]
    load = [0.0] * workers
    for i in sorted(range(n), key=lambda i: (-weights[i], i)):
        seat = min((s for s in range(workers) if len(shares[s]) < sizes[s]), key=lambda s: (load[s], s))
        shares[seat].append(items[i])
        load[seat] += weights[i]
    return [item for share in shares for item in share]
