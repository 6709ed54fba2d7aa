# Sourced by the tools/gpu_*.sh device scripts (run from the repository root):
# the kernels bundle (.gpu/env.sh, ../shared/gpu/pack.sh), the wheels the GPU
# image lacks (pytest-timeout; no registry there) and $OUT (what comes back).
source .gpu/env.sh || return 2
ls .gpu/wheels/*.whl >/dev/null 2>&1 && python3 -m pip install -q --no-index --no-deps .gpu/wheels/*.whl 2>/dev/null
OUT=${OUT:-/tmp/out}
