"""The kernels' degrees of freedom, each mapped to the Case facts that draw it
or declared out of scope with the reason: ONE table.

The entries are the fields of ``cudnn.sdpa.fwd.config_sm80.TemplateParams``
(the compile-time identity of an SM80 forward kernel), the parameters of the
public ``sdpa_fwd_wrapper_sm80`` and of the compile entry points
``prepared_host.compile_host`` / ``compile_thd_host``. The drawn ones come
from the facts' declarations (``fact(kernel=("TemplateParams.stats_log2",))``):
a fact names the fields and arguments that realise it, ``DRAWN`` is the
inverse; the out-of-scope ones, with their reasons, are listed here.
tests/test_feature_space.py derives the names from those objects themselves
(dataclass fields, ``inspect.signature``), so a field or argument added
upstream fails it until it is drawn (a fact's ``kernel=``) or declared out of
scope (a reason here). The
report's kernel-field coverage table (reports/coverage.py) reads the same
table: field -> the values of its facts' coverage axes -> examples.
"""

from __future__ import annotations

from typing import Dict, Iterable, List, Tuple

from .case import AUTO, FACTS

# Where a degree of freedom is declared.
SOURCES = {
    "TemplateParams": "cudnn.sdpa.fwd.config_sm80.TemplateParams (dataclass fields)",
    "wrapper": "cudnn.sdpa.fwd.sdpa_fwd_wrapper_sm80 (parameters)",
    "compile_host": "cudnn.sdpa.fwd.kernels.sm80.prepared_host.compile_host (parameters)",
    "compile_thd_host": "cudnn.sdpa.fwd.kernels.sm80.prepared_host.compile_thd_host (parameters)",
}


def _drawn() -> Dict[Tuple[str, str], Tuple[str, ...]]:
    """(source, name) -> the Case facts that draw it, from the facts'
    declarations (``Fact.kernel``: "source.name" entries): sources in
    ``SOURCES`` order, then names and facts in declaration order."""
    out: Dict[Tuple[str, str], List[str]] = {}
    for source in SOURCES:
        for f in FACTS.values():
            for entry in f.kernel:
                src, _, name = entry.partition(".")
                if src == source:
                    out.setdefault((src, name), []).append(f.name)
    return {key: tuple(names) for key, names in out.items()}


# (source, name) -> the Case facts that draw it (``Fact.kernel``).
DRAWN: Dict[Tuple[str, str], Tuple[str, ...]] = _drawn()

# (source, name) -> why no Case fact draws it.
OUT_OF_SCOPE: Dict[Tuple[str, str], str] = {
    ("TemplateParams", "tile_m"): "fixed per flavor (api_dsl._SM80_FLAVOR_KNOBS); neither public entry takes it: the flavor (head dims) draws it",
    ("TemplateParams", "num_warps"): "fixed per flavor (api_dsl._SM80_FLAVOR_KNOBS); neither public entry takes it: the flavor (head dims) draws it",
    ("TemplateParams", "tile_n"): "fixed per flavor (api_dsl._SM80_FLAVOR_KNOBS); neither public entry takes it: the flavor (head dims) draws it",
    ("wrapper", "scale_output"): "anything but 1.0 raises NotImplementedError: a contract rule (contracts.py scale_output_not_one), not a computation",
    ("wrapper", "current_stream"): "which stream the launch is queued on, not what it computes (the adapters launch on torch's current stream)",
    ("compile_host", "module"): "the template module specialized from TemplateParams (its fields are the TemplateParams rows)",
    ("compile_host", "params"): "the TemplateParams themselves (their fields are the TemplateParams rows)",
    ("compile_host", "cache_key"): "the compiled cache's key, derived from the other arguments (the disk_reuse property judges it)",
    ("compile_thd_host", "module"): "the template module specialized from TemplateParams (its fields are the TemplateParams rows)",
    ("compile_thd_host", "initialize_outputs"): "a property parameter, not a Case fact: the tails test runs both modes (initialize_outputs=True/False)",
}


def unaccounted(source: str, names: Iterable[str]) -> List[str]:
    """The names of ``source`` that are neither drawn nor declared out of scope."""
    return [n for n in names if (source, n) not in DRAWN and (source, n) not in OUT_OF_SCOPE]


def axes_of(fact_names: Iterable[str]) -> Tuple[str, ...]:
    """The coverage axes that show these facts (an AUTO fact's own axis, or
    the derived axes it names), in order, without repeats."""
    out: List[str] = []
    for name in fact_names:
        f = FACTS[name]
        for axis in (name,) if f.coverage == AUTO else (f.coverage or ()):
            if axis not in out:
                out.append(axis)
    return tuple(out)


def field_axes() -> Dict[str, Tuple[str, ...]]:
    """ "source.name" -> the coverage axes of the facts drawing it (the
    report's field x value table)."""
    return {f"{src}.{name}": axes_of(facts) for (src, name), facts in DRAWN.items()}


assert not set(DRAWN) & set(OUT_OF_SCOPE), "a degree of freedom is drawn or out of scope, not both"
bad = [f"{f.name}: {e!r}" for f in FACTS.values() for e in f.kernel if e.partition(".")[0] not in SOURCES or not e.partition(".")[2]]
assert not bad, f"Fact.kernel entries are 'source.name' of a declared source (SOURCES): {bad}"
