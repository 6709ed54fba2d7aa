"""Calibrate the error model (conformance/tolerances.py) against the kernel.

    python3 tools/calibrate_error_model.py                      # the real kernels, one CUDA GPU (~3-5 min)
    python3 tools/calibrate_error_model.py --emulate tc24       # the CPU emulation (tests/kernel_emulation.py)
    python3 tools/calibrate_error_model.py --emulate adversarial --profile ci --no-parts   # a gate's own numerics draws

Draws ``--per-stratum`` Cases for every (flavor, dtype, layout) stratum from
the suite's strategies (``strategies.dense_cases`` / ``thd_cases``, the
numerics tests' draws), runs each through the numerics property
(``properties.check_numerics`` on ``kernels.get_adapter
("prepared")``, or on the emulated kernel), and prints error/bound p50 / p99
/ max for O and LSE per dtype under the new model and under the legacy rule it
replaced, the failures (a correct kernel must have none), and which term
families carry the bounds (median share over the judged rows/elements).
Strata run in ``--jobs`` processes (spawned; each draws its own examples
with a fixed Hypothesis seed, so reruns draw the same cases). ``--profile
NAME`` judges instead the Cases a run under that Hypothesis profile draws for
the SM80 numerics tests (``conformance.pairs.draw``; under ci and pr,
derandomized, exactly the draws a GPU gate judges), e.g. a strategy
change's new draws on the emulation before a GPU run meets them. Writes
``calibration.json`` to ``--out`` (default: $OUT when set).
Exit status: 0 no failure, 1 a failure (or a stratum crashed), 2 bad arguments.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
import traceback
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# --emulate presets (tests/kernel_emulation.Arith fields).
ARITH = {
    "ideal": {},  # every tensor-core step rounded to nearest, correctly rounded ex2/lg2/rcp
    "tc24": {"tc_bits": 24},  # truncating 24-bit tensor-core window (A100)
    "tc25": {"tc_bits": 25},  # 25-bit window (H100)
    "adversarial": {"tc_bits": 24, "ex2_ulps": 2, "lg2_ulps": -2, "rcp_ulps": 2, "fma": False},
}


def _draw(flavor: str, dtype: str, layout: str, n: int, seed: int, max_tokens):
    """``n`` Cases of one stratum, the numerics tests' strategies, a fixed seed."""
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as hseed
    from hypothesis import strategies as st

    from strategies import dense_cases, thd_cases

    kw = dict(flavors=(flavor,), dtypes=(dtype,))
    if layout == "dense":
        strategy = dense_cases(**kw, **({"max_tokens": max_tokens} if max_tokens else {}))
    else:
        strategy = thd_cases(**kw, **({"max_tokens": max_tokens} if max_tokens else {}))
    drawn = []

    @hseed(seed)
    @settings(max_examples=n, database=None, deadline=None, phases=[Phase.generate], suppress_health_check=list(HealthCheck))
    @given(st.data())
    def collect(data):
        drawn.append(data.draw(strategy))

    collect()
    return drawn[:n]


def _parts(case, inputs_device: str):
    """Median share of each term family of both bounds over the judged rows."""
    import torch

    from ground.data import FINITE_PAD, make_inputs
    from ground.tolerances import kernel_bounds
    from reference.attention import reference_for_case

    inputs = make_inputs(case, inputs_device, poison=True, pad_fill=FINITE_PAD)
    _, _, m = reference_for_case(case, inputs, torch.float64, extra=lambda it: kernel_bounds(it, case.dtype, parts=True))
    keep = (m["visible"] > 0) & torch.isfinite(m["lse"])
    if not case.is_thd:
        keep = keep & inputs.q_live.to(keep.device)[:, None, :]
    keep_o = (keep.T[..., None] if case.is_thd else keep[..., None]).expand_as(m["o"])
    out = {}
    for q, mask in (("o", keep_o), ("lse", keep)):
        total = m[q][mask]
        if total.numel() == 0:
            continue
        for name, t in m.items():
            if name.startswith(q + ":"):
                out[name] = float((t[mask] / total).median())
    return out


