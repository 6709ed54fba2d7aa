"""``--resume`` (the mutant harness): the partial report written as each
record is made, what of it a later call of the same options keeps, and the
reports a run writes."""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path
from typing import Dict, Optional, Sequence, Tuple

from conformance.kill.processes import mutant_units
from conformance.kill.tally import render_markdown
from kernels.mutants import Mutant


class Usage(Exception):
    """Exit 2 with this message."""


PARTIAL = "mutants.partial.json"
# What must be equal for a record of an earlier call to stand in a run: the searches it made
# (options, selection, environment that the strategies and reference read) and what judged
# them (the kernels' source and versions, the findings file's content, the suite's revision).
RESUME_KEYS = (
    "families",
    "profile",
    "examples_scale",
    "kinds",
    "explicit",
    "jobs",
    "budget_s",
    "max_shrinks",
    "hang_s",
    "known_findings",
    "findings_digest",
    "kernels_source",
    "environment",
    "suite",
    "arch",  # not the card's name: the same sm_XX artifacts, and example counts (not speed) set a verdict
    "versions",
)
RESUME_ENV = ("SDPA_GEOMETRY", "SDPA_PLANT_REFERENCE_BUG")  # read by the strategies and the reference in every worker
# The verdicts a record keeps (each the same on every machine); the others are searched again.
KEPT = ("killed", "error", "compile_error", "survived", "short", "stale")
UNIT_KEPT = ("killed", "error", "compile_error")  # a unit's failure kept; any other failing unit is searched again


def unit_kept(res: dict) -> bool:
    """A unit's result stands in a later call: searched to its end (not cut) and, if it failed, with a verdict of ``UNIT_KEPT``."""
    return not res["cut"] and (res["failure"] is None or res["failure"].get("verdict") in UNIT_KEPT)


def file_digest(path) -> Optional[str]:
    """sha256 of the file's bytes (None: no file)."""
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16] if path else None
    except OSError:
        return None


def suite_revision(root: Optional[Path] = None) -> Optional[str]:
    """A digest of the suite's packages as they are on disk: every file there
    that git tracks or would track, committed or not, by path and bytes.
    Content, not a commit: the same code on another checkout (another commit,
    or the same changes left uncommitted) gives the same digest, so a search
    resumes wherever its code is the same. None without git."""
    from properties.watchdog import SUITE_PACKAGES

    root = Path(__file__).resolve().parents[2] if root is None else Path(root)
    packages = [Path(p).name for p in SUITE_PACKAGES]
    try:
        done = subprocess.run(
            ["git", "--no-optional-locks", "-C", str(root), "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", *packages],
            capture_output=True,
            text=True,
            timeout=60,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if done.returncode:
        return None
    digest = hashlib.sha256()
    for name in sorted(set(done.stdout.split("\0")) - {""}):
        if (root / name).is_file():  # a tracked file deleted on disk is gone from the code
            digest.update(name.encode() + b"\0" + (root / name).read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def resumed_records(
    partial: Path, run: dict, mutants: Sequence[Mutant], opts: Optional[dict] = None
) -> Tuple[Dict[str, dict], float, Dict[str, Dict[int, dict]]]:
    """What this run keeps of ``partial`` (an earlier call's
    mutants.partial.json): the records, by name; the wall seconds the calls
    before took; and, of a mutant with no record kept, its units searched to
    their count or to a kept failure (``unit_kept``): name -> unit index ->
    result (``opts``: this run's, whose ``mutant_units`` each must still be).
    Usage for a missing or unreadable file, or one made with other options
    (``RESUME_KEYS``, named); a record is kept when its verdict is one
    (``KEPT``) and its mutant's rewrites are the catalogue's now (every one,
    in full: ``Mutant.digest``)."""
    try:
        doc = json.loads(partial.read_text())
        before, records, saved = doc["run"], doc["records"], doc.get("units", {})
    except FileNotFoundError:
        raise Usage(f"--resume: no {partial} (a run writes it as its records are made)") from None
    except (ValueError, KeyError, TypeError) as e:
        raise Usage(f"--resume: {partial} is not a partial report ({type(e).__name__}: {e})") from None
    differ = [k for k in RESUME_KEYS if json.dumps(before.get(k), default=str) != json.dumps(run.get(k), default=str)]
    if differ:
        k = differ[0]
        raise Usage(f"--resume: {partial} was made with {k}={before.get(k)!r}, this run has {run.get(k)!r}: run the same options, or drop --resume")
    current = {m.name: m.digest for m in mutants}
    kept = {n: r for n, r in records.items() if n in current and r.get("verdict") in KEPT and r.get("rewrites") == current[n]}
    units: Dict[str, Dict[int, dict]] = {}
    for m in mutants:
        mine = saved.get(m.name) or {}
        if m.name in kept or not mine or opts is None or mine.get("rewrites") != current[m.name]:
            continue
        plan = [unit_label(u) for u in mutant_units(m, opts)]
        units[m.name] = {int(i): r["result"] for i, r in mine["done"].items() if int(i) < len(plan) and r["unit"] == plan[int(i)] and unit_kept(r["result"])}
    return kept, float(doc.get("wall_s") or 0.0), units


def unit_label(unit) -> list:
    """A unit as the partial report names it: [kind name, stratum or None], then [part, parts] where its stratum has parts."""
    return [unit.kind.name, list(unit.stratum) if unit.stratum else None] + ([unit.part, unit.parts] if unit.parts > 1 else [])


def write_partial(path: Path, run: dict, records: Dict[str, dict], wall_s: float, units: Optional[dict] = None) -> None:
    """The records made so far, with the options they were made under, and
    the units searched of mutants with no record yet (atomically: a call cut
    mid-write leaves the last one)."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"run": run, "wall_s": round(wall_s, 1), "records": records, "units": units or {}}, indent=1, default=str) + "\n")
    tmp.replace(path)


def write_reports(doc: dict, report_dir) -> Tuple[Path, Path]:
    d = Path(report_dir)
    d.mkdir(parents=True, exist_ok=True)
    js, md = d / "mutants.json", d / "mutants.md"
    js.write_text(json.dumps(doc, indent=1, default=str) + "\n")
    md.write_text(render_markdown(doc))
    return js, md
