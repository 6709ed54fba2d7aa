"""The ``sdpa-conformance`` command: replay a case file, re-render a report.

    sdpa-conformance repro sdpa-report/cases/numerics-1a2b3c4d5e.json
    sdpa-conformance repro sdpa-report/cases/numerics-1a2b3c4d5e.json --shrink-geometry
    sdpa-conformance report sdpa-report

Exit status: 0 the case passes now / report written; 1 the case still fails;
2 usage errors, unreadable case files, no GPU where the case needs one.
Nothing heavy is imported before it is needed: --help and --version are instant.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import List, Optional

from conformance import __version__
from conformance.ground.tables import ADAPTER_ENV, ADAPTERS, COMPAT_ENV, DEFAULT_ADAPTER, NO_GPU, PINNED

PACKAGES = ("nvidia-cudnn-frontend", "nvidia-cutlass-dsl", "torch")


class Usage(Exception):
    """Exit 2 with this message."""


def _version_text() -> str:
    from importlib.metadata import PackageNotFoundError, version

    lines = [f"sdpa-conformance {__version__}"]
    for name in PACKAGES:
        try:
            v = version(name)
        except PackageNotFoundError:
            v = "not installed"
        pin = PINNED.get(name)
        lines.append(f"  {name} {v}" + (f" (pinned {pin})" if pin and pin != v else ""))
    return "\n".join(lines)


class _Version(argparse.Action):
    """argparse's own version action re-wraps the text into one paragraph."""

    def __call__(self, parser, namespace, values, option_string=None):
        print(_version_text())
        parser.exit(0)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="sdpa-conformance",
        description="Conformance suite for cudnn-frontend's SM80 SDPA forward kernels. Run the suite with pytest; "
        "this command replays what a run left behind.",
        epilog="exit status: 0 pass / done, 1 the case still fails, 2 usage error, bad case file, or no GPU",
    )
    p.add_argument("--version", action=_Version, nargs=0, help="print the suite's version and the kernel package versions it sees, then exit")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    r = sub.add_parser("repro", help="replay one case file and say where the kernel differs",
                       description="Rebuild the case's tensors bit for bit, run the property named in the file, print where "
                       "it differs. Exit 1 if it still fails, 0 if it passes now.")
    r.add_argument("file", metavar="FILE", help="a case file, e.g. sdpa-report/cases/numerics-1a2b3c4d5e.json")
    r.add_argument("--adapter", choices=ADAPTERS, default=None, help="kernel entry point (default: the one recorded in the file, else $SDPA_ADAPTER, else prepared)")
    r.add_argument("--sm80-compat", action="store_true", default=None, help="run sm80 code on a newer GPU (default: as recorded, or $SDPA_SM80_COMPAT=1)")
    r.add_argument("--kernels-source", metavar="PATH", default=None, help="cudnn-frontend python/ tree to test instead of the installed wheel")
    r.add_argument("--shrink-geometry", action="store_true",
                   help="when it still fails, shrink it further outside the run's geometry pools (every fact, greedily; a compile per new "
                        "geometry) and write the simplest failing case next to FILE as *-min.json")
    r.add_argument("--max-runs", type=int, default=300, metavar="N", help="--shrink-geometry: at most N property runs (default 300)")
    g = sub.add_parser("report", help="merge a report dir's shards and render report.json/.md/.html",
                       description="Re-render the reports of a run from the shards in its report dir.")
    g.add_argument("dir", metavar="DIR", help="a report dir (default name: sdpa-report)")
    from conformance import kill_rate as mutants

    m = sub.add_parser("mutants", help="plant the bug catalogue in the kernels and measure the suite's kill rate (GPU)",
                       description="Plant each mutant of kernels/mutants.py (a source rewrite of the installed SM80 "
                       "templates or host) and search the suite's properties for a failure; report killed/survived "
                       "per mutant and the kill rate. The unmutated control must survive.")
    mutants.add_arguments(m)
    return p


# ------------------------------------------------------------------ repro
def _load(path: str):
    from conformance.ground.case import CaseFileError, load_case_file

    try:
        case, doc = load_case_file(path)
    except CaseFileError as e:
        raise Usage(f"{path}: {e}") from None
    prop = doc.get("property")
    if not isinstance(prop, str) or not prop:
        raise Usage(f"{path}: case file field 'property': expected the property's name, got {prop!r}")
    params = doc.get("params") or {}
    if not isinstance(params, dict):
        raise Usage(f"{path}: case file field 'params': expected an object of keyword arguments, got {params!r}")
    return case, doc, prop, params


def _fmt(v) -> str:
    return f"{v:.6g}" if isinstance(v, float) else str(v)


