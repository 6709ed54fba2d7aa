#!/usr/bin/env bash
# One device call (carry [".gpu"]): the cold ci gate, the backward through the
# public wrapper, then the whole mutant catalogue's kill table.
#
#   bash tools/gpu_gate_and_kill.sh [gate seconds] [mutant budget seconds] [kill timeout seconds]
#
# 1. tools/gpu_gate.sh 1 (cut at the gate deadline), its failures summarised;
# 2. conformance/test_backward.py on sdpa_bwd_wrapper_sm80 (SM80-compat mode);
# 3. python -m conformance.kill_rate over every mutant and the control.
# Logs and reports under $OUT; the last lines summarise each step.
set -uo pipefail
GATE=${1:-285}
BUDGET=${2:-90}
KILL_TIMEOUT=${3:-230}
source "$(dirname "$0")/gpu_setup.sh" || exit 2
failures() { grep -E "^E +conformance.ground.outcome.PropertyFailure|^E +[A-Za-z]+Error|^FAILED" "$1" | cut -c1-240 | sort -u | head -n "${2:-12}"; }
GATE_DEADLINE=$GATE bash "$(dirname "$0")/gpu_gate.sh" 1 2>&1 | grep -v "^gpu-env" | tail -n 12
failures "$OUT/ci-1.log" 14
start=$SECONDS
env SDPA_ADAPTER=wrapper SDPA_SM80_COMPAT=1 timeout -s INT -k 15 75 python3 -m pytest -n 16 -p no:cacheprovider -q -W ignore::DeprecationWarning \
  --hypothesis-profile=ci --report-dir="$OUT/bwd-wrapper" conformance/test_backward.py -k "backward_dense or backward_thd or deterministic" > "$OUT/bwd-wrapper.log" 2>&1
echo "backward via the wrapper: exit $? in $((SECONDS - start)) s | $(tail -n 3 "$OUT/bwd-wrapper.log" | grep -E 'passed|failed' | tail -n 1)"
failures "$OUT/bwd-wrapper.log" 8
start=$SECONDS
timeout "$KILL_TIMEOUT" python3 -m conformance.kill_rate --jobs 16 --budget-s "$BUDGET" --shrink-s 10 --report-dir "$OUT/mutants" > "$OUT/mutants.log" 2>&1
echo "kill_rate: exit $? in $((SECONDS - start)) s"; tail -n 50 "$OUT/mutants.log" | cut -c1-150
