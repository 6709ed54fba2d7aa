"""The verdicts of a run (the mutant harness): the tally and kill rate, what
makes a run invalid (a control that did not survive, a kill that fails on
the pristine kernels too), the exit status, the markdown table."""

from __future__ import annotations

from typing import Optional, Sequence

from conformance.kill.failures import COUNTED, KILLS, NON_VERDICTS, VERDICTS
from conformance.kill.processes import drew, pristine_text
from ground.case import Case


def tally(mutant_records: Sequence[dict]) -> dict:
    """Counts and the kill rate: (killed + error) / (killed + error + survived);
    every other verdict (``NON_VERDICTS``) is excluded, counted apart."""
    n = {v: sum(r["verdict"] == v for r in mutant_records) for v in VERDICTS}
    counted = sum(n[v] for v in COUNTED)
    rate = sum(n[v] for v in KILLS) / counted if counted else None
    return {**n, "total": len(mutant_records), "counted": counted, "excluded": len(mutant_records) - counted, "kill_rate": rate}


def invalidated(t: dict) -> dict:
    """A tally of an invalid run: its counts, no rate (it would measure the suite's failure)."""
    return t | {"kill_rate": None, "invalid": True}


def control_problem(control: Optional[dict]) -> Optional[str]:
    """Why the run is invalid because of the control (None: it survived)."""
    if control is None or control["verdict"] == "survived":
        return None
    verdict, error = control["verdict"], control.get("error")
    if verdict == "incomplete":
        return (
            f"the control's search was stopped by the cap (--budget-s) before its example counts ({error or drew(control)}): "
            "raise --budget-s (or lower --examples-scale), the control must fully survive"
        )
    if verdict == "short":
        return (
            f"the control's search drew fewer examples than planned ({drew(control)}): a property rejects most of its draws, the control must draw its counts"
        )
    if verdict == "harness_error":
        return f"the control's worker failed in the harness ({error or control.get('summary')}), so mutant verdicts mean nothing"
    if verdict == "infra":
        return f"the control's search met a fault of the machine ({error or control.get('summary')}): run it again (fewer --jobs)"
    what = f"failed {control.get('killed_by')}" if control.get("killed_by") else verdict
    case = f" on {control.get('case_text')}" if control.get("case_text") else ""
    detail = control.get("summary") or error or ""
    return f"the control (no rewrites) {what}{case}: {detail} -- the suite is not green on the installed kernels (fix it or add a known finding), so mutant verdicts mean nothing"


def controls_problem(controls) -> Optional[str]:
    """Why the run is invalid because of a control (a record or a list of
    them, one per family; None: every one survived)."""
    if controls is None or isinstance(controls, dict):
        return control_problem(controls)
    problems = [(c["name"], control_problem(c)) for c in controls]
    bad = [f"{name}: {p}" if len(controls) > 1 else p for name, p in problems if p]
    return "; ".join(bad) or None


def run_problem(controls, mutants: Sequence[dict] = ()) -> Optional[str]:
    """Why the run is invalid (None: it is not): a control that did not
    survive, or a mutant's kill that fails on the pristine kernels too (a
    failure of the suite, named with its Case)."""
    bad = [controls_problem(controls)] + [
        f"{r['name']}: its kill ({r.get('killed_by')}) fails on the pristine kernels too, on {pristine_text(r)} -- "
        "a failure of the suite, not the mutant's (fix it or add a known finding)"
        for r in mutants
        if r["verdict"] == "pristine_fails"
    ]
    return "; ".join(p for p in bad if p) or None


def exit_code(t: dict, control, goal: float) -> int:
    """``control``: the control's record, or the list of the families' controls."""
    # A mutant with no verdict (stale aside: a catalogue entry to fix, never run) fails the run: on
    # another machine, or with the suite's bug fixed, it might have been killed or survived.
    # No mutant run (--only control): the goal has nothing to measure.
    rate_ok = t["total"] == 0 or (t["kill_rate"] is not None and t["kill_rate"] >= goal)
    ok = controls_problem(control) is None and not any(t[v] for v in NON_VERDICTS if v != "stale") and rate_ok
    return 0 if ok else 1


