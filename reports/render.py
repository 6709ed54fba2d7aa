"""report.json, report.md and report.html from a merged run summary.

Both documents are rendered from one list of blocks, so they cannot drift:
("h", level, text) | ("p", text) | ("list", items) | ("table", headers, rows[, "gaps"])
| ("img", name, png_bytes, alt) | ("code", text). "gaps" marks zero cells as gaps (coverage):
shaded in HTML, "0 (gap)" in markdown.
"""

from __future__ import annotations

import base64
import html
import json
from pathlib import Path

from ground.case import Case, CaseFileError

from .casefile import strict
from .plots import ratio_histogram

ENV_ORDER = (
    "mode",
    "adapter",
    "planted_mutant",
    "gpu",
    "capability",
    "driver",
    "torch",
    "nvidia-cudnn-frontend",
    "nvidia-cutlass-dsl",
    "kernels_source",
    "hypothesis_profile",
    "hypothesis_seed",
    "report_dir",
    "known_findings",
)


def _fmt(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.3g}"
    if isinstance(v, dict):
        return ", ".join(f"{k} {_fmt(x)}" for k, x in v.items())
    return str(v)


def _case_text(d: dict) -> str:
    try:
        return Case.from_dict(d).describe()
    except (CaseFileError, TypeError):
        return json.dumps(d, sort_keys=True)


def _environment(s: dict) -> list:
    env = s["environment"]
    rows = [[k, _fmt(env[k])] for k in ENV_ORDER if k in env]
    rows += [[k, _fmt(v)] for k, v in env.items() if k not in ENV_ORDER + ("header",) and not isinstance(v, (dict, list))]
    rows += [[k, _fmt(v)] for k, v in (env.get("versions") or {}).items() if k not in env]
    rows += [["version warning", w] for w in env.get("version_warnings", [])]
    return [("h", 2, "Environment"), ("table", ["", ""], rows)]


def _run(s: dict) -> list:
    run, t = s["run"], s["tests"]
    out = [] if run["complete"] else [("p", "The run did not finish (no session record): counts cover what the shards hold.")]
    out += [
        ("h", 2, "Run"),
        (
            "table",
            ["examples", "all begun", "wall s", "examples / min", "tests", "passed", "failed", "xfailed", "xpassed", "skipped", "error", "shards"],
            [
                [
                    run["examples"],
                    run.get("examples_begun", run["examples"]),
                    _fmt(run["wall_seconds"]),
                    _fmt(run["examples_per_minute"]),
                    t["total"],
                    t["passed"],
                    t["failed"],
                    t["xfailed"],
                    t["xpassed"],
                    t["skipped"],
                    t["error"],
                    len(run["shards"]),
                ]
            ],
        ),
        (
            "p",
            "examples (and examples / min): those of the property tests up to their test's first failing example; all begun: "
            "every example, the suite's own tests' and those Hypothesis ran after a failure (searching on, shrinking) too.",
        ),
    ]
    if s.get("faults"):
        out += [
            ("h", 2, f"Processes ended by a fault ({len(s['faults'])})"),
            ("p", "A lost CUDA context or a hang ends the process that saw it (its test fails; the following tests ran in a fresh worker)."),
            (
                "list",
                [
                    f"{f.get('fault')}: {f.get('nodeid') or '-'} ({f.get('worker') or 'main'}, pid {f.get('pid')}): {f.get('message')}"
                    + (f"  {f['repro']}" if f.get("repro") else "")
                    for f in s["faults"]
                ],
            ),
        ]
    if s["warnings"]:
        out += [("h", 2, "Warnings"), ("list", s["warnings"])]
    return out


def _skips(s: dict) -> list:
    skips = s.get("skips") or []
    if not skips:
        return []
    rows = [[g["count"], g["reason"], ", ".join(g["tests"][:3]) + (f" (+{len(g['tests']) - 3} more)" if len(g["tests"]) > 3 else "")] for g in skips]
    return [("h", 2, f"Skipped tests ({sum(g['count'] for g in skips)}), by reason"), ("table", ["tests", "reason", "which"], rows)]


