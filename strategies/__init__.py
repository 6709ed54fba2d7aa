"""Hypothesis strategies of the suite: valid Cases, violating Cases, profiles.

- ``cases``/``dense_cases``/``thd_cases``: valid facts (``facts``, ``varlen``);
  their compile-key facts come from per-stratum pools or free draws
  (``geometry``: ``geometry="pool"|"free"``, $SDPA_GEOMETRY, the profile).
- ``backward_cases``: backward Cases (direction bwd) from the same facts (``backward``);
  ``based_thd_backward_cases``: deterministic THD ones with cu_seqlens_q[0] > 0.
- ``violating_cases``: one contract rule applied (``violations``).
- ``load_profile``/``examples``: Hypothesis profiles (``profiles``).
"""

from .backward import backward_cases, based_thd_backward_cases
from .facts import cases, dense_cases
from .profiles import examples, load_profile
from .varlen import thd_cases
from .violations import violating_cases

__all__ = ["backward_cases", "based_thd_backward_cases", "cases", "dense_cases", "thd_cases", "violating_cases", "load_profile", "examples"]
