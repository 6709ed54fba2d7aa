"""The properties: plain functions ``check(case, adapter, **params) -> Observation``.

pytest (conformance/test_*.py), the repro command and the kill-rate harness
all call these same functions through ``PROPERTIES``, so a case file replays
exactly what failed. Each raises PropertyFailure when the property does not
hold; where the failure is a known finding it is returned as an ``xfailed``
Observation instead, and the report lists it.
"""

from typing import Callable, Dict

from ground.outcome import Observation
from properties.backward import check_backward, check_backward_addressing, check_backward_rejection, check_determinism
from properties.backward_tails import check_backward_tails
from properties.common import device, entry_adapter, refusal_policy, served
from properties.compile_cache import COMPILED_FACTS, DISK_CASES, check_compile_distinct, check_compile_reuse, check_compiles, check_disk_reuse, runtime_variants
from properties.launch import check_graph_replay, check_launch_hygiene
from properties.metamorphic import DENSE_RELATIONS, RELATIONS, THD_RELATIONS, check_metamorphic
from properties.numerics import check_numerics
from properties.rejection import check_rejection
from properties.tails import check_tails, tail_expectation

# name -> check(case, adapter, **params); params are what recorder.begin saw.
# Each runs under the refusal policy (common.served): a Case its adapter cannot
# express is refused, and every ``ground.outcome.Unsupported`` it raises is
# rejected (a Hypothesis example of scope "case") or raised (skip; CLI exit 2).
PROPERTIES: Dict[str, Callable[..., Observation]] = {
    name: served(check)
    for name, check in (
        ("numerics", check_numerics),
        ("tails", check_tails),
        ("compile_reuse", check_compile_reuse),
        ("disk_reuse", check_disk_reuse),
        ("compile_distinct", check_compile_distinct),
        ("rejection", check_rejection),
        ("compiles", check_compiles),
        ("graph_replay", check_graph_replay),
        ("launch_hygiene", check_launch_hygiene),
        ("metamorphic", check_metamorphic),
        ("backward", check_backward),
        ("determinism", check_determinism),
        ("backward_tails", check_backward_tails),
        ("backward_rejection", check_backward_rejection),
        ("backward_addressing", check_backward_addressing),
    )
}
check_numerics, check_tails, check_compile_reuse = PROPERTIES["numerics"], PROPERTIES["tails"], PROPERTIES["compile_reuse"]
check_disk_reuse, check_rejection, check_compiles = PROPERTIES["disk_reuse"], PROPERTIES["rejection"], PROPERTIES["compiles"]
check_graph_replay, check_launch_hygiene = PROPERTIES["graph_replay"], PROPERTIES["launch_hygiene"]
check_metamorphic = PROPERTIES["metamorphic"]
check_backward, check_determinism = PROPERTIES["backward"], PROPERTIES["determinism"]
check_backward_tails = PROPERTIES["backward_tails"]
check_backward_rejection = PROPERTIES["backward_rejection"]
check_backward_addressing = PROPERTIES["backward_addressing"]

__all__ = [
    "PROPERTIES",
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
