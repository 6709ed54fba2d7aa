"""Where the kernel code comes from, and rewritten (mutant) copies of it.

Default: the installed ``nvidia-cudnn-frontend`` wheel. ``use_kernels_source``
(``--kernels-source PATH`` / ``SDPA_KERNELS_SOURCE``) makes ``import cudnn``
resolve to a cudnn-frontend checkout's ``python/`` tree instead; it must run
before anything imports ``cudnn``, so this module never imports it at load.

Rewrites (for the mutant harness): a ``Rewrite`` replaces one exact piece of
one kernel file's source. The rewritten file is written to a temp directory
under a name carrying its content digest and loaded from there, so it never
aliases the pristine module: ``template_loader.load_template`` keys modules by
``(path, params)`` and digests the file bytes into ``FROST_SOURCE_DIGEST``,
which the compile keys carry. A rewritten ``prepared_host`` gets its compile
keys salted with its digest (its keys name the template and the call, not the
host's own source). The sm90 family (``sm90_sources``): a rewritten host or
helper module is imported by a rewritten template under its own name, so the
template's digest, hence every compile key, changes with it.
"""

from __future__ import annotations

import atexit
import hashlib
import importlib.util
import os
import re
import shutil
import sys
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterable, Optional, Tuple

SOURCE_ENV = "SDPA_KERNELS_SOURCE"

# Rewritable files, relative to the cudnn package. "f16"/"d256" are the keys
# of api_dsl._SM80_KERNEL_FILES (the two SM80 templates), "host" the pointer host.
TARGETS = {
    "f16": "sdpa/fwd/kernels/sm80/prefill_f16.py",
    "d256": "sdpa/fwd/kernels/sm80/prefill_d256_f16.py",
    "host": "sdpa/fwd/kernels/sm80/prepared_host.py",
    # The backward: the generic template, the d=64 MHA kernel, its pointer host.
    "bwd_f16": "sdpa/bwd/kernels/sm80/bprop_f16.py",
    "bwd_d64": "sdpa/bwd/kernels/sm80/bprop_d64_f16.py",
    "bwd_host": "sdpa/bwd/kernels/sm80/prepared_host.py",
    "bwd_spec": "sdpa/bwd/prepared_sm80.py",  # build_spec: the pointer chain's compile key and geometry
    # The sm90 family (native Hopper D512 forward): its one template, pointer host and helpers.
    "sm90": "sdpa/fwd/kernels/sm90/prefill_d512_f16.py",
    "sm90_host": "sdpa/fwd/kernels/sm90/prepared_host.py",
    "sm90_common": "sdpa/fwd/kernels/sm90/_common_hopper.py",
}
BACKWARD_TARGETS = ("bwd_f16", "bwd_d64", "bwd_host", "bwd_spec")
SM90_TARGETS = ("sm90", "sm90_host", "sm90_common")
# What a --kernels-source tree must hold to serve this suite.
REQUIRED = ("cudnn/" + TARGETS["f16"], "cudnn/" + TARGETS["d256"])


class KernelSourceError(RuntimeError):
    """A kernels source that cannot be used (names the path)."""


class StaleMutant(ValueError):
    """A rewrite whose search text no longer occurs exactly once in its file."""


_override: Optional[Path] = None


def use_kernels_source(path=None) -> Optional[Path]:
    """Make ``import cudnn`` resolve under ``path`` (None: ``$SDPA_KERNELS_SOURCE``;
    neither: the installed wheel, returns None). Raises ``KernelSourceError``
    when the templates are missing there or cudnn was already imported elsewhere."""
    global _override
    raw = path if path is not None else (os.environ.get(SOURCE_ENV) or None)
    if raw is None:
        return None
    root = Path(raw).expanduser().resolve()
    missing = [rel for rel in REQUIRED if not (root / rel).is_file()]
    if missing:
        raise KernelSourceError(f"kernels source {root}: not a cudnn-frontend python/ tree, missing {', '.join(missing)}")
    loaded = sys.modules.get("cudnn")
    if loaded is not None and Path(loaded.__file__).resolve().parent != root / "cudnn":
        raise KernelSourceError(
            f"kernels source {root}: cudnn is already imported from {Path(loaded.__file__).parent}; choose the source before anything imports cudnn"
        )
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    # Subprocesses (xdist workers, repro runs) inherit the choice.
    os.environ[SOURCE_ENV] = str(root)
    _override = root
    return root


def package_root() -> Path:
    """The directory of the ``cudnn`` package in use (found without importing it)."""
    loaded = sys.modules.get("cudnn")
    if loaded is not None:
        return Path(loaded.__file__).resolve().parent
    spec = importlib.util.find_spec("cudnn")
    if spec is None or spec.origin is None:
        raise KernelSourceError("no cudnn package found (install nvidia-cudnn-frontend or pass --kernels-source)")
    return Path(spec.origin).resolve().parent


def describe() -> str:
    try:
        root = package_root()
    except KernelSourceError:
        return "none found"
    return f"{'checkout' if _override is not None else 'wheel'} {root}"


