"""The mutant harness: how many planted bugs the suite's properties catch.

    python -m conformance.kill_rate --jobs 16                    (a CUDA GPU; the defaults)
    python -m conformance.kill_rate --only control --examples-scale 10   (a long control search, over every job)
    python -m conformance.kill_rate --family sm90                (a Hopper GPU: the sm90 catalogue)
    python -m conformance.kill_rate --list                       (any machine)
    python -m conformance.kill_rate --plan --only control --profile nightly --examples-scale 0.4   (any machine)

Every mutant of ``kernels.mutants.MUTANTS`` (and the control: no rewrites)
runs in its own process on ``PreparedAdapter(rewrites=...)`` (with more
--jobs than mutants, in several: ``run_all`` splits its searches, and the
record is the one a single process gives); with
``--family sm90`` (or ``all``) those of ``kernels.mutants_sm90`` and their
control on ``Sm90Adapter(rewrites=...)`` (SM 9.0 only), searched by the sm90
kinds of ``conformance.kill_sm90`` (each family's mutants by its own kinds).
Without --family the SM80 catalogue runs, as it always has. For each
property kind of ``KINDS`` in order (derived from the test matrix,
properties.matrix; the mutant's expected killer first), a
Hypothesis search over the strategies the pytest tests use (flavors
restricted to the templates the mutant rewrites) runs until a property
fails; Hypothesis shrinks the failing case within its own count limits
(and the cap). A
kind is searched as a ci run tests it: one search per stratum of the
mutant's flavors (``search_strata``), each drawing exactly the kind's
example count (``planned_examples``: the profile's count for the kind times
its transform values, ``gate_tests``, times ``--examples-scale``; past
``PART_EXAMPLES``, in parts of seeds of their own). Example
counts, never time, decide how much is searched, so a verdict means the same
on every machine and at every ``--jobs``. ``--budget-s`` is only a safety
cap on a mutant's wall clock (searching and shrinking); the table says per
kind how many examples were drawn of how many planned.
Verdicts (``VERDICTS``; docs/mutants.md says why each counts or not): a
kill is ``killed`` (a PropertyFailure) or ``error`` (an exception the
mutated kernels raised, a CUDA error that left the context dead, a death
by a signal other than SIGKILL launching a Case that kills a fresh process
on the mutant's kernels again: conformance.inflight, or an example past the
hang bound, ``--hang-s`` (default ``HANG_S``), whose Case runs past ``HANG_REPLAY_S`` there), each
replayed on the pristine kernels before it counts (``pristine_fails`` when
it fails there too: a failure of the suite, which makes the run invalid);
``survived``: every search drew its planned count and nothing failed. No
verdict, never counted: ``harness_error`` (raised by the suite's own code,
a refusal, a worker that exited), ``infra`` (out of memory, a worker killed
by SIGKILL or by a crash or hang that did not recur: retried once in a fresh process), ``compile_error`` (the
rewritten source failed to load or compile before any launch), ``short`` (a
search drew fewer examples than planned: its property rejected the rest),
``incomplete`` (the cap stopped a search, or a worker outlived it),
``stale`` (a rewrite does not match exactly once). Known findings (the
file's, ground.findings) excuse exactly the failures they describe, as in a
pytest run: a property whose failed checks are all excused returns an
``xfailed`` observation; any other failure of the same example kills. The
control must survive everything, or the run is invalid (its rate is not
given). Kill rate = (killed + error) / (killed + error + survived).
A refusal (``ground.outcome.Unsupported``) is no verdict, never a kill: one
of scope "case" rejects its example (not counted as drawn), any other
stops the search unjudged (a harness error), unless a failure was found
already (then it rejects the example shrinking tried).
Writes mutants.json and mutants.md to --report-dir, and mutants.partial.json
as each record is made: ``--resume`` keeps its verdicts (a run of the same
options, kernels, findings and suite revision the last call did not finish,
e.g. cut by a time limit) and runs the rest.
Exit: 0 every control survived, every mutant has a verdict or is stale, and
kill rate >= --goal; 1 otherwise (or --list finds a stale mutant); 2 bad
arguments, no CUDA GPU, or (sm90 selected) no Hopper GPU.
"""

