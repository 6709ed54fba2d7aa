"""The kill harness's flight recorder: the Case each share of a mutant is
launching, in a small file per share (written before every example), so that
when a share's process dies by a signal the parent knows which Case it was
launching and can replay it (conformance.kill.processes: a crash of the mutated
kernel, confirmed on replay and absent on the pristine kernels, is a kill).
A file survives its writer's death; a message on a queue may not (its feeder
thread dies with the process)."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Callable, Optional

# The host's out-of-memory killer ends a process with SIGKILL: never the mutant's crash.
OOM_SIGNAL = signal.SIGKILL


def path(log_dir: str, mutant: str, share: int) -> Path:
    return Path(log_dir) / f"{mutant}.{share}.inflight.json"


def recorder(where: Path) -> Callable:
    """``record(unit, kind_name, case_dict)``: the next example of ``unit``, written before it launches.
    A file an earlier run of the same share left is removed first: it names no Case of this one."""
    counts: dict = {}
    where.unlink(missing_ok=True)

    def record(unit: int, kind: str, case: dict) -> None:
        counts[unit] = counts.get(unit, 0) + 1
        tmp = where.with_suffix(".tmp")
        tmp.write_text(json.dumps({"unit": unit, "kind": kind, "example": counts[unit], "case": case}))
        os.replace(tmp, where)  # whole or absent, whenever the writer dies

    return record


def read(where: Path) -> Optional[dict]:
    """The last example a share recorded: {"unit", "kind", "example", "case"}; None when none (or unreadable)."""
    try:
        got = json.loads(where.read_text())
    except (OSError, ValueError):
        return None
    return got if isinstance(got, dict) and {"unit", "kind", "example", "case"} <= set(got) else None