# --------------------------------------------------------------- rewrites
@dataclass(frozen=True)
class Rewrite:
    target: str  # a TARGETS key
    pattern: str  # exact source text (a regular expression when regex)
    replacement: str
    regex: bool = False


def rewrite_text(text: str, rewrites: Iterable[Rewrite], where: str) -> str:
    """Apply ``rewrites`` in order; each must match exactly once."""
    for rw in rewrites:
        if rw.regex:
            new, n = re.subn(rw.pattern, rw.replacement, text)
        else:
            n = text.count(rw.pattern)
            new = text.replace(rw.pattern, rw.replacement)
        if n != 1:
            raise StaleMutant(f"{where}: rewrite of {rw.pattern!r} matched {n} times (expected exactly once)")
        text = new
    return text


def _pristine(target: str) -> str:
    if target not in TARGETS:
        raise ValueError(f"rewrite target {target!r} is not one of {sorted(TARGETS)}")
    return (package_root() / TARGETS[target]).read_text(encoding="utf-8")


def check_rewrites(rewrites: Iterable[Rewrite]) -> None:
    """Verify every rewrite against its pristine file (StaleMutant otherwise)."""
    rewrites = tuple(rewrites)
    for target in sorted({rw.target for rw in rewrites}):
        rewrite_text(_pristine(target), [rw for rw in rewrites if rw.target == target], TARGETS.get(target, target))


_TMP: Optional[Path] = None


def _rewritten_file(target: str, rewrites: Iterable[Rewrite]) -> Optional[Tuple[Path, str]]:
    """(path, digest) of ``target`` with its rewrites applied, or None when none apply."""
    global _TMP
    mine = [rw for rw in rewrites if rw.target == target]
    if not mine:
        return None
    text = rewrite_text(_pristine(target), mine, TARGETS[target])
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]
    if _TMP is None:
        _TMP = Path(tempfile.mkdtemp(prefix="sdpa-rewrites-"))
        atexit.register(shutil.rmtree, _TMP, True)
    # Kept for the process: the DSL reads jit functions' source from the file.
    path = _TMP / f"{Path(TARGETS[target]).stem}_{digest}.py"
    if not path.exists():
        path.write_text(text, encoding="utf-8")
    return path, digest


def template_module(flavor: str, params, rewrites: Iterable[Rewrite] = ()):
    """The template module for (flavor, TemplateParams), rewritten when a
    rewrite targets its file; pristine through the kernels' own loader otherwise."""
    from cudnn.sdpa.fwd import api_dsl

    file_key = "d256" if flavor in api_dsl._SM80_D256_FLAVORS else "f16"
    hit = _rewritten_file(file_key, rewrites)
    if hit is None:
        return api_dsl._sm80_load_kernel_module(flavor, params)
    from cudnn.frost.template_loader import load_template

    return load_template(str(hit[0]), params, tag=f"sm80_{hit[0].stem}")


_HOSTS: Dict[str, object] = {}


