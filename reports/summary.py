"""Merge the shards' records into one run summary (the content of report.json).

Who writes what (so that nothing is counted twice):
- ``begin`` / ``obs``: the process that ran the example (recorder).
- ``failure``: the process that ran the failing test (one per failing
  property check it raised; the case file is already written).
- ``collected``: each process that collected tests (xdist workers all
  collect the same items: merged as a mapping, not summed).
- known findings: each ``obs`` lists the findings it exercised and the ones
  that excused a failed check; ground.findings.statuses turns
  them into reproduced / stale / not exercised (the rule the plugin enforces).
- ``steered``: the process that drew a Case an in-force crash finding
  selects (conformance.testgen): one per steered example; a crash finding's
  status is ``steered`` with their count.
- ``test`` and ``session``: only the controller, which sees every test
  report exactly once (its own, or the one forwarded by a worker).

Matrix examples: the examples of property tests (tests with a ``property``
marker: the test matrix) up to their test's first failed example. What a test
runs after that is Hypothesis searching on and shrinking; the records carry
no phase, so a test's record order (one process runs it) tells them apart.
The suite's own tests (power tests plant bugs on purpose) are no matrix
examples. The run's examples, examples per minute and the error/bound
statistics count matrix examples; coverage and the known findings count
every example of the property tests (a shrink attempt exercised its facts).
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from typing import Dict, List, Optional

from ground.case import Case, CaseFileError
from ground.families import DEFAULT_FAMILY
from ground.outcome import DELIBERATE_COMPILES

from .coverage import coverage

OUTCOMES = ("passed", "failed", "xfailed", "xpassed", "skipped", "error")
SLOWEST = 10
DTYPE_LABELS = {"float16": "fp16", "bfloat16": "bf16"}
NO_PROPERTY = "(tests without a property)"


RATIO_BUCKETS = ("passed", "excused", "failed")  # a matrix example's outcome: passed, xfailed (a known finding), failed


def quantile(ordered: List[float], p: float) -> float:
    """Nearest rank: the smallest value with at least ``p`` of the values at
    or below it. Over fewer than 100 values p99 is their max: the count shown
    beside every quantile says so."""
    rank = max(1, math.ceil(round(p * len(ordered), 9)))  # round: 0.99 * n in binary floating point
    return ordered[min(rank, len(ordered)) - 1]


def _stats(values: List[float]) -> dict:
    """Distribution of error/bound ratios (NaN, a broken check, counts as over the bound)."""
    ordered = sorted(v for v in values if not math.isnan(v))
    out = {"count": len(values), "over_bound": sum(1 for v in values if not v <= 1.0)}
    if ordered:
        out.update(p50=quantile(ordered, 0.5), p99=quantile(ordered, 0.99), max=ordered[-1])
    return out


def _ratio_rows(buckets: Dict[str, Dict[str, list]]) -> dict:
    """Per quantity (or "quantity dtype"): the passed matrix examples'
    distribution, what a correct kernel uses of its bound; beside it the count
    and max of the excused and the failed ones, which a quantile would mix in."""
    rows = {}
    for label in sorted(set().union(*(b.keys() for b in buckets.values()))):
        rows[label] = _stats(buckets["passed"].get(label, []))
        for k in RATIO_BUCKETS[1:]:
            values = buckets[k].get(label, [])
            finite = [v for v in values if not math.isnan(v)]
            rows[label][k] = {"count": len(values), "over_bound": sum(1 for v in values if not v <= 1.0), "max": max(finite) if finite else None}
    return rows


def worker_id(shard: str) -> str:
    """A shard's worker (``gw0``, ``main``): its name less the pid, so a
    restarted worker, a new process, is the same worker (reports.shards)."""
    return shard.rsplit("-", 1)[0]


def _case(d: dict) -> Optional[Case]:
    try:
        return Case.from_dict(d)
    except (CaseFileError, TypeError):
        return None


def merge(records: List[dict], warnings: Optional[List[str]] = None) -> dict:
    warnings = list(warnings or [])
    session = next((r for r in reversed(records) if r.get("kind") == "session"), {})
    props: Dict[str, dict] = defaultdict(
        lambda: {
            "examples": 0,
            "passed": 0,
            "failed": 0,
            "shrinking": 0,
            "expected": 0,
            "xfailed": 0,
            "ratios": {b: defaultdict(list) for b in RATIO_BUCKETS},
            "by_dtype": {b: defaultdict(list) for b in RATIO_BUCKETS},
            "left_out": Counter(),  # observations outside the matrix examples, by why
            "compile": Counter(),
            "seconds": 0.0,
            "phases": Counter(),
        }
    )
    failed_obs: Counter = Counter()  # (test, property) -> failed examples, classified once the test outcomes are known
    test_props: Dict[str, set] = defaultdict(set)
    last_begin: Dict[str, dict] = {}
    begun, obs_list, collected, steered = [], [], {}, []
    after_failure = set()  # (shard, test) that recorded a failed example: what it runs next is shrinking
    tagged = []  # (record, after a failure in its test) of each begin / obs, judged once the tests' markers are known
    tests: Dict[str, dict] = {}
    failures: Dict[tuple, dict] = {}
    times, faults = [], []
    keys_seen = set()  # compile-key digests (the adapters' notes)
    by_family: Counter = Counter()  # matrix examples per kernel family
    compiling: Dict[str, list] = defaultdict(list)  # key -> (worker, property, misses) of each example that compiled under it
    deliberate, unkeyed, deliberate_seconds = Counter(), Counter(), 0.0  # property -> compiles made on purpose / of examples naming no key
    workers: Dict[str, dict] = defaultdict(
        lambda: {"examples": 0, "example_seconds": 0.0, "phases": Counter(), "first": None, "last": None, "loaded": None, "collected": None, **_no_rejections()}
    )
    per_test: Dict[str, dict] = defaultdict(lambda: {"examples": 0, "example_seconds": 0.0, "first": None, "last": None, "shard": None, **_no_rejections()})
    for r in records:
        kind = r.get("kind")
        if kind in ("begin", "obs"):
            tagged.append((r, (r.get("shard"), r.get("test")) in after_failure))
        if kind == "begin":
            p = props[r["property"]]
            p["examples"] += 1
            test_props[r.get("test")].add(r["property"])
            last_begin[r.get("test")] = r
            times.append(r.get("t", 0.0))
            w = workers[r.get("shard", "?")]
            w["first"] = r.get("t") if w["first"] is None else w["first"]
            pt = per_test[r.get("test") or "?"]
            pt["first"], pt["shard"] = (r.get("t") if pt["first"] is None else pt["first"]), r.get("shard", "?")
        elif kind == "obs":
            p = props[r["property"]]
            if r.get("outcome") in ("passed", "xfailed"):
                p[r["outcome"]] += 1
            elif r.get("outcome") == "failed":
                failed_obs[(r.get("test"), r["property"])] += 1
                after_failure.add((r.get("shard"), r.get("test")))
            for k, v in (r.get("compile") or {}).items():
                if isinstance(v, (int, float)) and not isinstance(v, bool):
                    p["compile"][k] += v
            p["seconds"] += r.get("seconds") or 0.0
            p["phases"].update(r.get("phases") or {})
            w = workers[r.get("shard", "?")]
            w["examples"] += 1
            w["example_seconds"] += r.get("seconds") or 0.0
            w["phases"].update(r.get("phases") or {})
            w["last"] = r.get("t_end") or w["last"]
            pt = per_test[r.get("test") or "?"]
            pt["examples"] += 1
            pt["example_seconds"] += r.get("seconds") or 0.0
            for tally in (w, pt):  # the draws of the examples given a verdict (recorder.drawn): part of "between"
                tally["draw_seconds"] += r.get("draw_seconds") or 0.0
            pt["last"] = r.get("t_end") or pt["last"]
            notes = r.get("notes") or {}
            key, misses = notes.get("compile_key"), int((r.get("compile") or {}).get("misses") or 0)
            if key:
                keys_seen.add(key)
            if notes.get(DELIBERATE_COMPILES) and misses:
                deliberate[r["property"]] += misses
                deliberate_seconds += (r.get("compile") or {}).get("seconds") or 0.0
            elif key:
                if misses:
                    compiling[key].append((r.get("shard", "?"), r["property"], misses))
            elif misses:
                unkeyed[r["property"]] += misses
            obs_list.append(r)
        elif kind == "rejected":  # an example drawn and refused without a verdict (recorder.rejected)
            for tally in (workers[r.get("shard", "?")], per_test[r.get("test") or "?"]):
                tally["rejected"] += 1
                tally["rejected_seconds"] += r.get("seconds") or 0.0
        elif kind == "collected":
            collected.update(r.get("tests", {}))
            w = workers[r.get("shard", "?")]
            w["loaded"], w["collected"] = r.get("t_loaded"), r.get("t")
        elif kind == "steered":
            steered.append(r)
        elif kind == "test":
            tests[r["nodeid"]] = r  # the controller writes one per test; last wins if re-run
        elif kind == "failure":
            failures[(r.get("nodeid"), r.get("case_file"))] = r
        elif kind == "fatal":  # a process ended by a lost CUDA context, a hang or a test timeout (conformance.isolation)
            faults.append({k: r.get(k) for k in ("fault", "nodeid", "message", "repro", "worker", "pid")})

    _classify_failed(props, failed_obs, tests, failures)

    # Matrix examples (the module docstring): what the run's examples and
    # error/bound statistics count; coverage counts the property tests' examples.
    examples = 0  # matrix examples begun
    for r, after in tagged:
        in_matrix = bool(collected.get(r.get("test")))
        if r["kind"] == "begin":
            case = _case(r["case"])
            if in_matrix and case is not None:
                begun.append((r["property"], case))
            if in_matrix and not after:
                examples += 1
                by_family[(r.get("case") or {}).get("family") or DEFAULT_FAMILY] += 1
            continue
        p = props[r["property"]]
        if not in_matrix or after:
            p["left_out"]["after a failure in the test" if in_matrix else "outside the matrix"] += 1
            continue
        bucket = {"passed": "passed", "xfailed": "excused", "failed": "failed"}.get(r.get("outcome"))
        if bucket is None:
            continue
        dtype = DTYPE_LABELS.get((r.get("case") or {}).get("dtype"), "?")
        # Another family's ratios keep their own rows ("o fp16 sm90"): its error model is its own.
        fam = (r.get("case") or {}).get("family") or DEFAULT_FAMILY
        label = f"{dtype}" if fam == DEFAULT_FAMILY else f"{dtype} {fam}"
        for quantity, ratio in (r.get("ratios") or {}).items():
            p["ratios"][bucket][quantity].append(float(ratio))
            p["by_dtype"][bucket][f"{quantity} {label}"].append(float(ratio))

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
        verdicts = p["passed"] + p["failed"] + p["shrinking"] + p["expected"] + p["xfailed"]
        properties[name] = {
            "examples": p["examples"],
            "passed": p["passed"],
            # The failing cases the run reports (one per failure of a failing test).
            "failed": p["failed"],
            # Further failing examples Hypothesis tried while shrinking those.
            "shrinking": p["shrinking"],
            # Failures a passing test expected (power tests: a property run
            # against a planted bug inside pytest.raises).
            "expected": p["expected"],
            "xfailed": p["xfailed"],
            # Begun but never observed: the check raised something other than
            # its verdict (adapter error, crash, interrupt).
            "errors": max(0, p["examples"] - verdicts),
            "tests": {o: per_prop_tests[name][o] for o in OUTCOMES},
            # Over the matrix examples: passed ones' distribution, excused and failed ones' count and max.
            "ratios": _ratio_rows(p["ratios"]),
            "ratios_by_dtype": _ratio_rows(p["by_dtype"]),  # "o fp16", "lse bf16", ...
            # Observations the statistics leave out: the suite's own tests, a failing test's shrinking.
            "ratios_left_out": dict(sorted(p["left_out"].items())),
            "compile": _compile(p["compile"], p["seconds"]),
            "seconds": p["seconds"],
            "phases": _phases(p["phases"], p["seconds"]),
        }

    wall = session.get("wall_seconds")
    if wall is None and times:
        wall = max(times) - min(times)
    slowest = sorted(obs_list, key=lambda r: -(r.get("seconds") or 0.0))[:SLOWEST]
    first_xfailed = {}  # finding id -> the first example it excused
    for r in obs_list:
        for fid in r.get("findings") or ():
            first_xfailed.setdefault(fid, r)
    steers = Counter(r.get("finding") for r in steered if collected.get(r.get("test")))  # property tests only, like the observations
    findings = _findings(
        session, [o for o in obs_list if collected.get(o.get("test"))], warnings, steers
    )  # property tests only (findings.property_test_observations)
    return {
        "schema": 1,
        "environment": session.get("environment", {}),
        "run": {
            "wall_seconds": wall,
            # Matrix examples (the module docstring); examples_begun: every begun example.
            "examples": examples,
            "examples_begun": sum(p["examples"] for p in properties.values()),
            "examples_by_family": dict(sorted(by_family.items())),
            "examples_per_minute": (60.0 * examples / wall) if wall else None,
            "exitstatus": session.get("exitstatus"),
            "shards": sorted({r["shard"] for r in records if "shard" in r}),
            "complete": bool(session),
        },
        "tests": {o: totals[o] for o in OUTCOMES} | {"total": sum(totals.values())},
        "skips": skips_by_reason(tests),
        "properties": properties,
        "coverage": coverage((c for _, c in begun), session.get("environment", {}).get("adapter")),
        "compile": (comp := _compile(sum((p["compile"] for p in props.values()), Counter()), sum(p["seconds"] for p in props.values())))
        | _accounting(
            comp, keys_seen, compiling, unkeyed, deliberate, deliberate_seconds, len({worker_id(s) for s, w in workers.items() if w["examples"]}), wall
        )
        | {"cache": session.get("environment", {}).get("compile_cache_note")},
        "profile": _profile(workers, props, session.get("start")),
        "slowest_tests": _slowest_tests(per_test),
        "slowest": [
            {
                "property": r["property"],
                "test": r.get("test"),
                "seconds": r.get("seconds"),
                "outcome": r.get("outcome"),
                "compile_seconds": (r.get("compile") or {}).get("seconds"),
                "case": r["case"],
            }
            for r in slowest
        ],
        "failures": sorted(failures.values(), key=lambda f: (f.get("property") or "", f.get("nodeid") or "")),
        "unrecorded_failures": unrecorded,
        "faults": faults,
        "findings": findings,
        "warnings": warnings,
        # Raw ratios for the plots, per "quantity dtype": the passed matrix examples' (not written to report.json).
        "_ratios": {name: dict(p["by_dtype"]["passed"]) for name, p in props.items()},
        # First xfailed example of each known finding (build() writes its case file).
        "_first_xfailed": first_xfailed,
    }


def _classify_failed(props, failed_obs: Counter, tests: Dict[str, dict], failures: Dict[tuple, dict]) -> None:
    """Split each test's failed examples by what the test made of them: in a
    passing test they were expected (a planted bug the test wants caught);
    in a test xfailed as a known finding, known; in a failing test, one per
    failure it reports is the run's failure (the shrunk case Hypothesis
    replays last) and the rest are examples tried while shrinking."""
    reported = Counter((f.get("nodeid"), f.get("property")) for f in failures.values() if not f.get("finding"))
    for (test, prop), n in failed_obs.items():
        p, outcome = props[prop], (tests.get(test) or {}).get("outcome")
        if outcome in ("passed", "xpassed"):
            p["expected"] += n
        elif outcome == "xfailed":
            p["xfailed"] += n
        else:  # failed, error, or no test record (an interrupted run): its failures count
            k = min(n, max(1, reported[(test, prop)]))
            p["failed"] += k
            p["shrinking"] += n - k


def _phases(c: Counter, example_seconds: float) -> dict:
    """Seconds per phase (ground.phases) and the rest of the
    examples' seconds ("other": property code between the phases)."""
    out = {k: round(v, 3) for k, v in sorted(c.items(), key=lambda kv: -kv[1])}
    if example_seconds:
        out["other"] = round(max(0.0, example_seconds - sum(c.values())), 3)
    return out


