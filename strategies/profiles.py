"""Hypothesis profiles of the suite and the per-property example counts.

- ``dev``: few examples, fast feedback while editing (the local default).
- ``ci``: derandomized (the same examples every run, so a red CI is
  reproducible from the log), no deadline (kernel compiles take seconds),
  ``print_blob`` for reproduction, a fixed example count (the default when
  the ``CI`` environment variable is set). Shape facts come from small
  per-stratum geometry pools (strategies.geometry), so GPU examples are
  cheap and numerics/tails check 3.5x/1.75x more of them.
- ``pr``: the first stage of a kernel-change CI (<= 60 s cold on one GPU
  with 16 workers): derandomized like ``ci``, part of the matrix
  (properties.matrix.PROFILE_TESTS) over the pools' fewest rows (geometry
  mode ``few``), so few compile keys, each serving many examples.
- ``nightly``: many examples, each from the pools or over free geometry (a
  compile per free example);
  properties call ``hypothesis.target()`` on their error ratio so the
  search climbs toward the tolerance edge.

Selection: pytest's own ``--hypothesis-profile NAME`` wins, then the
environment variable ``SDPA_HYPOTHESIS_PROFILE``, then ``ci`` under ``CI``,
else ``dev``. Profiles are registered when this module is imported, so
Hypothesis' pytest plugin can load one by name whatever the plugin order.
"""

from __future__ import annotations

import os
from typing import Optional

from hypothesis import HealthCheck, settings
from hypothesis.errors import InvalidArgument

ENV_VAR = "SDPA_HYPOTHESIS_PROFILE"

MAX_EXAMPLES = {"dev": 10, "pr": 10, "ci": 40, "nightly": 1000}

# Share of the profile's examples per property kind: GPU launches and
# compiles are expensive, contract checks and CPU-only checks are cheap.
KIND_SCALE = {
    "numerics": 1.0,  # kernel vs reference on the GPU
    "tails": 0.5,  # poisoned-output / padding checks on the GPU
    "contracts": 0.5,  # violating cases: one exception per example
    "compile": 0.2,  # CPU compile tier (~1.5 s per new geometry)
    # GPU compile-cache deltas, per stratum and layout: a THD example compiles its sequence count + 1.
    "compile_reuse": 0.25,
    # Two launches per example, no reference; one test per relation x stratum (13 x 8), so the pytest
    # profiles scale it down below (PROFILE_KIND_SCALE); this base share is what a kill-rate search of
    # one relation gets (conformance.kill_rate: ci 20 examples).
    "metamorphic": 0.5,
    "cpu": 5.0,  # pure-Python checks (strategies, reference self-tests)
    # The large tier (strategies.large): gigabytes and up to 1e9 reference pairs per example,
    # a few examples per test (PROFILE_KIND_SCALE pins ci and nightly).
    "large": 0.1,
    # Upstream-parity tests on fixed small geometries (no compile per example).
    "parity": 0.25,
    # The backward: a specialization compiles in 4-9 s on the H200 (a chain of
    # kernels), so fewer examples per stratum than the forward's numerics.
    "backward": 0.5,  # gradients vs the reference on the GPU
    "determinism": 0.2,  # two deterministic launches, bitwise
    "backward_compile": 0.1,  # CPU compile tier of the backward (4-10 s per new specialization)
    # compile_distinct: one test per compile-key fact and (pass, layout) place, each example two compiles
    # (the base's shared across tests where the draws agree): one example per test under ci and dev.
    "compile_distinct": 0.025,
}

# Per-profile overrides of KIND_SCALE. Under ``ci`` the shape facts come from
# small per-stratum pools (strategies.geometry), so a compile buys many GPU
# examples: numerics and tails check 3.5x more (5,040 numerics+tails examples,
# one compile key per ~15 of them: tools/count_compile_keys.py). ``nightly``
# draws from the pools or free geometry (a compile per free example) and keeps
# the base shares but for the slow tiers below (large, parity, metamorphic,
# compile_distinct); ``dev`` only holds metamorphic down.
#
# The large tier keeps 2 examples per test under ci (its slice test; the rest
# with --large) and 3 under nightly: its budget is 10 minutes on one H200 with
# 16 workers (docs/large_tier.md); the parity tests 10 under ci, 50 nightly.
# metamorphic: 104 tests (13 relations x 8 strata) of two launches per example: ci 3 examples each (312
# examples, 624 launches, on the pools' compile keys), dev 1, nightly 50 (5,200 over free geometry).
PROFILE_KIND_SCALE = {
    "ci": {"numerics": 3.5, "tails": 1.75, "large": 0.05, "metamorphic": 0.075},
    "dev": {"metamorphic": 0.1},
    "nightly": {"large": 0.003, "parity": 0.05, "metamorphic": 0.05, "compile_distinct": 0.005},
    # pr (properties.matrix.PROFILE_TESTS: the tests it runs; geometry mode "few": the pools' fewest rows):
    # numerics 30 and tails 15 examples per test over ~10 keys per stratum and layout, so each key serves
    # several examples; compile_reuse and the backward few (a THD compile_reuse example compiles a second
    # key; a backward key is a chain of kernels); contract tests 5 per rule.
    "pr": {"numerics": 3.0, "tails": 1.5, "compile_reuse": 0.1, "backward": 0.3},
}

