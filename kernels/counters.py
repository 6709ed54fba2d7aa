"""Compile counters read around one call -> ``kernels.base.CompileDelta``.

    with measure() as box:
        ...one compile step...
    box.delta  # CompileDelta

``misses`` counts every trip to the compiler: ``compiled_cache`` counts
"misses" when it compiles and persists, and "bypassed" when it compiles
without its files (no device to name in the cache's environment, as on a
CPU-only machine, or the cache disabled). Both are real compiles.

Counters answer "did this call compile?", which depends on what the process
did before (a memo answers a key compiled earlier). ``asking()`` answers
"what did this call ask the compiled cache for?" -- a function of the call
alone once the memos in front of compile_cached are forgotten
(``forget_front_memos``).
"""

from __future__ import annotations

import json
import time
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path

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


# The in-process caches in front of ``compiled_cache.compile_cached`` on the SM80
# paths the adapters drive: while one holds an artifact, a call asks the compiled
# cache for nothing (no counter moves, record_entries() records nothing), so
# whether a call "compiled" depends on what the process did before.
# (module, attribute): lru_cache wrappers (cache_clear) and plain dicts (clear).
FRONT_MEMOS = (
    # the packed copies of both THD wrappers: _plan -> compile_gather (api_dsl.py:904, :975; fwd api_dsl.py:7123, :7190)
    ("cudnn.sdpa.packed_copy_sm80", "_plan"),
    ("cudnn.sdpa.fwd.kernels.sm80.staged_copy", "compile_gather"),
    ("cudnn.sdpa.fwd.kernels.staged_copy", "compile_copy"),
    ("cudnn.sdpa.fwd.kernels.sm80.rope_table", "compile_table"),
    # the forward THD host and its binder (build_launch -> compile_thd_host)
    ("cudnn.sdpa.fwd.kernels.sm80.prepared_host", "compile_thd_host"),
    ("cudnn.sdpa.fwd.prepared_sm80_thd", "build_launch"),
    ("cudnn.sdpa.fwd.prepared_staged_sm80", "_compile_core"),
    ("cudnn.sdpa.fwd.api_dsl", "_sm80_wrapper_cache"),  # the public forward wrapper's plan per geometry
    # the backward: its artifacts lru-cached by key, the staged casts, the THD wrapper's
    # plan per capacity (_sm80_thd_plan, bwd api_dsl.py:814) and the dense wrapper's plans
    ("cudnn.sdpa.bwd.kernels.sm80.prepared_host", "_compile_thd_artifact"),
    ("cudnn.sdpa.bwd.kernels.sm80.prepared_host", "_compile_staged_artifact"),
    ("cudnn.sdpa.bwd.kernels.sm80.staged_copy", "compile_cast"),
    ("cudnn.sdpa.bwd.api_dsl", "_sm80_thd_plan"),
    ("cudnn.sdpa.bwd.api_dsl", "_sm80_bwd_cache"),
)
# The same lrus in a rewritten (mutant) module: kernels.source loads fresh copies.
_REWRITTEN_LRUS = ("compile_thd_host", "_compile_thd_artifact", "_compile_staged_artifact")
# The adapters' own memos in front of compile_cached (kernels/prepared.py's dense
# artifacts by the kernel's key): each made by ``adapter_memo``, so owned here.
_ADAPTER_MEMOS: dict = {}


def adapter_memo(name: str) -> dict:
    """A new memo of compiled artifacts that an adapter keeps in front of
    compile_cached, named ``name``: ``forget_front_memos`` drops it with the
    kernels' own and ``memos_forgotten`` restores it."""
    memo = _ADAPTER_MEMOS[name] = {}  # a module imported afresh replaces its memo
    return memo


def _clear(cache) -> None:
    if hasattr(cache, "cache_clear"):
        cache.cache_clear()
    elif isinstance(cache, dict):
        cache.clear()


def forget_front_memos() -> None:
    """Drop every cache in front of compile_cached (``FRONT_MEMOS``, the
    rewritten modules' copies, the adapters' own memos: ``adapter_memo``),
    keeping compiled_cache's own memo: the next call asks compile_cached for
    each artifact it needs again (a memo hit: nothing reloaded, nothing
    compiled, and record_entries() records it)."""
    import importlib

    from kernels import source

    for module, name in FRONT_MEMOS:
        _clear(getattr(importlib.import_module(module), name))
    for mod in list(source._HOSTS.values()):
        for name in _REWRITTEN_LRUS:
            _clear(getattr(mod, name, None))
    for memo in _ADAPTER_MEMOS.values():
        memo.clear()