def _stratum(job: dict) -> dict:
    """One worker: draw and check every Case of one stratum."""
    import torch

    from ground.outcome import PropertyFailure
    from properties import numerics as properties

    if job["emulate"]:
        from tests.kernel_emulation import PLANTS, Arith, EmulatedAdapter, Plant

        adapter = EmulatedAdapter(Arith(**ARITH[job["emulate"]]), PLANTS[job["plant"]] if job["plant"] else Plant())
        properties.device = lambda: torch.device("cpu")  # this worker's own module
        where = "cpu"
    else:
        if job["mutant"]:  # a deliberately broken kernel: count which model catches it
            from kernels.mutants import by_name
            from kernels.prepared import PreparedAdapter

            adapter = PreparedAdapter(rewrites=by_name(job["mutant"]).rewrites)
        else:
            from kernels import get_adapter

            adapter = get_adapter("prepared")
        where = "cuda"
    rows = []
    try:
        if job.get("cases") is not None:  # --profile: a slice of a run's own draws
            from ground.case import Case

            cases = [Case.from_dict(d) for d in job["cases"]]
        else:
            cases = _draw(job["flavor"], job["dtype"], job["layout"], job["n"], job["seed"], job["max_tokens"])
    except Exception:  # noqa: BLE001 - reported as a crashed stratum
        return {**job, "crash": traceback.format_exc(), "rows": rows}
    for case in cases:
        start = time.perf_counter()
        row = {"case": case.to_dict()}
        try:
            obs = properties.check_numerics(case, adapter, legacy=True)
            row.update(outcome=obs.outcome, ratios=obs.ratios, legacy=obs.notes.get("legacy_ratios", {}), findings=obs.findings)
        except PropertyFailure as f:
            notes = f.observation.notes if f.observation is not None else {}
            row.update(
                outcome="failed",
                summary=f.summary,
                detail_ratio=f.detail.get("ratio"),
                quantity=f.detail.get("quantity"),
                legacy=notes.get("legacy_ratios", {}),
                worst=f.detail.get("worst", [])[:3],
            )
        except Exception:  # noqa: BLE001 - an adapter error is reported, not fatal
            row.update(outcome="error", summary=traceback.format_exc()[-1500:])
        if job["parts"] and row.get("outcome") in ("passed", "failed"):
            try:
                row["parts"] = _parts(case, where)
            except Exception:  # noqa: BLE001
                row["parts_error"] = traceback.format_exc()[-500:]
        row["seconds"] = time.perf_counter() - start
        rows.append(row)
    return {**job, "rows": rows}


def _q(values, p):
    v = sorted(x for x in values if not math.isnan(x))
    return v[min(len(v) - 1, int(p * len(v)))] if v else float("nan")


def summarize(results: list) -> dict:
    """Per dtype and quantity: p50 / p99 / max of error/bound, new and legacy."""
    table, failures, errors, parts, legacy_kills, kills = {}, [], [], {}, 0, {}
    for res in results:
        for row in res["rows"]:
            dt = row["case"]["dtype"]
            legacy_kill = any(not v <= 1 for v in row.get("legacy", {}).values())
            legacy_kills += legacy_kill
            k = kills.setdefault(dt, {"new": 0, "legacy": 0, "n": 0})
            k["n"] += 1
            k["new"] += row["outcome"] == "failed"
            k["legacy"] += legacy_kill
            if row["outcome"] == "error":
                errors.append(row)
                continue
            if row["outcome"] == "failed":
                failures.append(row)
            for q in ("o", "lse"):
                new = row.get("ratios", {}).get(q)
                if new is None and row["outcome"] == "failed" and row.get("quantity") == q:
                    new = row.get("detail_ratio")
                cell = table.setdefault(f"{dt} {q}", {"new": [], "legacy": []})
                if new is not None:
                    cell["new"].append(float(new))
                if q in row.get("legacy", {}):
                    cell["legacy"].append(float(row["legacy"][q]))
            for name, share in row.get("parts", {}).items():
                parts.setdefault(f"{dt} {name}", []).append(share)
    stats = {}
    for key, cell in sorted(table.items()):
        stats[key] = {
            m: {"n": len(v), "p50": _q(v, 0.5), "p99": _q(v, 0.99), "max": max(v) if v else float("nan"), "over": sum(1 for x in v if not x <= 1)}
            for m, v in cell.items()
        }
    shares = {k: _q(v, 0.5) for k, v in sorted(parts.items())}
    return {"stats": stats, "failures": failures, "errors": errors, "term_shares": shares, "legacy_kills": legacy_kills, "kills_by_dtype": kills}