# The pr profile's compile budget, in compile slots (tests/test_pr_profile.py
# counts them with tools/count_compile_keys.py): 60 s x 16 workers / 2.5 s per
# compile (the H200's cold ci run: 1.84 s mean) = 384 slots if a cold run did
# nothing but compile; that run's wall was ~1.7x its compile floor (launches,
# references, Hypothesis, the compiles no key names), so 384 / 1.7 = 225. A
# forward key is one compile; a backward key a chain of kernels, 3 slots (up to
# 7 artifacts for a chain's first key, ~1.3 a key over the ci run's 306 keys).
# An sm90 dense key: 6-14 s under 16 concurrent compiles on the H200 host
# (strategies/sm90.py), where an SM80 forward key took ~3 s in the same kind of
# cold ci run (numerics: 516 s over 141 compiles): 3 slots.
PR_COMPILE_SLOTS = 225
PR_BACKWARD_KEY_SLOTS = 3
PR_SM90_KEY_SLOTS = 3

# Every profile: no deadline (a kernel compile takes seconds) and no too-slow
# health check; ``ci`` adds derandomization, ``ci``/``nightly`` print the blob.
PROFILE_SETTINGS = {
    # derandomize stated for every profile: Hypothesis' own defaults derandomize
    # when $CI is set, which must not change what dev or nightly draw.
    "dev": {"derandomize": False},
    "ci": {"derandomize": True, "print_blob": True},
    "pr": {"derandomize": True, "print_blob": True},
    "nightly": {"derandomize": False, "print_blob": True},
}
for _name, _extra in PROFILE_SETTINGS.items():
    settings.register_profile(_name, max_examples=MAX_EXAMPLES[_name], deadline=None, suppress_health_check=[HealthCheck.too_slow], **_extra)


def pin_local_constants() -> None:
    """Hypothesis draws about one in twenty integers, floats and strings from
    a pool of the literals in every "local" module imported so far (any file
    outside site-packages and the standard library: this project's, and a
    kernel source tree put on PYTHONPATH). The pool grows as the process
    imports modules, so a test's examples, derandomized or not, would depend
    on what earlier tests imported (a worker that compiled a kernel first
    draws otherwise), on the machine's paths, and on any literal edited
    anywhere in the project. Pinned empty, a test's examples depend on the
    test and its seed alone; Hypothesis' own constants (its nasty values)
    stay. Hypothesis' private hook (hypothesis.internal.conjecture.providers,
    6.155 to 6.168 at least); a version without it is refused, not ignored."""
    try:
        from hypothesis.internal.conjecture import providers
    except ImportError as e:  # pragma: no cover - a Hypothesis that moved it
        raise ImportError(f"sdpa-conformance cannot pin Hypothesis' local constants: {e}; the suite pins hypothesis==6.155.2") from None
    if not (callable(getattr(providers, "_get_local_constants", None)) and hasattr(providers, "Constants") and hasattr(providers, "CONSTANTS_CACHE")):
        raise ImportError(
            "sdpa-conformance cannot pin Hypothesis' local constants (hypothesis.internal.conjecture.providers changed); the suite pins hypothesis==6.155.2"
        )
    empty = providers.Constants()
    providers._get_local_constants = lambda: empty
    providers.CONSTANTS_CACHE.cache.clear()  # any pool read before the pin


pin_local_constants()


def profile_name(cli_profile: Optional[str] = None) -> str:
    """The profile to run: pytest's --hypothesis-profile, then $SDPA_HYPOTHESIS_PROFILE,
    then ``ci`` when $CI is set, else ``dev``."""
    name = cli_profile or os.environ.get(ENV_VAR) or ("ci" if os.environ.get("CI") else "dev")
    try:
        settings.get_profile(name)  # ours, or one registered elsewhere
    except InvalidArgument:
        raise ValueError(f"hypothesis profile {name!r}: not registered (ours: {tuple(MAX_EXAMPLES)}; from --hypothesis-profile or ${ENV_VAR})") from None
    return name


def load_profile(cli_profile: Optional[str] = None) -> str:
    """Load and return the selected profile (the pytest plugin calls this from
    pytest_configure with ``config.getoption('--hypothesis-profile')``)."""
    name = profile_name(cli_profile)
    settings.load_profile(name)
    return name


def examples(kind: str, profile: Optional[str] = None) -> int:
    """max_examples for one property kind under ``profile`` (default: the loaded one)."""
    if kind not in KIND_SCALE:
        raise ValueError(f"example kind {kind!r}: not one of {tuple(KIND_SCALE)}")
    name = profile or settings.get_current_profile_name()
    base = settings.get_profile(name).max_examples if profile else settings().max_examples
    return max(1, round(base * PROFILE_KIND_SCALE.get(name, {}).get(kind, KIND_SCALE[kind])))


def describe(name: str, seed=None) -> dict:
    """What a run's header and report say about the Hypothesis search:
    ``profile`` (name, example count, derandomized or not) and ``seed``
    (--hypothesis-seed's value, else how the seed is chosen)."""
    s = settings.get_profile(name)
    profile = f"{name} ({s.max_examples} examples per test before per-property scaling" + (", derandomized)" if s.derandomize else ")")
    if s.derandomize:
        # Hypothesis seeds a derandomized test from its own digest, before any forced seed.
        how = "derandomized: each test's examples are fixed by the test (the same every run)"
        how += f"; --hypothesis-seed={seed} has no effect under this profile" if seed is not None else ""
    elif seed is not None:
        how = f"{seed} (--hypothesis-seed)"
    else:
        how = "random per test and run (a failure prints it; rerun with --hypothesis-seed=N)"
    return {"profile": profile, "seed": how}