def _failures(s: dict) -> list:
    real = s["failures"]
    out = [("h", 2, f"Failures ({len(real)})")]
    for f in real:
        hyp = f.get("hypothesis") or {}
        notes = [x for x in (f"hypothesis seed {hyp['seed']}" if hyp.get("seed") is not None else None, hyp.get("reproduce_failure")) if x]
        out += [
            ("h", 3, f"{f['property']}: {f.get('nodeid') or '-'}"),
            ("p", f.get("summary", "")),
            ("p", "case: " + _case_text(f["case"])),
            ("code", f.get("repro", "") + "".join(f"\n# {n}" for n in notes)),
        ]
    return out if real else out + [("p", "None.")]


def _findings(s: dict) -> list:
    fnd = s["findings"]
    out = [("h", 2, "Known findings" + (f" ({fnd['file']})" if fnd.get("file") else ""))]
    if not fnd["entries"]:
        return out + [("p", "No known findings in force.")]
    rows = [
        [
            e["id"],
            e.get("source") or "-",
            e.get("selects") or "-",
            e["status"],
            e["exercised"],
            e["reproduced"],
            e.get("steered", "-"),
            e["reason"],
            e.get("repro") or "-",
        ]
        for e in fnd["entries"]
    ]
    return out + [
        ("table", ["id", "entry", "excuses", "status", "examples exercising it", "examples it excused", "examples steered", "reason", "repro"], rows),
        (
            "p",
            "reproduced: it excused the failure it describes; stale: examples exercised it and none failed so "
            "(the run fails: remove or correct the entry); not exercised: no example of this run could show it; "
            "steered (crash findings): the tests drew that many examples it selects as its steered Case instead "
            "(the entry point faults on them; conformance/test_findings.py replays its case file).",
        ),
    ]


def _properties(s: dict) -> list:
    rows = []
    for name, p in s["properties"].items():
        tt = p["tests"]
        by = p.get("ratios_by_dtype") or p["ratios"]
        ratios = "; ".join(_ratio_cell(q, r) for q, r in by.items()) or "-"
        rows.append(
            [
                name,
                p["examples"],
                p["passed"],
                p["failed"],
                p.get("shrinking", 0),
                p.get("expected", 0),
                p["xfailed"],
                p["errors"],
                f"{tt['passed']}/{tt['failed']}/{tt['xfailed']}/{tt['skipped']}",
                ratios,
            ]
        )
    if not rows:
        return [("h", 2, "Properties"), ("p", "No test ran.")]
    left_out = "; ".join(
        f"{name}: " + ", ".join(f"{n} {why}" for why, n in p["ratios_left_out"].items()) for name, p in s["properties"].items() if p.get("ratios_left_out")
    )
    return [
        ("h", 2, "Properties"),
        (
            "table",
            ["property", "examples", "passed", "failed", "shrinking", "expected", "xfailed", "errors", "tests pass/fail/xfail/skip", "error/bound"],
            rows,
        ),
        (
            "p",
            "failed: the failing cases the run reports (one per failure, each with its case file); shrinking: further failing "
            "examples Hypothesis tried while shrinking those; expected: failures a passing test asked for (the power tests run a "
            "property against a planted bug); xfailed: known findings; errors: examples that raised without a verdict.",
        ),
        ("p", RATIO_NOTE + (f" Left out: {left_out}." if left_out else "")),
    ]


RATIO_NOTE = (
    "error/bound: p99 and max (nearest rank, n values) over the passed examples of the property tests up to their test's "
    "first failing example (what Hypothesis runs after it is shrinking), what a correct kernel uses of its bound; "
    "excused (a known finding) and failed examples beside them, their count and max."
)


def _ratio_cell(q: str, r: dict) -> str:
    text = f"{q} p99 {_fmt(r.get('p99'))} max {_fmt(r.get('max'))} (n {r.get('count', 0)})"
    for k in ("excused", "failed"):
        if (r.get(k) or {}).get("count"):
            text += f", {k} {r[k]['count']} max {_fmt(r[k]['max'])}"
    return text


def _ratio_plots(s: dict) -> list:
    out = [("h", 2, "Error / bound distribution"), ("p", "The passed examples of the property tests, as the error/bound column counts them.")]
    for name, ratios in s.get("_ratios", {}).items():
        if any(ratios.values()):
            out.append(("img", f"ratios-{name}.png", ratio_histogram(name, ratios), f"{name} error/bound histogram"))
    return out if len(out) > 2 else out + [("p", "No error ratios recorded (no numeric property ran).")]