def render(summary: dict, meta: dict) -> str:
    lines = [f"error/bound over {meta['examples']} examples ({meta['backend']}, {meta['seconds']:.0f} s)", ""]
    lines.append(f"{'dtype quantity':18s} {'model':7s} {'n':>4s} {'p50':>9s} {'p99':>9s} {'max':>9s} {'over 1':>6s}")
    for key, by_model in summary["stats"].items():
        for model in ("new", "legacy"):
            s = by_model[model]
            lines.append(f"{key:18s} {model:7s} {s['n']:4d} {s['p50']:9.3g} {s['p99']:9.3g} {s['max']:9.3g} {s['over']:6d}")
    if summary["term_shares"]:
        lines += ["", "median share of each term family in the bound (per judged row / element):"]
        lines += [f"  {k:28s} {v:.3g}" for k, v in summary["term_shares"].items()]
    lines += ["", f"failures under the new model: {len(summary['failures'])}; adapter errors: {len(summary['errors'])}"]
    for row in summary["failures"][:20]:
        lines.append(f"  FAIL {row.get('summary')}  case={json.dumps(row['case'], sort_keys=True)}")
    for row in summary["errors"][:5]:
        lines.append(f"  ERROR {row.get('summary', '').strip().splitlines()[-1] if row.get('summary') else ''}  case={json.dumps(row['case'], sort_keys=True)}")
    return "\n".join(lines)


def _profile_work(args, jobs: int, how: dict):
    """--profile: the numerics tests' draws under that profile (of the chosen flavors, dtypes and layouts),
    dealt round-robin into ``jobs`` slices; None (after a message) when there are none."""
    from conformance.pairs import draw
    from ground.tables import flavor_of

    tests = [f"test_numerics_{lay}" for lay in args.layouts.split(",")]
    flavors, dtypes = set(args.flavors.split(",")), set(args.dtypes.split(","))
    drawn = draw(args.profile, select="test_numerics_")
    cases = [c for t in tests for c in drawn.get(t, ())[:: args.every or 1] if flavor_of(c.d_qk, c.d_v) in flavors and c.dtype in dtypes]
    if not cases:
        print(f"--profile {args.profile}: no numerics draw of these flavors, dtypes and layouts", file=sys.stderr)
        return None
    slices = range(min(jobs, len(cases)))
    return [dict(flavor="*", dtype="*", layout=f"{args.profile} slice {i}", cases=[c.to_dict() for c in cases[i::jobs]], **how) for i in slices]


