"""What the suite runs on: GPU, driver, package versions and the run mode.

Nothing here imports ``cudnn``: the plugin reads the environment (and may
point the suite at another kernels source) before the kernels are imported.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import sys
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

from ground.tables import PINNED

# Set to 1 to run on versions other than ground.tables.PINNED (verdicts then
# describe another build; the header still names what ran).
ALLOW_MISMATCH_ENV = "SDPA_ALLOW_VERSION_MISMATCH"
# hypothesis: a derandomized search draws what its version draws (pyproject.toml pins it), so it is recorded too.
PACKAGES = ("torch", "nvidia-cudnn-frontend", "nvidia-cutlass-dsl", "hypothesis")

NATIVE = "native sm80"
COMPILE_ONLY = "compile-only (no GPU)"


class VersionMismatch(RuntimeError):
    """Installed kernel packages differ from ``ground.tables.PINNED``."""


@dataclass(frozen=True)
class Environment:
    gpu: Optional[str]  # device name, None without CUDA
    capability: Optional[Tuple[int, int]]
    driver: str  # CUDA driver version ("13.0"), "none" without one
    versions: Dict[str, str]
    mode: str

    @property
    def live_arch(self) -> Optional[str]:
        """``sm_XY`` of the live device (the arch compiles must target to load)."""
        return None if self.capability is None else arch_of(self.capability)

    @property
    def native(self) -> bool:
        return self.capability == (8, 0)


def arch_of(capability: Tuple[int, int]) -> str:
    return f"sm_{capability[0]}{capability[1]}"


def run_mode(capability: Optional[Tuple[int, int]]) -> str:
    if capability is None:
        return COMPILE_ONLY
    if tuple(capability) == (8, 0):
        return NATIVE
    return f"sm80 code on {arch_of(capability)}"


def installed_versions() -> Dict[str, str]:
    out = {}
    for name in PACKAGES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def _driver_version() -> str:
    try:
        from cuda.bindings import driver

        err, ver = driver.cuDriverGetVersion()
        if int(err) == 0:
            return f"{ver // 1000}.{ver % 1000 // 10}"
    except Exception:  # noqa: BLE001 -- no libcuda: no driver to name
        pass
    return "none"


def detect() -> Environment:
    import torch

    if torch.cuda.is_available():
        index = torch.cuda.current_device()
        name = torch.cuda.get_device_name(index)
        capability = tuple(torch.cuda.get_device_capability(index))
    else:
        name, capability = None, None
    return Environment(name, capability, _driver_version() if capability else "none", installed_versions(), run_mode(capability))


# The package probed for bytecode: CuTe DSL, which every worker imports with the kernels' host code.
BYTECODE_PROBE = "cutlass"


def bytecode(package: str = BYTECODE_PROBE) -> str:
    """Whether this process's imports load bytecode (the report's environment;
    it moves each worker's start by seconds, no verdict). Where Python writes
    none (``PYTHONDONTWRITEBYTECODE``, ``-B``) and ``package`` holds none, every
    worker compiles its sources again at start: ``python3 -m compileall``
    once mends that (docs/throughput.md)."""
    if not sys.dont_write_bytecode:
        return "written (imports cache their bytecode)"
    off, spec = "not written (PYTHONDONTWRITEBYTECODE or -B)", importlib.util.find_spec(package)
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return f"{off}; {package} not found as source"
    if os.path.exists(importlib.util.cache_from_source(spec.origin)):
        return f"{off}; {package} holds bytecode, imports load it"
    return f"{off}; {package} holds none: every worker compiles its imports at start (python3 -m compileall once; docs/throughput.md)"


def version_mismatches(installed: Optional[Dict[str, str]] = None) -> List[str]:
    installed = installed_versions() if installed is None else installed
    return [f"{name}: installed {installed.get(name, 'not installed')}, pinned {want}" for name, want in PINNED.items() if installed.get(name) != want]


def check_versions(installed: Optional[Dict[str, str]] = None) -> List[str]:
    """Raise ``VersionMismatch`` naming every package off its pin, unless
    ``SDPA_ALLOW_VERSION_MISMATCH=1`` (then the mismatches are returned)."""
    problems = version_mismatches(installed)
    if problems and os.environ.get(ALLOW_MISMATCH_ENV, "") != "1":
        raise VersionMismatch(
            "the kernel packages differ from the versions this suite is pinned to:\n  "
            + "\n  ".join(problems)
            + f"\n(install the pinned versions, or set {ALLOW_MISMATCH_ENV}=1 to run anyway)"
        )
    return problems


def header(adapter: str = "?", env: Optional[Environment] = None) -> str:
    """One line for the pytest header (and reports): what ran, where, how."""
    from kernels.source import describe

    env = detect() if env is None else env
    gpu = "no GPU" if env.gpu is None else f"{env.gpu} ({arch_of(env.capability)}, driver {env.driver})"
    v = env.versions
    return (
        f"sdpa-conformance: {gpu} | torch {v['torch']} | cudnn-frontend {v['nvidia-cudnn-frontend']}"
        f" | cutlass-dsl {v['nvidia-cutlass-dsl']} | hypothesis {v.get('hypothesis', '?')} | mode: {env.mode} | adapter: {adapter} | kernels: {describe()}"
    )