def _coverage(s: dict) -> list:
    cov = s["coverage"]
    m = cov["matrix"]
    gaps = cov["gaps"]
    out = [
        ("h", 2, f"Coverage ({cov['examples']} examples, {len(gaps)} gaps, {cov['empty_cells']} empty matrix cells)"),
        (
            "p",
            "The examples of the property tests, the ones the known findings count (the suite's own tests drive stand-in kernels). "
            "Valid examples per layout/mask (rows) and flavor/dtype (columns); empty cells (0, marked gap) were not exercised.",
        ),
        ("table", ["layout/mask"] + m["columns"], [[r] + c for r, c in zip(m["rows"], m["counts"])], "gaps"),
        ("h", 3, "gaps: values a complete run reaches that no example exercised"),
        ("list", gaps) if gaps else ("p", "None."),
    ]
    for family, missed in (cov.get("family_gaps") or {}).items():
        out += [
            ("h", 3, f"gaps of the {family} family: values its Cases can exercise that none of this run's did"),
            ("list", missed) if missed else ("p", "None."),
        ]
    fields = cov.get("kernel_fields") or {}
    if fields:
        fgaps = cov.get("kernel_field_gaps", [])
        out += [
            ("h", 3, f"kernel fields x values ({len(fgaps)} empty cells)"),
            (
                "p",
                "Each TemplateParams field and entry-point argument (ground/feature_space.py), the values of the "
                "coverage axes of the Case facts that draw it, and the examples that exercised each; an empty cell is a gap.",
            ),
            ("table", ["field", "value", "examples"], [[f, v, n] for f, counts in fields.items() for v, n in counts.items()], "gaps"),
            ("h", 3, "kernel field gaps"),
            ("list", fgaps) if fgaps else ("p", "None."),
            ("h", 3, "declared out of scope"),
            ("table", ["field", "why"], [[f, why] for f, why in cov.get("out_of_scope", {}).items()]),
        ]
    for fact, counts in cov["facts"].items():
        doc = (cov.get("axes") or {}).get(fact)
        out += [("h", 3, fact)] + ([("p", doc)] if doc else []) + [("table", ["value", "examples"], [[v, n] for v, n in counts.items()], "gaps")]
    rules = cov["contract_rules"]
    return out + [
        ("h", 3, "contract rules (violating examples)"),
        ("table", ["rule", "examples"], [[r, n] for r, n in rules.items()]) if rules else ("p", "None exercised."),
    ]


PAIRS_SHOWN = 200  # missing pairs listed per direction and layout (report.json holds every one)


def _percent(x) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _layout_rows(d: dict) -> list:
    """One direction's pair-table rows: per layout its examples, factors, feasible, drawn, missing, excluded pairs and share."""
    return [
        [
            layout,
            v["examples"],
            len(v["factors"]),
            v["feasible"],
            v["drawn"],
            len(v["missing"]),
            v["excluded"],
            _percent(v["drawn"] / v["feasible"] if v["feasible"] else None),
        ]
        for layout, v in d["layouts"].items()
    ]


def _pairs(s: dict) -> list:
    """The pair table: per direction and layout, the feasible pairs of
    compile-key factor values, those the run drew, and the missing ones."""
    p = (s.get("coverage") or {}).get("pairs")
    if not p:
        return []
    rows, out = [], []
    for direction in ("fwd", "bwd"):
        d = p[direction]
        rows += [[direction, *row] for row in _layout_rows(d)]
        rows.append([direction, "both", "", "", d["feasible"], d["drawn"], d["feasible"] - d["drawn"], "", _percent(d["share"])])
    shares = ", ".join(f"{x} {_percent(p[x]['share'])}" for x in ("fwd", "bwd"))
    out += [
        ("h", 2, f"Pair coverage of the compile-key factors ({shares})"),
        (
            "p",
            "Every pair of values of two compile-key factors (ground/pairs.py: the facts the kernels compile in, numeric ones by the "
            "classes that change the specialization) of one direction and layout, over the valid examples of the run"
            + (f" (drawn for the {p['adapter']} adapter: values it cannot express are excluded)" if p.get("adapter") else "")
            + ". Feasible: not excluded by a declared exclusion (below, with its reason); a missing pair met in no example.",
        ),
        ("table", ["direction", "layout", "examples", "factors", "feasible pairs", "drawn", "missing", "excluded", "drawn share"], rows),
    ]
    for direction in ("fwd", "bwd"):
        for layout, v in p[direction]["layouts"].items():
            if v["missing"]:
                more = [f"... {len(v['missing']) - PAIRS_SHOWN} more (report.json)"] if len(v["missing"]) > PAIRS_SHOWN else []
                out += [("h", 3, f"missing pairs, {direction} {layout} ({len(v['missing'])})"), ("list", v["missing"][:PAIRS_SHOWN] + more)]
            if v["drawn_though_excluded"]:
                out += [("h", 3, f"drawn though declared excluded, {direction} {layout}"), ("list", v["drawn_though_excluded"])]
    out += [
        ("h", 3, "declared exclusions"),
        (
            "table",
            ["values", "directions", "layouts", "reason", "source", "kind"],
            [
                [e["when"], "/".join(e["directions"]), "/".join(e["layouts"]), e["reason"], e["source"], "not drawn on purpose" if e["policy"] else "refused"]
                for e in p["exclusions"]
            ],
        ),
    ]
    return out


