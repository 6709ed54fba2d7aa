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
    # a compile-tier test of no property costs its own compiles; a declared weight wins over both
    assert schedule.weight_of(None, compiles=True) == schedule.COMPILE_SECONDS > schedule.OTHER_SECONDS
    assert schedule.weight_of("numerics", compiles=True) == PROPERTIES["numerics"].cold_seconds
    assert schedule.weight_of("numerics", declared=26) == schedule.weight_of(None, declared=26) == 26.0


class _Item:
    """A collected test as the deal sees it: its node id and markers."""

    def __init__(self, nodeid, **marks):
        self.nodeid, self.marks = nodeid, marks

    def get_closest_marker(self, name):
        return self.marks.get(name)


def test_a_gate_collection_deals_the_compile_tier_before_the_cheap_tests():
    """The plugin's weights on a gate's mix: the property tests, the sm90 compile tier (no property;
    one declaring its own weight) and cheap CPU checks. Each share begins with its heaviest test, and
    every compile-tier test comes before the share's cheap ones (weighed as cheap, the compile tier
    was dealt last and made a warm run's tail)."""
    import pytest

    from conformance.plugin import item_weight

    items = [_Item(f"backward{i}", property=pytest.mark.property("backward").mark) for i in range(16)]
    items += [_Item(f"numerics{i}", property=pytest.mark.property("numerics").mark) for i in range(32)]
    items += [_Item(f"check{i}") for i in range(120)] + [_Item("launch", gpu=pytest.mark.gpu.mark)]
    items += [_Item(f"tier{i}", compile=pytest.mark.compile.mark) for i in range(18)]  # collected last, as tests/ is
    items += [_Item("distinct[dense]", compile=pytest.mark.compile.mark, weight=pytest.mark.weight(26).mark)]
    weights = {it.nodeid: item_weight(it, have_gpu=False) for it in items}
    assert weights["distinct[dense]"] == 26.0 and weights["tier0"] == schedule.COMPILE_SECONDS and weights["launch"] == 0.0
    order = schedule.deal(items, lambda it: weights[it.nodeid], 16)
    for share in _shares([it.nodeid for it in order], 16):
        assert weights[share[0]] == max(weights[n] for n in share)
        tier = [i for i, n in enumerate(share) if n.startswith("tier")]
        cheap = [i for i, n in enumerate(share) if weights[n] <= schedule.OTHER_SECONDS]
        assert not tier or not cheap or max(tier) < min(cheap)


def _split_weights(order, seconds):
    return [sum(seconds[n] for n in share) for share in _shares(order, 16)]


def test_the_stored_durations_are_a_measured_run_of_their_profile():
    from strategies.profiles import MAX_EXAMPLES

    tables = sorted(schedule.DURATIONS_DIR.glob("*.json"))
    assert tables, "no stored durations"
    for path in tables:
        data = __import__("json").loads(path.read_text())
        assert data["measured"] and path.stem.removesuffix("-warm") in MAX_EXAMPLES, path.name
        assert data["seconds"] and all("::" in node and 0 <= s < 3600 for node, s in data["seconds"].items()), path.name


def test_the_durations_of_a_run_are_its_profile_s_and_cache_s():
    cold, warm = schedule.durations("ci", warm=False), schedule.durations("ci", warm=True)
    assert cold and warm and cold != warm and set(warm) <= set(cold) | set(warm)
    assert schedule.durations("pr", warm=True) == schedule.durations("pr", warm=False)  # no warm table: the cold one
    assert schedule.durations("no such profile", warm=True) == {}
    assert schedule.weight_of("numerics", measured=3.0, declared=26) == 3.0 and schedule.weight_of("numerics", measured=None) == 9.0


def test_the_measured_tests_deal_into_even_shares():
    """On each stored run's own tests, the heaviest of 16 shares weighs within 5% of the mean
    (10% for pr's 79 tests, some of them a third of a share), or no more than the heaviest test
    (a share holds it whole: no deal goes below it). Dealt in a snake instead (the
    schedule's former deal: equal counts, weights ignored when filling), the warm run's
    heaviest share was 17% above the mean."""
    for profile, warm, slack in (("ci", False, 1.05), ("ci", True, 1.05), ("pr", False, 1.10)):
        seconds = schedule.durations(profile, warm)
        nodes = sorted(seconds)
        shares = _split_weights(schedule.deal(nodes, seconds.get, 16), seconds)
        mean = sum(shares) / 16
        assert max(shares) <= max(slack * mean, max(seconds.values())), (profile, warm, max(shares), mean)
    seconds = schedule.durations("ci", True)
    snake = _snake(sorted(seconds), seconds.get, 16)
    assert max(_split_weights(snake, seconds)) > 1.15 * sum(seconds.values()) / 16


def _snake(items, weight, workers):
    """The former deal: heaviest first, dealt 0..N-1, N-1..0, ..."""
    ranked = sorted(range(len(items)), key=lambda i: (-weight(items[i]), i))
    shares = [[] for _ in range(workers)]
    for k, i in enumerate(ranked):
        turn, seat = divmod(k, workers)
        shares[seat if turn % 2 == 0 else workers - 1 - seat].append(items[i])
    return [item for share in shares for item in share]


def test_a_measured_test_weighs_its_seconds_in_the_plugin():
    import pytest

    from conformance.plugin import item_weight

    item = _Item("conformance/test_numerics.py::test_numerics_dense[qwen-fp16]", property=pytest.mark.property("numerics").mark)
    assert item_weight(item, have_gpu=True) == 9.0
    assert item_weight(item, have_gpu=True, measured={item.nodeid: 22.5}) == 22.5
    assert item_weight(_Item("x", gpu=pytest.mark.gpu.mark), have_gpu=False, measured={"x": 5.0}) == 0.0
