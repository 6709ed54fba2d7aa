"""Merge the shards' records into one run summary (the content of report.json).

Who writes what (so that nothing is counted twice):
- ``begin`` / ``obs``: the process that ran the example (recorder).
- ``failure``: the process that ran the failing test (one per failing
  property check it raised; the case file is already written).
- ``collected``: each process that collected tests (xdist workers all
  collect the same items: merged as a mapping, not summed).
- ``finding``: any process where a known finding matched (merged as a set).
- ``test`` and ``session``: only the controller, which sees every test
  report exactly once (its own, or the one forwarded by a worker).
"""

from __future__ import annotations

import fnmatch
import math
from collections import Counter, defaultdict
from typing import Dict, List, Optional

from conformance.ground.case import Case, CaseFileError

from .coverage import coverage

OUTCOMES = ("passed", "failed", "xfailed", "xpassed", "skipped", "error")
SLOWEST = 10
NO_PROPERTY = "(tests without a property)"


def _stats(values: List[float]) -> dict:
    """Distribution of error/bound ratios (NaN, a broken check, counts as over the bound)."""
    ordered = sorted(v for v in values if not math.isnan(v))
    out = {"count": len(values), "over_bound": sum(1 for v in values if not v <= 1.0)}
    if ordered:
        q = lambda p: ordered[min(len(ordered) - 1, int(p * len(ordered)))]  # noqa: E731
        out.update(p50=q(0.5), p99=q(0.99), max=ordered[-1])
    return out


def _case(d: dict) -> Optional[Case]:
    try:
        return Case.from_dict(d)
    except (CaseFileError, TypeError):
        return None


def merge(records: List[dict], warnings: Optional[List[str]] = None) -> dict:
    warnings = list(warnings or [])
    session = next((r for r in reversed(records) if r.get("kind") == "session"), {})
    props: Dict[str, dict] = defaultdict(lambda: {"examples": 0, "passed": 0, "failed": 0, "xfailed": 0, "ratios": defaultdict(list), "compile": Counter(), "seconds": 0.0})
    test_props: Dict[str, set] = defaultdict(set)
    last_begin: Dict[str, dict] = {}
    begun, obs_list, collected, matched = [], [], {}, set()
    tests: Dict[str, dict] = {}
    failures: Dict[tuple, dict] = {}
    times = []
    keys_seen, compiled = set(), Counter()  # compile-key digests (kernels.prepared notes): seen / compiled how often
    for r in records:
        kind = r.get("kind")
        if kind == "begin":
            p = props[r["property"]]
            p["examples"] += 1
            test_props[r.get("test")].add(r["property"])
            last_begin[r.get("test")] = r
            case = _case(r["case"])
            if case is not None:
                begun.append((r["property"], case))
            times.append(r.get("t", 0.0))
        elif kind == "obs":
            p = props[r["property"]]
            if r.get("outcome") in ("passed", "failed", "xfailed"):
                p[r["outcome"]] += 1
            for quantity, ratio in (r.get("ratios") or {}).items():
                p["ratios"][quantity].append(float(ratio))
            for k, v in (r.get("compile") or {}).items():
                if isinstance(v, (int, float)) and not isinstance(v, bool):
                    p["compile"][k] += v
            p["seconds"] += r.get("seconds") or 0.0
            key = (r.get("notes") or {}).get("compile_key")
            if key:
                keys_seen.add(key)
                compiled[key] += int((r.get("compile") or {}).get("misses") or 0)
            obs_list.append(r)
            if r.get("finding"):
                matched.add(r["finding"])
        elif kind == "collected":
            collected.update(r.get("tests", {}))
        elif kind == "finding":
            matched.add(r["id"])
        elif kind == "test":
            tests[r["nodeid"]] = r  # the controller writes one per test; last wins if re-run
        elif kind == "failure":
            failures[(r.get("nodeid"), r.get("case_file"))] = r

    # A failed test with begun examples but no failure record: its worker died
    # mid-example (segfault, abort); the last begun case is the suspect.
    unrecorded = []
    recorded_tests = {f.get("nodeid") for f in failures.values()}
    for nodeid, t in tests.items():
        if t["outcome"] in ("failed", "error") and nodeid not in recorded_tests and nodeid in last_begin:
            unrecorded.append({"nodeid": nodeid, "begin": last_begin[nodeid], "message": t.get("message", "")})

    # Tests per property: the properties a test began, else its collected guess.
    per_prop_tests: Dict[str, Counter] = defaultdict(Counter)
    totals = Counter()
    for nodeid, t in tests.items():
        totals[t["outcome"]] += 1
        names = test_props.get(nodeid) or ({collected[nodeid]} if collected.get(nodeid) else {NO_PROPERTY})
        for name in names:
            per_prop_tests[name][t["outcome"]] += 1

    properties = {}
    for name in sorted(set(props) | set(per_prop_tests), key=lambda n: (n == NO_PROPERTY, n)):
        p = props[name]
        verdicts = p["passed"] + p["failed"] + p["xfailed"]
        properties[name] = {
            "examples": p["examples"],
            "passed": p["passed"],
            "failed": p["failed"],
            "xfailed": p["xfailed"],
            # Begun but never observed: the check raised something other than
            # its verdict (adapter error, crash, interrupt).
            "errors": max(0, p["examples"] - verdicts),
            "tests": {o: per_prop_tests[name][o] for o in OUTCOMES},
            "ratios": {q: _stats(v) for q, v in sorted(p["ratios"].items())},
            "compile": _compile(p["compile"], p["seconds"]),
            "seconds": p["seconds"],
        }

    examples = sum(p["examples"] for p in properties.values())
    wall = session.get("wall_seconds")
    if wall is None and times:
        wall = max(times) - min(times)
    slowest = sorted(obs_list, key=lambda r: -(r.get("seconds") or 0.0))[:SLOWEST]
    xfailed = [r for r in obs_list if r.get("outcome") == "xfailed" and r.get("finding")]
    first_xfailed = {}
    for r in xfailed:
        first_xfailed.setdefault(r["finding"], r)
    findings = _findings(session, matched, begun, collected, tests, xfailed, first_xfailed, warnings)
    return {
        "schema": 1,
        "environment": session.get("environment", {}),
        "run": {
            "wall_seconds": wall,
            "examples": examples,
            "examples_per_minute": (60.0 * examples / wall) if wall else None,
            "exitstatus": session.get("exitstatus"),
            "shards": sorted({r["shard"] for r in records if "shard" in r}),
            "complete": bool(session),
        },
        "tests": {o: totals[o] for o in OUTCOMES} | {"total": sum(totals.values())},
        "properties": properties,
        "coverage": coverage(c for _, c in begun),
        "compile": _compile(sum((p["compile"] for p in props.values()), Counter()), sum(p["seconds"] for p in props.values()))
        | {"keys": len(keys_seen), "compiled_keys": sum(1 for n in compiled.values() if n), "repeat_compiles": sum(max(0, n - 1) for n in compiled.values()),
           "cache": session.get("environment", {}).get("compile_cache_note")},
        "slowest": [
            {"property": r["property"], "test": r.get("test"), "seconds": r.get("seconds"), "outcome": r.get("outcome"), "compile_seconds": (r.get("compile") or {}).get("seconds"), "case": r["case"]}
            for r in slowest
        ],
        "failures": sorted(failures.values(), key=lambda f: (f.get("finding") is not None, f.get("property") or "", f.get("nodeid") or "")),
        "unrecorded_failures": unrecorded,
        "findings": findings,
        "warnings": warnings,
        # Raw ratios for the plots (not written to report.json).
        "_ratios": {name: dict(p["ratios"]) for name, p in props.items()},
        # First xfailed example of each known finding (build() writes its case file).
        "_first_xfailed": first_xfailed,
    }


