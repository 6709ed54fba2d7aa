"""The kill harness's large-tier lock: one large-tier search at a time over
every mutant's processes (a large-tier example holds 8-17 GB of the device).

It is a file lock (``fcntl.flock``), which the operating system releases when
its holder's file descriptor closes, so also when the holder dies: a mutated
kernel that crashes its process (a signal death) while holding it frees it. A
``multiprocessing.Lock`` held by a dead process stays taken, and every later
large-tier search waited out its whole cap on it, the control's too (an
invalid run). The controls take no lock at all (conformance.kill.processes):
the run's validity never waits on a mutant, even one whose launch hangs
while holding it; at most one mutant's large-tier example and the control's
share the device.
"""

from __future__ import annotations

import fcntl
import os
import time
from typing import Optional

# How often a waiting process tries the lock again (a holder's release is not signalled).
POLL_S = 0.2


class LargeTierLock:
    """A cross-process lock on the file ``path`` (created when missing).
    Picklable: a spawned process opens its own descriptor on first use."""

    def __init__(self, path: str):
        self.path = str(path)
        self._fd: Optional[int] = None

    def __getstate__(self):
        return {"path": self.path}

    def __setstate__(self, state):
        self.path, self._fd = state["path"], None

    def acquire(self, timeout: float) -> bool:
        """Hold it, waiting ``timeout`` seconds at most; False when not had by then."""
        if self._fd is not None:
            raise RuntimeError(f"{self.path}: already held by this process")
        deadline = time.monotonic() + max(0.0, timeout)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    os.close(fd)
                    return False
                time.sleep(POLL_S)
                continue
            self._fd = fd
            return True

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is None:
            raise RuntimeError(f"{self.path}: released while not held")
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
