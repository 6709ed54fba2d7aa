"""conformance.schedule: the dealt collection order of a distributed run."""

import random

from conformance import schedule


def _shares(order, workers):
    n, shares, start = len(order), [], 0
    for w in range(workers):  # worksteal's first split: len(pending) // nodes_remaining each
        size = (n - start) // (workers - w)
        shares.append(order[start : start + size])
        start += size
    return shares


def test_every_share_weighs_about_the_same_and_starts_heavy():
    rng = random.Random(0)
    # The shape of a gate: a few heavy backward tests collected first, many cheap ones after.
    items = [("backward", 55.0)] * 16 + [("backward_tails", 30.0)] * 24 + [("numerics", 9.0)] * 32 + [("metamorphic", 3.0)] * 120
    items += [("own", rng.uniform(0, 1)) for _ in range(150)]
    order = schedule.deal(items, lambda it: it[1], 16)
    assert sorted(order) == sorted(items)  # a permutation
    shares = _shares(order, 16)
    weights = [sum(w for _, w in s) for s in shares]
    assert max(weights) - min(weights) <= 55.0  # within one heaviest test (collection order: 16 x 55 s on 1-2 workers)
    assert all(s[0][1] == max(w for _, w in s) for s in shares)  # each share's heaviest runs first
    assert all(s[-1][1] <= 1.0 for s in shares)  # a thief takes cheap tests from the back
    naive = [sum(w for _, w in s) for s in _shares(items, 16)]
    assert max(naive) > 2 * max(weights)


def test_deal_is_deterministic_and_leaves_small_runs_alone():
    items = [(i, i % 7) for i in range(50)]
    assert schedule.deal(items, lambda it: it[1], 4) == schedule.deal(list(items), lambda it: it[1], 4)
    assert schedule.deal(items, lambda it: it[1], 1) == items
    assert schedule.deal(items[:3], lambda it: it[1], 4) == items[:3]


def test_the_weight_of_a_test_is_its_property_s_own():
    from properties import PROPERTIES

    # By construction: the schedule holds no table of its own, every property carries its weight.
    assert all(schedule.weight_of(name) == prop.cold_seconds > 0 for name, prop in PROPERTIES.items())
    assert schedule.weight_of(None) == schedule.weight_of("not a property") == schedule.OTHER_SECONDS
    assert not hasattr(schedule, "COLD_SECONDS")