def kill_rate_line(t: dict, goal: float) -> str:
    """The rate, its formula with the counts, and every excluded verdict's count."""
    if t["total"] == 0:
        return "kill rate: n/a (no mutant run: the control alone)"
    excluded = "excluded (no verdict): " + ", ".join(f"{t.get(v, 0)} {v}" for v in NON_VERDICTS)
    if t.get("invalid"):
        return f"kill rate: n/a (INVALID RUN); {excluded}"
    formula = f"(killed {t['killed']} + error {t['error']}) / (killed {t['killed']} + error {t['error']} + survived {t['survived']})"
    if t["kill_rate"] is None:
        return f"kill rate: n/a = {formula}: no mutant to count; {excluded}"
    return f"kill rate: {t['kill_rate']:.0%} = {formula} = {t['killed'] + t['error']}/{t['counted']}; {excluded}; goal {goal:.0%}"


COLUMNS = (
    "mutant",
    "bug class",
    "targets",
    "verdict",
    "killed by",
    "expected killer",
    "first failure (s)",
    "shrunk case size",
    "shrunk case",
    "examples drawn / planned",
)


def render_markdown(doc: dict) -> str:
    run, t = doc["run"], doc["tally"]
    shares = run.get("shares") or {}
    split = f" (searches split over processes: {', '.join(f'{name} {n}' for name, n in shares.items())})" if shares else ""
    split += f", resumed: {run['resumed']} records from earlier calls (--resume)" if run.get("resumed") else ""
    controls = doc.get("controls") or ([doc["control"]] if doc.get("control") else [])
    shrinks = "" if run.get("max_shrinks") is None else f", at most {run['max_shrinks']} shrinks a search"
    problem = run_problem(controls, doc["mutants"])
    valid = invalidated if problem else dict
    lines = [
        "# Mutants",
        "",
        f"profile `{run['profile']}`, example counts x{run.get('examples_scale', 1):g} (per kind and stratum: the verdicts mean the same on "
        f"every machine), cap {run['budget_s']:g} s per mutant{shrinks}, {run['jobs']} jobs{split}, {run['wall_s']} s wall; {run.get('gpu') or 'no GPU'} ({run.get('mode') or '-'})",
        "",
    ]
    lines += [f"**INVALID RUN**: {problem}", ""] if problem else []  # first: no rate stands above it
    lines += [f"**{kill_rate_line(valid(t), run['goal'])}**", ""]
    lines += [f"- {f}: {kill_rate_line(valid(ft), run['goal'])}" for f, ft in (doc.get("tally_by_family") or {}).items()]
    lines += [""] if doc.get("tally_by_family") else []
    lines += ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for r in controls + doc["mutants"]:
        case = r.get("first_case") if r["verdict"] == "error" else r.get("case")
        text = Case.from_dict(case).describe() if case else (r.get("error") or "-")
        text += " (shrinking stopped by the cap or --max-shrinks)" if r.get("shrink_capped") else ""
        if r.get("first_verdict") not in (None, r.get("mutant_verdict", r["verdict"])):  # the first failing example failed otherwise than the shrunk one
            text += f" (first failure: {r['first_verdict']}, {(r.get('first_summary') or '')[:120]})"
        cells = (
            r["name"],
            r.get("bug_class", "-"),
            "/".join(r.get("targets") or []) or "-",
            r["verdict"],
            r.get("killed_by") or "-",
            r.get("expected_killer") or "-",
            r.get("first_failure_s") or "-",
            r.get("case_size") if r.get("case_size") is not None else "-",
            text,
            drew(r),
        )
        lines.append("| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines) + "\n"
