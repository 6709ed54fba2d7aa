#!/usr/bin/env bash
# One device call (carry [".gpu"]): the whole mutant catalogue's kill table,
# the backward through the public wrapper, then the cold ci gate with what is
# left (the kill table first: it is the verdict-power measurement; the gate is
# cut at its deadline and reports what finished).
#
#   bash tools/gpu_gate_and_kill.sh [kill timeout s] [mutant budget s] [backward s] [gate s] [gate runs]
#
# A step given 0 seconds is skipped (e.g. `560 240 0 0`: the kill table alone).
# KILL_ARGS: more kill_rate arguments (e.g. KILL_ARGS="--only rope_k_tile_local_positions").
# BWD_TESTS: the -k expression of the wrapper backward step (default: the whole of conformance/test_backward.py).
# At most 8 files come back from a device call: everything lands in $OUT's
# logs and results.tar.gz (gpu_setup.sh), keep it that way.
# 1. python -m conformance.kill_rate over every mutant and the control;
# 2. conformance/test_backward.py on sdpa_bwd_wrapper_sm80 (SM80-compat mode);
# 3. tools/gpu_gate.sh N (N runs, default 1: the first cold, the rest warm; all within the
#    gate seconds, the one running cut at that deadline), each run's failures summarised.
# Logs and reports under $OUT; the last lines summarise each step.
set -uo pipefail
KILL_TIMEOUT=${1:-230}
BUDGET=${2:-90}
BWD=${3:-75}
GATE=${4:-285}
RUNS=${5:-1}
source "$(dirname "$0")/gpu_setup.sh" || exit 2
failures() { grep -E "^E +conformance.ground.outcome.PropertyFailure|^E +[A-Za-z]+Error|^FAILED" "$1" | cut -c1-240 | sort -u | head -n "${2:-12}"; }
[ "$KILL_TIMEOUT" -gt 0 ] && {
start=$SECONDS
timeout -s INT -k 10 "$KILL_TIMEOUT" python3 -m conformance.kill_rate --jobs 16 --budget-s "$BUDGET" --shrink-s 5 --report-dir "$OUT/mutants" ${KILL_ARGS:-} > "$OUT/mutants.log" 2>&1
echo "kill_rate: exit $? in $((SECONDS - start)) s"; grep -E "^\[|kill rate|INVALID|harness" "$OUT/mutants.log" | cut -c1-170
}
[ "$BWD" -gt 0 ] && {
start=$SECONDS
env SDPA_ADAPTER=wrapper SDPA_SM80_COMPAT=1 timeout -s INT -k 10 "$BWD" python3 -m pytest -n 16 -p no:cacheprovider -q -W ignore::DeprecationWarning \
  --hypothesis-profile=ci --report-dir="$OUT/bwd-wrapper" conformance/test_backward.py -k "${BWD_TESTS:-}" > "$OUT/bwd-wrapper.log" 2>&1
echo "backward via the wrapper: exit $? in $((SECONDS - start)) s | $(grep -E '[0-9]+ (passed|failed)' "$OUT/bwd-wrapper.log" | tail -n 1)"
grep -E "examples.*failing case" "$OUT/bwd-wrapper.log" | tail -n 1
failures "$OUT/bwd-wrapper.log" 8
}
[ "$GATE" -gt 0 ] && {
GATE_DEADLINE=$GATE bash "$(dirname "$0")/gpu_gate.sh" "$RUNS" 2>&1 | grep -v "^gpu-env" | tail -n $((12 * RUNS))
for i in $(seq 1 "$RUNS"); do [ -f "$OUT/ci-$i.log" ] && { echo "run $i failures:"; failures "$OUT/ci-$i.log" 14; }; done
}
exit 0  # the summaries above are the verdicts (a skipped last step would otherwise leave status 1)
