#!/usr/bin/env bash
# GPU smoke run of the guard bands, the bias poison and the adapter
# capabilities (branch `guards`), both adapters, in ONE device call:
#
#   bash tools/gpu_smoke_guards.sh                 # prepared, then wrapper (--sm80-compat off SM80)
#   bash tools/gpu_smoke_guards.sh prepared        # one adapter only
#
# Each adapter's pytest is capped at $SMOKE_SECONDS (default 260 s) so both fit
# in the 600 s of one call. Reports (report.json/.md/.html, case files) go to
# ${OUT:-./smoke-out}/<adapter>; `-rs` prints every skip reason: on the wrapper
# the THD `no-init` tails tests must SKIP naming the adapter and "no 'no-init'".
# Exit status: 0 when every pytest run passed (or was expected to fail).
set -u
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
out="${OUT:-$PWD/smoke-out}"
secs="${SMOKE_SECONDS:-260}"
workers="${SMOKE_WORKERS:-12}"
adapters=("${@:-prepared wrapper}")
# Three strata: an exact envelope (gptoss 64), an off-envelope staged one
# (dsv3 192x128 pads V/O: staging copies are guarded and checked) and d=256.
strata="gptoss-fp16 or dsv3-bf16 or qwen-fp16"
rc=0
run() {  # name, extra pytest args...
    local name="$1"; shift
    echo "=== $name: pytest $*"
    timeout -k 10 "$secs" python3 -m pytest -q -p no:warnings -rs -n "$workers" --hypothesis-profile=ci \
        --report-dir="$out/$name" "$@"
    local code=$?
    echo "=== $name: exit $code"
    [ "$code" -eq 0 ] || rc=1
}
# The guard unit tests, incl. the move of every guarded buffer to the GPU.
run unit tests/test_guards.py -n 2
for adapter in ${adapters[*]}; do
    case "$adapter" in
        prepared) extra=(--adapter=prepared); rejects="test_prepared_rejects and not before_compiling" ;;
        wrapper) extra=(--adapter=wrapper --sm80-compat); rejects="test_wrapper_rejects" ;;
        *) echo "unknown adapter $adapter"; exit 2 ;;
    esac
    run "$adapter" "${extra[@]}" conformance/test_numerics.py conformance/test_tails.py conformance/test_compile.py conformance/test_contracts.py \
        -k "$strata or (test_runtime_facts_mint_no_compile and not cpu) or ($rejects)"
done
exit $rc