def main(argv=None) -> int:
    from ground.tables import FLAVORS

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--per-stratum", type=int, default=24, help="examples per (flavor, dtype, layout) stratum (default 24: 384 in all)")
    ap.add_argument("--jobs", type=int, default=None, help="worker processes (default: 16 on the GPU, 2 emulated)")
    ap.add_argument("--emulate", choices=sorted(ARITH), help="run the CPU emulation instead of the kernels (no GPU)")
    ap.add_argument("--plant", help="with --emulate: a planted error of tests/kernel_emulation.PLANTS (counts kills instead)")
    ap.add_argument(
        "--mutant",
        help="on the GPU: a mutant of kernels.mutants (e.g. a precision_* one) instead of the installed kernels (counts kills "
        "under both models; flavors default to the templates it rewrites)",
    )
    ap.add_argument("--flavors", default=None, help="comma-separated (default: all, or the mutant's)")
    ap.add_argument("--dtypes", default="float16,bfloat16")
    ap.add_argument("--layouts", default="dense,thd")
    ap.add_argument("--max-tokens", type=int, default=None, help="bound the drawn lengths (the emulation is slow on long rows)")
    ap.add_argument("--seed", type=int, default=20261202)
    ap.add_argument("--profile", help="judge the Cases a run under this Hypothesis profile draws for the numerics tests (not per stratum)")
    ap.add_argument("--every", type=int, default=None, help="with --profile: every N-th draw of each test, a sample across its strata (default: all)")
    ap.add_argument("--no-parts", action="store_true", help="skip the term-share breakdown (one more reference pass per example)")
    ap.add_argument("--out", default=os.environ.get("OUT"), help="directory for calibration.json (default: $OUT)")
    args = ap.parse_args(argv)
    if args.per_stratum < 1:
        print("--per-stratum must be >= 1", file=sys.stderr)
        return 2
    if args.every is not None and (args.every < 1 or not args.profile):
        print("--every N: N >= 1, with --profile", file=sys.stderr)
        return 2
    if args.profile:
        from strategies.profiles import MAX_EXAMPLES

        if args.profile not in MAX_EXAMPLES:
            print(f"--profile {args.profile!r}: expected one of {', '.join(MAX_EXAMPLES)}", file=sys.stderr)
            return 2
    if args.mutant:
        from conformance.kill.kinds import flavors_for
        from kernels.mutants import by_name

        if args.emulate:
            print("--mutant rewrites the real kernels: not with --emulate (use --plant)", file=sys.stderr)
            return 2
        try:
            mutant = by_name(args.mutant)
        except (KeyError, ValueError):
            print(f"--mutant {args.mutant!r}: not a mutant of kernels.mutants (python -m conformance.kill_rate --list)", file=sys.stderr)
            return 2
        args.flavors = args.flavors or ",".join(flavors_for(mutant))
    if not args.emulate:
        import torch

        if not torch.cuda.is_available():
            print("no CUDA GPU: run on the GPU machine, or pass --emulate PRESET", file=sys.stderr)
            return 2
    if args.plant:
        from tests.kernel_emulation import PLANTS

        if not args.emulate or args.plant not in PLANTS:
            print(f"--plant needs --emulate and one of {sorted(PLANTS)}", file=sys.stderr)
            return 2
    args.flavors = args.flavors or ",".join(FLAVORS)
    jobs = args.jobs or (2 if args.emulate else 16)
    strata = [(f, d, lay) for f in args.flavors.split(",") for d in args.dtypes.split(",") for lay in args.layouts.split(",")]
    how = dict(emulate=args.emulate, plant=args.plant, parts=not args.no_parts, mutant=args.mutant)  # every job's
    if args.profile:
        work = _profile_work(args, jobs, how)
        if work is None:
            return 2
    else:
        work = [
            dict(flavor=f, dtype=d, layout=lay, n=args.per_stratum, seed=args.seed + i, max_tokens=args.max_tokens, **how)
            for i, (f, d, lay) in enumerate(strata)
        ]
    start = time.perf_counter()
    with ProcessPoolExecutor(max_workers=min(jobs, len(work)), mp_context=get_context("spawn")) as pool:
        results = list(pool.map(_stratum, work))
    seconds = time.perf_counter() - start
    summary = summarize(results)
    crashed = [r for r in results if r.get("crash")]
    backend = (
        f"emulated ({args.emulate}{', plant ' + args.plant if args.plant else ''})"
        if args.emulate
        else f"prepared adapter, CUDA{', mutant ' + args.mutant if args.mutant else ''}"
    )
    meta = {"backend": backend, "seconds": seconds, "examples": sum(len(r["rows"]) for r in results), "per_stratum": args.per_stratum, "seed": args.seed}
    if args.profile:
        meta.update(profile=args.profile, per_stratum=None, seed=None)
    print(render(summary, meta))
    for r in crashed:
        print(f"stratum {r['flavor']}/{r['dtype']}/{r['layout']} crashed:\n{r['crash']}", file=sys.stderr)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        doc = {"meta": meta, **summary, "strata": results}
        (out / "calibration.json").write_text(json.dumps(doc, indent=1, default=str))
        print(f"\nwrote {out / 'calibration.json'}")
    if args.plant or args.mutant:  # a planted error: report how often each rule caught it, per dtype
        print(f"\n{'planted ' + args.plant if args.plant else 'mutant ' + args.mutant}: examples killed (new model / legacy rule) of examples run")
        for dt, k in summary["kills_by_dtype"].items():
            print(f"  {dt:9s} new {k['new']:4d}  legacy {k['legacy']:4d}  of {k['n']}")
        return 1 if crashed else 0
    return 1 if (summary["failures"] or crashed) else 0


if __name__ == "__main__":
    sys.exit(main())
