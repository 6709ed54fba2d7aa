"""Does a mutant change the kernel on given Cases? (needs a CUDA GPU)

    python3 tools/gpu_mutant_probe.py MUTANT [--pool-rope] [--no-probe] [--case JSON ...]

Runs the mutant's expected killer's property on its own probe Case (and on
``--case`` Cases, and with ``--pool-rope`` on every dense pool row with RoPE
whose queries see keys past the first KV tile) with the mutated kernels (and the pristine ones: on the probe, or every
Case with ``--pristine-all``), and prints the verdicts per Case. A mutant whose
probe passes mutated is not reaching the code it rewrites (a stale path), a
mutant that fails on the probe but survives a kill table is a draw problem.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> int:
    from conformance.kill.kinds import KINDS
    from ground.case import Case
    from ground.outcome import PropertyFailure
    from kernels.mutants import MUTANTS
    from kernels.prepared import PreparedAdapter

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("mutant", choices=[m.name for m in MUTANTS])
    p.add_argument("--case", action="append", default=[], help="a Case as JSON (repeatable)")
    p.add_argument("--pool-rope", action="store_true", help="add the dense pool rows with RoPE past one KV tile")
    p.add_argument("--pristine-all", action="store_true", help="run the pristine kernels on every Case (default: the probe only)")
    p.add_argument("--no-probe", action="store_true", help="leave out the mutant's probe Case: the first --case is the process's first launch")
    args = p.parse_args()
    mutant = {m.name: m for m in MUTANTS}[args.mutant]
    kind = {k.name: k for k in KINDS}[mutant.expected_killer]
    cases = [Case(**mutant.probe)] * (not args.no_probe) + [Case(**json.loads(c)) for c in args.case]
    if args.pool_rope:
        from strategies import geometry
        from strategies.pools import TILE_N

        for f, d in geometry.STRATA:
            cases += [c for c in (g.case(d) for g in geometry.dense_pool(f, d)) if c.rope and c.s_kv > TILE_N]
    adapters = {"mutated": PreparedAdapter(rewrites=mutant.rewrites), "pristine": PreparedAdapter(rewrites=())}
    for i, case in enumerate(cases):
        verdicts = []
        for label, adapter in adapters.items():
            if label == "pristine" and (i or args.no_probe) and not args.pristine_all:
                continue
            try:
                kind.family.check(case, adapter, kind.fixed)
                verdicts.append(f"{label}: passed")
            except PropertyFailure as f:
                verdicts.append(f"{label}: FAILED {f.summary[:140]}")
            except Exception as e:  # noqa: BLE001 - a crash is a verdict here
                verdicts.append(f"{label}: ERROR {type(e).__name__}: {str(e)[:140]}")
        print(case.describe(), "|", " | ".join(verdicts), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
