#!/usr/bin/env python3
"""Two kill-rate runs of one catalogue side by side: the same verdicts?

    python3 tools/compare_catalogues.py A B [--table] [--extra C ...] [--extra-a C] [--extra-b C]

A and B are ``sdpa-conformance mutants`` reports: a finished run's
``mutants.json`` or a partial ``mutants.partial.json`` (either may be
gzipped, as docs/searches keeps them). ``--extra`` adds reports whose records
fill mutants that A or B lack: a run restricted to one mutant, its label the
file's name; ``--extra-a`` and ``--extra-b`` fill only that side (a restricted
run made with that side's options). Prints, per mutant with a record in both, whether
the verdict, the killing kind and the examples each kind drew agree, and the
mutants only one run has; ``--table`` prints the markdown table of verdicts
and examples drawn as docs/measurements.md shows it. Exit 1 when a verdict
or a killer differs (examples may: a race, or a first failure found in
another order), 2 on an unreadable report.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def records(path: str) -> dict:
    """mutant name -> record, from a finished or partial report (gzipped or not)."""
    raw = Path(path).read_bytes()
    doc = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    if "records" in doc:  # a partial report
        return dict(doc["records"])
    controls = doc.get("controls") or ([doc["control"]] if doc.get("control") else [])
    return {r["name"]: r for r in controls + doc["mutants"]}


def brief(r: dict) -> str:
    """A table cell's examples: the killing (or last) kind's 'kind n/planned'; every kind's summed when it survived."""
    kinds = r.get("kinds") or []
    if r["verdict"] in ("survived", "short"):
        total, planned = sum(k["examples"] for k in kinds), sum(k["planned"] for k in kinds)
        return f"all {len(kinds)} kinds, {total:,} / {planned:,}"
    last = kinds[-1] if kinds else None
    return f"{last['name']} {last['examples']}/{last['planned']}" if last else "-"


def cell(r: dict | None) -> str:
    return "no record" if r is None else f"{r['verdict']}: {brief(r)}"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("a")
    p.add_argument("b")
    p.add_argument("--extra", action="append", default=[], help="a report whose records fill mutants A or B lack (repeatable)")
    p.add_argument("--extra-a", action="append", default=[], help="as --extra, for A only (repeatable)")
    p.add_argument("--extra-b", action="append", default=[], help="as --extra, for B only (repeatable)")
    p.add_argument("--table", action="store_true", help="print the markdown table of verdicts and examples")
    args = p.parse_args()
    from conformance.kill.processes import drew  # every kind's drawn/planned, as the run's progress line prints it
    from conformance.kill.tally import kill_rate_line, tally

    try:
        a, b = records(args.a), records(args.b)
        sides = [(x, "AB") for x in args.extra] + [(x, "A") for x in args.extra_a] + [(x, "B") for x in args.extra_b]
        extra = [(Path(x).name, on, records(x)) for x, on in sides]
    except (OSError, ValueError, KeyError) as e:
        print(f"compare_catalogues: cannot read a report: {e}", file=sys.stderr)
        return 2
    filled = {}
    for label, on, recs in extra:
        for side, mine in (("A", a), ("B", b)):
            if side not in on:
                continue
            for name, r in recs.items():
                if name not in mine and not name.startswith("control"):
                    mine[name] = r
                    filled.setdefault(name, []).append(f"{side} from {label}")
    names = list(dict.fromkeys(list(a) + list(b)))
    both = [n for n in names if n in a and n in b]
    differ = [n for n in both if (a[n]["verdict"], a[n].get("killed_by")) != (b[n]["verdict"], b[n].get("killed_by"))]
    examples = [n for n in both if n not in differ and drew(a[n]) != drew(b[n])]
    if args.table:
        print("| mutant | A | B |\n|---|---|---|")
        for n in names:
            print(f"| `{n}` | {cell(a.get(n))} | {cell(b.get(n))} |")
        print()
    print(f"{len(both)} records in both (the controls included); {len(both) - len(differ)} with the same verdict by the same kind")
    for n in differ:
        print(f"  DIFFERENT VERDICT {n}: A {cell(a[n])} (by {a[n].get('killed_by')}); B {cell(b[n])} (by {b[n].get('killed_by')})")
    for n in examples:
        print(f"  examples differ {n}: A {drew(a[n])}; B {drew(b[n])}")
    for n in names:
        if n not in both:
            print(f"  only in {'A' if n in a else 'B'}: {n}")
    for n, how in filled.items():
        print(f"  filled: {n} ({', '.join(how)})")
    for label, recs in (("A", a), ("B", b)):
        mutants = [r for n, r in recs.items() if not n.startswith("control")]
        print(f"{label}: {len(mutants)} mutants; {kill_rate_line(tally(mutants), 0.9)}")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