# The run's compiles, told apart (tests/test_compile_cache.py pins each count):
# - deliberate: an example that compiles on purpose outside what the run shares
#   (its notes say why under ground.outcome.DELIBERATE_COMPILES);
#   a warm run makes them too, and they are no run key's work.
# - artifacts: under one compile key, the most compiles one example made (a
#   backward example compiles a chain of kernels, its forward's too): what the
#   key had to compile. Every further compile under the key is a repeat, by cause:
#   several workers (the key's first compiles in a second process: a race on an
#   empty cache) or one worker (a process compiling what it compiled before: a
#   memo or its cache entry lost). An artifact two keys share (the forward of a
#   backward chain and a forward example) counts under each key that compiled it.
# - unkeyed: compiles of examples that name no compile key (a call whose compiles
#   no key can name, e.g. a wrapper's where its requests could not be observed):
#   each counted as an artifact, as nothing tells their repeats apart.
REPEAT_CLASSES = ("several workers", "one worker")
REPEAT_TOP = 10
FLOOR_DEFINITION = (
    "(distinct artifacts + compiles of examples naming no key) x mean seconds per compile / workers; "
    "the keys floor: compiled keys x mean seconds per compile / workers, one artifact per key as measured before; "
    "mean seconds per compile: the compile seconds over the compiles, deliberate ones left out; workers: worker ids (gw0, ...) "
    "that ran examples, a restarted worker once"
)