def _compile(s: dict) -> list:
    def row(name, c):
        share = "-" if c.get("share") is None else f"{100 * c['share']:.0f}%"
        return [name, c["compiles"], c["hits"], c["memo_hits"], c["thd_lru_misses"], c["modules"], _fmt(c["seconds"]), share]

    rows = [row(n, p["compile"]) for n, p in s["properties"].items() if p["examples"]] + [row("total", s["compile"])]
    c = s["compile"]
    out = [
        ("h", 2, "Compile statistics"),
        ("table", ["property", "compiles", "hits", "memo hits", "THD LRU misses", "modules", "seconds", "share of example time"], rows),
    ]
    out += _accounting(c)
    if c.get("cache"):
        out.append(("p", c["cache"]))
    return out


def _accounting(c: dict) -> list:
    """The compile section's counts: artifacts, repeats by cause, deliberate
    compiles and both floors, each with its definition (reports.summary)."""
    out, floor, keys_floor = [], c.get("floor") or {}, c.get("keys_floor") or {}
    if c.get("keys") or c.get("unkeyed_compiles"):
        unkeyed = ", ".join(f"{k} {v}" for k, v in (c.get("unkeyed") or {}).items())
        out.append(
            (
                "p",
                f"{c.get('keys', 0)} distinct compile keys among the examples, {c.get('compiled_keys', 0)} compiled in this run: "
                f"{c.get('artifacts', 0)} distinct artifacts (under a key, the most compiles one example made: a backward chain is several), "
                f"{c.get('repeat_compiles', 0)} repeats (a compile under a key beyond its artifacts); "
                f"{c.get('unkeyed_compiles', 0)} compiles of examples naming no key{f' ({unkeyed})' if unkeyed else ''}.",
            )
        )
    if c.get("repeat_compiles"):
        out.append(
            (
                "p",
                "Repeats by cause (several workers: a race; one worker: a memo or cache entry lost): "
                + ", ".join(f"{k} {v}" for k, v in c["repeats"]["by_class"].items())
                + ".",
            )
        )
        out.append(
            (
                "table",
                ["key", "compiles", "artifacts", "examples", "workers", "properties", "cause"],
                [
                    [t["key"][:16], t["compiles"], t["artifacts"], t["examples"], t["workers"], ", ".join(t["properties"]), t["class"]]
                    for t in c["repeats"]["top"]
                ],
            )
        )
    d = c.get("deliberate") or {}
    if d.get("compiles"):
        by = ", ".join(f"{k} {v}" for k, v in d["by_property"].items())
        out.append(
            (
                "p",
                f"{d['compiles']} deliberate compiles ({by}; {_fmt(d['seconds'])} s): compile checks that compile on purpose outside the run's cache, in a warm run too; no run key's work.",
            )
        )
    if floor.get("seconds"):
        ratio = lambda f: f", wall / floor {f['ratio']:.2f}" if f.get("ratio") else ""  # noqa: E731
        out.append(
            (
                "p",
                f"Compile floor {_fmt(floor['seconds'])} s{ratio(floor)} = ({c.get('artifacts', 0)} artifacts + {c.get('unkeyed_compiles', 0)} keyless compiles) x {_fmt(floor['per_compile'])} s / {floor['workers']} workers; "
                f"keys floor {_fmt(keys_floor.get('seconds', 0.0))} s{ratio(keys_floor)}. Definitions: {floor.get('definition', '')}.",
            )
        )
    return out