from __future__ import annotations

import argparse
import math
import os
import signal
import sys
import time
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

from conformance import family_select
from conformance.kill.catalogue import CAP_S, CONTROLS, DEFAULT_REPORT_DIR, FINDINGS_FILE, HARNESS, catalogue_of
from conformance.kill.failures import NON_VERDICTS
from conformance.kill.kinds import KIND_NAMES, KINDS, change_line
from conformance.kill.processes import NO_VERDICT_WHY, mutant_units, run_all, share_plan
from conformance.kill.replay import HANG_REPLAY_S, HANG_S
from conformance.kill.resume import (
    PARTIAL,
    RESUME_ENV,
    Usage,
    file_digest,
    resumed_records,
    suite_revision,
    unit_kept,
    unit_label,
    write_partial,
    write_reports,
)
from conformance.kill.search import planned_by_kind
from conformance.kill.tally import exit_code, invalidated, kill_rate_line, run_problem, tally
from conformance.kill_sm90 import PENDING
from ground.families import DEFAULT_FAMILY, FAMILY_NAMES
from ground.outcome import Unsupported
from ground.tables import NO_GPU
from kernels.mutants import Mutant


def add_arguments(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    p.add_argument(
        "--plan",
        action="store_true",
        help="print what the run would search, launching nothing (no GPU needed): per mutant and control its searches (kind x stratum x part) "
        "and the examples they plan, per kind for the controls",
    )
    p.add_argument(
        "--list", action="store_true", help="print the catalogue and check every rewrite applies exactly once (no GPU needed); exit 1 if one is stale"
    )
    p.add_argument(
        "--only",
        metavar="NAME[,NAME]",
        default=None,
        help="run only these mutants (of the --family catalogues); each family's control always runs, and naming it (control, control_sm90) runs it alone",
    )
    p.add_argument(
        "--family",
        choices=FAMILY_NAMES + ("all",),
        default=None,
        help="kernel families whose catalogue runs, each with its control: sm80 (kernels/mutants.py), sm90 (kernels/mutants_sm90.py: "
        "a Hopper GPU) or all (default: sm80; --list: all)",
    )
    p.add_argument("--properties", metavar="KIND[,KIND]", default=None, help=f"property kinds to search, in this order: {', '.join(KIND_NAMES)} (default: all)")
    p.add_argument(
        "--jobs",
        type=int,
        default=os.cpu_count() or 1,
        help="processes at once: one per mutant; with more jobs than mutants (e.g. --only control), and once no mutant waits, the spare "
        "ones split the mutants' searches (kinds and strata) between them, with the verdict one process would give (default: the number of CPUs)",
    )
    p.add_argument("--profile", default="ci", help="Hypothesis profile of strategies.profiles (default: ci)")
    p.add_argument(
        "--examples-scale",
        type=float,
        default=1.0,
        metavar="X",
        help="multiply every kind's example count per stratum (the profile's count for the kind times its transform values) by X, "
        "e.g. 10 for a long control search (default: 1)",
    )
    p.add_argument(
        "--budget-s",
        type=float,
        default=CAP_S,
        metavar="S",
        help=f"safety cap on one mutant's wall clock, searching and shrinking; example counts, not time, decide what is searched, and a search "
        f"the cap stops is 'incomplete', never 'survived' (default: {CAP_S:g})",
    )
    p.add_argument(
        "--max-shrinks",
        type=int,
        default=None,
        metavar="N",
        help="shrink candidates a search may check after its first failure (default: Hypothesis' own limits). The verdict, its killer and "
        "the examples drawn are fixed when the failure is found; shrinking only makes its case smaller, and a mutant whose every "
        "candidate recompiles spends seconds on each",
    )
    p.add_argument(
        "--hang-s",
        type=float,
        default=HANG_S,
        metavar="S",
        help=f"an example still running after S seconds ends its worker, and its Case is replayed alone in a fresh process: a hang "
        f"(an error of the mutant) only if it runs past {HANG_REPLAY_S:g} s there too and the pristine kernels pass it; a slow example "
        f"that finishes there is searched again. So a bound below the slowest example costs time, not a wrong verdict (default: {HANG_S:g})",
    )
    p.add_argument("--goal", type=float, default=0.9, help="kill rate for exit status 0 (default: 0.9)")
    p.add_argument("--report-dir", default=DEFAULT_REPORT_DIR, help=f"where mutants.json/.md and the worker logs go (default: ./{DEFAULT_REPORT_DIR})")
    p.add_argument("--known-findings", metavar="FILE", default=None, help=f"known findings file (default: {FINDINGS_FILE} of the repository, if present)")
    p.add_argument(
        "--kernels-source",
        metavar="PATH",
        default=None,
        help="cudnn-frontend python/ tree to mutate instead of the installed wheel (--list checks the rewrites against it)",
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help=f"keep the verdicts in REPORT_DIR/{PARTIAL} (written as each record is made) of an earlier call with the same options, "
        "and run the rest: a catalogue run over several time-limited calls",
    )
    return p


def _names(raw: Optional[str], known: Sequence[str], what: str) -> Optional[List[str]]:
    if raw is None:
        return None
    names = [n.strip() for n in raw.split(",") if n.strip()]
    bad = [n for n in names if n not in known]
    if bad or not names:
        raise Usage(f"{what} {bad[0] if bad else raw!r}: not one of {', '.join(known)}")
    return names


def selected_families(family: Optional[str], *, listing: bool = False) -> Tuple[str, ...]:
    """The families --family names; not given: the SM80 family for a run (the
    measured catalogue; the sm90 one needs a Hopper GPU and is asked for by
    name), every family for --list (which needs no GPU)."""
    if family is None:
        return FAMILY_NAMES if listing else (DEFAULT_FAMILY,)
    return FAMILY_NAMES if family == "all" else (family,)


def _validate(args) -> dict:
    from strategies.profiles import MAX_EXAMPLES, profile_name

    for option, value, ok, expected in (
        ("--jobs", args.jobs, args.jobs >= 1, "a number of processes >= 1"),
        ("--budget-s", args.budget_s, 0 < args.budget_s < math.inf, "a finite number of seconds > 0"),
        ("--max-shrinks", args.max_shrinks, args.max_shrinks is None or args.max_shrinks >= 0, "a count >= 0"),
        ("--hang-s", args.hang_s, 0 < args.hang_s < math.inf, "a finite number of seconds > 0"),
        ("--examples-scale", args.examples_scale, 0 < args.examples_scale < math.inf, "a finite factor > 0"),
        ("--goal", args.goal, 0 <= args.goal <= 1, "a kill rate from 0 to 1"),
    ):
        if not ok:  # nan fails every comparison
            raise Usage(f"{option} {value:g}: expected {expected}")
    try:
        profile = profile_name(args.profile)
    except ValueError:
        raise Usage(f"--profile {args.profile!r}: not a registered Hypothesis profile (ours: {', '.join(MAX_EXAMPLES)})") from None
    families = selected_families(args.family, listing=args.list)
    catalogue = tuple(m for f in families for m in catalogue_of(f))
    asked = {n.strip() for n in (args.only or "").split(",")}
    elsewhere = [m for f in FAMILY_NAMES if f not in families for m in (CONTROLS[f],) + catalogue_of(f) if m.name in asked]
    if elsewhere:
        raise Usage(f"--only: {elsewhere[0].name} is an {elsewhere[0].family} mutant: run it with --family {elsewhere[0].family} (or all)")
    # A control's name selects no mutant: each family's control always runs, so --only control runs it alone.
    only = _names(args.only, [CONTROLS[f].name for f in families] + [m.name for m in catalogue], "--only: mutant")
    pending = [n.strip() for n in (args.properties or "").split(",") if n.strip() in PENDING]
    if pending:
        raise Usage(f"--properties: {pending[0]} cannot run yet: {PENDING[pending[0]]}")
    kinds = _names(args.properties, KIND_NAMES, "--properties: kind") or list(KIND_NAMES)
    unsearched = [f for f in families if not any(k.family_name == f for k in KINDS if k.name in kinds)]
    if unsearched and not args.list:  # its mutants would all "survive" a search of nothing
        raise Usage(f"--properties: no kind of the {unsearched[0]} family (its kinds: {', '.join(k.name for k in KINDS if k.family_name == unsearched[0])})")
    found = args.known_findings or next(
        (str(p) for p in (Path.cwd() / FINDINGS_FILE, Path(__file__).resolve().parents[2] / FINDINGS_FILE) if p.is_file()), None
    )
    if found:
        from ground import findings
        from properties import CHECKS

        try:
            findings.load(found, checks=CHECKS)
        except findings.FindingsError as e:
            raise Usage(str(e)) from None
    v = {
        "families": families,
        "controls": [CONTROLS[f] for f in families],
        "mutants": [m for m in catalogue if only is None or m.name in only],
        "kinds": kinds,
        "explicit": args.properties is not None,
        "profile": profile,
        "findings": found,
    }
    # A mutant (or control) with no search would "survive" a search of nothing.
    empty = [] if args.list else [m for m in v["controls"] + v["mutants"] if not mutant_units(m, v)]
    if empty:
        raise Usage(
            f"{empty[0].name} would search nothing: no kind it is searched by among {','.join(kinds)} runs under --profile {profile} "
            "(a mutant with no search would survive it): name other --properties or another --profile"
        )
    return v


def list_catalogue(mutants: Sequence[Mutant], out=print) -> int:
    from kernels.source import StaleMutant, check_rewrites

    stale = 0
    for m in mutants:
        try:
            check_rewrites(m.rewrites)
            state = "ok"
        except StaleMutant as e:
            state, stale = f"STALE: {e}", stale + 1
        waits = HARNESS[m.family].listing
        pending = f" (killer not runnable yet: {PENDING[m.expected_killer]})" if m.expected_killer in PENDING else ""
        out(f"{m.name:<32} {m.bug_class:<18} {'/'.join(m.targets):<11} killer {m.expected_killer:<27} {state}{waits}{pending}\n    {change_line(m)}")
    out(f"{len(mutants)} mutants, {stale} stale")
    return 1 if stale else 0


def plan_catalogue(v: dict, scale: float, out=print) -> int:
    """What a run of ``v`` (``_validate``'s) at ``--examples-scale scale`` searches:
    each control's and mutant's units and planned examples (a kill ends its
    mutant's search at its first failure, so a mutant's count is its most)."""
    total = 0
    for m in v["controls"] + v["mutants"]:
        units = mutant_units(m, v | {"examples_scale": scale})
        per_kind = planned_by_kind(units, v["profile"], scale)
        n = sum(per_kind.values())
        total += n
        kinds = f": {', '.join(f'{k} {c:,}' for k, c in per_kind.items())}" if m.bug_class == "control" else ""
        out(f"{m.name:<32} {len(units):>4} searches {n:>8,} examples{kinds}")
    out(f"{len(v['controls']) + len(v['mutants'])} runs, profile {v['profile']} x{scale:g}: at most {total:,} examples (each control's all drawn)")
    return 0


def _interrupted(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def main(args) -> int:
    try:
        v = _validate(args)
        if args.kernels_source:  # before --list too: it checks the rewrites against this tree's files
            from kernels.source import KernelSourceError, use_kernels_source

            try:
                use_kernels_source(args.kernels_source)
            except KernelSourceError as e:
                raise Usage(f"--kernels-source: {e}") from None
        if args.list:
            return list_catalogue(v["mutants"])
        if args.plan:
            return plan_catalogue(v, args.examples_scale)
        import torch

        capability = torch.cuda.get_device_capability() if torch.cuda.is_available() else None
        why = next((w for f in v["families"] if HARNESS[f].gpu_refusal and (w := HARNESS[f].gpu_refusal(capability))), None)
        if why:
            raise Unsupported.machine(f"{why} (--list works anywhere)")
        if capability is None:
            raise Unsupported.machine(NO_GPU + " (--list works anywhere)")
    except Usage as e:
        print(f"sdpa-conformance mutants: error: {e}", file=sys.stderr)
        return 2
    except Unsupported as refusal:  # the refusal policy (ground.outcome.REFUSALS): its exit status
        print(f"sdpa-conformance mutants: error: {refusal.usage()}", file=sys.stderr)
        return refusal.exit_status
    from kernels.environment import detect

    env, start = detect(), time.time()
    log_dir = Path(args.report_dir) / "mutants-logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    opts = {
        "profile": v["profile"],
        "budget_s": args.budget_s,
        "max_shrinks": args.max_shrinks,
        "hang_s": args.hang_s,
        "examples_scale": args.examples_scale,
        "kinds": v["kinds"],
        "explicit": v["explicit"],
        "findings": v["findings"],
        "kernels_source": args.kernels_source,
        "log_dir": str(log_dir),
        "threads": max(1, (os.cpu_count() or 1) // args.jobs),
    }
    controls = v["controls"]
    print(
        f"{len(v['mutants'])} mutants + {len(controls)} control{'s' if len(controls) > 1 else ''} (family {', '.join(v['families'])}), {args.jobs} jobs, profile {v['profile']} example counts x{args.examples_scale:g}, "
        f"cap {args.budget_s:g} s each{'' if args.max_shrinks is None else f', at most {args.max_shrinks} shrinks a search'}"
        f"{'' if args.hang_s == HANG_S else f', hang bound {args.hang_s:g} s'}, kinds {', '.join(v['kinds'])}"
    )
    everyone = controls + v["mutants"]
    run = {
        "families": list(v["families"]),
        "profile": v["profile"],
        "examples_scale": args.examples_scale,
        "budget_s": args.budget_s,
        "max_shrinks": args.max_shrinks,
        "hang_s": args.hang_s,
        "jobs": args.jobs,
        "goal": args.goal,
        "kinds": v["kinds"],
        "explicit": v["explicit"],
        "known_findings": v["findings"],
        "findings_digest": file_digest(v["findings"]),
        "kernels_source": str(Path(args.kernels_source).expanduser().resolve()) if args.kernels_source else None,
        "environment": {name: os.environ.get(name) for name in RESUME_ENV},
        "suite": suite_revision(),
        "gpu": env.gpu,
        # What the compiled code runs on: a resumed search may go on on another card of the same arch.
        "arch": env.live_arch,
        # The families' modes ("native sm90"), not the SM80 code's alone.
        "mode": family_select.mode(tuple(v["families"]), env.capability) if v["families"] != (DEFAULT_FAMILY,) else env.mode,
        "versions": env.versions,
    }
    partial = Path(args.report_dir) / PARTIAL
    try:
        kept, before_s, done = resumed_records(partial, run, everyone, opts) if args.resume else ({}, 0.0, {})
    except Usage as e:
        print(f"sdpa-conformance mutants: error: {e}", file=sys.stderr)
        return 2
    todo = [m for m in everyone if m.name not in kept]
    if args.resume:
        print(
            f"resumed: {len(kept)} records kept from {partial} ({before_s:g} s before), {len(todo)} to run"
            + (f", {sum(map(len, done.values()))} of their searches (units) done" if done else "")
        )
    _, plan = share_plan(todo, opts, args.jobs)
    split = {name: n for name, n in plan.items() if n > 1}
    if split:
        print("split over processes: " + ", ".join(f"{name} {n}" for name, n in split.items()))
    made, plans = dict(kept), {m.name: mutant_units(m, opts) for m in todo}
    searched = {m.name: {"change": change_line(m), "rewrites": m.digest, "done": {}} for m in todo}
    for name, mine in done.items():
        searched[name]["done"] = {str(i): {"unit": unit_label(plans[name][i]), "result": r} for i, r in mine.items()}

    def save() -> None:
        write_partial(partial, run, made, before_s + time.time() - start, {n: u for n, u in searched.items() if n not in made and u["done"]})

    def keep(rec: dict) -> None:
        made[rec["name"]] = rec
        save()

    def unit(name: str, i: int, res: dict) -> None:
        if unit_kept(res):  # searched to its end, or failed with a verdict: not searched again
            searched[name]["done"][str(i)] = {"unit": unit_label(plans[name][i]), "result": res}
            save()

    save()

    # A time limit's SIGTERM ends the run as Ctrl-C does, so multiprocessing stops its daemon workers
    # on the way out instead of leaving them searching on the GPU (the partial report is already written).
    signal.signal(signal.SIGTERM, _interrupted)
    try:
        new = {r["name"]: r for r in run_all(todo, opts, args.jobs, on_record=keep, done_units=done, on_unit=unit)}
    except KeyboardInterrupt as e:  # Ctrl-C or a time limit: what finished is kept, and how to go on is said
        print(
            f"sdpa-conformance mutants: interrupted ({e or 'Ctrl-C'}): {len(made)} of {len(everyone)} records kept in {partial}; "
            "the same options with --resume go on from there",
            file=sys.stderr,
        )
        return 130
    records = [
        kept[m.name] | {"resumed": True} if m.name in kept else new[m.name] | ({"resumed_units": len(done[m.name])} if done.get(m.name) else {})
        for m in everyone
    ]
    control_records, mutant_records = records[: len(controls)], records[len(controls) :]
    problem = run_problem(control_records, mutant_records)
    valid = invalidated if problem else dict  # an invalid run gives no rate: it would measure the suite's failure
    t = valid(tally(mutant_records))
    run.update(
        shares=split,  # processes per mutant searched by more than one at the start (run_all)
        wall_s=round(before_s + time.time() - start, 1),  # every call's, with --resume
        resumed=len(kept),
    )
    doc = {"run": run, "control": control_records[0], "controls": control_records, "mutants": mutant_records, "tally": t, "valid": problem is None}
    if len(v["families"]) > 1:  # each family's own rate too: one catalogue's power says nothing of the other's
        doc["tally_by_family"] = {f: valid(tally([r for r in mutant_records if r.get("family", DEFAULT_FAMILY) == f])) for f in v["families"]}
    js, md = write_reports(doc, args.report_dir)
    if problem:
        print(f"INVALID RUN: {problem}", file=sys.stderr)
        sys.stderr.flush()
    print(kill_rate_line(t, args.goal))
    for f, ft in (doc.get("tally_by_family") or {}).items():
        print(f"  {f}: {kill_rate_line(ft, args.goal)}")
    for verdict in NON_VERDICTS:
        names = [r["name"] for r in mutant_records if r["verdict"] == verdict]
        if names and verdict != "pristine_fails":  # those the INVALID line names
            why = NO_VERDICT_WHY.get(verdict, "no verdict, not counted")
            print(f"{len(names)} mutant(s) {verdict} ({why}; logs: {log_dir}): {', '.join(names)}", file=sys.stderr)
    print(f"{js}\n{md}")
    return exit_code(t, control_records, args.goal)


def parser() -> argparse.ArgumentParser:
    return add_arguments(argparse.ArgumentParser(prog="sdpa-conformance mutants", description=__doc__.split("\n\n")[0]))
