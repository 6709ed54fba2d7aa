"""The on-disk compiled cache a run shares across its processes.

``cudnn.frost.compiled_cache`` persists every kernel it compiles (the exported
tvm-ffi object) under ``$CUDNN_FRONTEND_COMPILED_CACHE``, in a directory per
environment (frontend source digest, DSL and tvm-ffi versions, driver,
device) and an entry per compile key, and takes a file lock per entry while
it compiles one. Every process pointed at one directory therefore compiles a
key at most once: a second process asking for it waits on the lock and loads
the first one's file; in a later run every key already there is a load of a
few milliseconds.

So a run points all its processes (the xdist workers, the repro and kill-rate
subprocesses they start) at one directory: ``--compile-cache DIR`` /
``$SDPA_COMPILE_CACHE``, else an inherited ``$CUDNN_FRONTEND_COMPILED_CACHE``,
else the frontend's own persistent default (``$XDG_CACHE_HOME`` or
``~/.cache``, ``cudnn_frontend/compiled_plans``). The disk_reuse property
keeps its own fresh directories.

Without a GPU the environment manifest has no device and the cache persists
nothing (``compiled_cache`` counts every compile as "bypassed"): on a CPU-only
machine each process compiles its own keys, as before. Nothing here imports
cudnn (the kernels source may not be chosen yet).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

CACHE_ENV = "CUDNN_FRONTEND_COMPILED_CACHE"  # read by cudnn.frost.compiled_cache
DISABLE_ENV = "CUDNN_FRONTEND_DISABLE_COMPILED_CACHE"
OPTION_ENV = "SDPA_COMPILE_CACHE"  # the suite's own: --compile-cache


def default_dir() -> Path:
    """The frontend's own default (compiled_cache.get_cache_dir without an override)."""
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(xdg) / "cudnn_frontend" / "compiled_plans"


def resolve(option: Optional[str] = None, base: Optional[Path] = None) -> Path:
    """The run's cache directory: ``option``, else $SDPA_COMPILE_CACHE, else
    $CUDNN_FRONTEND_COMPILED_CACHE, else ``default_dir()``. A relative path is
    taken from ``base`` (default: the working directory)."""
    raw = option or os.environ.get(OPTION_ENV) or os.environ.get(CACHE_ENV)
    if not raw:
        return default_dir()
    path = Path(raw).expanduser()
    return (Path(base or os.getcwd()) / path).resolve() if not path.is_absolute() else path


class CacheDirError(ValueError):
    """A compiled-cache directory that cannot be made (names it and why)."""


def use(path) -> Optional[str]:
    """Point this process and every process it starts at ``path``; returns
    the variable's previous value (for ``restore``). CacheDirError when the
    directory cannot be made."""
    try:
        Path(path).mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise CacheDirError(f"compiled cache {path}: not a directory") from None
    except OSError as e:
        raise CacheDirError(f"compiled cache {path}: cannot make the directory ({e.strerror})") from None
    previous = os.environ.get(CACHE_ENV)
    os.environ[CACHE_ENV] = str(path)
    return previous


def restore(previous: Optional[str]) -> None:
    if previous is None:
        os.environ.pop(CACHE_ENV, None)
    else:
        os.environ[CACHE_ENV] = previous


def holds_kernels(path) -> bool:
    """Whether the cache directory ``path`` holds any entry (its lock files aside):
    a run on it loads kernels an earlier one compiled."""
    try:
        return any(not p.name.startswith(".") for p in Path(path).iterdir())
    except OSError:
        return False


def disabled() -> bool:
    return os.environ.get(DISABLE_ENV, "0").strip().lower() in ("1", "true", "yes", "on")


def describe(path, has_gpu: bool) -> str:
    """One line for the header and the report."""
    if disabled():
        return f"compiled cache disabled (${DISABLE_ENV}): every process compiles its own"
    if not has_gpu:
        return f"compiled cache {path} (no GPU: nothing is persisted, each process compiles its own)"
    return f"compiled cache {path} (shared by the run's processes: a key compiles once)"
