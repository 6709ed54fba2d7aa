"""The verdict of one failing example (the mutant harness): which verdicts
count, and what a property's exception says (a kill, a crash of the mutated
kernels, a compile error, the machine's fault or the harness' own)."""

from __future__ import annotations

import traceback
from pathlib import Path

# The verdicts a kill counts (the rate's numerator), and the ones counted at all (its denominator);
# every other verdict is none: listed, never counted (docs/mutants.md: why each).
KILLS = ("killed", "error")
COUNTED = KILLS + ("survived",)
NON_VERDICTS = ("pristine_fails", "compile_error", "infra", "harness_error", "short", "incomplete", "stale")
VERDICTS = COUNTED + NON_VERDICTS
REWRITTEN = "sdpa-rewrites-"  # kernels.source writes a mutant's rewritten files to a temp directory of this prefix
# Where the kernels load or compile their sources before any launch (file, function; None:
# any): an exception raised below one of these frames is the source's compile error.
COMPILE_STAGES = (
    ("cudnn/frost/template_loader.py", "load_template"),  # executes a template's (rewritten) source
    ("cudnn/frost/compiled_cache.py", "compile_cached"),  # every DSL compile of the SM80 and sm90 hosts
    ("cutlass/base_dsl/compiler.py", None),  # cute.compile, the DSL's compiler
    ("kernels/source.py", "host_module"),  # a rewritten host module's body
    ("kernels/source.py", "_package_module"),  # a rewritten backward or sm90 module's body
)


def _rewritten(filename: str) -> bool:
    return any(part.startswith(REWRITTEN) for part in Path(filename).parts)


def raised_by_kernels(exc: BaseException) -> bool:
    """``properties.watchdog.raised_by_kernels``, with the mutant's rewritten
    files (loaded from a temp directory, outside the cudnn package) counted
    as the kernels', and a SyntaxError as raised where its source is."""
    from properties.watchdog import SUITE_PACKAGES
    from properties.watchdog import raised_by_kernels as in_cudnn

    if in_cudnn(exc):
        return True
    if isinstance(exc, SyntaxError) and _rewritten(exc.filename or ""):
        return True
    files = [str(Path(f.filename).resolve()) for f in traceback.extract_tb(exc.__traceback__)]
    last_own = max((i for i, f in enumerate(files) if f.startswith(SUITE_PACKAGES)), default=-1)
    return any(_rewritten(f) for f in files[last_own + 1 :])


def out_of_memory(exc: BaseException) -> bool:
    """The device or the host ran out of memory (torch.OutOfMemoryError, "CUDA error: out of memory", MemoryError)."""
    text = f"{type(exc).__name__}: {exc}".lower()
    return isinstance(exc, MemoryError) or type(exc).__name__ == "OutOfMemoryError" or "out of memory" in text


def compiling(exc: BaseException) -> bool:
    """``exc`` was raised while the kernels loaded or compiled their sources (``COMPILE_STAGES``), before any launch."""
    if isinstance(exc, SyntaxError):
        return True
    for frame in traceback.extract_tb(exc.__traceback__):
        name = Path(frame.filename).as_posix()
        if any(name.endswith("/" + where) and fn in (None, frame.name) for where, fn in COMPILE_STAGES):
            return True
    return False


def crash_or_harness(exc: BaseException) -> str:
    """The verdict of an exception a property raised (not a PropertyFailure):
    ``infra`` (out of memory: the machine, not the mutant), ``compile_error``
    (raised by the kernels while loading or compiling the rewritten source),
    ``error`` (raised by the kernels' own code, or a CUDA error after which
    this process' context is dead: a crash of the mutated kernel), else
    ``harness_error`` (the suite's code, or a library it called: never a kill;
    a message that merely names a CUDA error included)."""
    from properties.watchdog import context_lost, looks_like_cuda_error

    if out_of_memory(exc):
        return "infra"
    if raised_by_kernels(exc):
        return "compile_error" if compiling(exc) else "error"
    if looks_like_cuda_error(exc) and context_lost(exc) is not None:
        return "error"
    return "harness_error"


def failure_verdict(failure: BaseException) -> str:
    """The verdict of a failing example: a PropertyFailure kills, but the
    launch check's (the kernels raised on a valid Case: properties.common.accepted)
    is judged by what they raised (``crash_or_harness``: out of memory and a
    compile error are no kill); any other exception by ``crash_or_harness``."""
    from ground.outcome import PropertyFailure

    if not isinstance(failure, PropertyFailure):
        return crash_or_harness(failure)
    cause = failure.__cause__ if getattr(failure, "check", None) == "launch" else None
    if cause is not None and out_of_memory(cause):
        return "infra"
    if cause is not None and raised_by_kernels(cause) and compiling(cause):
        return "compile_error"
    return "killed"