def _profile(s: dict) -> list:
    prof = s.get("profile") or {}
    if not prof.get("workers"):
        return []
    names = [k for k in prof["phases"]]
    rows = [[w["worker"], w["examples"], _fmt(w["span_seconds"]), *_between(w)] + [_fmt(w["phases"].get(k, 0.0)) for k in names] for w in prof["workers"]]
    total = dict(prof, between_examples=prof["span_seconds"] - prof["example_seconds"])
    rows.append(["total", sum(w["examples"] for w in prof["workers"]), _fmt(prof["span_seconds"]), *_between(total)] + [_fmt(prof["phases"][k]) for k in names])
    return [
        ("h", 2, "Per-worker profile (seconds)"),
        (
            "p",
            "Each process's span from its first example to its last verdict; 'between examples' is Hypothesis (generation, "
            "shrinking), pytest and fixtures; of it, 'drawing' is the judged examples' draws (the matrix tests') and "
            "'rejected' the examples drawn and refused without a verdict (their seconds); the phases are ground.phases "
            "(compile is the adapters' compile step).",
        ),
        ("table", ["worker", "examples", "span", *BETWEEN] + names, rows),
        *_timeline(s, prof["workers"]),
    ]


TIMELINE = (("loaded", "plugin loaded"), ("collected", "collected"), ("first", "first example"), ("last", "last verdict"))


def _timeline(s: dict, workers: list) -> list:
    """Each worker's timeline against the run's wall: what the wall holds besides the spans (start-up before the
    first example, the wait for the last worker)."""
    rows = [[w["worker"], *(_fmt(t) if (t := w.get("timeline", {}).get(k)) is not None else "-" for k, _ in TIMELINE)] for w in workers]
    if not any(any(c != "-" for c in r[1:]) for r in rows):
        return []  # no session start recorded (an interrupted run)
    wall = s["run"].get("wall_seconds")
    return [
        (
            "p",
            f"Worker timeline, seconds since the run began (wall {_fmt(wall) if wall else '-'} s): the process loaded the plugin "
            "(spawned, Python and pytest started), collected, began its first example, gave its last verdict.",
        ),
        ("table", ["worker", *(label for _, label in TIMELINE)], rows),
    ]


BETWEEN = ("between examples", "drawing", "rejected (s)")


def _between(row: dict) -> list:
    """The BETWEEN cells of a profile row: the time between examples, the draws in it, and 'N (seconds)' of the
    rejected examples."""
    rejected = f"{row.get('rejected', 0)} ({_fmt(row.get('rejected_seconds', 0.0))})"
    return [_fmt(row["between_examples"]), _fmt(row.get("draw_seconds", 0.0)), rejected]


def _slowest_tests(s: dict) -> list:
    rows = [[r["test"], r["worker"], _fmt(r["span_seconds"]), r["examples"], _fmt(r["example_seconds"]), *_between(r)] for r in s.get("slowest_tests") or ()]
    if not rows:
        return []
    return [
        ("h", 2, "Slowest tests"),
        ("p", "Each test's span on its worker, from its first begun example to its last verdict: a long one is a worker's tail."),
        ("table", ["test", "worker", "span", "examples", "example s", *BETWEEN], rows),
    ]


def _slowest(s: dict) -> list:
    if not s["slowest"]:
        return [("h", 2, "Slowest examples"), ("p", "No examples.")]
    rows = [[_fmt(r["seconds"]), _fmt(r["compile_seconds"]), r["property"], r["outcome"], _case_text(r["case"]), r.get("test") or "-"] for r in s["slowest"]]
    return [("h", 2, "Slowest examples"), ("table", ["seconds", "compile s", "property", "outcome", "case", "test"], rows)]


def _family_pairs(s: dict) -> list:
    """Another family's pair table (its own compile-key factors: its KernelFamily.pairs module), where the run drew its Cases."""
    out = []
    for family, p in sorted(((s.get("coverage") or {}).get("family_pairs") or {}).items()):
        d, rows = p["fwd"], _layout_rows(p["fwd"])
        out += [
            ("h", 2, f"Pair coverage of the {family} family's compile-key factors (fwd {_percent(d['share'])})"),
            ("table", ["layout", "examples", "factors", "feasible pairs", "drawn", "missing", "excluded", "drawn share"], rows),
        ]
        for layout, v in d["layouts"].items():
            if v["missing"]:
                out += [("h", 3, f"missing {family} pairs, {layout} ({len(v['missing'])})"), ("list", v["missing"][:PAIRS_SHOWN])]
    return out


