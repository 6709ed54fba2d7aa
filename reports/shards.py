"""Shard files: one JSON-lines file per process, <report-dir>/shards/<run>/<worker>-<pid>.jsonl.

Every process of a run (the xdist controller ``main`` and each worker, a
restarted worker too: the pid is in the name) appends only to its own shard,
so nothing is shared while the run goes on and the merge reads each record
exactly once. Runs get their own directory, so a stale shard of an earlier
run, or one of a concurrent run sharing the report dir, is never merged in.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import List, Optional, Tuple

SHARDS = "shards"
CASES = "cases"
SESSION_MARK = '"kind": "session"'
STALE_SECONDS = 24 * 3600


def new_run_id() -> str:
    """Sorts by start time (second resolution), unique per controller process."""
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"


def shard_path(report_dir, run_id: str, worker: str) -> Path:
    return Path(report_dir) / SHARDS / run_id / f"{worker}-{os.getpid()}.jsonl"


def prune(report_dir, keep: str) -> None:
    """Remove earlier runs' shards: the finished ones (their reports are
    rendered) and any older than a day (crashed). A run without a session
    record yet may still be going on in the same report dir: kept."""
    for d in _run_dirs(report_dir):
        if d.name == keep:
            continue
        files = list(d.glob("*.jsonl"))
        finished = any(SESSION_MARK in p.read_text(encoding="utf-8", errors="replace") for p in files if p.name.startswith("main-"))
        newest = max((p.stat().st_mtime for p in files), default=0.0)
        if finished or time.time() - newest > STALE_SECONDS:
            shutil.rmtree(d, ignore_errors=True)


def _run_dirs(report_dir) -> List[Path]:
    d = Path(report_dir) / SHARDS
    return sorted(p for p in d.iterdir() if p.is_dir()) if d.is_dir() else []


def latest_run(report_dir) -> Optional[str]:
    runs = _run_dirs(report_dir)
    return runs[-1].name if runs else None


# The fields the merge and the renderers index on a record of each kind
# (reports.summary, reports.render), and the types of those they read into.
REQUIRED = {"begin": ("property", "case"), "obs": ("property", "case"), "failure": ("property", "case"), "test": ("nodeid", "outcome")}
_OBJECT, _STRING, _NUMBER = (dict, "an object"), (str, "a string"), ((int, float), "a number")
TYPES = {k: _OBJECT for k in ("case", "params", "context", "environment", "tests", "ratios", "compile", "notes", "phases", "hypothesis")}
TYPES.update({k: _STRING for k in ("property", "nodeid", "outcome")}, **{k: _NUMBER for k in ("t", "t_end", "seconds", "wall_seconds")})


def problem(rec) -> Optional[str]:
    """Why a parsed line is no record the merge can read, or None."""
    if not isinstance(rec, dict):
        return f"a JSON {type(rec).__name__}, not a record (an object)"
    kind = rec.get("kind")
    missing = [k for k in REQUIRED.get(kind, ()) if rec.get(k) is None] if isinstance(kind, str) else []
    if missing:
        return f"a record of kind {kind!r} without {missing[0]!r}"
    for k, (types, expected) in TYPES.items():
        if rec.get(k) is not None and (not isinstance(rec[k], types) or isinstance(rec[k], bool)):
            return f"field {k!r}: expected {expected}, got {json.dumps(rec[k])[:80]}"
    return None


def read(report_dir, run_id: Optional[str] = None) -> Tuple[List[dict], List[str]]:
    """All records of one run's shards (default: the latest run), each tagged
    with its shard name, plus warnings: a line that is no readable record (a
    process killed mid-write leaves a partial last line) is skipped, named."""
    records, warnings = [], []
    run_id = run_id or latest_run(report_dir)
    d = Path(report_dir) / SHARDS / run_id if run_id else None
    for p in sorted(d.glob("*.jsonl")) if d is not None and d.is_dir() else []:
        try:
            lines = p.read_bytes().split(b"\n")
        except OSError as e:
            warnings.append(f"shard {run_id}/{p.name}: cannot read it ({e.strerror}); skipped")
            continue
        for n, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line.decode("utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError):
                warnings.append(f"shard {run_id}/{p.name} line {n}: unreadable record skipped (process killed while writing?)")
                continue
            why = problem(rec)
            if why:
                warnings.append(f"shard {run_id}/{p.name} line {n}: {why}; record skipped")
                continue
            rec["shard"] = p.stem
            records.append(rec)
    return records, warnings


def as_read(record: dict, shard_path) -> dict:
    """``record`` as ``read`` gives it back once written to the shard at ``shard_path``
    (JSON's types, tagged with its shard's name): for a writer that holds what it read."""
    from properties.recorder import jsonable

    return dict(json.loads(json.dumps(record, default=jsonable)), shard=Path(shard_path).stem)