def _accounting(
    comp: dict, keys_seen: set, compiling: Dict[str, list], unkeyed: Counter, deliberate: Counter, deliberate_seconds: float, workers: int, wall
) -> dict:
    """The compile section's counts (the comment above says what each is)."""
    artifacts, by_class, top = 0, Counter(), []
    for key, hits in compiling.items():
        per_worker: Dict[str, list] = defaultdict(list)
        for w, _, m in hits:
            per_worker[w].append(m)
        most = max(m for _, _, m in hits)
        artifacts += most
        race = sum(max(ms) for ms in per_worker.values()) - most
        lost = sum(sum(ms) - max(ms) for ms in per_worker.values())
        by_class[REPEAT_CLASSES[0]] += race
        by_class[REPEAT_CLASSES[1]] += lost
        if race or lost:
            top.append(
                {
                    "key": key,
                    "compiles": sum(m for _, _, m in hits),
                    "artifacts": most,
                    "examples": len(hits),
                    "workers": len(per_worker),
                    "properties": sorted({p for _, p, _ in hits}),
                    "class": REPEAT_CLASSES[0] if race >= lost else REPEAT_CLASSES[1],
                }
            )
    top.sort(key=lambda t: (-(t["compiles"] - t["artifacts"]), t["key"]))
    compiled_keys = len(compiling)
    # Over the compiles the floors count: a deliberate compile (a cold cache on purpose) is slower than most.
    counted = comp.get("compiles", 0) - sum(deliberate.values())
    per = (comp["seconds"] - deliberate_seconds) / counted if counted > 0 else 0.0
    return {
        "keys": len(keys_seen),
        "compiled_keys": compiled_keys,
        "artifacts": artifacts,
        "unkeyed_compiles": sum(unkeyed.values()),
        "unkeyed": dict(sorted(unkeyed.items())),
        "repeat_compiles": sum(by_class.values()),
        "repeats": {"by_class": {c: by_class[c] for c in REPEAT_CLASSES}, "top": top[:REPEAT_TOP]},
        "deliberate": {"compiles": sum(deliberate.values()), "seconds": deliberate_seconds, "by_property": dict(sorted(deliberate.items()))},
        "floor": _floor(per, artifacts + sum(unkeyed.values()), workers, wall) | {"definition": FLOOR_DEFINITION},
        "keys_floor": _floor(per, compiled_keys, workers, wall),
    }


