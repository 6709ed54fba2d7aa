#!/usr/bin/env python3
"""Count the torch ops one numerics example's reference and error model make (or, with --judging, its judging).

    PYTHONPATH=$PWD python3 tools/count_model_ops.py              # 60 ci draws per test
    PYTHONPATH=$PWD python3 tools/count_model_ops.py --examples 200 --by-function
    PYTHONPATH=$PWD python3 tools/count_model_ops.py --judging         # what judging one example makes

Each numerics example computes the float64 reference and its error model's
bounds (``reference_for_case(..., extra=bounds_for(case.family))``) as a
sequence of small torch ops. On a GPU each op that is not a view is a kernel
launch, and with 16 workers sharing one GPU their count, not their
arithmetic, sets what these small shapes cost; a host sync (``.item()``,
``tolist()``, ``nonzero``, a tensor's truth value) waits for every queued launch. Both
counts are the same on any device, so they are measured here on the CPU,
with a ``TorchDispatchMode``, over the Cases the ``ci`` profile draws for the
numerics tests (derandomized: the Cases a GPU run judges), SM80 and sm90.
Each launching op's outputs are counted as its bytes written: on a GPU
these small float64 ops are bound by their launches unless their bytes
(read about as much again) take longer than a launch at the device's memory
bandwidth. ``--by-function`` adds the ops and the bytes per example of the
functions that make most.
``--judging`` counts instead what one example's judging makes (the checks
inside ``judge.collecting()``: guard bands, exact values, error ratios, the
deferred verdicts' read), for the numerics and tails tests of the SM80
family, each example launched on the CPU stand-in (tests/standins.py).
"""

from __future__ import annotations

import argparse
import sys
import traceback
from collections import Counter
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

ROOT = Path(__file__).resolve().parents[1]
TESTS = ("test_numerics_dense", "test_numerics_thd", "test_sm90_numerics_dense", "test_sm90_numerics_thd")
# What reaches the dispatcher without launching a kernel: allocation, and the
# host syncs (counted apart).
SYNCS = {"aten._local_scalar_dense.default", "aten.nonzero.default", "aten.is_nonzero.default", "aten.equal.default"}
NO_LAUNCH = {"aten.empty.memory_format", "aten.empty_strided.default", "aten.lift_fresh.default", "aten.detach.default"}


class OpCount(TorchDispatchMode):
    """Launching ops and host syncs; with ``by_function``, ops per innermost function of ours."""

    def __init__(self, by_function: bool = False):
        super().__init__()
        self.ops = self.syncs = 0
        self.written = 0  # bytes the launching ops write (their outputs): what memory-bound ops cost on a GPU
        self.by_function = by_function
        self.functions: Counter = Counter()
        self.function_bytes: Counter = Counter()

    def __enter__(self):
        # A CPU tensor's tolist() never reaches the dispatcher; on a GPU it is a copy to the host.
        self._tolist = torch.Tensor.tolist
        counter = self

        def tolist(t, *args, **kwargs):
            counter.syncs += 1
            return counter._tolist(t, *args, **kwargs)

        torch.Tensor.tolist = tolist
        return super().__enter__()

    def __exit__(self, *exc):
        torch.Tensor.tolist = self._tolist
        return super().__exit__(*exc)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name, out = str(func), func(*args, **(kwargs or {}))
        if name in SYNCS:
            self.syncs += 1
        elif not func.is_view and name not in NO_LAUNCH:
            self.ops += 1
            written = sum(t.numel() * t.element_size() for t in _tensors(out))
            self.written += written
            if self.by_function:
                ours = [f for f in traceback.extract_stack(limit=16) if f.filename.startswith(str(ROOT)) and "/tools/" not in f.filename]
                if ours:
                    where = f"{Path(ours[-1].filename).relative_to(ROOT)}:{ours[-1].name}"
                    self.functions[where] += 1
                    self.function_bytes[where] += written
        return out


def _tensors(out) -> list:
    """The tensors an op returned (one, or a tuple/list of them)."""
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (tuple, list)):
        return [t for t in out if isinstance(t, torch.Tensor)]
    return []


