"""Which poison a backward failure depends on (a GPU diagnostic; not a test).

    python3 tools/gpu_bwd_poison_probe.py CASE.json [CASE.json ...]

Replays each backward / backward_tails case file (as `sdpa-conformance repro`
does, no findings applied) under four variants and prints one line per
variant: PASS or the failure's summary.

- suite:     as the suite runs it (workspace body 0xFF, float guard bands NaN,
             dead input rows NaN);
- ws0:       the workspace body 0x00 instead (what a fresh torch.empty often holds);
- guard0:    float guard bands 0.0 instead of NaN (out-of-bounds reads of inputs
             then read zeros);
- clean:     dead input rows and dO rows finite (make_inputs / make_grad_output
             without poison), workspace and guards as the suite has them.

A failure that goes away under exactly one variant names the memory the
kernel read without writing it.
"""

from __future__ import annotations

import sys
from contextlib import contextmanager


@contextmanager
def _patched(obj, name, value):
    old = getattr(obj, name)
    setattr(obj, name, value)
    try:
        yield
    finally:
        setattr(obj, name, old)


def main(paths) -> int:
    import kernels
    import kernels.backward as kb
    import properties.backward as pb
    import properties.backward_tails as pt
    from conformance.cli import _load
    from ground import data, findings
    from ground.outcome import PropertyFailure
    from properties import PROPERTIES

    def unpoisoned(fn):
        return lambda *a, **k: fn(*a, **{**k, "poison": False})

    variants = {
        "suite": [],
        "ws0": [(kb, "SCRATCH_FILL", 0)],
        "guard0": [(data, "FLOAT_SENTINEL", 0.0)],
        "clean": [(pb, "make_inputs", unpoisoned(pb.make_inputs)), (pb, "make_grad_output", unpoisoned(pb.make_grad_output))]
        + ([(pt, "make_inputs", unpoisoned(pt.make_inputs))] if hasattr(pt, "make_inputs") else [])
        + ([(pt, "make_grad_output", unpoisoned(pt.make_grad_output))] if hasattr(pt, "make_grad_output") else []),
    }
    adapter = kernels.get_adapter("prepared")
    for path in paths:
        case, doc, prop, params = _load(path)
        print(f"\n{path}: {prop} {params or ''} {case.describe()}", flush=True)
        for name, patches in variants.items():
            try:
                with findings.applied([]):
                    stack = [_patched(o, a, v) for o, a, v in patches]
                    for p in stack:
                        p.__enter__()
                    try:
                        PROPERTIES[prop].check(case, adapter=adapter, **params)
                    finally:
                        for p in reversed(stack):
                            p.__exit__(None, None, None)
                print(f"  {name:7s} PASS", flush=True)
            except PropertyFailure as f:
                print(f"  {name:7s} FAIL {f.summary[:330]}", flush=True)
            except Exception as e:  # noqa: BLE001 - a diagnostic prints what happened
                print(f"  {name:7s} RAISED {type(e).__name__}: {str(e)[:200]}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