SECTIONS = (
    _environment,
    _run,
    _skips,
    _failures,
    _findings,
    _properties,
    _ratio_plots,
    _coverage,
    _pairs,
    _family_pairs,
    _compile,
    _profile,
    _slowest_tests,
    _slowest,
)


def blocks(s: dict) -> list:
    return [("h", 1, "sdpa-conformance report")] + [b for section in SECTIONS for b in section(s)]


# -------------------------------------------------------------------- writers
def _md_cell(v) -> str:
    return str(v).replace("|", "\\|").replace("\n", " ")


def to_markdown(bl: list, plots_dir: Path) -> str:
    lines = []
    for b in bl:
        if b[0] == "h":
            lines += ["#" * b[1] + " " + b[2], ""]
        elif b[0] == "p":
            lines += [b[1], ""]
        elif b[0] == "list":
            lines += [f"- {x}" for x in b[1]] + [""]
        elif b[0] == "code":
            lines += ["```", b[1], "```", ""]
        elif b[0] == "table":
            lines.append("| " + " | ".join(_md_cell(h) for h in b[1]) + " |")
            lines.append("|" + "---|" * len(b[1]))
            gaps = len(b) > 3 and b[3] == "gaps"  # coverage: a zero cell is a gap
            lines += ["| " + " | ".join("0 (gap)" if gaps and c == 0 else _md_cell(c) for c in row) + " |" for row in b[2]] + [""]
        elif b[0] == "img":
            plots_dir.mkdir(parents=True, exist_ok=True)
            (plots_dir / b[1]).write_bytes(b[2])
            lines += [f"![{b[3]}]({plots_dir.name}/{b[1]})", ""]
    return "\n".join(lines)


CSS = (
    "body{font-family:sans-serif;margin:2em;max-width:110em}table{border-collapse:collapse;margin:.5em 0}"
    "td,th{border:1px solid #ccc;padding:2px 6px;font-size:90%;text-align:left}pre{background:#f4f4f4;padding:.5em}"
    "td.gap{background:#fde2e2}"
)


def to_html(bl: list) -> str:
    e = html.escape
    body = []
    for b in bl:
        if b[0] == "h":
            body.append(f"<h{b[1]}>{e(b[2])}</h{b[1]}>")
        elif b[0] == "p":
            body.append(f"<p>{e(b[1])}</p>")
        elif b[0] == "list":
            body.append("<ul>" + "".join(f"<li>{e(str(x))}</li>" for x in b[1]) + "</ul>")
        elif b[0] == "code":
            body.append(f"<pre>{e(b[1])}</pre>")
        elif b[0] == "table":
            head = "".join(f"<th>{e(str(h))}</th>" for h in b[1])
            gaps = len(b) > 3 and b[3] == "gaps"  # coverage: a zero cell is a gap, shaded
            rows = "".join("<tr>" + "".join(f"<td{' class=gap' if gaps and c == 0 else ''}>{e(str(c))}</td>" for c in row) + "</tr>" for row in b[2])
            body.append(f"<table><tr>{head}</tr>{rows}</table>")
        elif b[0] == "img":
            data = base64.b64encode(b[2]).decode("ascii")
            body.append(f'<img alt="{e(b[3])}" src="data:image/png;base64,{data}">')
    return f"<!doctype html><html><head><meta charset='utf-8'><title>sdpa-conformance report</title><style>{CSS}</style></head><body>{''.join(body)}</body></html>\n"


def write_all(summary: dict, report_dir) -> dict:
    """Write the three reports (and the md's plot files); returns their paths."""
    d = Path(report_dir)
    d.mkdir(parents=True, exist_ok=True)
    bl = blocks(summary)
    paths = {"json": d / "report.json", "md": d / "report.md", "html": d / "report.html"}
    public = {k: v for k, v in summary.items() if not k.startswith("_")}
    paths["json"].write_text(json.dumps(strict(public), indent=1, default=str) + "\n", encoding="utf-8")
    paths["md"].write_text(to_markdown(bl, d / "plots"), encoding="utf-8")
    paths["html"].write_text(to_html(bl), encoding="utf-8")
    return paths
