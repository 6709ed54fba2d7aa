#!/usr/bin/env bash
# The ci gate on the lent GPU, N times in a row, in one device call:
#
#   device call, carry [".gpu"]:  bash tools/gpu_gate.sh [N] [pytest args...]
#
# Run 1 is cold (an empty compiled cache of its own), later runs warm.
# GATE_DEADLINE=S: stop starting runs, and cut the one running, S seconds after
# the script began (a device call is at most 600 s).
# Each run's report goes to $OUT/ci-<i>; the last lines printed are one row
# per run (tests, examples, wall, compiles, error/bound p99 per quantity and
# dtype), read from report.json.
set -uo pipefail
N=${1:-1}; shift || true
source "$(dirname "$0")/gpu_setup.sh" || exit 2
status=0
began=$SECONDS
# One fresh compiled cache for the N runs: run 1 is cold even on a machine a
# previous call warmed, runs 2..N find what run 1 compiled.
CACHE=$(mktemp -d /tmp/sdpa-gate-cache.XXXXXX)
for i in $(seq 1 "$N"); do
  limit=""
  if [ "${GATE_DEADLINE:-0}" -gt 0 ]; then
    left=$(( GATE_DEADLINE - (SECONDS - began) ))
    [ $left -lt 60 ] && { echo "run $i: not started, ${left} s left before GATE_DEADLINE"; N=$((i - 1)); break; }
    limit="timeout -s INT -k 20 $((left - 25))"  # SIGINT, then SIGKILL: leave time to render
  fi
  $limit python3 -m pytest -n 16 conformance --hypothesis-profile=ci -p no:cacheprovider -q -W ignore::DeprecationWarning \
    --durations=30 --compile-cache="$CACHE" --report-dir="$OUT/ci-$i" "$@" > "$OUT/ci-$i.log" 2>&1
  rc=$?; [ $rc -ne 0 ] && status=$rc
  [ -f "$OUT/ci-$i/report.json" ] || python3 -m conformance.cli report "$OUT/ci-$i" > /dev/null 2>&1  # a run cut at the deadline
  tail -n 25 "$OUT/ci-$i.log" | grep -E "passed|failed|ERROR|stale|known findings" | tail -n 4
done
python3 - "$OUT" "$N" <<'PY'
import json, sys
out, n = sys.argv[1], int(sys.argv[2])
for i in range(1, n + 1):
    try:
        s = json.load(open(f"{out}/ci-{i}/report.json"))
    except OSError:
        print(f"run {i}: no report"); continue
    t, r, c = s["tests"], s["run"], s["compile"]
    ratios = {}
    for prop in ("numerics",):
        for q, st in (s["properties"].get(prop, {}).get("ratios_by_dtype") or {}).items():
            ratios[q] = f"p99 {st['p99']:.3f} max {st['max']:.3f} n {st['count']}"
    print(f"run {i}: tests {t} | examples {r['examples']} in {r['wall_seconds']:.0f} s ({r['examples_per_minute']:.0f}/min) | compiles {c.get('compiles')} hits {c.get('hits')}")
    print(f"    compile keys {c.get('keys')}, compiled {c.get('compiled_keys')}, repeat compiles {c.get('repeat_compiles')}: {(c.get('repeats') or {}).get('by_class')}")
    for q, line in sorted(ratios.items()):
        print(f"    error/bound {q}: {line}")
    print("    examples per property: " + ", ".join(f"{k} {v.get('examples')} ({v.get('failed')} failed)" for k, v in sorted(s["properties"].items())))
    print("    compiles per property: " + ", ".join(f"{k} {(v.get('compile') or {}).get('compiles')}" for k, v in sorted(s["properties"].items())
                                                   if (v.get("compile") or {}).get("compiles")))
    prof = s.get("profile") or {}
    if prof.get("workers"):
        spans = [w["span_seconds"] or 0 for w in prof["workers"]]
        print(f"    profile: {len(spans)} workers, span min {min(spans):.0f} / mean {sum(spans) / len(spans):.0f} / max {max(spans):.0f} s, "
              f"sum {prof['span_seconds']:.0f} s; examples {prof['example_seconds']:.0f} s: "
              + ", ".join(f"{k} {v:.0f}" for k, v in prof["phases"].items()))
PY
exit $status
