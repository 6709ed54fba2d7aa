"""Run reports: merge the per-process shards of a report dir and render them.

``build(report_dir)`` is what the pytest plugin calls at the end of a run and
what ``sdpa-conformance report DIR`` calls to re-render; see reports/README.md
for the files a run leaves.
"""

from __future__ import annotations


def build(report_dir, run_id=None, read=None) -> tuple:
    """Merge one run's shards under ``report_dir`` (default: the latest run),
    write the case files only the merge can write, render
    report.json/.md/.html. Returns (summary, paths). ``read``: the run's
    records and warnings as ``shards.read`` gave them, when the caller holds
    them already (the plugin, which judged the known findings on them)."""
    from . import casefile, render, shards, summary

    run_id = run_id or shards.latest_run(report_dir)
    records, warnings = read if read is not None else shards.read(report_dir, run_id)
    s = summary.merge(records, warnings)
    s["run"]["id"] = run_id
    env = s["environment"]
    # A worker that died mid-example wrote no failure record: its last begun
    # case becomes one here, so the crash has a repro command too.
    for u in s.pop("unrecorded_failures"):
        b = u["begin"]
        text = f"the test failed during this example without a verdict (worker crash?): {u['message']}".strip()
        path = casefile.write(
            report_dir,
            property=b["property"],
            case=b["case"],
            params=b.get("params"),
            summary=text,
            nodeid=u["nodeid"],
            environment=env | (b.get("context") or {}),
        )
        s["failures"].append(
            {
                "kind": "failure",
                "nodeid": u["nodeid"],
                "property": b["property"],
                "case": b["case"],
                "summary": text,
                "case_file": str(path),
                "repro": casefile.repro_command(path),
            }
        )
    # One replayable example per reproduced known finding: the first example
    # it excused, written here.
    for e in s["findings"]["entries"]:
        r = s["_first_xfailed"].get(e["id"])
        if r is not None:
            why = (r.get("notes") or {}).get("summary") or e["reason"]
            path = casefile.write(
                report_dir,
                property=r["property"],
                case=r["case"],
                params=r.get("params"),
                summary=why,
                nodeid=r.get("test"),
                environment=env | (r.get("context") or {}),
                finding=e["id"],
            )
            e["repro"] = casefile.repro_command(path)
    paths = render.write_all(s, report_dir)
    return s, paths


__all__ = ["build"]
