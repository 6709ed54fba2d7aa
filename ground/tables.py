"""The suite's shared tables: one definition of every constant more than one
layer needs. No cudnn import here (reports and strategies use these on any
machine); tests/test_strategies.py and tests/test_reports.py check the
flavor tables against the installed kernels.
"""

from typing import Dict, Tuple

# The kernel packages this suite was written against; a run on other versions
# is refused with a clear message (kernels.environment.check_versions).
PINNED = {"nvidia-cudnn-frontend": "1.32.0", "nvidia-cutlass-dsl": "4.8.1"}

# ------------------------------------------------------------------ flavors
# SM80 flavor envelopes name -> (D_QK, D_V), smallest first: the kernels' own
# pick order (api_dsl._SM80_FLAVOR_DIMS / _sm80_pick_flavor).
FLAVOR_ENVELOPES: Dict[str, Tuple[int, int]] = {
    "gptoss": (64, 64),
    "llama": (128, 128),
    "dsv3": (192, 128),
    "qwen": (256, 256),
}
FLAVORS: Tuple[str, ...] = tuple(FLAVOR_ENVELOPES)

# Every flavor runs tile_m=128, tile_n=64 (config_sm80 *_CFG).
TILE_M, TILE_N = 128, 64


def flavor_of(d_qk: int, d_v: int) -> str:
    """The kernels' pick: an exact envelope wins, else the first that covers;
    "none" when no envelope covers the head dims."""
    for name, env in FLAVOR_ENVELOPES.items():
        if (d_qk, d_v) == env:
            return name
    for name, (fq, fv) in FLAVOR_ENVELOPES.items():
        if d_qk <= fq and d_v <= fv:
            return name
    return "none"


def off_envelope(d_qk: int, d_v: int) -> bool:
    """True when the serving flavor's envelope is wider than the head dims
    (the wrappers pad such operands to the envelope)."""
    return FLAVOR_ENVELOPES.get(flavor_of(d_qk, d_v)) != (d_qk, d_v)


# ------------------------------------------------------------------- dtypes
DTYPES = ("float16", "bfloat16")
DTYPE_SHORT = {"float16": "fp16", "bfloat16": "bf16"}

# ------------------------------------------------------------------- strata
# xdist distributes test items, not Hypothesis examples, so each GPU property
# is parametrized over (flavor, dtype): 4 x 2 items per layout keep 16 workers
# busy, and every item stays inside one flavor and dtype, so the compiled
# specializations a worker builds are reused by its later examples.
STRATA = [(f, d) for f in FLAVORS for d in DTYPES]
STRATA_IDS = [f"{f}-{DTYPE_SHORT[d]}" for f, d in STRATA]


# ----------------------------------------------------------------- adapters
# name -> what it drives; kernels.ADAPTERS maps the same names to classes.
ADAPTERS: Dict[str, str] = {
    "prepared": "the compile entry points (prepared_host compile_host / compile_thd_host)",
    "wrapper": "the public sdpa_fwd_wrapper_sm80",
}
DEFAULT_ADAPTER = "prepared"
# What an adapter can be asked for beyond a plain launch; each adapter class
# declares the ones it serves in ``supports`` (a property that needs one it
# lacks raises ground.outcome.Unsupported, scope "adapter": the test skips,
# naming the adapter, rather than checking another mode under the same test id).
CAPABILITIES: Dict[str, str] = {
    "caller-outputs": "the kernel writes O/LSE into the caller's (guarded, poisoned) buffers in the Case's memory order",
    "no-init": "THD without zero-initializing the outputs (compile_thd_host initialize_outputs=False)",
    "compile-only": "specialize and compile for sm_80 without a GPU",
    "thd-addressing": "hand the THD backward its buffers as the forward takes them (kernels.backward.ADDRESSINGS)",
}
ADAPTER_ENV = "SDPA_ADAPTER"
COMPAT_ENV = "SDPA_SM80_COMPAT"

# ----------------------------------------------------------------- messages
NO_GPU = "no CUDA GPU found: launching the kernels under test needs one"