def _no_rejections() -> dict:
    return {"rejected": 0, "rejected_seconds": 0.0, "draw_seconds": 0.0}


def _slowest_tests(per_test: Dict[str, dict]) -> list:
    """The SLOWEST tests by span (first begun example to last verdict, on
    their worker), with their examples' seconds and the rest ("between
    examples"): what one worker's tail is made of, for balancing a run."""
    rows = []
    for test, t in per_test.items():
        if t["first"] is None or t["last"] is None or not t["examples"]:
            continue
        span = t["last"] - t["first"]
        rows.append(
            {
                "test": test,
                "worker": t["shard"],
                "examples": t["examples"],
                "span_seconds": round(span, 3),
                "example_seconds": round(t["example_seconds"], 3),
                "between_examples": round(span - t["example_seconds"], 3),
                "rejected": t["rejected"],
                "rejected_seconds": round(t["rejected_seconds"], 3),
                "draw_seconds": round(t["draw_seconds"], 3),
            }
        )
    return sorted(rows, key=lambda r: (-r["span_seconds"], r["test"]))[:SLOWEST]


def _since(t: Optional[float], start: Optional[float]) -> Optional[float]:
    return round(t - start, 3) if t is not None and start is not None else None


def _profile(workers: Dict[str, dict], props: Dict[str, dict], start: Optional[float] = None) -> dict:
    """Where the worker time went: per process (shard), its span from its
    first begun example to its last verdict, the examples' seconds split by
    phase, and the rest of the span ("between examples": Hypothesis
    generating and shrinking, pytest, fixtures, idle at the end; of it,
    the draws of the judged examples and the rejected examples: drawn,
    refused, no verdict). Its timeline, in seconds since the run began
    (``start``): when it loaded the plugin (spawned, Python and pytest up),
    collected, began its first example and gave its last verdict; what the
    run's wall holds besides the spans."""
    rows = []
    for shard, w in sorted(workers.items()):
        if not w["examples"]:
            continue
        span = (w["last"] - w["first"]) if (w["first"] is not None and w["last"] is not None) else None
        rows.append(
            {
                "worker": shard,
                "timeline": {k: _since(w[k], start) for k in ("loaded", "collected", "first", "last")},
                "examples": w["examples"],
                "span_seconds": round(span, 3) if span is not None else None,
                "example_seconds": round(w["example_seconds"], 3),
                "phases": _phases(w["phases"], w["example_seconds"]),
                "between_examples": round(span - w["example_seconds"], 3) if span is not None else None,
                "rejected": w["rejected"],
                "rejected_seconds": round(w["rejected_seconds"], 3),
                "draw_seconds": round(w["draw_seconds"], 3),
            }
        )
    total = Counter()
    for w in workers.values():
        total.update(w["phases"])
    example_seconds = sum(w["example_seconds"] for w in workers.values())
    return {
        "workers": rows,
        "phases": _phases(total, example_seconds),
        "example_seconds": round(example_seconds, 3),
        "span_seconds": round(sum(r["span_seconds"] or 0.0 for r in rows), 3),
        "rejected": sum(r["rejected"] for r in rows),
        "rejected_seconds": round(sum(r["rejected_seconds"] for r in rows), 3),
        "draw_seconds": round(sum(r["draw_seconds"] for r in rows), 3),
    }


