#!/usr/bin/env bash
# One device call (carry [".gpu"]): the backward properties on both entry
# points in the ci profile, then the backward mutants' kill search.
#
#   bash tools/gpu_backward.sh [mutant budget seconds]
#
# 0. tools/gpu_dbias_probe.py: dBias of fixed bias Cases against the reference and
#    each arithmetic the kernel could be doing (< 60 s; its table in $OUT/dbias-probe.log).
# 1. conformance/test_backward.py, prepared adapter (SdpaBwdDslSm80 on caller buffers).
# 2. the same, public wrapper in SM80-compatibility mode (off an A100).
# 3. the bwd_* mutants (and the control) through conformance.kill_rate, searched
#    with the backward kinds only.
# Logs and reports under $OUT; the last lines are one summary line per step.
set -uo pipefail
BUDGET=${1:-120}
source "$(dirname "$0")/gpu_setup.sh" || exit 2
timeout 180 python3 tools/gpu_dbias_probe.py > "$OUT/dbias-probe.log" 2>&1
echo "dbias probe: exit $? | $(grep -v -i warn "$OUT/dbias-probe.log" | tail -n 11 | cut -c1-400)"
for adapter in prepared wrapper; do
  start=$(date +%s)
  env SDPA_ADAPTER=$adapter SDPA_SM80_COMPAT=1 timeout 420 python3 -m pytest -n 16 -p no:cacheprovider -q -W ignore::DeprecationWarning \
    --hypothesis-profile=ci --report-dir="$OUT/bwd-$adapter" conformance/test_backward.py > "$OUT/bwd-$adapter.log" 2>&1
  echo "backward $adapter: exit $? in $(( $(date +%s) - start )) s | $(grep -E '[0-9]+ (passed|failed)|examples' "$OUT/bwd-$adapter.log" | tr '\n' ' ' | cut -c1-600)"
done
mutants=$(python3 -c "from kernels.mutants import BWD_MUTANTS; print(','.join(m.name for m in BWD_MUTANTS))")
timeout 900 python3 -m conformance.kill_rate --only "$mutants" --properties backward_dense,backward_thd,backward_tails_dense,backward_tails_thd_init,backward_tails_thd_noinit,backward_compile_reuse_thd \
  --jobs 10 --budget-s "$BUDGET" --shrink-s 20 --report-dir "$OUT/bwd-mutants" > "$OUT/bwd-mutants.log" 2>&1
echo "kill_rate: exit $?"; tail -n 16 "$OUT/bwd-mutants.log"
