#!/usr/bin/env bash
# One short device call (carry [".gpu"]): the numerics tests alone (ci
# profile, 16 workers, cold), for the per-example phase profile
# (conformance/ground/phases.py) to compare with a gate's numerics rows.
#   bash tools/gpu_numerics_profile.sh [seconds]
set -uo pipefail
SECS=${1:-120}
source "$(dirname "$0")/gpu_setup.sh" || exit 2
timeout -s INT -k 15 "$SECS" python3 -m pytest -n 16 --hypothesis-profile=ci -p no:cacheprovider -q -W ignore::DeprecationWarning \
  --report-dir="$OUT/num" conformance/test_numerics.py > "$OUT/num.log" 2>&1
echo "rc $? | $(grep -E '[0-9]+ (passed|failed)' "$OUT/num.log" | tail -1)"
[ -f "$OUT/num/report.json" ] || python3 -m conformance.cli report "$OUT/num" > /dev/null 2>&1
python3 - "$OUT/num/report.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
p = s["properties"]["numerics"]
n = p["examples"]
print(f"numerics examples {n}, wall {s['run']['wall_seconds']:.0f} s, compiles {p['compile']['compiles']}")
print("per-example seconds by phase:", {k: round(v / n, 4) for k, v in p["phases"].items()})
print("phase totals:", p["phases"])
PY
