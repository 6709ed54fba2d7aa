"""The ``sdpa-conformance`` command: replay a case file, re-render a report.

    sdpa-conformance repro sdpa-report/cases/numerics-1a2b3c4d5e.json
    sdpa-conformance repro sdpa-report/shards/<run>/gw3-4242.jsonl[:LINE]
    sdpa-conformance repro sdpa-report/cases/numerics-1a2b3c4d5e.json --shrink-geometry
    sdpa-conformance report sdpa-report
    sdpa-conformance facts
    sdpa-conformance pairs --profile ci

Exit status: 0 the case passes now / report written; 1 the case still fails;
2 usage errors, unreadable case files, and refusals (ground.outcome.Unsupported,
whatever its scope: no GPU where the case needs one, an arch or capability the
adapter lacks, a fact it cannot express). gate passes on the status of the
first failing pytest run; mutants exits 1 below its --goal (conformance.kill.tally).
Nothing heavy is imported before it is needed: --help and --version are instant.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
from pathlib import Path
from typing import List, Optional

from conformance import __version__
from ground.outcome import Unsupported
from ground.tables import ADAPTER_ENV, ADAPTERS, COMPAT_ENV, DEFAULT_ADAPTER, NO_GPU, PINNED

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
        description="Conformance suite for cudnn-frontend's SM80 SDPA kernels (forward and backward). gate runs the suite (pytest) "
        "on the local GPU; repro and report replay and re-render what a run left behind; mutants measures the suite's kill rate "
        "on planted bugs; pairs measures on the CPU which compile-key pairs a profile draws; facts prints the Case facts.",
        epilog="exit status: 0 pass / done; 1 the case still fails (repro), the kill rate is short of --goal (mutants); "
        "2 usage error, unreadable file, or a refusal (no GPU); gate: the first failing run's pytest status "
        "(1 tests failed, 2-4 usage or internal errors), 1 when --deadline left a run cut or unstarted",
    )
    p.add_argument("--version", action=_Version, nargs=0, help="print the suite's version and the kernel package versions it sees, then exit")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    r = sub.add_parser(
        "repro",
        help="replay one case file and say where the kernel differs",
        description="Rebuild the case's tensors bit for bit, run the property named in the file, print where "
        "it differs. Exit 1 if it still fails, 0 if it passes now.",
    )
    r.add_argument(
        "file",
        metavar="FILE",
        help="a case file, e.g. sdpa-report/cases/numerics-1a2b3c4d5e.json; or a shard "
        "(sdpa-report/shards/<run>/<worker>-<pid>.jsonl[:LINE]): the example begun at LINE, default the last one begun "
        "(what a process that died mid-example was running)",
    )
    r.add_argument(
        "--adapter", choices=ADAPTERS, default=None, help="kernel entry point (default: the one recorded in the file, else $SDPA_ADAPTER, else prepared)"
    )
    r.add_argument("--sm80-compat", action="store_true", default=None, help="run sm80 code on a newer GPU (default: as recorded, or $SDPA_SM80_COMPAT=1)")
    r.add_argument("--kernels-source", metavar="PATH", default=None, help="cudnn-frontend python/ tree to test instead of the installed wheel")
    r.add_argument(
        "--shrink-geometry",
        action="store_true",
        help="when it still fails, shrink it further outside the run's geometry pools (every fact, greedily; a compile per new "
        "geometry) and write the simplest failing case next to FILE as *-min.json",
    )
    r.add_argument("--max-runs", type=int, default=300, metavar="N", help="--shrink-geometry: at most N property runs, N >= 1 (default 300)")
    r.add_argument(
        "--timeout",
        type=float,
        default=300.0,
        metavar="SECONDS",
        help="a replay with no verdict after this long is a hang: say so and exit 1 (default: 300; 0: wait forever)",
    )
    sub.add_parser(
        "facts",
        help="print the Case facts and the coverage axes (markdown), from their declarations",
        description="The facts a Case holds (ground/case.py) and the coverage axes that show them (ground/coverage.py), as markdown tables.",
    )
    g = sub.add_parser(
        "report",
        help="merge a report dir's shards and render report.json/.md/.html",
        description="Re-render the reports of a run from the shards in its report dir.",
    )
    g.add_argument("dir", metavar="DIR", help="a report dir (default name: sdpa-report)")
    from conformance.kill import cli as mutants

    m = sub.add_parser(
        "mutants",
        help="plant the bug catalogue in the kernels and measure the suite's kill rate (GPU)",
        description="Plant each mutant of kernels/mutants.py (a source rewrite of the installed SM80 "
        "templates or host) and search the suite's properties for a failure, each property kind drawing "
        "its example count per stratum (times --examples-scale), so a verdict means the same on every "
        "machine and --jobs; --budget-s only caps a mutant's wall clock. Report per mutant killed/error/"
        "survived/incomplete (the cap stopped it)/stale with each kind's examples drawn / planned, and "
        "the kill rate. The unmutated control must fully survive. --family sm90 (or all) runs the sm90 catalogue "
        "(kernels/mutants_sm90.py) and its control on a Hopper GPU. Arguments as python -m conformance.kill_rate.",
    )
    mutants.add_arguments(m)
    from conformance import gate

    gt = sub.add_parser(
        "gate",
        help="run the suite on the local GPU, N runs in a row, and print each run's summary",
        description="Run the properties on this machine's GPU (pytest -n WORKERS conformance), N times in a row "
        "(--cold: the first on an empty compiled cache), each into REPORT_DIR/run-<i>, and print per run: tests, "
        "examples, wall time, compiles against the compile floor, error/bound p99, known findings. The CPU tier (tests marked "
        "cpu_tier, which the CPU run judges) runs only with --cpu-tier. Exit status: "
        "the first failing run's pytest status (1 a property failed or a finding went stale), 2 for a bad option or without a GPU.",
    )
    gate.add_arguments(gt)
    from conformance import pairs as pair_coverage

    pc = sub.add_parser(
        "pairs",
        help="measure on the CPU which pairs of compile-key factor values a profile's draws make meet",
        description="Draw the examples a run of the property tests draws under --profile (each test built as pytest builds it, "
        "its checks replaced by a recorder: no kernel runs) and count the pairs of compile-key factor values they make meet "
        "(ground/pairs.py) against the feasible ones, per direction and layout; list the missing pairs.",
    )
    pair_coverage.add_arguments(pc)
    return p


# ------------------------------------------------------------------ repro
SHARD_LINE = re.compile(r"^(?P<path>.+\.jsonl)(?::(?P<line>\d+))?$")


def _load(path: str):
    from ground.case import CaseFileError, load_case_file

    try:
        case, doc = _load_shard_line(path) if SHARD_LINE.match(path) else load_case_file(path)
    except CaseFileError as e:
        raise Usage(f"{path}: {e}") from None
    prop = doc.get("property")
    if not isinstance(prop, str) or not prop:
        raise Usage(f"{path}: case file field 'property': expected the property's name, got {prop!r}")
    params = doc.get("params") or {}
    if not isinstance(params, dict):
        raise Usage(f"{path}: case file field 'params': expected an object of keyword arguments, got {params!r}")
    hyp = doc.get("hypothesis")
    if hyp is not None and not isinstance(hyp, dict):
        raise Usage(f"{path}: case file field 'hypothesis': expected an object (seed, reproduce_failure), got {hyp!r}")
    _check_violation(path, case, prop, params)  # first: a rejection's missing entry is named with the rule's targets
    _check_params(path, prop, params)
    return case, doc, prop, params


def _param_domains() -> dict:
    """(property, keyword) -> the values it takes, where that set is closed."""
    from properties import COMPILED_FACTS, RELATIONS

    return {("metamorphic", "relation"): RELATIONS, ("compile_distinct", "fact"): COMPILED_FACTS}


def _check_params(path: str, prop: str, params: dict) -> None:
    """The property exists and takes ``params``, each of its type and, where
    the property has a closed set, one of it: a bad value would raise inside
    the property, and read as the kernel failing. Checked before anything
    needs a GPU, so a CPU machine names the real problem."""
    import inspect

    from properties import PROPERTIES

    if prop not in PROPERTIES:
        raise Usage(f"{path}: case file field 'property': {prop!r} is not one of {', '.join(PROPERTIES)}")
    signature = inspect.signature(PROPERTIES[prop].check, eval_str=True)
    try:
        signature.bind(None, adapter=None, **params)
    except TypeError as e:
        raise Usage(f"{path}: case file field 'params': {e} (the keyword arguments of the {prop} property)") from None
    for name, value in params.items():
        kind = getattr(signature.parameters.get(name), "annotation", None)  # None: taken by a **keywords
        if kind in (bool, str) and type(value) is not kind:
            raise Usage(f"{path}: case file field 'params.{name}': expected {'true/false' if kind is bool else 'a string'}, got {value!r}")
        domain = _param_domains().get((prop, name))
        if domain is not None and value not in domain:
            raise Usage(f"{path}: case file field 'params.{name}': {value!r} is not one of {', '.join(domain)}")


def _load_shard_line(arg: str):
    """(Case, a case-file-like document) from a shard's ``begin`` record: the
    line given, else the last ``begin`` of the shard. The run's environment
    comes from its session record when the run finished (the controller's shard)."""
    from ground.case import Case, CaseFileError

    m = SHARD_LINE.match(arg)
    path, line = m.group("path"), int(m.group("line")) if m.group("line") else None
    lines = _text(path).split("\n")
    if lines[-1] == "":  # the newline that ends the last record starts no line
        lines.pop()
    if line is not None and not 1 <= line <= len(lines):
        raise CaseFileError(f"line {line}: the shard has {len(lines)} line(s)")
    numbers = [line] if line is not None else range(len(lines), 0, -1)
    for n in numbers:
        try:
            rec = json.loads(lines[n - 1]) if lines[n - 1].strip() else {}
        except json.JSONDecodeError:
            if line is not None:
                raise CaseFileError(f"line {n}: not a JSON record (torn by a killed process?)") from None
            continue
        if not isinstance(rec, dict):
            if line is not None:
                raise CaseFileError(f"line {n}: a JSON {type(rec).__name__}, not a record (an object)")
            continue
        if rec.get("kind") == "begin":
            break
        if line is not None:
            raise CaseFileError(f"line {n}: a {rec.get('kind')!r} record, not a 'begin' (an example's start)")
    else:
        raise CaseFileError("no 'begin' record in this shard (no example started)")
    if not isinstance(rec.get("case"), dict):
        raise CaseFileError(f"line {n}: field 'case': expected the Case's fields, got {rec.get('case')!r}")
    case = Case.from_dict(rec["case"])
    if not 0 <= case.seed < 2**63:  # as ground.case.load_case_file refuses it
        raise CaseFileError(f"line {n}: case field 'seed': expected 0 to 2**63 - 1, got {case.seed}")
    context = rec.get("context") or {}
    if not isinstance(context, dict):
        raise CaseFileError(f"line {n}: field 'context': expected an object (adapter, sm80_compat), got {context!r}")
    env = _session_environment(os.path.dirname(path))
    doc = {
        "case": rec["case"],
        "property": rec.get("property"),
        "params": rec.get("params") or {},
        "nodeid": rec.get("test"),
        "adapter": context.get("adapter", env.get("adapter")),
        "sm80_compat": context.get("sm80_compat", env.get("sm80_compat")),
        "mode": env.get("mode"),
        "gpu": env.get("gpu"),
        "kernels_source": env.get("kernels_source"),
        "planted_mutant": env.get("planted_mutant"),
        "summary": f"example begun at {path}:{n}",
    }
    return case, doc


def _text(path: str, what: str = "it") -> str:
    from ground.case import CaseFileError

    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise CaseFileError(f"cannot read {what} ({e.strerror})") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise CaseFileError(f"cannot read {what} (not UTF-8 text: byte {data[e.start]:#04x} at offset {e.start})") from None


def _session_environment(run_dir: str) -> dict:
    from ground.case import CaseFileError

    for name in sorted(os.listdir(run_dir)) if os.path.isdir(run_dir) else []:
        if name.startswith("main-") and name.endswith(".jsonl"):
            shard = os.path.join(run_dir, name)
            for n, line in enumerate(_text(shard, f"the run's session shard {shard}").split("\n"), 1):
                if '"kind": "session"' in line:
                    try:
                        rec = json.loads(line)
                    except json.JSONDecodeError:
                        continue
                    if not isinstance(rec, dict):
                        continue
                    env = rec.get("environment") or {}
                    if not isinstance(env, dict):
                        raise CaseFileError(f"{shard} line {n}: the session's field 'environment': expected an object, got {env!r}")
                    return env
    return {}


def _check_violation(path: str, case, prop: str, params: dict) -> None:
    """A contract-violating case names a known rule, and the rejection
    property gets an entry point the rule targets (else exit 2, naming the field)."""
    from ground import contracts

    if case.violation is not None:
        try:
            rule = contracts.rule(case.violation)
        except ValueError as e:
            raise Usage(f"{path}: case file field 'case.violation': {e}") from None
    if prop != "rejection":
        return
    if case.violation is None:
        raise Usage(
            f"{path}: case file field 'case.violation': missing; the rejection property replays a contract-violating case "
            "and needs the rule it breaks (a name of ground/contracts.py)"
        )
    entry = params.get("entry")
    if entry not in rule.expect:
        got = "missing" if entry is None else repr(entry)
        raise Usage(f"{path}: case file field 'params.entry': {got}; rule {rule.name!r} targets {', '.join(sorted(rule.expect))}")


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
    from reports.casefile import inputs_digest

    if args.max_runs < 1:
        raise Usage(f"--max-runs {args.max_runs}: expected a number of property runs >= 1")
    if not (args.timeout >= 0 and math.isfinite(args.timeout)):
        raise Usage(f"--timeout {args.timeout:g}: expected a finite number of seconds >= 0 (0: wait forever)")
    case, doc, prop, params = _load(args.file)
    _check_reference_plant()
    hyp = doc.get("hypothesis") or {}
    adapter_name = args.adapter or doc.get("adapter") or os.environ.get(ADAPTER_ENV) or DEFAULT_ADAPTER
    if adapter_name not in ADAPTERS:
        raise Usage(f"{args.file}: case file field 'adapter': {adapter_name!r} is not one of {', '.join(ADAPTERS)}")
    compat = bool(args.sm80_compat or doc.get("sm80_compat") or os.environ.get(COMPAT_ENV) == "1")
    print(f"case file: {args.file}")
    print(f"property:  {prop}" + (f" {json.dumps(params)}" if params else "") + f"   adapter: {adapter_name}" + (" (sm80-compat)" if compat else ""))
    print(f"case:      {case.describe()}")
    print(f"recorded:  {doc.get('nodeid') or '-'}   mode: {doc.get('mode') or '-'}   gpu: {doc.get('gpu') or '-'}")
    if hyp.get("seed") is not None or hyp.get("reproduce_failure"):
        print("hypothesis: " + "   ".join(x for x in (f"seed {hyp['seed']}" if hyp.get("seed") is not None else "", hyp.get("reproduce_failure") or "") if x))
    if doc.get("summary"):
        print(f"was:       {doc['summary']}")
    _planted_note(doc)

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
        raise Unsupported.machine(
            NO_GPU + "; replay this case on a GPU machine" + (f" (recorded on {doc['gpu']}, {doc.get('mode')})" if doc.get("gpu") else "")
        )

    digest = inputs_digest(case)
    if doc.get("inputs_sha256"):
        same = digest == doc["inputs_sha256"]
        print(
            f"inputs:    {'regenerated bit for bit' if same else 'DIFFER from the recorded run (torch RNG or data module changed)'} (sha256 {str(digest)[:16]})"
        )

    import kernels
    from ground import findings
    from ground.outcome import PropertyFailure
    from properties import PROPERTIES

    adapter = kernels.get_adapter(adapter_name, family=case.family)
    _bound(args.timeout, prop)
    try:
        with findings.applied([]):  # repro applies no findings: it shows every discrepancy
            obs = PROPERTIES[prop].check(case, adapter=adapter, **params)
    except PropertyFailure as failure:
        print(f"\nFAIL {prop}: {failure.summary}")
        for line in format_detail(failure.detail):
            print(line)
        covered = _known_finding_note(failure, params)
        print("\nstill fails" + (", as the known findings describe" if covered else "") + " (exit 1)")
        return _shrink(args, doc, prop, case, adapter, params, failure) if args.shrink_geometry else 1
    except Unsupported:  # this machine or adapter cannot run what the case file asks: no verdict (main: the refusal's exit status)
        raise
    except Exception as e:  # noqa: BLE001 - an exception from the kernel is the failure being replayed
        import traceback

        from properties import watchdog

        traceback.print_exc()
        lost = watchdog.context_lost(e)
        print(
            f"\nFAIL {prop}: raised {type(e).__name__}: {e}"
            + (f"\nCUDA context lost: {lost} (a sticky CUDA error)" if lost else "")
            + "\n\nstill fails (exit 1)"
        )
        return _shrink(args, doc, prop, case, adapter, params, e) if args.shrink_geometry else 1
    finally:
        _unbound()
    ratios = "   ".join(f"{q} error/bound {_fmt(r)}" for q, r in (obs.ratios or {}).items())
    print(f"\nPASS {prop}" + (f": {ratios}" if ratios else "") + "\n\npasses now (exit 0)")
    return 0


def _shrink(args, doc: dict, prop: str, case, adapter, params: dict, failure: BaseException) -> int:
    """repro --shrink-geometry: shrink the still-failing case over free
    geometry (properties.shrink) and write the simplest failing
    case next to the file. Exit 1: it still fails."""
    from functools import partial
    from pathlib import Path

    from ground.outcome import PropertyFailure
    from properties import PROPERTIES
    from properties.shrink import shrink_geometry
    from reports.casefile import inputs_digest, repro_command, strict

    if case.violation:
        print("--shrink-geometry: a contract-violating case has no geometry to shrink; nothing done")
        return 1
    print(f"\nshrinking outside the geometry pools (at most {args.max_runs} runs; a compile per new geometry) ...")
    check = partial(PROPERTIES[prop].check, adapter=adapter)

    def summary(e: BaseException) -> str:
        return e.summary if isinstance(e, PropertyFailure) else f"{type(e).__name__}: {str(e)[:300]}"

    def log(state) -> None:
        print(f"  step {len(state.steps)} (run {state.runs}): {state.case.describe()}\n      {summary(state.failure)[:160]}", flush=True)

    result = shrink_geometry(check, case, failure, max_runs=args.max_runs, log=log, **params)
    if not result.steps:
        print(f"no simpler case fails ({result.runs} runs): the case file is already minimal")
        return 1
    final = result.failure
    out = Path(args.file).with_name(Path(args.file).stem + "-min.json")
    shrunk = dict(
        doc,
        case=result.case.to_dict(),
        summary=summary(final),
        detail=getattr(final, "detail", {}) or {},
        shrunk_from=str(args.file),
        inputs_sha256=inputs_digest(result.case),
        repro=repro_command(out),
    )
    out.write_text(json.dumps(strict(shrunk), indent=1, default=str) + "\n", encoding="utf-8")
    print(f"\nsimplest failing case ({len(result.steps)} steps, {result.runs} runs{'' if result.complete else ', stopped by --max-runs'}):")
    print(f"case:      {result.case.describe()}")
    print(f"was:       {case.describe()}")
    print(f"wrote {out}\n  {repro_command(out)}\n\nstill fails (exit 1)")
    return 1


def _planted_note(doc: dict) -> None:
    """A case recorded with a planted mutant replays the planted bug only with it planted again."""
    from kernels.mutants import PLANT_ENV

    was, now = doc.get("planted_mutant"), os.environ.get(PLANT_ENV) or None
    if was and was != now:
        print(f"NOTE:      recorded with the kernels deliberately broken ({PLANT_ENV}={was}); set it to replay that bug")
    if now:
        print(f"WARNING:   kernels deliberately broken: {PLANT_ENV}={now} (prepared adapter)")


def _check_reference_plant() -> None:
    """An unknown $SDPA_PLANT_REFERENCE_BUG raises where the reference is first
    imported, inside the property: it would read as the kernel failing."""
    try:
        from reference import planted  # the first import of reference applies the plant

        planted.check()
    except ValueError as e:  # reference.planted.UnknownPlant
        raise Usage(str(e)) from None


def _bound(seconds: float, prop: str) -> None:
    """A replay that hangs (a kernel that never finishes) says so and exits 1."""
    from properties import watchdog

    if seconds and seconds > 0:

        def hung(label, limit):
            print(f"\nFAIL {prop}: no verdict within {limit:g} s: a hung kernel? (--timeout)\n\nstill fails (exit 1)", flush=True)

        watchdog.start(seconds, hung, backstop=False, exit_code=1)
        watchdog.arm("repro")


def _unbound() -> None:
    from properties import watchdog

    watchdog.disarm()
    watchdog.stop()


def _known_finding_note(failure, params: dict) -> bool:
    """Name the known finding (./known_findings.toml) that describes each
    failed check, if any; True when every failed check has one."""
    from ground import findings
    from properties import CHECKS

    path = "known_findings.toml"
    if not os.path.isfile(path):
        return False
    try:
        entries = findings.load(path, checks=CHECKS)
    except findings.FindingsError as e:
        print(f"  ({e})")
        return False
    verdict = findings.judge(failure.property, failure.case, failure.failures, entry=params.get("entry"), params=params, entries=entries)
    for x, f in verdict.excused:
        print(f"  {x.check}: known finding {f.id} ({f.source}): {f.reason}")
    for x in verdict.unexcused:
        print(f"  {x.check}: no known finding describes it")
    return not verdict.unexcused


# ----------------------------------------------------------------- report
def report(args) -> int:
    if not os.path.isdir(args.dir):
        raise Usage(f"{args.dir}: not a directory")
    from reports import shards

    run = shards.latest_run(args.dir)
    if run is None or not any((Path(args.dir) / shards.SHARDS / run).glob("*.jsonl")):
        raise Usage(
            f"{args.dir}: no shards (no {shards.SHARDS}/<run>/*.jsonl): not the report dir of a run, or its shards were removed; "
            "run pytest with --report-dir=DIR first"
        )
    records, warnings = shards.read(args.dir, run)
    if not records:  # a report of "0 examples" would read as a run that ran nothing and passed
        for w in warnings:
            print(f"warning: {w}", file=sys.stderr)
        why = "every line skipped, as the warnings say" if warnings else "the shards are empty"
        raise Usage(f"{args.dir}: no readable record in {shards.SHARDS}/{run}/*.jsonl ({why}); no report written")
    import reports
    from reports.casefile import display_path

    summary, paths = reports.build(args.dir, run)
    for w in summary["warnings"]:
        print(f"warning: {w}", file=sys.stderr)
    failing = len(summary["failures"])
    print(f"{summary['run']['examples']} examples, {summary['tests']['total']} tests, {failing} failing case(s)")
    for p in paths.values():
        print(display_path(p))
    return 0


def facts(args) -> int:
    from ground.case import facts_markdown
    from ground.coverage import AXES

    print("## Case facts\n\n" + facts_markdown())
    print("## Coverage axes\n\n| axis | values a complete run reaches | what |\n|---|---|---|")
    for a in AXES:
        print(f"| {a.name} | {' / '.join(a.values)} | {a.doc} |")
    return 0


def _mutants(args) -> int:
    from conformance.kill import cli as mutants

    return mutants.main(args)


def _gate(args) -> int:
    from conformance import gate

    return gate.run(args)


def _pairs(args) -> int:
    from conformance import pairs

    return pairs.run(args)


def main(argv: Optional[List[str]] = None) -> int:
    args = parser().parse_args(argv)
    try:
        return {"repro": repro, "report": report, "facts": facts, "mutants": _mutants, "gate": _gate, "pairs": _pairs}[args.command](args)
    except Usage as e:
        print(f"sdpa-conformance {args.command}: error: {e}", file=sys.stderr)
        return 2
    except Unsupported as refusal:  # the refusal policy (ground.outcome.REFUSALS): the message, its exit status (2)
        print(f"sdpa-conformance {args.command}: error: {refusal.usage()}", file=sys.stderr)
        return refusal.exit_status


if __name__ == "__main__":
    sys.exit(main())
