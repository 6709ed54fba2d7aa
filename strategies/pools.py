"""The small value pools every strategy draws shapes from.

Why pools and not free integers: each distinct dense geometry (all shapes and
strides of Q/K/V/O/bias) is a new kernel compile (~1.5 s), while THD compiles
once per (flavor, dtype, mask family, h, h_kv, n_seq, swa_window). Drawing
batch, heads, sequence lengths, head dims and windows from a few fixed values
makes geometries recur across examples (and across runs), so the compile cache
serves most of them. Runtime-only values (dense padding lengths, THD
per-sequence lengths, offsets, scale, seed) are free: they never reach a key.

Every pool is ordered simplest first: ``sampled_from`` shrinks toward index 0.
"""

from __future__ import annotations

from typing import Dict, List, Tuple

# Flavor envelopes (d_qk, d_v), in the kernels' own pick order.
from ground.tables import FLAVOR_ENVELOPES, FLAVORS, TILE_M, TILE_N  # noqa: F401  (re-exported)

# Lengths on and around the tile edges (behind a boolean draw: "edges").
EDGE_LENGTHS = (1, 63, 64, 65, 127, 128, 129, 191, 192, 255, 256, 257)
# Everyday lengths: small, reused, one under/over a power of two.
SMALL_LENGTHS = (1, 2, 5, 16, 33)

BATCHES = (1, 2, 3)
# h_kv first, then the group size h_q / h_kv: GQA/MQA are integral by construction,
# up to 8:1 (GQA 16/2, MQA 8/1).
KV_HEADS = (1, 2)
GROUP_SIZES = (1, 2, 3, 4, 8)

# Off-envelope head dims: multiples of 8 (the native pointer host's vector
# width, prepared_sm80.native_layouts), with both d % 16 == 0 and == 8.
HEAD_DIMS = (8, 24, 32, 56, 64, 72, 96, 120, 128, 136, 160, 184, 192, 200, 232, 248, 256)

# Left windows (a compile key for THD, a constexpr for dense) and right bands
# (runtime), incl. 0 and tile edges.
WINDOWS = (0, 1, 16, 63, 64, 65, 128)
RIGHT_BANDS = (0, 1, 5, 64)

# Softmax scales behind the "custom" draw; the nasty ones behind a second one.
SCALES = (0.5, 0.125, 1.0, 0.03125, 2.0)
NASTY_SCALES = (0.0, -0.125, -1.0, 8.0, 1e-4, -8.0)

# THD per-sequence lengths.
THD_SMALL = (1, 2, 3, 7, 16, 31)
THD_EDGES = (63, 64, 65, 127, 128, 129)
THD_LONG = (300, 513, 1000)
THD_MAX_SEQS = 4  # sequence counts 1..4: n_seq is a THD compile key
THD_OFFSETS = (1, 8, 64)  # non-zero first offsets / capacity slack, in tokens


def off_envelope_dims(flavor: str) -> List[Tuple[int, int]]:
    """Every (d_qk, d_v) from HEAD_DIMS that the kernels' flavor pick sends to
    ``flavor`` without being its exact envelope: covered by its envelope and
    by no earlier one (the pick walks the envelopes smallest first)."""
    order = list(FLAVOR_ENVELOPES)
    env = FLAVOR_ENVELOPES[flavor]
    earlier = [FLAVOR_ENVELOPES[f] for f in order[: order.index(flavor)]]
    out = []
    for dq in HEAD_DIMS:
        for dv in HEAD_DIMS:
            covered = dq <= env[0] and dv <= env[1]
            taken = any(dq <= e[0] and dv <= e[1] for e in earlier)
            if covered and not taken and (dq, dv) != env:
                out.append((dq, dv))
    return out


# Precomputed once: strategies bound dims by construction from this table.
OFF_ENVELOPE_DIMS: Dict[str, Tuple[Tuple[int, int], ...]] = {f: tuple(off_envelope_dims(f)) for f in FLAVORS}