def skips_by_reason(tests: Dict[str, dict]) -> List[dict]:
    """The run's skipped tests grouped by their reason, most first: a skip is
    a verdict the run did not give, so every one is shown with why."""
    groups: Dict[str, List[str]] = defaultdict(list)
    for nodeid, t in tests.items():
        if t.get("outcome") == "skipped":
            groups[t.get("message") or "(no reason recorded)"].append(nodeid)
    return [{"reason": r, "count": len(ids), "tests": sorted(ids)} for r, ids in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0]))]


def _floor(per_compile: float, artifacts: int, workers: int, wall: Optional[float]) -> dict:
    """The least wall time a run that must compile ``artifacts`` can take on
    ``workers`` processes (artifacts x ``per_compile`` seconds / workers), and
    the run's wall time over it (a cold run's overhead beyond compiling)."""
    seconds = artifacts * per_compile / workers if workers else 0.0
    return {"seconds": seconds, "artifacts": artifacts, "per_compile": per_compile, "workers": workers, "ratio": (wall / seconds) if seconds and wall else None}


def _compile(c: Counter, example_seconds: float = 0.0) -> dict:
    """Compile counters; ``share``: compile seconds over the examples' seconds
    (the worker time the examples took, compiles included)."""
    seconds = c.get("seconds", 0.0)
    return {
        "compiles": c.get("misses", 0),
        "hits": c.get("hits", 0),
        "memo_hits": c.get("memo_hits", 0),
        "thd_lru_misses": c.get("thd_lru_misses", 0),
        "modules": c.get("modules", 0),
        "seconds": seconds,
        "share": seconds / example_seconds if example_seconds else None,
    }


def _findings(session: dict, observations: list, warnings: list, steered: Optional[dict] = None) -> dict:
    """The run's known findings with their status (ground.findings.statuses):
    reproduced, stale (exercised, never reproduced: the plugin failed the
    run), or not exercised (a subset or CPU-only run); a crash finding
    steered (with how many examples) or not exercised."""
    from ground.findings import STALE, stale, statuses

    entries = statuses(session.get("findings", []), observations, steered)
    warnings.extend(stale(entries))
    return {"file": session.get("findings_file"), "entries": entries, "stale": [e["id"] for e in entries if e["status"] == STALE]}
