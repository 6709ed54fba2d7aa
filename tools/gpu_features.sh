#!/usr/bin/env bash
# One device call (carry [".gpu"]): the kernel feature space (issue 13) on the GPU.
#
#   bash tools/gpu_features.sh [mutant budget seconds]
#
# 1. the numerics and tails tests (ci profile, prepared adapter): the pools now
#    carry RoPE, the schedulers, no-Stats runs, Stats layouts, sink units /
#    dtypes / strides and int64 cu_seqlens on existing rows.
# 2. the same on the public wrapper (it takes sched and rope; the rest skip).
# 3. the feature mutants (and the control) through conformance.kill_rate.
# Logs and reports under $OUT; the last lines are one summary line per step.
set -uo pipefail
BUDGET=${1:-120}
source "$(dirname "$0")/gpu_setup.sh" || exit 2
for adapter in prepared wrapper; do
  timeout 280 python3 -m pytest -n 16 -p no:cacheprovider -q -W ignore::DeprecationWarning --hypothesis-profile=ci \
    --adapter=$adapter $([ $adapter = wrapper ] && echo --sm80-compat) --report-dir="$OUT/$adapter" \
    conformance/test_numerics.py conformance/test_tails.py > "$OUT/$adapter.log" 2>&1
  echo "$adapter: exit $? | $(grep -E '[0-9]+ (passed|failed)' "$OUT/$adapter.log" | tail -1)"
  grep -E '^FAILED' "$OUT/$adapter.log" | head -20
done
timeout 300 python3 -m conformance.kill_rate --only rope_k_tile_local_positions,sched_lpt_decode_drops_batch,sched_lpt_l2_full_last_block,lse_row_stride_assumed_one,thd_lse_stride_ignored,sink_log2_converted_again,prefix_int64_read_as_int32 \
  --jobs 8 --budget-s "$BUDGET" --shrink-s 20 --report-dir "$OUT/mutants" > "$OUT/mutants.log" 2>&1
echo "kill_rate: exit $?"; tail -n 14 "$OUT/mutants.log"
