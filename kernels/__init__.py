"""Kernel adapters: run a Case on one entry point of the kernels under test.

``get_adapter(name, **options)`` builds one by name; the name defaults to
``$SDPA_ADAPTER`` and then "prepared". Nothing here imports ``cudnn`` (the
kernels source may still be chosen, kernels.source.use_kernels_source).
"""

from __future__ import annotations

import importlib
import os
from typing import Optional

from ground import tables
from ground.tables import ADAPTER_ENV, DEFAULT_ADAPTER
from kernels.base import Adapter  # noqa: F401  (the return type; imports no cudnn)

# name -> (module, class)
ADAPTERS = {
    "prepared": ("kernels.prepared", "PreparedAdapter"),  # prepared_host compile entry points
    "wrapper": ("kernels.wrapper", "WrapperAdapter"),  # public sdpa_fwd_wrapper_sm80
}
assert set(ADAPTERS) == set(tables.ADAPTERS), "kernels.ADAPTERS and ground.tables.ADAPTERS name the same adapters"


def adapter_name(name: Optional[str] = None) -> str:
    return name or os.environ.get(ADAPTER_ENV) or DEFAULT_ADAPTER


def get_adapter(name: Optional[str] = None, **options) -> "Adapter":
    name = adapter_name(name)
    if name not in ADAPTERS:
        raise ValueError(f"unknown adapter {name!r} (from {ADAPTER_ENV} or the option); known: {', '.join(ADAPTERS)}")
    module, cls = ADAPTERS[name]
    return getattr(importlib.import_module(module), cls)(**options)
