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
"""

from __future__ import annotations

from typing import Callable, List, Optional, Sequence, TypeVar

from properties import PROPERTIES

T = TypeVar("T")

OTHER_SECONDS = 0.5  # a test of no property (the suite's own tests, CPU checks)
# A compile-tier test of no property (marker ``compile``: a family's CPU tier, which the gate runs too):
# its compiles are its own (a cold cache each), so it costs as much warm as cold. The 18
# compile-tier tests the gate ran on the H200 (family_select.GATE_TESTS) took 7.5 s each on average, cold and warm alike
# (docs/measurements.md); weighed as OTHER_SECONDS they were dealt last and made a warm run's tail.
COMPILE_SECONDS = 7.5
WEIGHT_MARKER = "weight(seconds): what the test costs where its property's or tier's weight is far off (conformance.schedule)"


def weight_of(property: Optional[str], *, compiles: bool = False, declared: Optional[float] = None) -> float:
    """Seconds per test of ``property`` on a cold ci run: ``declared`` (the
    test's ``weight`` marker) if given, else its ``Property.cold_seconds``
    (properties/registry.py); for a test of no property ``COMPILE_SECONDS``
    if it ``compiles`` (the ``compile`` marker), else ``OTHER_SECONDS``.
    Relative weights only: a wrong one costs balance, never a verdict."""
    if declared is not None:
        return float(declared)
    found = PROPERTIES.get(property) if property is not None else None
    if found is not None:
        return found.cold_seconds
    return COMPILE_SECONDS if compiles else OTHER_SECONDS


def deal(items: Sequence[T], weight: Callable[[T], float], workers: int) -> List[T]:
    """``items`` reordered for ``workers`` contiguous shares: sorted heaviest
    first (ties keep their order), dealt in a snake (0..N-1, N-1..0, ...) so
    the shares have equal counts (+-1) and near-equal weights, then the
    shares concatenated. Deterministic: every xdist worker must collect the
    same order."""
    if workers < 2 or len(items) <= workers:
        return list(items)
    ranked = sorted(range(len(items)), key=lambda i: (-weight(items[i]), i))
    shares: List[List[T]] = [[] for _ in range(workers)]
    for k, i in enumerate(ranked):
        turn, seat = divmod(k, workers)
        shares[seat if turn % 2 == 0 else workers - 1 - seat].append(items[i])
    return [item for share in shares for item in share]
