#!/usr/bin/env python3
"""Store a gate run's seconds per test as the schedule's weights.

    PYTHONPATH=$PWD python3 tools/store_durations.py RUN_DIR PROFILE [--warm] [--note TEXT]

RUN_DIR is one run's report directory (``sdpa-conformance gate --report-dir
DIR`` writes DIR/run-<i>): its shards' test records (pytest's duration of
each test that ran, skipped ones left out) go to
``conformance/durations/PROFILE.json`` (``--warm``: PROFILE-warm.json, for a
run on a compiled cache that held kernels), with ``--note`` saying which run
they were measured in. A distributed run deals its tests by these
(conformance.schedule); a test the table lacks weighs its estimate.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def measured(run_dir: Path) -> dict:
    """node id -> seconds, of every test that ran (not skipped) in the run's shards (reports.shards.read)."""
    from reports import shards

    records, _ = shards.read(run_dir)
    seconds = {r["nodeid"]: round(float(r["duration"]), 1) for r in records if r.get("kind") == "test" and r["outcome"] != "skipped"}
    return dict(sorted(seconds.items()))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="store_durations.py", description=__doc__.split("\n\n")[0])
    p.add_argument("run_dir", type=Path)
    p.add_argument("profile")
    p.add_argument("--warm", action="store_true", help="the run's compiled cache held kernels (PROFILE-warm.json)")
    p.add_argument("--note", default="", help="where and when it was measured (stored beside the seconds)")
    args = p.parse_args(argv)
    seconds = measured(args.run_dir)
    if not seconds:
        print(f"store_durations.py: error: no test records under {args.run_dir}/shards", file=sys.stderr)
        return 2
    out = ROOT / "conformance" / "durations" / f"{args.profile}{'-warm' if args.warm else ''}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({"measured": args.note, "seconds": seconds}, indent=0) + "\n")
    print(f"{out.relative_to(ROOT)}: {len(seconds)} tests, {sum(seconds.values()):.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
