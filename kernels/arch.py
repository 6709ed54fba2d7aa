"""The GPU arch the kernels' compiles target.

The prepared adapter, the public wrapper's SM80-compatibility mode and the
backward's compile-only tier all pin or retarget the ``--gpu-arch`` option a
host module's ``compile_cached`` is handed: one definition here, below every
adapter (nothing of ours imported, no cudnn either).
"""

from __future__ import annotations

import re
from contextlib import contextmanager
from typing import Optional

# The arch the CPU compile tier (compile_only) builds for: the kernels' own.
COMPILE_ONLY_ARCH = "sm_80"
_ARCH_OPTION = re.compile(r"--gpu-arch[= ]\S+")


def set_gpu_arch(options: str, arch: str, add: bool = False) -> str:
    """``options`` with its --gpu-arch set to ``arch`` (added only when ``add``)."""
    if _ARCH_OPTION.search(options):
        return _ARCH_OPTION.sub(f"--gpu-arch={arch}", options)
    return f"{options} --gpu-arch={arch}".strip() if add else options


@contextmanager
def compile_arch(host, arch: Optional[str], *, add: bool = False):
    """While active, compiles issued by ``host`` (a prepared_host module) target
    ``arch``: ``compile_thd_host`` hard-codes ``--gpu-arch=sm_80``, whose artifact
    has no loadable entry on another arch; ``add`` also pins ``compile_host``,
    which names no arch and compiles for the live device (sm_100 without one)."""
    if arch is None:
        yield
        return
    real = host.compile_cached

    def targeted(*args, **kwargs):
        kwargs["options"] = set_gpu_arch(str(kwargs.get("options") or ""), arch, add)
        return real(*args, **kwargs)

    host.compile_cached = targeted
    try:
        yield
    finally:
        host.compile_cached = real
