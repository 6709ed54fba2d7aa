#!/usr/bin/env python3
"""Run the launching forward tests of ``conformance/`` on the CPU against
honest stand-in kernels, through the suite's plugin, recorder and report.

    PYTHONPATH=$PWD python3 tools/standin_run.py                       # the default selection, ci, 2 workers
    PYTHONPATH=$PWD python3 tools/standin_run.py -k "numerics_dense and gptoss" --profile dev
    PYTHONPATH=$PWD python3 tools/standin_run.py --ops /tmp/ops        # + torch ops and host syncs per phase

The SM80 stand-in (``tests/standins.py``) stores the float64 reference
where the prepared entry's contract says; the sm90 entries are the emulated
kernel (dense) and the THD reference stand-in (``tests/standin_plugin.py``).
Every property these tests judge must pass on them: a failure is the suite's (a dry run of a property or strategy
change before a GPU run meets it). The report's per-worker profile then
shows the pipeline's own time (Hypothesis, the draws, the inputs, the
reference and error model, the judging) with the kernels taken out.
Never a verdict on a kernel, so no known findings are read. The default
selection is what ``tests.standins.STANDS_IN_FOR`` names (and why the rest
is left out) and the sm90 tests that launch.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PATHS = [
    "conformance/test_numerics.py",
    "conformance/test_tails.py",
    "conformance/test_metamorphic.py",
    "conformance/test_backward.py",
    "conformance/test_sm90_numerics.py",
    "conformance/test_sm90_metamorphic.py",
]
# The sm90 tests that launch (the check that the sm90 entries are the real adapters left out).
SM90_TESTS = ("test_sm90_numerics_dense", "test_sm90_tails_dense", "test_sm90_numerics_thd", "test_sm90_metamorphic")


def default_select() -> str:
    """The tests the stand-ins stand in for (tests.standins.STANDS_IN_FOR, and the sm90 family's), less the entry
    relation's parameters and the THD forward addressing test."""
    sys.path.insert(0, str(ROOT))
    from tests.standins import STANDS_IN_FOR

    return f"({' or '.join(STANDS_IN_FOR + SM90_TESTS)}) and not entry and not addressing"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workers", "-n", default="2", help="pytest-xdist workers (default 2)")
    ap.add_argument("--report-dir", default="sdpa-report/standin", help="where the run's report goes (default sdpa-report/standin)")
    ap.add_argument("--ops", metavar="PREFIX", help="write PREFIX.<pid>.json per process: torch ops and host syncs per phase")
    ap.add_argument("--profile", default="ci", help="the Hypothesis profile (default ci: the draws a ci GPU run judges)")
    ap.add_argument("-k", dest="select", help="pytest -k expression (default: every test the stand-ins can stand in for)")
    ap.add_argument("pytest_args", nargs="*", help="after --: more pytest arguments")
    args = ap.parse_args(argv)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    if args.ops:
        env["SDPA_STANDIN_OPS"] = args.ops
    cmd = [sys.executable, "-m", "pytest", "-p", "tests.standin_plugin", "-p", "no:cacheprovider", "-q", "-n", args.workers]
    with tempfile.TemporaryDirectory(prefix="sdpa-standin-") as tmp:
        # No known findings: they describe the real kernels, which the stand-in is not (each would go stale).
        none = Path(tmp) / "no_findings.toml"
        none.write_text("")
        cmd += [
            f"--report-dir={args.report_dir}",
            f"--known-findings={none}",
            f"--hypothesis-profile={args.profile}",
            "--family=all",
            "-k",
            args.select or default_select(),
        ]
        cmd += [*PATHS, *args.pytest_args]
        return subprocess.call(cmd, cwd=ROOT, env=env)


if __name__ == "__main__":
    sys.exit(main())
