"""Judge a profile's backward draws on the emulated backward (no GPU).

    python3 tools/screen_backward.py --test test_backward_thd --profile ci --jobs 2

Draws the Cases a run under ``--profile`` makes for one backward test
(``conformance.pairs.draw``: under ci and pr, derandomized, exactly what a
GPU gate judges) and runs each through ``properties.backward.check_backward``
on ``tests/kernel_emulation.EmulatedBackward`` with the adversarial forward
arithmetic of tools/calibrate_error_model.py (the O and LSE a Case takes
from the kernel come from it). A strategy or error-model change's backward
draws are screened here before a GPU run meets them. Prints the examples
judged, the failures (each Case and its summary) and the largest error / bound
per gradient. Exit status: 0 no failure, 1 a failure, 2 bad arguments.
"""

from __future__ import annotations

import argparse
import functools
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

TESTS = ("test_backward_dense", "test_backward_thd")


@functools.lru_cache(maxsize=None)
def _drawn(profile: str) -> dict:
    """Every test's draws under ``profile`` (drawn once per process: all tests are drawn together)."""
    from conformance.pairs import draw

    return draw(profile)


def _judge(job: dict) -> dict:
    """One process' share of the draws: (failures, refusals, largest ratio per gradient)."""
    from unittest import mock

    import torch

    from ground.outcome import PropertyFailure, Unsupported
    from properties import backward as bwd_prop
    from tests.kernel_emulation import Arith, EmulatedBackward
    from tools.calibrate_error_model import ARITH

    cases = _drawn(job["profile"])[job["test"]][: job["first"]][:: job["every"]][job["part"] :: job["parts"]]
    arith, out = Arith(**ARITH["adversarial"]), {"judged": 0, "refused": 0, "failures": [], "worst": {}}
    with mock.patch.object(bwd_prop, "device", lambda: torch.device("cpu")):
        for case in cases:
            try:
                ratios = bwd_prop.check_backward(case, EmulatedBackward(arith=arith)).ratios
            except Unsupported:
                out["refused"] += 1
                continue
            except PropertyFailure as e:
                out["failures"].append(f"{case.describe()}: {e.summary}")
                ratios = {}
            out["judged"] += 1
            for name, r in ratios.items():
                out["worst"][name] = max(out["worst"].get(name, 0.0), r)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--test", choices=TESTS, default="test_backward_thd")
    ap.add_argument("--profile", default="ci", help="Hypothesis profile whose draws are judged (default ci)")
    ap.add_argument("--first", type=int, default=None, help="only the test's first N draws (default: all)")
    ap.add_argument("--every", type=int, default=1, help="every N-th draw (default: all)")
    ap.add_argument("--jobs", type=int, default=2, help="processes (default 2)")
    args = ap.parse_args(argv)
    from strategies.profiles import MAX_EXAMPLES

    if args.profile not in MAX_EXAMPLES or args.every < 1 or args.jobs < 1 or (args.first is not None and args.first < 1):
        print(f"--profile one of {', '.join(MAX_EXAMPLES)}; --first, --every and --jobs >= 1", file=sys.stderr)
        return 2
    start = time.perf_counter()
    jobs = [dict(vars(args), part=i, parts=args.jobs) for i in range(args.jobs)]
    with ProcessPoolExecutor(max_workers=args.jobs, mp_context=get_context("spawn")) as pool:
        parts = list(pool.map(_judge, jobs))
    failures = [f for p in parts for f in p["failures"]]
    worst = {n: max(p["worst"].get(n, 0.0) for p in parts) for n in sorted({n for p in parts for n in p["worst"]})}
    for f in failures:
        print("FAIL " + f)
    print(
        f"{args.test} ({args.profile}, first {args.first or 'all'}, every {args.every}): judged {sum(p['judged'] for p in parts)}, failed {len(failures)}, "
        f"refused {sum(p['refused'] for p in parts)}; {time.perf_counter() - start:.0f} s; largest error / bound: "
        + ", ".join(f"{n} {r:.3f}" for n, r in worst.items())
    )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
