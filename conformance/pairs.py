"""Pair coverage of a profile, measured on the CPU: ``sdpa-conformance pairs``.

    sdpa-conformance pairs --profile ci
    sdpa-conformance pairs --profile nightly --seed 1 --json pairs.json

Draws the examples a run of the suite's property tests draws, without
running them: each test of the matrix (properties.matrix) is built as the
pytest suite builds it (conformance.testgen.matrix_test: the same
Hypothesis settings, the same derandomized digest, the same projection for
the adapter) and called with its checks replaced by a recorder; the served
Cases' compile-key factor pairs are counted against the feasible ones
(ground.pairs). What it cannot see: the GPU numerics tests steer half of
their examples by their error ratios (hypothesis.target) and crash findings
steer a few Cases; the recorder reports no ratio and puts no finding in
force, so those draws are this command's approximation.

Which tests: every family with a strategy that a run of ``pytest
conformance`` runs, GPU and compile tier (the large tier under the nightly
profile only, as the plugin selects it), but the contract rejections (their
Cases break a rule: no pair counts).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from types import SimpleNamespace
from typing import Dict, List, Optional

from ground import pairs
from ground.families import DEFAULT_FAMILY, FAMILY_NAMES
from ground.tables import ADAPTERS, DEFAULT_ADAPTER
from strategies.profiles import MAX_EXAMPLES

SHOWN = 40  # missing pairs printed per (direction, layout); --json holds them all

# Every family but the default draws its Cases outside the SM80 matrix: the
# module that draws and measures them (``tests()``, ``draws()``, ``measure()``).
FAMILY_MEASURES = {"sm90": "conformance.pairs_sm90"}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--profile",
        choices=tuple(MAX_EXAMPLES),
        default="ci",
        help="the Hypothesis profile whose draws are counted (default ci; pr: the tests and strata it runs)",
    )
    p.add_argument("--adapter", choices=ADAPTERS, default=None, help="the entry point the Cases are served for (default prepared; sm80 only)")
    p.add_argument("--seed", type=int, default=None, help="the seed of a profile that is not derandomized (nightly): draws differ per seed")
    p.add_argument("-k", dest="select", default=None, metavar="TEXT", help="only the tests whose name holds TEXT (at least one must)")
    p.add_argument("--json", default=None, metavar="FILE", help="also write the measurement (every missing pair) here")
    p.add_argument(
        "--family", choices=FAMILY_NAMES, default=DEFAULT_FAMILY, help=f"the kernel family whose pairs are counted (default {DEFAULT_FAMILY}; a stratum)"
    )


# Properties whose Cases all break a contract rule: no pair to count.
VIOLATING = ("rejection", "backward_rejection")


def _families(profile: str, select: Optional[str]):
    from properties.matrix import MATRIX, in_profile

    for fam in MATRIX:
        if fam.strategy is None or not ({"gpu", "compile"} & set(fam.marks)) or fam.property in VIOLATING:
            continue
        if "large" in fam.marks and profile != "nightly":
            continue
        if select and select not in fam.test:
            continue
        if not any(in_profile(profile, fam.test, values) for values, _ in (fam.parameters() if fam.axes else [({}, "")])):
            continue
        yield fam


@contextlib.contextmanager
def _recording(cases: List):
    """Family.check records the Case it is handed instead of checking it."""
    from properties.matrix import Family

    real = Family.check

    def record(self, case, adapter, values):
        cases.append(case)
        return SimpleNamespace(ratios={})

    Family.check = record
    try:
        yield
    finally:
        Family.check = real


def draw(profile: str = "ci", adapter: str = DEFAULT_ADAPTER, seed: Optional[int] = None, select: Optional[str] = None, progress=None) -> Dict[str, list]:
    """test name -> the Cases its examples are served under ``profile`` (the
    Hypothesis profile loaded before is loaded again after)."""
    import hypothesis

    from strategies import load_profile

    previous = hypothesis.settings.get_current_profile_name()
    load_profile(profile)
    try:
        return _draw(profile, SimpleNamespace(name=adapter), seed, select, progress)
    finally:
        hypothesis.settings.load_profile(previous)


def _draw(profile: str, stub, seed: Optional[int], select: Optional[str], progress) -> Dict[str, list]:
    import hypothesis
    import pytest

    from conformance.testgen import matrix_test
    from properties.matrix import in_profile

    out: Dict[str, list] = {}
    for fam in _families(profile, select):
        cases: List = []
        fn = matrix_test(fam.test)
        if seed is not None:
            fn = hypothesis.seed(seed)(fn)
        fixtures = {fam.adapter: stub} if fam.adapter else {}
        if "gpu" in fam.marks:
            fixtures["gpu"] = None
        started = time.perf_counter()
        with _recording(cases):
            for values, _ in fam.parameters() if fam.axes else [({}, "")]:
                if not in_profile(profile, fam.test, values):
                    continue
                try:
                    fn(**values, **fixtures)
                except pytest.skip.Exception:
                    pass
        out[fam.test] = cases
        if progress:
            progress(f"{fam.test}: {len(cases)} examples ({time.perf_counter() - started:.1f} s)")
    return out


def measure(profile: str = "ci", adapter: str = DEFAULT_ADAPTER, seed: Optional[int] = None, select: Optional[str] = None, progress=None) -> dict:
    drawn = draw(profile, adapter, seed, select, progress)
    out = pairs.coverage((c for cases in drawn.values() for c in cases), adapter)
    out["profile"] = profile
    out["seed"] = seed
    out["tests"] = {name: len(cases) for name, cases in drawn.items()}
    return out


def lines(m: dict) -> List[str]:
    """The measurement as text: per direction and layout, feasible / drawn / missing."""
    out = [f"pair coverage: profile {m['profile']}, adapter {m['adapter']}" + (f", seed {m['seed']}" if m.get("seed") is not None else "")]
    out.append(f"{'direction':10} {'layout':7} {'examples':>9} {'feasible':>9} {'drawn':>7} {'missing':>8} {'share':>7}")
    for direction in pairs.DIRECTIONS:
        d = m[direction]
        for layout, v in d["layouts"].items():
            share = v["drawn"] / v["feasible"] if v["feasible"] else None
            out.append(f"{direction:10} {layout:7} {v['examples']:9d} {v['feasible']:9d} {v['drawn']:7d} {len(v['missing']):8d} {_share(share)}")
        out.append(f"{direction:10} {'both':7} {'':9} {d['feasible']:9d} {d['drawn']:7d} {d['feasible'] - d['drawn']:8d} {_share(d['share'])}")
    for direction in pairs.DIRECTIONS:
        for layout, v in m[direction]["layouts"].items():
            if v["missing"]:
                more = f" (+{len(v['missing']) - SHOWN} more)" if len(v["missing"]) > SHOWN else ""
                out.append(f"missing {direction} {layout}: " + "; ".join(v["missing"][:SHOWN]) + more)
            if v["drawn_though_excluded"]:
                out.append(f"drawn though excluded {direction} {layout}: " + "; ".join(v["drawn_though_excluded"]))
    return out


def _share(share: Optional[float]) -> str:
    """The share of the feasible pairs drawn; "-" where no pair is feasible (not 100%: nothing was there to draw)."""
    return f"{share:7.1%}" if share is not None else f"{'-':>7}"


def _unwritable(path: str) -> Optional[str]:
    """Why ``path`` cannot be written, or None (the file is left as it was)."""
    existed = os.path.exists(path)
    try:
        with open(path, "a", encoding="utf-8"):
            pass
    except OSError as e:
        return e.strerror or str(e)
    if not existed:
        os.remove(path)
    return None


def family_measure(name: str):
    """The module that draws and measures family ``name``'s pairs; None for the default family (this module)."""
    import importlib

    return importlib.import_module(FAMILY_MEASURES[name]) if name in FAMILY_MEASURES else None