def forget_memos(*, compiled: bool = True) -> None:
    """Drop the in-process memos in front of the compiler (compiled_cache's
    memo unless ``compiled`` is false, and every cache in front of it:
    ``forget_front_memos``), so that whatever compile the next call asks for
    shows in the counters (a disk hit, or a compile) however warm the process
    is. A check that a call asks for no compile at all needs this: a warm memo
    would answer silently and the check would depend on test order."""
    from cudnn.frost import compiled_cache

    if compiled:
        compiled_cache.clear_memo()
    forget_front_memos()


# Counters a call that asks for no compile leaves at zero (after forget_memos).
NO_COMPILE_REQUEST = {"misses": 0, "hits": 0, "memo_hits": 0}


@contextmanager
def memos_forgotten(*, compiled: bool = True):
    """forget_memos() for the block; afterwards the artifacts the adapters'
    own memos (``adapter_memo``) held are back (on the CPU there is no on-disk
    cache to reload them from, so a check that needs cold memos would
    otherwise cost every later test of its process a recompile)."""
    kept = {name: dict(memo) for name, memo in _ADAPTER_MEMOS.items()}
    forget_memos(compiled=compiled)
    try:
        yield
    finally:
        for name, held in kept.items():
            for key, artifact in held.items():
                _ADAPTER_MEMOS[name].setdefault(key, artifact)


# ------------------------------------------------------------ what a call asks for
@dataclass
class Asked:
    """What one call asked compiled_cache.compile_cached for (``asking``).

    ``entries``: the on-disk entries (record_entries(): entry directory name ->
    {"symbol", "key", "entry"}); empty without a device manifest (the CPU) or
    with the cache disabled. ``keys``: every keyed request, memo hits included
    ("key|symbol|options" -> {"symbol", "key"}), whatever the device or the
    files; empty when this frontend has no ``compiled_cache._record`` to
    observe. Neither sees a request that a memo in front of compile_cached
    answered: forget those first (``forget_front_memos``)."""

    entries: dict[str, dict] = field(default_factory=dict)
    keys: dict[str, dict] = field(default_factory=dict)


def can_observe_requests() -> bool:
    """Whether ``asking`` can see compile_cached's requests on this frontend
    (record_entries, or the per-request hook it is built on)."""
    from cudnn.frost import compiled_cache

    return hasattr(compiled_cache, "record_entries") or hasattr(compiled_cache, "_record")


def _entry_of(entry) -> dict:
    path = Path(entry)
    try:
        record = json.loads((path / "entry.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        record = {}
    return {"symbol": record.get("symbol", "?"), "key": record.get("key", ""), "entry": path.name}


@contextmanager
def asking():
    """Yield an ``Asked`` filled, when the block ends, with what its calls
    asked compile_cached for: record_entries()' entries, and every keyed
    request seen through compile_cached's per-request hook (``_record``, which
    record_entries() is built on: called on a compile and on a memo hit alike)."""
    from cudnn.frost import compiled_cache

    box = Asked()
    real = getattr(compiled_cache, "_record", None)
    if real is not None:

        def observed(cache_key, symbol, options):
            box.keys.setdefault(f"{cache_key}|{symbol}|{options}", {"symbol": symbol, "key": cache_key})
            return real(cache_key, symbol, options)

        compiled_cache._record = observed
    recording = getattr(compiled_cache, "record_entries", None)
    try:
        with recording() if recording is not None else nullcontext([]) as entries:
            try:
                yield box
            finally:
                for e in list(entries):
                    item = _entry_of(e)
                    box.entries.setdefault(item["entry"], item)
    finally:
        if real is not None:
            compiled_cache._record = real


def label(item: dict, width: int = 96) -> str:
    """``symbol [key prefix]`` of an ``Asked`` item, for failure summaries."""
    key = str(item.get("key", ""))
    return f"{item.get('symbol', '?')} [{key[:width]}{'...' if len(key) > width else ''}]"
