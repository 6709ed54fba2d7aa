"""The reference attention (fp32/fp64 and the same-dtype "lowp" run)."""

from .planted import activate as _activate_plant

_activate_plant()  # a no-op unless SDPA_PLANT_REFERENCE_BUG is set
