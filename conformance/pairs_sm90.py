"""The sm90 family's pair coverage, measured on the CPU: what
``sdpa-conformance pairs --family sm90`` draws and counts.

Its tests draw their Cases from ``strategies.sm90`` directly (they are
outside the SM80 matrix), so this module replays each strategy at the
example count its test runs and counts the served Cases' compile-key
factor pairs against the family's own table (``ground.pairs_sm90``).
``conformance.pairs`` dispatches to it by family (``pairs.FAMILY_MEASURES``).
"""

from __future__ import annotations

import time
from typing import Dict, List, Optional


def tests() -> Dict[str, tuple]:
    """test -> (strategy factory, examples or None: the profile's): the tests that draw sm90 Cases."""
    from strategies.profiles import examples
    from strategies.sm90 import sm90_cases

    return {
        # conformance/test_sm90_numerics.py, test_sm90_compile.py (Hopper GPU): at their budget kinds
        "test_sm90_numerics_dense": (lambda: sm90_cases(layouts=("dense",)), examples("numerics")),
        "test_sm90_numerics_thd": (lambda: sm90_cases(layouts=("thd",)), examples("numerics")),
        "test_sm90_tails_dense": (lambda: sm90_cases(layouts=("dense",)), examples("tails")),
        "test_sm90_runtime_facts_mint_no_compile[dense]": (lambda: sm90_cases(layouts=("dense",)), 10),
        "test_sm90_runtime_facts_mint_no_compile[thd]": (lambda: sm90_cases(layouts=("thd",)), 10),
        # tests/test_sm90_specialize.py (the CPU tier): both layouts, pool and free head dims
        "test_the_planner_takes_every_drawn_case_as_the_case_says": (lambda: sm90_cases() | sm90_cases(head_dims="free"), 200),
    }


def draws(profile: str = "ci", seed: Optional[int] = None, select: Optional[str] = None) -> Dict[str, list]:
    """test name -> the sm90 Cases its strategy draws under ``profile``
    (``tests()``: each test's strategy and example count; None: the
    profile's max_examples), only the tests whose name holds ``select``
    when given. The Hypothesis profile loaded before is loaded again after."""
    import hypothesis
    from hypothesis import given, settings

    from strategies import load_profile

    previous = hypothesis.settings.get_current_profile_name()
    load_profile(profile)
    try:
        out: Dict[str, list] = {}
        for name, (strategy, examples) in tests().items():
            if select and select not in name:
                continue
            cases: List = []
            n = examples or hypothesis.settings().max_examples
            fn = settings(max_examples=n, database=None)(given(strategy())(_recorder(cases)))
            (hypothesis.seed(seed)(fn) if seed is not None else fn)()
            out[name] = cases
        return out
    finally:
        hypothesis.settings.load_profile(previous)


def _recorder(cases: List):
    def record(case):
        cases.append(case)

    return record


def measure(profile: str = "ci", seed: Optional[int] = None, progress=None, select: Optional[str] = None) -> dict:
    """The family's pair coverage (ground.pairs_sm90) of ``draws``."""
    from ground import pairs_sm90

    started = time.perf_counter()
    drawn = draws(profile, seed, select)
    if progress:
        progress(f"sm90: {sum(map(len, drawn.values()))} examples ({time.perf_counter() - started:.1f} s)")
    out = pairs_sm90.coverage(c for cases in drawn.values() for c in cases)
    out.update(profile=profile, seed=seed, adapter="sm90", family="sm90", tests={name: len(cases) for name, cases in drawn.items()})
    return out
