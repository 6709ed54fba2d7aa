#!/usr/bin/env bash
# One device call (carry [".gpu"]): the planted-fault demonstrations and the
# precision mutants' kill search, on the prepared adapter.
#
#   bash tools/gpu_faults_and_mutants.sh [mutant budget seconds]
#
# 1. fault_v_stride_out_of_bounds (an illegal address, f16 template only): the
#    gptoss tests must fail as "CUDA context lost", the qwen (d256) tests pass.
# 2. fault_kv_loop_never_ends (a hang): the same split, ended by --sdpa-timeout.
# 3. the precision mutants (and the control) through conformance.kill_rate.
# Logs and reports under $OUT; the last lines are one summary line per step.
set -uo pipefail
BUDGET=${1:-100}
source "$(dirname "$0")/gpu_setup.sh" || exit 2
sel='dense and (gptoss or qwen)'
for fault in fault_v_stride_out_of_bounds fault_kv_loop_never_ends; do
  env -u CI SDPA_PLANT_MUTANT=$fault timeout 170 python3 -m pytest -n 16 -p no:cacheprovider -q -W ignore::DeprecationWarning \
    --hypothesis-profile=ci --sdpa-timeout=60 --max-worker-restart=64 --report-dir="$OUT/$fault" conformance/test_numerics.py -k "$sel" \
    > "$OUT/$fault.log" 2>&1
  echo "$fault: exit $? | $(grep -E '^(FAILED|PASSED)|[0-9]+ (passed|failed)' "$OUT/$fault.log" | tr '\n' ' ' | cut -c1-900)"
done
timeout 300 python3 -m conformance.kill_rate --only precision_row_sum_in_io_dtype,precision_ln2_four_digits,precision_scale_in_io_dtype,precision_long_row_drops_last_key \
  --jobs 16 --budget-s "$BUDGET" --shrink-s 20 --report-dir "$OUT/mutants" > "$OUT/mutants.log" 2>&1
echo "kill_rate: exit $?"; tail -n 12 "$OUT/mutants.log"
