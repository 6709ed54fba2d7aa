"""The reference attention (fp32/fp64 and the same-dtype "lowp" run)."""

from .planted import activate as _activate_plant

PLANTED = _activate_plant()  # None unless SDPA_PLANT_REFERENCE_BUG is set