def _compile(c: Counter, example_seconds: float = 0.0) -> dict:
    """Compile counters; ``share``: compile seconds over the examples' seconds
    (the worker time the examples took, compiles included)."""
    seconds = c.get("seconds", 0.0)
    return {"compiles": c.get("misses", 0), "hits": c.get("hits", 0), "memo_hits": c.get("memo_hits", 0), "thd_lru_misses": c.get("thd_lru_misses", 0),
            "modules": c.get("modules", 0), "seconds": seconds, "share": seconds / example_seconds if example_seconds else None}


def _findings(session: dict, matched: set, begun: list, collected: dict, tests: dict, xfailed: list, first_xfailed: dict, warnings: list) -> dict:
    """Loaded entries, which matched, and the ones to warn about.

    Warned: a node-id entry that selected no test of a module the run
    collected (renamed or removed test), and an example entry whose selected
    examples ran without the discrepancy showing (the kernel may be fixed).
    An entry with nothing of its to look at (its module not collected, none
    of its examples drawn: a subset run, a CPU-only run) is listed as not
    exercised, not warned.
    """
    from conformance.ground.findings import FindingsError, parse

    entries = session.get("findings", [])
    try:
        loaded = parse({"finding": [{k: v for k, v in e.items() if k != "kind"} for e in entries]}, "session findings")
    except FindingsError as e:
        warnings.append(f"known findings recorded by the run cannot be read back: {e}")
        loaded = []
    by_test = defaultdict(Counter)  # finding id -> test outcomes of the tests it marked
    for t in tests.values():
        for fid in t.get("findings", []):
            by_test[fid][t["outcome"]] += 1
    by_example = Counter(r["finding"] for r in xfailed)
    out, unmatched = [], []
    for f in loaded:
        if f.nodeid:  # the collected tests of the module(s) its node id names
            module = f.nodeid.split("::", 1)[0]
            selected = sum(1 for n in collected if n.split("::", 1)[0] == module or fnmatch.fnmatchcase(n.split("::", 1)[0], module))
        else:
            selected = sum(1 for prop, c in begun if f.matches(prop, c))
        status = "matched" if f.id in matched else ("not exercised" if selected == 0 else "unmatched")
        out.append(f.to_dict() | {
            "status": status,
            "xfailed_tests": by_test[f.id]["xfailed"],
            "xpassed_tests": by_test[f.id]["xpassed"],
            "xfailed_examples": by_example[f.id],
            "selected": selected,  # collected tests of its module / examples it selects
        })
        if status == "unmatched":
            why = (f"selects none of the {selected} collected tests of its module (renamed or removed?)" if f.nodeid
                   else f"{selected} selected example(s) ran and none failed (fixed? then remove the entry)")
            msg = f"known finding {f.id!r} ({f.describe()}) matched nothing in this run: {why}"
            unmatched.append({"id": f.id, "message": msg})
            warnings.append(msg)
    # Findings declared in code (e.g. the contract table's "contract:<rule>@<entry>")
    # reach the report only through their xfailed examples.
    for fid in sorted(set(by_example) - {f.id for f in loaded}):
        reason = (first_xfailed[fid].get("notes") or {}).get("summary") or "(declared in code, not in the findings file)"
        out.append({"id": fid, "kind": "declared in code", "reason": reason, "status": "matched",
                    "xfailed_tests": 0, "xpassed_tests": 0, "xfailed_examples": by_example[fid], "selected": None})
    return {"file": session.get("findings_file"), "entries": out, "unmatched": unmatched}