COORDS = ("sequence", "batch", "head", "token", "packed_token", "dim")


def format_detail(detail: dict) -> List[str]:
    """The failure's detail, worst elements as one line each with coordinates."""
    lines = []
    scalars = {k: v for k, v in detail.items() if k != "worst" and not isinstance(v, (dict, list))}
    if scalars:
        lines.append("  " + "   ".join(f"{k}: {_fmt(v)}" for k, v in scalars.items()))
    for k, v in detail.items():
        if k != "worst" and isinstance(v, (dict, list)):
            lines.append(f"  {k}: {json.dumps(v, default=str)}")
    worst = detail.get("worst") or []
    if worst:
        lines.append("  worst elements:")
    for w in worst:
        where = " ".join(f"{c} {w[c]}" for c in COORDS if c in w)
        got, want = w.get("got"), w.get("want")
        diff = ""
        if isinstance(got, float) and isinstance(want, float):
            diff = f"  |diff| {_fmt(abs(got - want))}"
        lines.append(f"    {str(w.get('quantity', '?')).upper():4} {where:42} got {_fmt(got)}  want {_fmt(want)}{diff}  [{w.get('region', '-')}]")
    return lines


def repro(args) -> int:
    from reports.casefile import describe, inputs_digest

    case, doc, prop, params = _load(args.file)
    hyp = doc.get("hypothesis") or {}
    adapter_name = args.adapter or doc.get("adapter") or os.environ.get(ADAPTER_ENV) or DEFAULT_ADAPTER
    if adapter_name not in ADAPTERS:
        raise Usage(f"{args.file}: case file field 'adapter': {adapter_name!r} is not one of {', '.join(ADAPTERS)}")
    compat = bool(args.sm80_compat or doc.get("sm80_compat") or os.environ.get(COMPAT_ENV) == "1")
    print(f"case file: {args.file}")
    print(f"property:  {prop}" + (f" {json.dumps(params)}" if params else "") + f"   adapter: {adapter_name}" + (" (sm80-compat)" if compat else ""))
    print(f"case:      {describe(case)}")
    print(f"recorded:  {doc.get('nodeid') or '-'}   mode: {doc.get('mode') or '-'}   gpu: {doc.get('gpu') or '-'}")
    if hyp.get("seed") is not None or hyp.get("reproduce_failure"):
        print("hypothesis: " + "   ".join(x for x in (f"seed {hyp['seed']}" if hyp.get("seed") is not None else "", hyp.get("reproduce_failure") or "") if x))
    if doc.get("summary"):
        print(f"was:       {doc['summary']}")

    # The kernels source must be chosen before anything imports cudnn.
    # A case from a checkout run records "checkout <path>" (kernels.source.describe()).
    recorded = str(doc.get("kernels_source") or "")
    source = args.kernels_source or (recorded.split(" ", 1)[1] if recorded.startswith("checkout ") else None)
    if source:
        from kernels.source import KernelSourceError, use_kernels_source

        try:
            use_kernels_source(source)
        except KernelSourceError as e:
            raise Usage(f"--kernels-source: {e}") from None
    if compat:
        os.environ[COMPAT_ENV] = "1"

    import torch

    needs_gpu = doc.get("needs_gpu")
    if needs_gpu is None:  # not recorded: a case from a GPU run launched kernels
        needs_gpu = not str(doc.get("mode") or "").startswith("compile-only")
    if needs_gpu and not torch.cuda.is_available():
        raise Usage(NO_GPU + "; replay this case on a GPU machine" + (f" (recorded on {doc['gpu']}, {doc.get('mode')})" if doc.get("gpu") else ""))

    digest = inputs_digest(case)
    if doc.get("inputs_sha256"):
        same = digest == doc["inputs_sha256"]
        print(f"inputs:    {'regenerated bit for bit' if same else 'DIFFER from the recorded run (torch RNG or data module changed)'} (sha256 {str(digest)[:16]})")

    from conformance.ground.outcome import PropertyFailure
    from conformance.properties import PROPERTIES, NoGPU

    if prop not in PROPERTIES:
        raise Usage(f"{args.file}: case file field 'property': {prop!r} is not one of {', '.join(PROPERTIES)}")
    import kernels

    adapter = kernels.get_adapter(adapter_name)
    try:
        obs = PROPERTIES[prop](case, adapter=adapter, **params)
    except PropertyFailure as failure:
        print(f"\nFAIL {prop}: {failure.summary}")
        for line in format_detail(failure.detail):
            print(line)
        _known_finding_note(prop, case)
        print("\nstill fails (exit 1)")
        return _shrink(args, doc, prop, case, adapter, params, failure) if args.shrink_geometry else 1
    except NoGPU as e:
        raise Usage(str(e)) from None
    except Exception as e:  # noqa: BLE001 - an exception from the kernel is the failure being replayed
        import traceback

        traceback.print_exc()
        print(f"\nFAIL {prop}: raised {type(e).__name__}: {e}\n\nstill fails (exit 1)")
        return _shrink(args, doc, prop, case, adapter, params, e) if args.shrink_geometry else 1
    if obs.outcome == "xfailed":  # a finding declared in code (contract table) still reproduces
        print(f"\nXFAIL {prop} (known finding {obs.finding}): {obs.notes.get('summary', '')}\n\nstill fails, as known (exit 1)")
        return 1
    ratios = "   ".join(f"{q} error/bound {_fmt(r)}" for q, r in (obs.ratios or {}).items())
    print(f"\nPASS {prop}" + (f": {ratios}" if ratios else "") + "\n\npasses now (exit 0)")
    return 0


