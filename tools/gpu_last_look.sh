#!/usr/bin/env bash
# One short device call (carry [".gpu"]): the metamorphic family in the ci
# profile, the backward's numerics as far as time allows, and the
# thd_neighbour_key mutant searched by the reference comparison (numerics_thd)
# and by the metamorphic relations, side by side. Every run is cut at its
# deadline (SIGINT, then SIGKILL) and its report re-rendered from the shards;
# the last lines list each case file (property, test, summary).
#
#   bash tools/gpu_last_look.sh [metamorphic seconds] [backward seconds]
set -uo pipefail
META_S=${1:-200}; BWD_S=${2:-130}
source "$(dirname "$0")/gpu_setup.sh" || exit 2
kill_run() {  # name, kinds
  timeout -k 10 $((META_S - 10)) python3 -m conformance.kill_rate --only thd_neighbour_key --properties "$2" --jobs 2 --budget-s 90 --shrink-s 15 \
    --report-dir "$OUT/kill-$1" > "$OUT/kill-$1.log" 2>&1
}
kill_run numerics numerics_thd & k1=$!
kill_run meta metamorphic_thd_seq_perm,metamorphic_thd_isolation,metamorphic_thd_position & k2=$!
suite() {  # name, seconds, pytest args...
  local name=$1 secs=$2; shift 2
  local t0=$SECONDS
  timeout -s INT -k 20 "$secs" python3 -m pytest -n 14 --hypothesis-profile=ci -p no:cacheprovider -q -W ignore::DeprecationWarning \
    --report-dir="$OUT/$name" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  [ -f "$OUT/$name/report.json" ] || python3 -m conformance.cli report "$OUT/$name" > /dev/null 2>&1
  echo "== $name: rc $rc in $((SECONDS - t0)) s | $(grep -E '[0-9]+ (passed|failed)' "$OUT/$name.log" | tail -1)"
  python3 - "$OUT/$name" <<'PY'
import json, sys, glob, os
d = sys.argv[1]
try:
    s = json.load(open(os.path.join(d, "report.json")))
    r = s["run"]
    print(f"   tests {s['tests']} | examples {r['examples']} | compiles {s['compile'].get('compiles')}")
    for n, p in s["properties"].items():
        if p["examples"]:
            print(f"   {n}: examples {p['examples']} passed {p['passed']} failed {p['failed']} shrinking {p['shrinking']} errors {p['errors']} ratios {({q: round(v['max'], 3) for q, v in p['ratios'].items()})}")
except Exception as e:
    print("   no report:", e)
seen = set()
for f in sorted(glob.glob(os.path.join(d, "cases", "*.json"))):
    c = json.load(open(f))
    key = (c.get("nodeid"), (c.get("summary") or "")[:60])
    if key in seen:
        continue
    seen.add(key)
    case = c.get("case", {})
    facts = {k: v for k, v in case.items() if k in ("layout", "batch", "h_q", "h_kv", "sinks", "sink_layout", "lse_layout", "has_lse", "rope", "bias", "sched", "memory")}
    print(f"   CASE {os.path.basename(f)} {c.get('nodeid')} params={c.get('params')} | {(c.get('summary') or '')[:230]} | {facts}")
PY
}
suite meta "$META_S" conformance/test_metamorphic.py
wait $k1 $k2
for k in numerics meta; do echo "== kill-$k"; grep -E "killed|survived|kill rate|error" "$OUT/kill-$k.log" | head -5; done
suite bwd "$BWD_S" conformance/test_backward.py -k "backward_dense or backward_thd"
