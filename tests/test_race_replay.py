"""A race finding's replay (conformance/test_findings.py) waits for its race
by a count of tries, in both of its phases: a race that shows late is still
reproduced, one that never shows is stale after RACE_TRIES agreeing replays."""

from types import SimpleNamespace

import pytest

from conformance.test_findings import RACE_TRIES, _first_excused, _first_failure
from ground.outcome import PropertyFailure


def _replays(shows_on: int, outcome: str = "xfailed"):
    """A replay that passes until its ``shows_on``-th call (1-based; 0: never), then fails (or is ``outcome``); its calls counted."""
    calls = []

    def replay():
        calls.append(1)
        if shows_on and len(calls) >= shows_on:
            if outcome == "failed":
                raise PropertyFailure("determinism", None, "two launches differ", {}, check="bitwise")
            return SimpleNamespace(outcome=outcome)
        return SimpleNamespace(outcome="passed")

    return replay, calls


@pytest.mark.parametrize("shows_on", [1, 6, RACE_TRIES])
def test_a_late_race_is_still_reproduced(shows_on):
    # 6: the first try past the old budget of 5, which once turned a correct run red.
    replay, calls = _replays(shows_on, "failed")
    assert _first_failure(replay, RACE_TRIES) is not None and len(calls) == shows_on
    replay, calls = _replays(shows_on)
    assert _first_excused(replay, [], RACE_TRIES).outcome == "xfailed" and len(calls) == shows_on


def test_a_race_that_never_shows_is_stale_after_the_budget():
    replay, calls = _replays(0)
    assert _first_failure(replay, RACE_TRIES) is None and len(calls) == RACE_TRIES
    replay, calls = _replays(0)
    assert _first_excused(replay, [], RACE_TRIES).outcome == "passed" and len(calls) == RACE_TRIES


def test_a_plain_finding_gets_one_try():
    replay, calls = _replays(2, "failed")
    assert _first_failure(replay, 1) is None and len(calls) == 1