def _shrink(args, doc: dict, prop: str, case, adapter, params: dict, failure: BaseException) -> int:
    """repro --shrink-geometry: shrink the still-failing case over free
    geometry (conformance.properties.shrink) and write the simplest failing
    case next to the file. Exit 1: it still fails."""
    from functools import partial
    from pathlib import Path

    from conformance.ground.outcome import PropertyFailure
    from conformance.properties import PROPERTIES
    from conformance.properties.shrink import shrink_geometry
    from reports.casefile import describe, inputs_digest, repro_command, strict

    if case.violation:
        print("--shrink-geometry: a contract-violating case has no geometry to shrink; nothing done")
        return 1
    print(f"\nshrinking outside the geometry pools (at most {args.max_runs} runs; a compile per new geometry) ...")
    check = partial(PROPERTIES[prop], adapter=adapter)
    def summary(e: BaseException) -> str:
        return e.summary if isinstance(e, PropertyFailure) else f"{type(e).__name__}: {str(e)[:300]}"

    def log(state) -> None:
        print(f"  step {len(state.steps)} (run {state.runs}): {describe(state.case)}\n      {summary(state.failure)[:160]}", flush=True)

    result = shrink_geometry(check, case, failure, max_runs=args.max_runs, log=log, **params)
    if not result.steps:
        print(f"no simpler case fails ({result.runs} runs): the case file is already minimal")
        return 1
    final = result.failure
    out = Path(args.file).with_name(Path(args.file).stem + "-min.json")
    shrunk = dict(doc, case=result.case.to_dict(), summary=summary(final), detail=getattr(final, "detail", {}) or {}, shrunk_from=str(args.file),
                  inputs_sha256=inputs_digest(result.case), repro=repro_command(out))  # fmt: skip
    out.write_text(json.dumps(strict(shrunk), indent=1, default=str) + "\n", encoding="utf-8")
    print(f"\nsimplest failing case ({len(result.steps)} steps, {result.runs} runs{'' if result.complete else ', stopped by --max-runs'}):")
    print(f"case:      {describe(result.case)}")
    print(f"was:       {describe(case)}")
    print(f"wrote {out}\n  {repro_command(out)}\n\nstill fails (exit 1)")
    return 1


def _known_finding_note(prop: str, case) -> None:
    """Say so when the failure is an expected one (repro itself applies no findings)."""
    from conformance.ground import findings

    path = "known_findings.toml"
    if os.path.isfile(path):
        try:
            entries = findings.load(path)
        except findings.FindingsError:
            return
        for f in entries:
            if f.matches(prop, case):
                print(f"  known finding {f.id}: {f.reason}")


# ----------------------------------------------------------------- report
def report(args) -> int:
    if not os.path.isdir(args.dir):
        raise Usage(f"{args.dir}: not a directory")
    import reports
    from reports.casefile import display_path

    summary, paths = reports.build(args.dir)
    for w in summary["warnings"]:
        print(f"warning: {w}", file=sys.stderr)
    failing = sum(1 for f in summary["failures"] if not f.get("finding"))
    print(f"{summary['run']['examples']} examples, {summary['tests']['total']} tests, {failing} failing case(s)")
    for p in paths.values():
        print(display_path(p))
    return 0


def _mutants(args) -> int:
    from conformance import kill_rate as mutants

    return mutants.main(args)


def main(argv: Optional[List[str]] = None) -> int:
    args = parser().parse_args(argv)
    try:
        return {"repro": repro, "report": report, "mutants": _mutants}[args.command](args)
    except Usage as e:
        print(f"sdpa-conformance {args.command}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