def cases_of(examples: int) -> dict:
    from conformance.pairs import draw
    from conformance.pairs_sm90 import draws as sm90_draws

    drawn = {**draw("ci", select="test_numerics_"), **sm90_draws("ci")}
    return {name: drawn[name][:examples] for name in TESTS}


def count(case, by_function: bool) -> tuple:
    from ground.data import FINITE_PAD, make_inputs
    from ground.tolerances import bounds_for
    from reference.attention import reference_for_case

    inputs = make_inputs(case, "cpu", poison=True, pad_fill=FINITE_PAD)
    with OpCount(by_function) as k:
        reference_for_case(case, inputs, torch.float64, extra=lambda it: bounds_for(case.family)(it, case.dtype))
    return k


JUDGED = {"test_numerics_dense": "numerics", "test_numerics_thd": "numerics", "test_tails_dense": "tails", "test_tails_thd": "tails"}


def judging_cases_of(examples: int) -> dict:
    from conformance.pairs import draw

    drawn = {**draw("ci", select="test_numerics_"), **draw("ci", select="test_tails_")}
    return {name: drawn[name][:examples] for name in JUDGED}


def judging_ops(run, by_function: bool = False) -> OpCount:
    """The ops of the judging inside ``run()`` (one example of a property, launched on the CPU), counted
    inside ``judge.collecting()`` with the property modules' ``device`` set to the CPU."""
    from contextlib import ExitStack, contextmanager
    from unittest import mock

    from properties import judge
    from tests.standins import device_users

    real, counted = judge.collecting, []

    @contextmanager
    def collecting():
        with OpCount(by_function) as k, real() as sink:
            counted.append(k)
            yield sink

    with ExitStack() as stack:
        stack.enter_context(mock.patch.object(judge, "collecting", collecting))
        for module in device_users():
            stack.enter_context(mock.patch.object(module, "device", lambda: torch.device("cpu")))
        run()
    (k,) = counted
    return k


def count_judging(name: str, case, by_function: bool) -> OpCount:
    """The ops of one example's judging, the property run on the CPU stand-in."""
    from properties import check_numerics, check_tails
    from tests.standins import ReferenceKernel

    check = check_numerics if JUDGED[name] == "numerics" else check_tails
    return judging_ops(lambda: check(case, ReferenceKernel(name="prepared")), by_function)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--examples", type=int, default=60, help="the first N ci draws of each counted test (default 60)")
    p.add_argument("--by-function", action="store_true", help="also the ops per example of the functions that make most")
    p.add_argument("--judging", action="store_true", help="count one example's judging instead (numerics and tails, on the CPU stand-in)")
    args = p.parse_args(argv)
    if args.examples < 1:
        p.error("--examples must be at least 1")
    if args.judging:
        sys.path.insert(0, str(ROOT))  # the stand-in lives in tests/
    print("| test | examples | ops per example: mean | median | max | host syncs per example | MB written per example: mean | max |")
    print("|---|---|---|---|---|---|---|---|")
    drawn = judging_cases_of(args.examples) if args.judging else cases_of(args.examples)
    for name, cases in drawn.items():
        counted = [count_judging(name, c, args.by_function) if args.judging else count(c, args.by_function) for c in cases]
        ops = sorted(k.ops for k in counted)
        n = len(ops)
        syncs = sum(k.syncs for k in counted) / n
        mb = [k.written / 1e6 for k in counted]
        print(f"| {name} | {n} | {sum(ops) / n:,.0f} | {ops[n // 2]:,} | {ops[-1]:,} | {syncs:.1f} | {sum(mb) / n:,.1f} | {max(mb):,.1f} |", flush=True)
        if args.by_function:
            total = sum((k.functions for k in counted), Counter())
            print("  ops: " + ", ".join(f"{f} {c / n:,.0f}" for f, c in total.most_common(8)))
            written = sum((k.function_bytes for k in counted), Counter())
            print("  MB written: " + ", ".join(f"{f} {b / n / 1e6:,.1f}" for f, b in written.most_common(8)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
