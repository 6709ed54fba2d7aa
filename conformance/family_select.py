"""Which kernel families a run judges (``--family`` / ``$SDPA_FAMILY``).

Values: a family of ground.families (``sm80``, ``sm90``) or ``all``. Default:
the families the live GPU runs (each family's own arch natively, and the SM80
code on any newer GPU, as the sm80 adapters run it); without a GPU, every
family (their CPU compile tiers, the launches skip). A test judges the family
its ``family(name)`` marker names; an unmarked test under conformance/ judges
the sm80 family (the properties); any other unmarked test (the suite's own)
runs in every selection. Tests of families not selected are deselected, never
skipped. The header and report name the selection and its mode per family:
``native sm90``, ``sm80 code on sm_90``, ``compile sm90`` (planned and compiled
on the CPU; no GPU of its arch here).
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional, Tuple

from ground.families import DEFAULT_FAMILY, FAMILIES, FAMILY_NAMES

FAMILY_ENV = "SDPA_FAMILY"
ALL = "all"
CHOICES = FAMILY_NAMES + (ALL,)
MARKER = "family(name): the kernel family a test judges (ground.families); --family selects"
# The tests of a family that the gate runs besides conformance/ (the properties, the sm80 family's).
# None launches a kernel: each module is marked cpu_tier, so the gate passes them only with --cpu-tier.
GATE_TESTS = {
    "sm80": (),
    "sm90": (
        "tests/test_compile_tier_sm90.py",
        "tests/test_compile_cache_sm90.py",
        "tests/test_pairs_sm90.py",
        "tests/test_contracts_sm90.py",
        "tests/test_sm90_specialize.py",
    ),
}
assert set(GATE_TESTS) == set(FAMILY_NAMES)


def parse(value: Optional[str], source: str = "--family") -> Optional[Tuple[str, ...]]:
    """The families ``value`` names (None: not given, the default applies);
    ValueError naming the source and the choices for anything else."""
    if value is None or value == "":
        return None
    if value == ALL:
        return FAMILY_NAMES
    if value in FAMILIES:
        return (value,)
    raise ValueError(f"{source}={value!r}: expected one of {', '.join(CHOICES)}")


def capability_of(arch: str) -> Tuple[int, int]:
    """(major, minor) of an ``sm_XY`` / ``sm_XYa`` arch."""
    digits = arch[len("sm_") :].rstrip("a")
    return int(digits[:-1]), int(digits[-1])


def runs_on(name: str, capability: Optional[Tuple[int, int]]) -> Optional[str]:
    """How family ``name`` runs on a GPU of ``capability``: "native", "compat"
    (the SM80 code on a newer GPU) or None (it cannot launch there)."""
    if capability is None:
        return None
    own = capability_of(FAMILIES[name].arch)
    if tuple(capability) == own:
        return "native"
    if name == DEFAULT_FAMILY and tuple(capability) > own:
        return "compat"
    return None  # an arch-specific (sm_90a) family runs on its own arch only


def default(capability: Optional[Tuple[int, int]]) -> Tuple[str, ...]:
    if capability is None:
        return FAMILY_NAMES
    return tuple(n for n in FAMILY_NAMES if runs_on(n, capability) is not None)


def mode(families: Tuple[str, ...], capability: Optional[Tuple[int, int]]) -> str:
    """The selection's mode, one part per family: "native sm90", "sm80 code on sm_90", "compile sm90"."""
    parts = []
    for name in families:
        how = runs_on(name, capability)
        if how == "native":
            parts.append(f"native {name}")
        elif how == "compat":
            parts.append(f"{name} code on sm_{capability[0]}{capability[1]}")
        else:
            parts.append(f"compile {name}")
    return ", ".join(parts)


def family_of(item, rootpath: Path) -> Optional[str]:
    """The family a collected test judges (None: the suite's own test, every selection)."""
    marker = item.get_closest_marker("family")
    if marker is not None:
        return marker.args[0]
    try:
        top = Path(item.path).resolve().relative_to(Path(rootpath).resolve()).parts[0]
    except (ValueError, IndexError):
        return None
    return DEFAULT_FAMILY if top == "conformance" else None


def deselect(config, items, families: Tuple[str, ...]) -> None:
    """Drop the tests of families not in ``families`` (pytest_deselected)."""
    unknown = sorted({m.args[0] for item in items for m in item.iter_markers("family")} - set(FAMILY_NAMES))
    if unknown:
        raise ValueError(f"family marker {unknown[0]!r}: not a family of ground.families ({', '.join(FAMILY_NAMES)})")
    dropped = [item for item in items if family_of(item, config.rootpath) not in (None, *families)]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        gone = set(dropped)
        items[:] = [item for item in items if item not in gone]
