# Sourced by the tools/gpu_*.sh device scripts (run from the repository root):
# the kernels bundle (.gpu/env.sh, ../shared/gpu/pack.sh), the wheels the GPU
# image lacks (pytest-timeout; no registry there) and $OUT (what comes back).
source .gpu/env.sh || return 2
ls .gpu/wheels/*.whl >/dev/null 2>&1 && python3 -m pip install -q --no-index --no-deps .gpu/wheels/*.whl 2>/dev/null
OUT=${OUT:-/tmp/out}
# Only a handful of files come back from a device call: on exit, the outermost
# script packs every report, case file and log below $OUT's top level into
# $OUT/results.tar.gz (shards, plots and HTML left out) and keeps the top-level logs.
bundle_out() {
  [ -d "$OUT" ] || return 0
  ( cd "$OUT" && find . -mindepth 2 -type f ! -path "*/shards/*" ! -name "*.png" ! -name "*.html" -print0 \
      | tar czf /tmp/sdpa-results.tar.gz --null -T - \
    && find . -mindepth 1 -maxdepth 1 -type d -exec rm -rf {} + && mv /tmp/sdpa-results.tar.gz results.tar.gz )
}
if [ -z "${SDPA_BUNDLE_OWNER:-}" ]; then
  export SDPA_BUNDLE_OWNER=$$
  mkdir -p "$OUT"
  trap bundle_out EXIT
fi