def _refusal(args) -> Optional[str]:
    """What is wrong with the options, found before the measurement (seconds to minutes)."""
    name = getattr(args, "family", DEFAULT_FAMILY)
    other = family_measure(name)
    if other is not None and args.adapter is not None:
        return f"--adapter {args.adapter}: the {name} family's Cases are drawn for its own entry point; --adapter counts {DEFAULT_FAMILY} draws only"
    if args.select:
        names = [n for n in other.tests() if args.select in n] if other is not None else [fam.test for fam in _families(args.profile, args.select)]
        if not names:
            return f"-k {args.select!r}: no test of the {name} family under profile {args.profile} holds it"
    if args.json and (why := _unwritable(args.json)):
        return f"--json {args.json}: cannot write it ({why})"
    return None


def run(args) -> int:
    say = lambda s: print(s, file=sys.stderr)  # noqa: E731
    why = _refusal(args)
    if why:
        print(f"sdpa-conformance pairs: error: {why}", file=sys.stderr)
        return 2
    other = family_measure(getattr(args, "family", DEFAULT_FAMILY))
    if other is not None:
        m = other.measure(args.profile, args.seed, progress=say, select=args.select)
    else:
        m = measure(args.profile, args.adapter or DEFAULT_ADAPTER, args.seed, args.select, progress=say)
    print("\n".join(lines(m)))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(m, f, indent=1)
            f.write("\n")
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_arguments(p)
    return run(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
