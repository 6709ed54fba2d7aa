"""The SM80 flavor envelopes, in the kernels' own pick order, without
importing cudnn (reports and strategies use them on any machine).

Mirrors ``api_dsl._SM80_FLAVOR_DIMS`` / ``_sm80_pick_flavor``;
tests/test_strategies.py and tests/test_reports.py check both against the
installed kernels.
"""

from typing import Dict, Tuple

# name -> (D_QK, D_V), smallest envelope first.
FLAVOR_ENVELOPES: Dict[str, Tuple[int, int]] = {
    "gptoss": (64, 64),
    "llama": (128, 128),
    "dsv3": (192, 128),
    "qwen": (256, 256),
}
FLAVORS: Tuple[str, ...] = tuple(FLAVOR_ENVELOPES)


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
