"""Kernel adapters: run a Case on one entry point of the kernels under test.

``get_adapter(name, family=..., **options)`` builds one by entry-point name
("prepared": the compile entry, "wrapper": the public wrapper) for a kernel
family (ground.families; default sm80); the name defaults to
``$SDPA_ADAPTER`` and then "prepared". Nothing here imports ``cudnn`` (the
kernels source may still be chosen, kernels.source.use_kernels_source).
"""

from __future__ import annotations

import importlib
import os
from typing import Optional

from ground import tables
from ground.families import DEFAULT_FAMILY, FAMILY_NAMES
from ground.tables import ADAPTER_ENV, DEFAULT_ADAPTER
from kernels.base import Adapter  # noqa: F401  (the return type; imports no cudnn)

# name -> (module, class)
ADAPTERS = {
    "prepared": ("kernels.prepared", "PreparedAdapter"),  # prepared_host compile entry points
    "wrapper": ("kernels.wrapper", "WrapperAdapter"),  # public sdpa_fwd_wrapper_sm80
}
assert set(ADAPTERS) == set(tables.ADAPTERS), "kernels.ADAPTERS and ground.tables.ADAPTERS name the same adapters"
# family -> entry-point name -> (module, class): every family serves the same entry-point names.
FAMILY_ADAPTERS = {
    "sm80": ADAPTERS,
    "sm90": {"prepared": ("kernels.sm90.adapter", "Sm90Adapter"), "wrapper": ("kernels.sm90.wrapper", "Sm90WrapperAdapter")},
}
assert set(FAMILY_ADAPTERS) == set(FAMILY_NAMES) and all(set(t) == set(ADAPTERS) for t in FAMILY_ADAPTERS.values())


def adapter_name(name: Optional[str] = None) -> str:
    return name or os.environ.get(ADAPTER_ENV) or DEFAULT_ADAPTER


def get_adapter(name: Optional[str] = None, *, family: Optional[str] = None, **options) -> "Adapter":
    """The ``name`` entry point of ``family``'s kernels. ``sm80_compat`` is the
    SM80 code's option on a newer GPU; a native family has no such mode."""
    name, family = adapter_name(name), family or DEFAULT_FAMILY
    if name not in ADAPTERS:
        raise ValueError(f"unknown adapter {name!r} (from {ADAPTER_ENV} or the option); known: {', '.join(ADAPTERS)}")
    if family not in FAMILY_ADAPTERS:
        raise ValueError(f"unknown kernel family {family!r}; known: {', '.join(FAMILY_ADAPTERS)}")
    if family != DEFAULT_FAMILY:
        options.pop("sm80_compat", None)
    module, cls = FAMILY_ADAPTERS[family][name]
    return getattr(importlib.import_module(module), cls)(**options)
