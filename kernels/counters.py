"""Compile counters read around one call -> ``kernels.base.CompileDelta``.

    with measure() as box:
        ...one compile step...
    box.delta  # CompileDelta

``misses`` counts every trip to the compiler: ``compiled_cache`` counts
"misses" when it compiles and persists, and "bypassed" when it compiles
without its files (no device to name in the cache's environment, as on a
CPU-only machine, or the cache disabled). Both are real compiles.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass

from kernels.base import CompileDelta


def read() -> dict:
    from cudnn.frost import compiled_cache, template_loader
    from cudnn.sdpa.fwd import prepared_sm80_thd
    from cudnn.sdpa.fwd.kernels.sm80 import prepared_host

    from kernels.source import rewritten_hosts

    s = compiled_cache.stats()
    # Rewritten hosts (mutants) carry their own compile_thd_host lru.
    lru = sum(h.compile_thd_host.cache_info().misses for h in (prepared_host, *rewritten_hosts()))
    return {
        "misses": s["misses"] + s["bypassed"],
        "hits": s["hits"],
        "memo_hits": s["memo_hits"],
        "thd_lru_misses": lru + prepared_sm80_thd.build_launch.cache_info().misses,
        "modules": len(template_loader._MODULES),
    }


@dataclass
class DeltaBox:
    delta: CompileDelta = CompileDelta()


@contextmanager
def measure():
    """Yield a box whose ``delta`` is set when the block ends (even by an exception)."""
    box = DeltaBox()
    before, start = read(), time.perf_counter()
    try:
        yield box
    finally:
        seconds = time.perf_counter() - start
        after = read()
        box.delta = CompileDelta(**{k: after[k] - before[k] for k in before}, seconds=seconds)


def forget_memos() -> None:
    """Drop the in-process memos in front of the compiler (compiled_cache's
    memo, the staged/packed copy plans, the public wrapper's per-geometry
    plan cache), so that whatever compile the next call asks for shows in the
    counters (a disk hit, or a compile) however warm the process is. A check
    that a call asks for no compile at all needs this: a warm memo would
    answer silently and the check would depend on test order."""
    from cudnn.frost import compiled_cache
    from cudnn.sdpa import packed_copy_sm80
    from cudnn.sdpa.fwd import api_dsl, prepared_staged_sm80
    from cudnn.sdpa.fwd.kernels.sm80 import staged_copy

    compiled_cache.clear_memo()
    # The adapter's own memo of dense artifacts by the kernel's key (kernels/prepared.py).
    from kernels import prepared

    prepared._DENSE.clear()
    packed_copy_sm80._plan.cache_clear()
    staged_copy.compile_gather.cache_clear()
    prepared_staged_sm80._compile_core.cache_clear()
    api_dsl._sm80_wrapper_cache.clear()
    # The backward's: its packed/staged artifacts are lru-cached by key, and the
    # public backward wrapper keeps a plan per geometry.
    from cudnn.sdpa.bwd import api_dsl as bwd_api
    from cudnn.sdpa.bwd.kernels.sm80 import prepared_host as bwd_host

    bwd_host._compile_thd_artifact.cache_clear()
    bwd_host._compile_staged_artifact.cache_clear()
    bwd_api._sm80_bwd_cache.clear()


# Counters a call that asks for no compile leaves at zero (after forget_memos).
NO_COMPILE_REQUEST = {"misses": 0, "hits": 0, "memo_hits": 0}


@contextmanager
def memos_forgotten():
    """forget_memos() for the block; afterwards the adapter's dense artifacts
    it held are back (on the CPU there is no on-disk cache to reload them from,
    so a check that needs cold memos would otherwise cost every later test of
    its process a recompile)."""
    from kernels import prepared

    kept = dict(prepared._DENSE)
    forget_memos()
    try:
        yield
    finally:
        for key, artifact in kept.items():
            prepared._DENSE.setdefault(key, artifact)

