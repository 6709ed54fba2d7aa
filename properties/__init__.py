"""The properties: plain functions ``check(case, adapter, **params) -> Observation``,
each owned by one ``Property`` (``properties/registry.py``: its name, check,
the checks a failure or a known finding may name, its schedule weight, the
directions it judges and a one-line doc).

pytest (conformance/test_*.py), the repro command and the kill-rate harness
all call these same functions through ``PROPERTIES[name].check``, so a case
file replays exactly what failed. Each raises PropertyFailure when the
property does not hold; where the failure is a known finding it is returned
as an ``xfailed`` Observation instead, and the report lists it. ``CHECKS``
(the union of the properties' checks) is the vocabulary the callers of
``ground.findings.load`` / ``parse`` hand it.
"""

from properties.common import device, entry_adapter, refusal_policy
from properties.compile_cache import COMPILED_FACTS, DISK_CASES, runtime_variants
from properties.metamorphic import DENSE_RELATIONS, RELATIONS, THD_RELATIONS
from properties.registry import CHECKS, PROPERTIES, REGISTRY, Property
from properties.tails import tail_expectation

# The served checks, by name (what the tests of the suite call directly).
check_numerics, check_tails, check_compile_reuse = PROPERTIES["numerics"].check, PROPERTIES["tails"].check, PROPERTIES["compile_reuse"].check
check_disk_reuse, check_rejection, check_compiles = PROPERTIES["disk_reuse"].check, PROPERTIES["rejection"].check, PROPERTIES["compiles"].check
check_compile_distinct = PROPERTIES["compile_distinct"].check
check_graph_replay, check_launch_hygiene = PROPERTIES["graph_replay"].check, PROPERTIES["launch_hygiene"].check
check_metamorphic = PROPERTIES["metamorphic"].check
check_backward, check_determinism = PROPERTIES["backward"].check, PROPERTIES["determinism"].check
check_backward_tails = PROPERTIES["backward_tails"].check
check_backward_rejection = PROPERTIES["backward_rejection"].check
check_backward_addressing = PROPERTIES["backward_addressing"].check

__all__ = [
    "PROPERTIES",
    "Property",
    "REGISTRY",
    "CHECKS",
    "device",
    "entry_adapter",
    "refusal_policy",
    "DISK_CASES",
    "COMPILED_FACTS",
    "runtime_variants",
    "tail_expectation",
    "check_numerics",
    "check_tails",
    "check_compile_reuse",
    "check_disk_reuse",
    "check_rejection",
    "check_compiles",
    "check_graph_replay",
    "check_launch_hygiene",
    "check_compile_distinct",
    "check_metamorphic",
    "RELATIONS",
    "DENSE_RELATIONS",
    "THD_RELATIONS",
    "check_backward",
    "check_determinism",
    "check_backward_tails",
    "check_backward_rejection",
    "check_backward_addressing",
]
