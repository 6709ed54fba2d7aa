"""``sdpa-conformance gate``: the suite on the local GPU, N runs in a row, one summary per run.

    sdpa-conformance gate                           # one run, ci profile, the prepared adapter
    sdpa-conformance gate --runs 3 --cold           # cold (a fresh compiled cache), then warm twice
    sdpa-conformance gate --adapter wrapper --sm80-compat --junitxml gate.xml

Each run is ``python -m pytest -n WORKERS <the properties> --hypothesis-profile=PROFILE``
with its own report directory (``REPORT_DIR/run-<i>``); the summary is read
back from that run's report.json. The last line is the gate's verdict (green,
or red naming the runs that failed). The CPU tier (tests marked ``cpu_tier``:
verdicts the same on every machine, which the CPU run judges) is left out
(``--no-cpu-tier``) unless ``--cpu-tier``. Exit status: 0 when every run asked for
ran and passed, else the first failing run's pytest status (1 a property
failed or a known finding went stale; 2-4 usage or internal errors); 1 when
--deadline cut a run or left one unstarted (fewer verdicts than asked for);
2 for a bad option, or when there is no GPU (a refusal of this machine:
ground.outcome.REFUSALS).
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import List, Optional

from conformance import family_select
from ground.outcome import Unsupported
from ground.tables import ADAPTERS, NO_GPU
from strategies.profiles import MAX_EXAMPLES

PROFILES = tuple(MAX_EXAMPLES)
ROOT = Path(__file__).resolve().parent.parent  # the checkout: pytest's rootdir (known_findings.toml, findings/)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--adapter", choices=ADAPTERS, default=None, help="entry point under test (default: $SDPA_ADAPTER, else prepared)")
    p.add_argument(
        "--family",
        choices=family_select.CHOICES,
        default=None,
        help="kernel families to judge: sm80, sm90 or all (default: $SDPA_FAMILY, else the families the GPU runs); "
        "a family's tests beyond conformance/ (family_select.GATE_TESTS: CPU tier) join a run with --cpu-tier",
    )
    p.add_argument("--sm80-compat", action="store_true", help="run the SM80 code on a newer GPU (the public wrapper needs it off SM80)")
    p.add_argument(
        "--cpu-tier",
        action="store_true",
        help="also run the CPU tier (tests marked cpu_tier: verdicts the same on every machine, which the CPU run judges) on the GPU; default: left out",
    )
    p.add_argument("--profile", choices=PROFILES, default="ci", help="Hypothesis profile: example counts (default ci)")
    p.add_argument("--runs", type=int, default=1, metavar="N", help="runs in a row (default 1)")
    p.add_argument(
        "--cold",
        action="store_true",
        help="run 1 on a fresh, empty compiled cache (a new directory in --compile-cache DIR, else in --report-dir, printed before the verdict); later runs reuse it (warm)",
    )
    p.add_argument("--workers", default="auto", metavar="N", help="pytest-xdist workers: auto (one per core, the default) or N >= 1")
    p.add_argument("--report-dir", default="sdpa-report", metavar="DIR", help="run i writes DIR/run-<i> (default sdpa-report)")
    p.add_argument(
        "--compile-cache",
        default=None,
        metavar="DIR",
        help="on-disk compiled cache (default: the suite's, see --help of pytest; with --cold a fresh one is made in DIR)",
    )
    p.add_argument("--junitxml", default=None, metavar="FILE", help="JUnit XML per run (FILE, or FILE with -<i> before the suffix for N > 1)")
    p.add_argument(
        "--deadline",
        type=float,
        default=0,
        metavar="SECONDS",
        help="stop starting runs, and interrupt the one running, this long after the gate began (0: none); a run cut or left unstarted exits 1",
    )
    p.add_argument("pytest_args", nargs=argparse.REMAINDER, metavar="-- PYTEST_ARGS", help="passed to every pytest run, after --")


def _junit(path: Optional[str], i: int, runs: int) -> Optional[str]:
    if not path or runs == 1:
        return path
    p = Path(path)  # the file name's suffix only: a dot in a directory name is no suffix
    return str(p.with_name(f"{p.stem}-{i}{p.suffix}"))


def family_tests(family: Optional[str], cpu_tier: bool = True) -> List[str]:
    """The test paths beyond conformance/ of the families ``family`` names
    (every family's when not given: the plugin deselects what the GPU does not run).
    Every one of them is CPU tier: without ``cpu_tier`` none (collecting them
    would only lengthen each worker's start-up)."""
    if not cpu_tier:
        return []
    names = family_select.parse(family) or family_select.FAMILY_NAMES
    return [str(ROOT / t) for name in names for t in family_select.GATE_TESTS[name]]


def command(args, i: int, cache: Optional[str]) -> List[str]:
    """The pytest command line of run ``i``."""
    report = Path(args.report_dir).resolve() / f"run-{i}"
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-n",
        str(args.workers),
        str(ROOT / "conformance"),
        *family_tests(args.family, args.cpu_tier),
        f"--rootdir={ROOT}",
        f"--hypothesis-profile={args.profile}",
        "-p",
        "no:cacheprovider",
        "-q",
        f"--report-dir={report}",
    ]
    if args.adapter:
        cmd.append(f"--adapter={args.adapter}")
    if args.family:
        cmd.append(f"--family={args.family}")
    if args.sm80_compat:
        cmd.append("--sm80-compat")
    if not args.cpu_tier:  # the CPU run judges it: GPU time goes to what only a GPU can judge
        cmd.append("--no-cpu-tier")
    if cache:
        cmd.append(f"--compile-cache={cache}")
    junit = _junit(args.junitxml, i, args.runs)
    if junit:
        cmd.append(f"--junitxml={Path(junit).resolve()}")
    extra = list(args.pytest_args or ())
    return cmd + (extra[1:] if extra[:1] == ["--"] else extra)


def summarize(report: dict, i: int) -> List[str]:
    """The lines printed for run ``i`` from its report.json."""
    t, r, c = report["tests"], report["run"], report["compile"]
    tests = ", ".join(f"{n} {k}" for k, n in t.items() if n and k != "total")
    wall = r.get("wall_seconds") or 0.0
    fams = r.get("examples_by_family") or {}
    per = f" ({', '.join(f'{n} {k}' for k, n in fams.items())})" if len(fams) > 1 else ""
    lines = [f"run {i}: {tests or 'no tests'} | {r['examples']} examples{per} in {wall:.0f} s ({(r.get('examples_per_minute') or 0):.0f}/min)"]
    floor, keys_floor, rep = c.get("floor") or {}, c.get("keys_floor") or {}, (c.get("repeats") or {}).get("by_class") or {}
    ratio = lambda f: f", wall / floor {f['ratio']:.2f}" if f.get("ratio") else ""  # noqa: E731
    lines.append(
        f"  compiles {c.get('compiles')}: {c.get('artifacts', 0)} artifacts of {c.get('compiled_keys', 0)} keys, "
        f"{c.get('unkeyed_compiles', 0)} of examples naming no key, {c.get('repeat_compiles', 0)} repeats "
        f"({rep.get('several workers', 0)} races, {rep.get('one worker', 0)} memos lost), "
        f"{(c.get('deliberate') or {}).get('compiles', 0)} deliberate; hits {c.get('hits')}"
    )
    lines.append(
        f"  compile floor {floor.get('seconds', 0):.0f} s{ratio(floor)} ({floor.get('artifacts', 0)} artifacts); "
        f"keys floor {keys_floor.get('seconds', 0):.0f} s{ratio(keys_floor)}"
    )
    cov = report.get("coverage") or {}
    tables = {"sm80": cov.get("pairs"), **(cov.get("family_pairs") or {})}
    shares = [f"{fam} {d} {100 * t[d]['share']:.1f}%" for fam, t in tables.items() if t for d in ("fwd", "bwd") if (t.get(d) or {}).get("share") is not None]
    if shares:
        lines.append("  pairs drawn: " + ", ".join(shares))
    for prop, p in sorted(report["properties"].items()):
        for q, s in sorted((p.get("ratios_by_dtype") or {}).items()):
            if s.get("count"):
                lines.append(f"  {prop} error/bound {q}: p99 {s['p99']:.3f} max {s['max']:.3f} ({s['count']} examples)")
    f = report.get("findings") or {}
    counts = {}
    for e in f.get("entries") or ():
        counts[e["status"]] = counts.get(e["status"], 0) + 1
    lines.append(
        "  known findings: "
        + (", ".join(f"{n} {s}" for s, n in sorted(counts.items())) or "none")
        + (f"; stale: {', '.join(f['stale'])}" if f.get("stale") else "")
    )
    for g in report.get("skips") or ():  # every skipped test is a verdict not given: say why
        lines.append(f"  skipped {g['count']}: {g['reason']}")
    return lines


def _has_gpu() -> bool:
    import torch

    return torch.cuda.is_available()


def _usage_problem(args) -> Optional[str]:
    """What is wrong with the options (checked before anything runs, GPU or not)."""
    if args.runs < 1:
        return "--runs must be >= 1"
    if not (args.deadline >= 0 and math.isfinite(args.deadline)):
        return f"--deadline {args.deadline:g}: expected a finite number of seconds >= 0 (0: none)"
    if args.workers != "auto" and not (str(args.workers).isdigit() and int(args.workers) >= 1):
        return f"--workers {args.workers!r}: expected auto or a number of workers >= 1"
    return None


def run(args) -> int:
    problem = _usage_problem(args)
    if problem:
        print(f"sdpa-conformance gate: error: {problem}", file=sys.stderr)
        return 2
    if not _has_gpu():  # a refusal of this machine (ground.outcome.REFUSALS): its message and exit status
        refusal = Unsupported.machine(f"{NO_GPU}; the gate launches the kernels (run pytest for the CPU tiers)")
        print(f"sdpa-conformance gate: error: {refusal.usage()}", file=sys.stderr)
        return refusal.exit_status
    began, status, red = time.monotonic(), 0, []
    cache = args.compile_cache
    if args.cold:  # a fresh directory inside --compile-cache DIR (what DIR held before stays out of the run)
        parent = args.compile_cache or args.report_dir
        try:
            Path(parent).mkdir(parents=True, exist_ok=True)
            cache = tempfile.mkdtemp(prefix="compile-cache-", dir=parent)
        except OSError as e:
            print(f"sdpa-conformance gate: error: --cold: cannot make a fresh compiled cache in {parent} ({e.strerror})", file=sys.stderr)
            return 2
    for i in range(1, args.runs + 1):
        left = args.deadline - (time.monotonic() - began) if args.deadline else None
        if left is not None and left < 60:
            print(f"run {i}: not started, {left:.0f} s left before --deadline")
            _print_cache(args, cache)
            print(f"gate: {i - 1} of {args.runs} run(s) ran before --deadline: no verdict on the rest (exit status 1)")
            return status or 1
        cmd = command(args, i, cache)
        print("$ " + " ".join(cmd), flush=True)
        started = time.monotonic()
        try:
            rc = subprocess.run(cmd, cwd=ROOT, timeout=left).returncode
        except subprocess.TimeoutExpired:
            rc = 1
            print(f"run {i}: cut at --deadline")
        status = status or rc
        if rc:
            red.append(i)
        report = Path(args.report_dir) / f"run-{i}" / "report.json"
        if not report.is_file():  # a run cut short leaves its shards: render them
            subprocess.run([sys.executable, "-m", "conformance.cli", "report", str(report.parent)], cwd=ROOT, capture_output=True)
        try:
            lines = summarize(json.loads(report.read_text()), i)
        except (OSError, ValueError, KeyError) as e:
            lines = [f"run {i}: no report ({e})"]
        # The report's wall is the pytest run's (configure to the known findings' verdict); the
        # user waits for the process: its start-up and the report's rendering too.
        took = time.monotonic() - started
        print("\n".join(lines) + f"\n  pytest exit status {rc}; {took:.0f} s end to end (start-up, run, report)", flush=True)
    _print_cache(args, cache)
    # The gate's one verdict, last: a user reads the bottom line, not each run's status.
    verdict = "green" if not red else "red: run " + ", ".join(map(str, red)) + " failed"
    print(f"gate: {verdict}; {args.runs - len(red)} of {args.runs} run(s) passed (exit status {status})")
    return status


def _print_cache(args, cache: Optional[str]) -> None:
    """After --cold: where the fresh compiled cache is. It is a new directory
    inside --compile-cache DIR, so a later gate given DIR itself would find
    none of its kernels and run cold again; given this path it runs warm."""
    if args.cold:
        print(f"compiled cache: {cache} (a later gate with --compile-cache {cache} runs warm on it)")


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="sdpa-conformance gate", description=__doc__.split("\n\n")[0])
    add_arguments(p)
    return run(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
