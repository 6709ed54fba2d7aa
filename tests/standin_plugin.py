"""A pytest plugin (``-p tests.standin_plugin``) that runs the launching
forward tests of ``conformance/`` on the CPU against the honest stand-in
(``tests.standins.ReferenceKernel`` as the prepared adapter), through the
suite's own plugin, recorder and report. For ``tools/standin_run.py``: a dry
run of property and strategy changes, and a profile of the pipeline with the
kernels taken out. Never a verdict on a kernel.

With ``$SDPA_STANDIN_OPS=PREFIX`` each process writes ``PREFIX.<pid>.json``:
torch ops and host syncs per phase (``ground.phases``; "outside": between
phases), and where the syncs outside every phase were made.
"""

from __future__ import annotations

import json
import os
import traceback
from collections import Counter

import pytest

OPS_ENV = "SDPA_STANDIN_OPS"
# What reaches the dispatcher without launching a kernel, and the host syncs (tools/count_model_ops.py's sets).
SYNCS = {"aten._local_scalar_dense.default", "aten.nonzero.default", "aten.is_nonzero.default", "aten.equal.default"}
NO_LAUNCH = {"aten.empty.memory_format", "aten.empty_strided.default", "aten.lift_fresh.default", "aten.detach.default"}
_state: dict = {}


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    import conformance.test_sm90_numerics as sm90_tests
    import kernels
    from tests.standins import ReferenceKernel, Sm90StandIn

    kernels.get_adapter = lambda name, **kw: ReferenceKernel(name="prepared")
    projections = {name: project for name, (_, project) in sm90_tests._entries().items()}  # what each entry can express
    sm90_tests._hopper_gate = lambda: None
    sm90_tests._entries = lambda: {name: (Sm90StandIn, project) for name, project in projections.items()}


def pytest_collection_finish(session):
    """After collection: the properties launch on the CPU and the ``gpu`` fixture passes; the environment (the
    report's header, a failure's case file) is still read off the real machine."""
    import torch

    import kernels.environment as kenv
    from tests.standins import device_users

    for module in device_users():
        module.device = lambda: torch.device("cpu")
    real = _state["cuda"] = torch.cuda.is_available, torch.cuda.current_device
    detect = _state["detect"] = kenv.detect

    def real_detect():
        faked = torch.cuda.is_available, torch.cuda.current_device
        torch.cuda.is_available, torch.cuda.current_device = real
        try:
            return detect()
        finally:
            torch.cuda.is_available, torch.cuda.current_device = faked

    kenv.detect = real_detect
    torch.cuda.is_available, torch.cuda.current_device = (lambda: True), (lambda: 0)


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session):
    import torch

    if "cuda" in _state:  # the report's environment reads the real machine
        torch.cuda.is_available, torch.cuda.current_device = _state.pop("cuda")
        import kernels.environment as kenv

        kenv.detect = _state.pop("detect")


@pytest.hookimpl(wrapper=True)
def pytest_runtestloop(session):
    if not os.environ.get(OPS_ENV):
        return (yield)
    from torch.utils._python_dispatch import TorchDispatchMode

    from ground import phases

    counts, where = Counter(), Counter()

    class PerPhase(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name, phase = str(func), (phases._stack[-1][0] if phases._stack else "outside")
            if name in SYNCS:
                counts[f"{phase} syncs"] += 1
                if phase == "outside":
                    ours = [f for f in traceback.extract_stack()[:-1] if "/site-packages/" not in f.filename and "standin_plugin" not in f.filename]
                    where[f"{ours[-1].filename}:{ours[-1].lineno} {ours[-1].name}" if ours else "?"] += 1
            elif name not in NO_LAUNCH:
                counts[f"{phase} ops"] += 1
            return func(*args, **(kwargs or {}))

    with PerPhase():
        try:
            return (yield)
        finally:
            path = f"{os.environ[OPS_ENV]}.{os.getpid()}.json"
            with open(path, "w") as f:
                json.dump({"counts": dict(counts), "syncs outside phases": dict(where.most_common(20))}, f, indent=1)