def host_module(rewrites: Iterable[Rewrite] = ()):
    """``prepared_host``, or a fresh module of its rewritten source."""
    hit = _rewritten_file("host", rewrites)
    if hit is None:
        from cudnn.sdpa.fwd.kernels.sm80 import prepared_host

        return prepared_host
    path, digest = hit
    if digest not in _HOSTS:
        # A name inside the sm80 package keeps its relative imports working.
        name = f"cudnn.sdpa.fwd.kernels.sm80._rewritten_host_{digest}"
        spec = importlib.util.spec_from_file_location(name, path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        base = mod.template_key

        def salted(module_globals, arguments, function="compile"):
            key = base(module_globals, arguments, function)
            return None if key is None else f"{key}|host:{digest}"

        mod.template_key = salted
        _HOSTS[digest] = mod
    return _HOSTS[digest]


def rewritten_hosts() -> Tuple[object, ...]:
    return tuple(h for key, h in _HOSTS.items() if not key.startswith("pkg:"))


def _package_module(target: str, path: Path, digest: str, package: str):
    """A fresh module of a rewritten file, named inside ``package`` (its imports keep working)."""
    key = f"pkg:{target}:{digest}"
    if key not in _HOSTS:
        name = f"{package}._rewritten_{target}_{digest}"
        spec = importlib.util.spec_from_file_location(name, path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod  # the DSL resolves jit functions through their module
        spec.loader.exec_module(mod)
        _HOSTS[key] = mod
    return _HOSTS[key]


def backward_digest(rewrites: Iterable[Rewrite]) -> Optional[str]:
    """A digest of the backward rewrites (None: none), salting the backward's compile keys:
    the prepared pointer key digests the generic template only, not the host nor the d=64 kernel."""
    mine = [(rw.target, rw.pattern, rw.replacement, rw.regex) for rw in rewrites if rw.target in BACKWARD_TARGETS]
    return hashlib.sha256(repr(mine).encode()).hexdigest()[:12] if mine else None


@contextmanager
def backward_sources(rewrites: Iterable[Rewrite] = ()):
    """While active, the SM80 backward compiles from the rewritten sources:
    ``api_dsl._load_sm80_bwd_module`` loads the rewritten generic template, the
    d=64 kernel module is swapped in ``api_dsl._SM80_BWD_KERNEL_MOD``, a
    rewritten ``prepared_sm80.build_spec`` replaces the pristine one, and the
    pointer host's entry points (``compile_host`` and the planners that
    ``build_spec`` / ``scratch_workspace_bytes`` import at call time) are the
    rewritten host's. Every compile key gets the rewrites' digest, so nothing
    is served from a pristine artifact. No rewrites: nothing changes."""
    rewrites = tuple(rewrites)
    digest = backward_digest(rewrites)
    if digest is None:
        yield
        return
    from cudnn.frost.template_loader import load_template
    from cudnn.sdpa.bwd import api_dsl
    from cudnn.sdpa.bwd.kernels.sm80 import prepared_host

    saved = []

    def patch(obj, name, value):
        saved.append((obj, name, getattr(obj, name)))
        setattr(obj, name, value)

    hit = _rewritten_file("bwd_f16", rewrites)
    if hit is not None:
        path, tag = str(hit[0]), f"sdpa_bwd_sm80_{hit[0].stem}"
        patch(api_dsl, "_load_sm80_bwd_module", lambda params: load_template(path, params, tag=tag))
    hit = _rewritten_file("bwd_d64", rewrites)
    mods = api_dsl._SM80_BWD_KERNEL_MOD
    had_d64 = mods.get("d64")
    if hit is not None:
        mods["d64"] = _package_module("bwd_d64", hit[0], hit[1], "cudnn.sdpa.bwd.kernels.sm80")
    host = prepared_host
    hit = _rewritten_file("bwd_host", rewrites)
    if hit is not None:
        host = _package_module("bwd_host", hit[0], hit[1], "cudnn.sdpa.bwd.kernels.sm80")
        for name in ("launch_bounds", "thd_origins", "workspace_regions"):
            patch(prepared_host, name, getattr(host, name))
        # Its compiles go through the pristine module's compile_cached, looked up per call,
        # so an arch pin on prepared_host (kernels.arch.compile_arch) reaches them.
        patch(host, "compile_cached", lambda *a, **kw: prepared_host.compile_cached(*a, **kw))
    hit = _rewritten_file("bwd_spec", rewrites)
    if hit is not None:
        from cudnn.sdpa.bwd import prepared_sm80

        spec = _package_module("bwd_spec", hit[0], hit[1], "cudnn.sdpa.bwd")
        patch(prepared_sm80, "build_spec", spec.build_spec)
    real_compile = host.compile_host

    def salted(api, geometry, d64_module, cache_key):
        return real_compile(api, geometry, d64_module, None if cache_key is None else f"{cache_key}|bwd-rewrites:{digest}")

    patch(prepared_host, "compile_host", salted)
    try:
        yield
    finally:
        for obj, name, value in reversed(saved):
            setattr(obj, name, value)
        if had_d64 is None:
            mods.pop("d64", None)
        else:
            mods["d64"] = had_d64


# The sm90 template's imports of its two sibling modules (prefill_d512_f16.py:65, :67):
# a rewritten sibling is imported under its own name, so the template's text, hence its
# FROST_SOURCE_DIGEST and every compile key, changes with it.
_SM90_SIBLINGS = {"sm90_host": "cudnn.sdpa.fwd.kernels.sm90.prepared_host", "sm90_common": "cudnn.sdpa.fwd.kernels.sm90._common_hopper"}
SM90_TEMPLATE = "sm90/prefill_d512_f16.py"  # as api_dsl._load_kernel_template names it


def sm90_template_file(rewrites: Iterable[Rewrite]) -> Optional[Path]:
    """The rewritten sm90 template file (its siblings' rewrites imported), or None when no rewrite targets the family."""
    rewrites = tuple(rewrites)
    redirects = []
    for target, module in _SM90_SIBLINGS.items():
        hit = _rewritten_file(target, rewrites)
        if hit is not None:
            mod = _package_module(target, hit[0], hit[1], "cudnn.sdpa.fwd.kernels.sm90")
            redirects.append(Rewrite("sm90", f"from {module} import ", f"from {mod.__name__} import "))
    hit = _rewritten_file("sm90", rewrites + tuple(redirects))
    return None if hit is None else hit[0]


@contextmanager
def sm90_sources(rewrites: Iterable[Rewrite] = ()):
    """While active, the sm90 template is loaded from its rewritten source
    wherever the kernels load it (``api_dsl._load_kernel_template``: the
    planner's ``compile()`` and ``kernels.sm90.adapter``). No sm90 rewrites:
    nothing changes."""
    path = sm90_template_file(rewrites)
    if path is None:
        yield
        return
    from cudnn.frost.template_loader import load_template
    from cudnn.sdpa.fwd import api_dsl

    real = api_dsl._load_kernel_template

    def load(filename, params, tag):
        return load_template(str(path), params, tag=tag) if filename == SM90_TEMPLATE else real(filename, params, tag)

    api_dsl._load_kernel_template = load
    try:
        yield
    finally:
        api_dsl._load_kernel_template = real
