#!/usr/bin/env bash
# One device call (carry [".gpu"]): the backward properties on both entry
# points in the ci profile, the probes and the replays of the wrapper's
# finding, with the backward mutants' kill search running beside them.
#
#   bash tools/gpu_backward.sh [mutant budget s] [per-adapter timeout s]
#
# BWD_MUTANTS: the mutants searched (comma list; default every bwd_* mutant).
# BWD_KINDS: the kinds they are searched with (default the backward ones).
# KILL_JOBS: mutants at once (default 2: the search shares the GPU and the
#   CPUs with the pytest runs).  PROBES: tools/*.py probes run first
#   (default: the dBias and the wrapper Stats-strides probes).
# Steps, each with its log under $OUT and one summary line at the end:
# 0. conformance.kill_rate over BWD_MUTANTS, in the background;
# 1. the PROBES;
# 2. conformance/test_backward.py, prepared adapter (SdpaBwdDslSm80 on caller buffers);
# 3. the same, public wrapper in SM80-compatibility mode (off an A100);
# 4. `sdpa-conformance repro` of each findings/wrapper-*.json (exit 1: it still reproduces);
# 5. the kill search's table, once it ends.
set -uo pipefail
BUDGET=${1:-120}
PER_ADAPTER=${2:-420}
source "$(dirname "$0")/gpu_setup.sh" || exit 2
mutants=${BWD_MUTANTS:-$(python3 -c "from kernels.mutants import BWD_MUTANTS; print(','.join(m.name for m in BWD_MUTANTS))")}
kinds=${BWD_KINDS:-backward_dense,backward_thd,backward_tails_dense,backward_tails_thd_init,backward_tails_thd_noinit,backward_compile_reuse_thd}
kill_start=$SECONDS
timeout -s INT -k 10 $((BUDGET + 120)) python3 -m conformance.kill_rate --only "$mutants" --properties "$kinds" \
  --jobs "${KILL_JOBS:-2}" --budget-s "$BUDGET" --shrink-s 20 --report-dir "$OUT/bwd-mutants" > "$OUT/bwd-mutants.log" 2>&1 &
kill_pid=$!
for probe in ${PROBES:-gpu_dbias_probe.py gpu_wrapper_stats_probe.py}; do
  timeout 180 python3 "tools/$probe" > "$OUT/${probe%.py}.log" 2>&1
  echo "$probe: exit $? | $(grep -v -i warn "$OUT/${probe%.py}.log" | tail -n 12 | cut -c1-300)"
done
for adapter in prepared wrapper; do
  start=$SECONDS
  env SDPA_ADAPTER=$adapter SDPA_SM80_COMPAT=1 timeout -s INT -k 10 "$PER_ADAPTER" python3 -m pytest -n 12 -p no:cacheprovider -q -W ignore::DeprecationWarning \
    -rfE --hypothesis-profile=ci --report-dir="$OUT/bwd-$adapter" conformance/test_backward.py > "$OUT/bwd-$adapter.log" 2>&1
  echo "backward $adapter: exit $? in $((SECONDS - start)) s | $(grep -E '[0-9]+ (passed|failed)|examples' "$OUT/bwd-$adapter.log" | tr '\n' ' ' | cut -c1-600)"
  grep -E "^FAILED|^ERROR" "$OUT/bwd-$adapter.log" | cut -c1-240 | head -n 8
done
for case in findings/wrapper-*.json; do
  python3 -m conformance.cli repro "$case" > "$OUT/repro-$(basename "$case" .json).log" 2>&1
  echo "repro $case: exit $? | $(grep -v -i warn "$OUT/repro-$(basename "$case" .json).log" | tail -n 2 | tr '\n' ' ' | cut -c1-300)"
done
wait "$kill_pid"
echo "kill_rate: exit $? in $((SECONDS - kill_start)) s"; tail -n 16 "$OUT/bwd-mutants.log"
