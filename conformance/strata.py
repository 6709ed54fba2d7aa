"""How the GPU properties are split into pytest items.

xdist distributes test items, not Hypothesis examples, so each property is
parametrized over (flavor, dtype): 4 x 2 items per layout keep 16 workers
busy, and every item stays inside one flavor and dtype, so the compiled
specializations a worker builds are reused by its later examples.
"""

from conformance.flavors import FLAVORS

DTYPES = ("float16", "bfloat16")
STRATA = [(f, d) for f in FLAVORS for d in DTYPES]
STRATA_IDS = [f"{f}-{'fp16' if d == 'float16' else 'bf16'}" for f, d in STRATA]
