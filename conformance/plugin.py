"""The pytest plugin of sdpa-conformance (pytest11 entry point ``sdpa_conformance``).

Options, the environment header, the ``adapter`` and ``gpu`` fixtures,
refusals (ground.outcome.Unsupported) skipped at the line that refused, the
known findings in force (ground.findings), and the recording of
every run:

- every process (xdist controller and workers) appends to its own shard
  (properties.recorder); properties record their examples there;
- the process that runs a failing test writes the case file of the failing
  case and appends its one-line repro command to the failure report;
- the controller alone records test outcomes (it sees every report exactly
  once) and, at the end, merges the shards, renders the reports, and fails
  the run if a known finding its examples exercised never reproduced (stale).

Nothing here imports torch or cudnn at import time: ``--kernels-source``
must be applied before cudnn is first imported, and CPU-only runs stay fast.
"""

from __future__ import annotations

import os
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import pytest

from conformance import __version__, family_select, isolation, schedule
from ground import findings, phases
from ground.families import DEFAULT_FAMILY, FAMILY_NAMES
from ground.outcome import PropertyFailure, Unsupported
from ground.tables import ADAPTER_ENV, ADAPTERS, COMPAT_ENV, DEFAULT_ADAPTER, NO_GPU
from properties import CHECKS, recorder
from reports import casefile, shards

# When this process loaded the plugin (pytest's start, before collection): a
# worker's collected record carries it, so the report can split its start.
LOADED = time.time()
DEFAULT_REPORT_DIR = "sdpa-report"
FINDINGS_FILE = "known_findings.toml"
PATH_OPTIONS = ("--report-dir", "--kernels-source", "--known-findings", "--compile-cache")
CPU_TIER_MARKER = (
    "cpu_tier: a verdict the same on every machine (compiles for a fixed arch or into a fresh cache, launches nothing): "
    "the CPU run judges it; sdpa-conformance gate leaves it out unless --cpu-tier"
)
CPU_TIER_LEFT_OUT = "left to the CPU run (--no-cpu-tier)"


@dataclass
class Run:
    adapter: str
    sm80_compat: bool
    report_dir: Path
    run_id: str  # shards/<run_id>/: this run's shards only
    kernels_source: Optional[str]
    findings_file: Optional[Path]
    worker: Optional[str]  # xdist worker id; None in the controller
    recording: bool
    start: float = field(default_factory=time.time)
    env: Optional[dict] = None
    version_warnings: list = field(default_factory=list)  # mismatches allowed by $SDPA_ALLOW_VERSION_MISMATCH
    pending: dict = field(default_factory=dict)  # nodeid -> outcome so far (controller)
    restore: tuple = ()
    hypothesis: dict = field(default_factory=dict)  # profile and seed, as strategies.profiles.describe says
    summary: Optional[dict] = None
    paths: Optional[dict] = None
    compile_cache: Optional[str] = None  # the on-disk compiled cache every process of the run shares (kernels.cache)
    compile_cache_previous: Optional[str] = None  # the variable's value before the run set it
    cache_warm: bool = False  # the compiled cache held kernels when the run began (the controller's reading: conformance.schedule)
    profile: str = ""  # the Hypothesis profile's name
    families: Optional[tuple] = None  # --family / $SDPA_FAMILY; None until the default is read off the GPU (selected_families)
    env_before: dict = field(default_factory=dict)  # the mirrored variables' values before the run (None: unset)
    cpu_tier: bool = True  # False: --no-cpu-tier, the tests marked cpu_tier are deselected (the CPU run judges them)


RUN = pytest.StashKey[Run]()


# ---------------------------------------------------------------- options
def pytest_addoption(parser):
    # Registers the suite's Hypothesis profiles before Hypothesis' own plugin
    # configures (it loads --hypothesis-profile by name, whatever the plugin order).
    import strategies.profiles  # noqa: F401

    g = parser.getgroup("sdpa-conformance", "SM80 SDPA conformance suite")
    g.addoption(
        "--adapter",
        choices=ADAPTERS,
        default=None,
        help="kernel entry point to drive: prepared (the compile entry points) or wrapper (sdpa_fwd_wrapper_sm80). Default: $SDPA_ADAPTER, else prepared.",
    )
    g.addoption(
        "--family",
        choices=family_select.CHOICES,
        default=None,
        help="kernel families to judge (ground.families): sm80, sm90 or all. Default: $SDPA_FAMILY, else the families the GPU runs "
        "(natively, and sm80 code on a newer GPU); without a GPU every family's CPU tiers.",
    )
    g.addoption("--sm80-compat", action="store_true", default=False, help="run the sm80 kernels on a newer GPU (sm80 code on sm_90). Also $SDPA_SM80_COMPAT=1.")
    g.addoption("--report-dir", default=None, metavar="DIR", help=f"where shards, case files and report.json/.md/.html go (default ./{DEFAULT_REPORT_DIR}).")
    g.addoption(
        "--kernels-source",
        default=None,
        metavar="PATH",
        help="test the kernels of this cudnn-frontend source tree instead of site-packages (applied before cudnn is imported).",
    )
    g.addoption(
        "--known-findings", default=None, metavar="FILE", help=f"known findings file (.toml or .json). Default: {FINDINGS_FILE} at the rootdir, if present."
    )
    isolation.addoption(g, parser)
    g.addoption(
        "--large",
        action="store_true",
        default=False,
        help="run the large tier (tests marked large: production-scale shapes, minutes and gigabytes; "
        "also -m large, $SDPA_LARGE=1 or the nightly profile). Default: skipped.",
    )
    g.addoption(
        "--compile-cache",
        default=None,
        metavar="DIR",
        help="on-disk compiled cache shared by the run's processes (a key compiles once per run; kept for later runs). "
        "Default: $SDPA_COMPILE_CACHE, else $CUDNN_FRONTEND_COMPILED_CACHE, else the frontend's ~/.cache/cudnn_frontend/compiled_plans.",
    )
    g.addoption(
        "--no-cpu-tier",
        action="store_true",
        default=False,
        help="leave the CPU tier out: deselect the tests marked cpu_tier (verdicts the same on every machine, which the CPU run judges). "
        "sdpa-conformance gate passes it unless --cpu-tier.",
    )


LARGE_ENV = "SDPA_LARGE"


def large_tier_selected(config) -> bool:
    """Whether the large tier runs: --large, $SDPA_LARGE=1, a -m expression
    asking for it, or the nightly profile."""
    from strategies import profiles

    expr = config.getoption("markexpr", default="") or ""
    asked = "large" in expr and "not large" not in expr
    profile = profiles.profile_name(config.getoption("hypothesis_profile", default=None))
    return bool(config.getoption("large", default=False)) or os.environ.get(LARGE_ENV) == "1" or asked or profile == "nightly"


def _profile_selection(config, items) -> None:
    """Deselect the tests of a kernel family (family_select.family_of: not the
    suite's own) the profile does not run (properties.matrix.PROFILE_TESTS)."""
    from properties.matrix import in_profile
    from strategies import profiles

    profile = profiles.profile_name(config.getoption("hypothesis_profile", default=None))
    dropped = [
        item
        for item in items
        if family_select.family_of(item, config.rootpath) is not None
        and not in_profile(profile, getattr(item, "originalname", item.name), getattr(getattr(item, "callspec", None), "params", {}))
    ]
    _deselect(config, items, dropped)


def _cpu_tier_selection(config, items) -> None:
    """--no-cpu-tier: deselect the tests marked cpu_tier. Deselected, not
    skipped: the CPU run gives their verdict, the GPU run gives none."""
    _deselect(config, items, [item for item in items if item.get_closest_marker("cpu_tier") is not None])


def _deselect(config, items, dropped) -> None:
    """Take ``dropped`` out of ``items`` and report them deselected (pytest_deselected)."""
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        gone = set(dropped)
        items[:] = [item for item in items if item not in gone]


def pytest_collection_modifyitems(config, items):
    _profile_selection(config, items)
    run = config.stash.get(RUN, None)
    if run is not None:
        try:
            family_select.deselect(config, items, selected_families(run))
        except ValueError as e:
            raise pytest.UsageError(str(e)) from None
        if not run.cpu_tier:
            _cpu_tier_selection(config, items)
    if not large_tier_selected(config):
        skip = pytest.mark.skip(reason="large tier: run with --large (or -m large, $SDPA_LARGE=1, the nightly profile)")
        for item in items:
            if item.get_closest_marker("large") is not None:
                item.add_marker(skip)
    _deal(config, items)


def _deal(config, items) -> None:
    """An xdist worker collects in dealt order (conformance.schedule): every
    worker's share about the same weight, heavy tests first. Tests that will
    skip weigh nothing."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 0)
    dist = getattr(config, "workerinput", {}).get("sdpa_dist")
    if dist != "worksteal" or workers < 2:
        return  # dealt shares are worksteal's first split (load sends chunks of a few tests)
    import torch

    have_gpu = torch.cuda.is_available()
    run = config.stash.get(RUN, None)
    measured = schedule.durations(run.profile, run.cache_warm) if run is not None else {}
    items[:] = schedule.deal(items, lambda item: item_weight(item, have_gpu, measured), workers)


def item_weight(item, have_gpu: bool, measured: Optional[dict] = None) -> float:
    """A collected test's weight in the deal (conformance.schedule.weight_of):
    its seconds in ``measured`` (a stored run's, by node id), its ``weight``
    marker, its property's, the compile tier's or a cheap test's; a test that
    will skip weighs nothing."""
    if item.get_closest_marker("skip") is not None or (item.get_closest_marker("gpu") is not None and not have_gpu):
        return 0.0
    declared = item.get_closest_marker("weight")
    compiles = item.get_closest_marker("compile") is not None
    return schedule.weight_of(
        _property_of(item),
        compiles=compiles,
        declared=declared.args[0] if declared is not None else None,
        measured=(measured or {}).get(item.nodeid),
    )


def _check_rootdir(config) -> None:
    """pytest picks its rootdir (and so pyproject.toml, testpaths, markers,
    known_findings.toml) before plugins declare their options, so in
    ``--report-dir /elsewhere`` the value counts as a test path there.
    Refuse such a run when the configuration it found is not the one above
    the invocation dir, rather than run without the suite's settings."""
    args, here = list(config.invocation_params.args), Path(config.invocation_params.dir).resolve()
    ini = config.inipath
    if ini is not None and (ini.parent.resolve() == here or ini.parent.resolve() in here.parents):
        return
    for i, arg in enumerate(args[:-1]):
        value = (here / args[i + 1]).resolve()
        if arg in PATH_OPTIONS and value.exists() and here not in [value, *value.parents]:
            raise pytest.UsageError(f"pytest took {args[i + 1]} for a test path when finding its rootdir (now {config.rootpath}): write {arg}={args[i + 1]}")


def _resolve(config) -> Run:
    adapter = config.getoption("adapter") or os.environ.get(ADAPTER_ENV) or DEFAULT_ADAPTER
    if adapter not in ADAPTERS:
        raise pytest.UsageError(f"{ADAPTER_ENV}={adapter!r}: expected one of {', '.join(ADAPTERS)}")
    compat_env = os.environ.get(COMPAT_ENV, "")
    if compat_env not in ("", "0", "1"):
        raise pytest.UsageError(f"{COMPAT_ENV}={compat_env!r}: expected 1 or 0")
    compat = bool(config.getoption("sm80_compat")) or compat_env == "1"
    try:
        families = family_select.parse(config.getoption("family") or os.environ.get(family_select.FAMILY_ENV), f"${family_select.FAMILY_ENV}")
    except ValueError as e:
        raise pytest.UsageError(str(e)) from None
    # The kernels side (mode detection, adapters) and xdist workers read the
    # environment, so the options are mirrored there for the run, and the
    # previous values come back at its end (an in-process run, e.g. pytester,
    # must leave nothing to the tests and subprocesses after it).
    mirrored = {family_select.FAMILY_ENV: config.getoption("family"), ADAPTER_ENV: config.getoption("adapter") and adapter, COMPAT_ENV: "1" if compat else None}
    mirrored = {k: v for k, v in mirrored.items() if v}
    env_before = {k: os.environ.get(k) for k in mirrored}
    os.environ.update(mirrored)

    here = Path(config.invocation_params.dir)
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None and "sdpa_report_dir" in workerinput:
        # The controller's dir and run, whatever the worker's cwd.
        report_dir, run_id = Path(workerinput["sdpa_report_dir"]), workerinput["sdpa_run_id"]
    else:
        report_dir, run_id = (here / (config.getoption("report_dir") or DEFAULT_REPORT_DIR)).resolve(), shards.new_run_id()

    opt = config.getoption("known_findings")
    if opt:
        findings_file = (here / opt).resolve()
        if not findings_file.is_file():
            raise pytest.UsageError(f"--known-findings {opt}: no such file")
    else:
        default = Path(config.rootpath) / FINDINGS_FILE
        findings_file = default if default.is_file() else None

    source = config.getoption("kernels_source")
    if source:
        source = str((here / source).resolve())
    recording = not (config.option.collectonly or getattr(config.option, "help", False))
    worker = workerinput.get("workerid", "gw") if workerinput is not None else None
    return Run(
        adapter,
        compat,
        report_dir,
        run_id,
        source,
        findings_file,
        worker,
        recording,
        families=families,
        env_before=env_before,
        cpu_tier=not config.getoption("no_cpu_tier"),
    )


def _configure_kernels(run: Run) -> None:
    """Point ``import cudnn`` at the kernels source, then check the versions
    of what will be imported (neither module imports cudnn)."""
    from kernels import environment, source

    try:
        source.use_kernels_source(run.kernels_source)  # None: $SDPA_KERNELS_SOURCE, else the wheel
    except source.KernelSourceError as e:
        raise pytest.UsageError(f"--kernels-source: {e}") from None
    try:
        # Raises on a mismatch; returns the mismatches $SDPA_ALLOW_VERSION_MISMATCH allows.
        run.version_warnings = list(environment.check_versions())
    except environment.VersionMismatch as e:
        raise pytest.UsageError(f"sdpa-conformance: {e}") from None


@pytest.hookimpl(tryfirst=True)  # first: the kernels source must be chosen before any plugin imports cudnn
def _share_cores(config) -> None:
    """An xdist worker takes its share of the cores for torch's CPU ops
    (input generation): torch's default, every core in every process, ran 16
    workers x 16 threads on 16 cores, and oversubscribed threads made
    make_inputs ~10x slower (1 thread 0.04 s, 2 threads on 2 busy cores 0.41 s
    per dense example; on the H200 host input generation was a third of all
    worker time)."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 0)
    if getattr(config, "workerinput", None) is not None and workers > 0:
        import torch

        torch.set_num_threads(max(1, (os.cpu_count() or 1) // workers))


def _steal_work(config) -> None:
    """``-n N`` without ``--dist``: distribute with xdist's ``worksteal``
    instead of ``load``. The suite's tests differ ~100x in cost (a per-stratum
    numerics test vs a contract rule); ``load`` fixes most of each worker's
    queue up front, so a worker dealt several slow tests sets the wall while
    others idle; ``worksteal`` hands an idle worker half of the busiest one's
    queue. An explicit ``--dist`` wins."""
    given = any(a == "--dist" or a.startswith("--dist=") or a == "-d" for a in config.invocation_params.args)
    if getattr(config.option, "dist", "no") == "load" and not given:
        config.option.dist = "worksteal"


@pytest.hookimpl(tryfirst=True)  # before pytest-timeout's: it reads the timeout method this sets (isolation.configure_test_timeout)
def pytest_configure(config):
    config.addinivalue_line("markers", "property(name): the conformance property a test checks (report attribution)")
    config.addinivalue_line("markers", schedule.WEIGHT_MARKER)
    config.addinivalue_line("markers", family_select.MARKER)
    config.addinivalue_line("markers", CPU_TIER_MARKER)
    if getattr(config.option, "help", False):
        return
    _check_rootdir(config)
    _share_cores(config)
    _steal_work(config)
    run = _resolve(config)
    _check_report_dir(run)
    _configure_kernels(run)
    from kernels import cache

    shared = getattr(config, "workerinput", {}).get("sdpa_compile_cache")  # a worker: the controller's
    run.compile_cache = shared or str(cache.resolve(config.getoption("compile_cache"), config.invocation_params.dir))
    # Read once, before any worker compiles: every worker must deal the same order.
    run.cache_warm = getattr(config, "workerinput", {}).get("sdpa_cache_warm", cache.holds_kernels(run.compile_cache))
    try:
        run.compile_cache_previous = cache.use(run.compile_cache)
    except cache.CacheDirError as e:
        given = "--compile-cache" if config.getoption("compile_cache") else f"${cache.OPTION_ENV} / ${cache.CACHE_ENV}"
        raise pytest.UsageError(f"{given}: {e}") from None
    from strategies import profiles

    try:
        profile = profiles.load_profile(config.getoption("hypothesis_profile", default=None))
    except ValueError as e:  # an unknown profile name
        raise pytest.UsageError(str(e)) from None
    run.profile = profile
    run.hypothesis = profiles.describe(profile, config.getoption("hypothesis_seed", default=None))
    _check_planted_mutant()
    loaded = []
    if run.findings_file is not None:
        try:
            loaded = findings.load(run.findings_file, name=casefile.display_path(run.findings_file), checks=CHECKS)
        except findings.FindingsError as e:
            raise pytest.UsageError(str(e)) from None
    previous_findings = findings.activate(loaded)
    previous_recorder = None
    if run.recording:
        if run.worker is None:
            shards.prune(run.report_dir, keep=run.run_id)
        previous_recorder = recorder.open_shard(str(shards.shard_path(run.report_dir, run.run_id, run.worker or "main")))
    run.restore = (previous_findings, previous_recorder)
    config.stash[RUN] = run
    # The run-time hooks live on an object per config: a pytester run nested
    # in a pytest run gets its own.
    config.pluginmanager.register(Recording(config, run), "sdpa_conformance_run")
    config.pluginmanager.register(
        isolation.Isolation(
            config,
            run,
            max_examples=profiles.settings().max_examples,
            case_env=lambda item: dict(environment(run), **_adapter_used(item, run)),
            hypothesis_of=lambda item: _hypothesis(item, ""),
        ),
        "sdpa_conformance_isolation",
    )


def _check_report_dir(run: Run) -> None:
    """The run's shards go under --report-dir: a path that cannot hold them is
    a usage error here, not an internal error at the first record."""
    if not run.recording or run.worker is not None:  # a worker writes where its controller could
        return
    if run.report_dir.exists() and not run.report_dir.is_dir():
        raise pytest.UsageError(f"--report-dir {run.report_dir}: not a directory")
    try:
        (run.report_dir / shards.SHARDS).mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise pytest.UsageError(f"--report-dir {run.report_dir}: cannot make {e.filename} ({e.strerror})") from None


def _check_planted_mutant() -> None:
    """$SDPA_PLANT_MUTANT (a deliberately broken kernel, for demonstrations)
    and $SDPA_PLANT_REFERENCE_BUG (a broken reference) are refused where CI is
    set: a gate must never run on one. An unknown name of either is a usage
    error."""
    from kernels.mutants import PLANT_ENV, planted

    try:
        mutant = planted()
    except ValueError as e:
        raise pytest.UsageError(str(e)) from None
    if mutant is not None and os.environ.get("CI"):
        raise pytest.UsageError(f"{PLANT_ENV}={mutant.name} plants a deliberate bug in the kernels; refused because $CI is set (never gate on it)")
    try:  # $SDPA_PLANT_REFERENCE_BUG: an unknown name would raise inside the first example that imports the reference
        from reference import planted as reference_plant  # the first import of reference applies the plant

        broken = reference_plant.check()
    except ValueError as e:  # reference.planted.UnknownPlant
        raise pytest.UsageError(str(e)) from None
    if broken is not None and os.environ.get("CI"):
        raise pytest.UsageError(f"{reference_plant.ENV}={broken} breaks the reference deliberately; refused because $CI is set (never gate on it)")


# ------------------------------------------------------------ environment
def adapter_label(run: Run) -> str:
    return f"{run.adapter} (sm80-compat)" if run.sm80_compat else run.adapter


def selected_families(run: Run) -> tuple:
    """The families the run judges: --family / $SDPA_FAMILY, else those the live GPU runs (family_select.default)."""
    if run.families is None:
        from kernels import environment as kenv

        run.families = family_select.default(kenv.detect().capability)
    return run.families


def environment(run: Run) -> dict:
    """The run's facts for the header, case files and reports (cached)."""
    if run.env is None:
        from kernels import environment as kenv
        from kernels import source

        e = kenv.detect()
        run.env = {
            "gpu": e.gpu,
            "capability": e.live_arch,
            "driver": e.driver,
            "versions": dict(e.versions),
            "mode": e.mode,
            "adapter": run.adapter,
            "sm80_compat": run.sm80_compat,
            "kernels_source": source.describe(),
            "report_dir": str(run.report_dir),
            "known_findings": str(run.findings_file) if run.findings_file else None,
            "header": kenv.header(adapter_label(run), e),
            "hypothesis_profile": run.hypothesis.get("profile"),
            "hypothesis_seed": run.hypothesis.get("seed"),
            "families": "+".join(selected_families(run)),
            "family_mode": family_select.mode(selected_families(run), e.capability),
            # A case file of another family records its own mode ("native sm90"), not the SM80 code's.
            "family_modes": {n: family_select.mode((n,), e.capability) for n in FAMILY_NAMES if n != DEFAULT_FAMILY},
            "phase_timing": phases.mode(),
            "bytecode": kenv.bytecode(),
            "cpu_tier": "run here" if run.cpu_tier else CPU_TIER_LEFT_OUT,
        }
        from kernels.mutants import planted

        mutant = planted()
        if mutant is not None:
            run.env["planted_mutant"] = mutant.name
        if run.compile_cache:
            from kernels import cache

            run.env["compile_cache"] = run.compile_cache
            run.env["compile_cache_note"] = cache.describe(run.compile_cache, e.capability is not None)
        if run.version_warnings:
            run.env["version_warnings"] = run.version_warnings
    return run.env


def pytest_report_header(config):
    run = config.stash.get(RUN, None)
    if run is None:
        return None
    n = len(findings.active())
    known = f"{casefile.display_path(run.findings_file)} ({n} entries)" if run.findings_file else "none"
    env = environment(run)
    lines = [
        env["header"],
        f"sdpa-conformance {__version__}: report dir {casefile.display_path(run.report_dir)} | known findings {known}",
        f"hypothesis: profile {env['hypothesis_profile']} | seed: {env['hypothesis_seed']}",
        f"sdpa-conformance: families {env['families']} | mode: {env['family_mode']}",
    ]
    iso = config.pluginmanager.get_plugin("sdpa_conformance_isolation")
    if iso is not None:
        lines.append(iso.header())
    if env.get("compile_cache_note"):
        lines.append(f"sdpa-conformance: {env['compile_cache_note']}")
    if not run.cpu_tier:
        lines.append(f"sdpa-conformance: cpu tier: {CPU_TIER_LEFT_OUT}, its tests (marked cpu_tier) deselected")
    if env.get("planted_mutant"):
        from kernels.mutants import PLANT_ENV, planted

        m = planted()
        lines.append(
            f"WARNING: KERNELS DELIBERATELY BROKEN: {PLANT_ENV}={m.name} is planted in the prepared adapter ({m.why}) "
            "-- a demonstration run, never a verdict on the kernels"
        )
    return lines + [f"WARNING: unpinned kernel package: {w}" for w in run.version_warnings]


# --------------------------------------------------------------- fixtures
@pytest.fixture(scope="session")
def gpu():
    """The CUDA device; where there is none, refused (``Unsupported``, scope
    "machine"): the test skips with the reason."""
    import torch

    if not torch.cuda.is_available():
        raise Unsupported.machine(NO_GPU + " (the compile-only tier still runs)")
    return torch.device("cuda", torch.cuda.current_device())


@pytest.hookimpl(tryfirst=True)  # before pytest's unittest shim, which would report the skip at its own line
def pytest_runtest_makereport(item, call):
    """A refusal (``ground.outcome.Unsupported``, a unittest.SkipTest; scope
    "case" reaches here only outside a Hypothesis example) skips the test
    with its reason, reported at the line that refused."""
    refusal = call.excinfo.value if call.excinfo is not None else None
    if isinstance(refusal, Unsupported):
        skipped = pytest.skip.Exception(str(refusal)).with_traceback(refusal.__traceback__)
        call.excinfo = pytest.ExceptionInfo.from_exception(skipped)


@pytest.fixture(scope="session")
def adapter(pytestconfig):
    """The kernel adapter chosen by --adapter / $SDPA_ADAPTER."""
    import kernels

    # sm80-compat reaches the wrapper adapter through $SDPA_SM80_COMPAT (set at configure).
    return kernels.get_adapter(pytestconfig.stash[RUN].adapter)


# ------------------------------------------------------ run-time recording
def _property_of(item) -> Optional[str]:
    """A test's property: its ``property`` marker (the test matrix,
    properties.matrix, gives every property test one)."""
    mark = item.get_closest_marker("property")
    return mark.args[0] if mark is not None and mark.args else None


def _leaves(exc) -> list:
    """The exceptions inside (nested) exception groups, e.g. Hypothesis' multiple bugs."""
    inner = getattr(exc, "exceptions", None)
    if isinstance(inner, tuple):
        return [leaf for e in inner for leaf in _leaves(e)]
    return [exc]


def _hypothesis(item, text: str) -> dict:
    fn = getattr(item, "obj", None)
    seed = getattr(fn, "_hypothesis_internal_use_seed", None) or getattr(fn, "_hypothesis_internal_use_generated_seed", None)
    if seed is None:
        seed = item.config.getoption("hypothesis_seed", default=None)
    settings = getattr(fn, "_hypothesis_internal_use_settings", None)
    info = casefile.hypothesis_info(text, seed, getattr(settings, "derandomize", None))
    if info["seed"] is not None:
        info["rerun"] = f"pytest '{item.nodeid}' --hypothesis-seed={info['seed']}"
    return info


def _failing_cases(exc) -> list:
    """(property, Case, params, summary, detail) for each property check that
    failed: the PropertyFailures raised, else the case begun last (the
    shrunk one: Hypothesis replays it last) with the exception as summary."""
    out = []
    last = recorder.last_begun()
    for e in _leaves(exc):
        if isinstance(e, PropertyFailure):
            params = last.params if last is not None and (last.property, last.case) == (e.property, e.case) else {}
            out.append((e.property, e.case, params, e.summary, e.detail))
    if not out and last is not None:
        first = (str(exc).strip().splitlines() or [""])[0][:300]
        out.append((last.property, last.case, last.params, f"{type(exc).__name__}: {first}", {"exception": type(exc).__name__, "message": str(exc)[:4000]}))
    return out


def _adapter_used(item, run: Run) -> dict:
    """The adapter the test actually drove: a fixture value that is one
    (tests may ask for a specific entry point), else the run's --adapter."""
    for value in getattr(item, "funcargs", {}).values():
        value = value[0] if isinstance(value, tuple) and value else value  # an (adapter, projection) fixture
        entry = getattr(value, "entry", getattr(value, "name", None))  # another family's adapter names its entry point
        if entry in ADAPTERS and callable(getattr(value, "run", None)):
            return {"adapter": entry, "sm80_compat": bool(getattr(value, "sm80_compat", False))}
    return {"adapter": run.adapter, "sm80_compat": run.sm80_compat}


def _skip_reason(report) -> str:
    """A skipped test's reason: pytest's (path, line, "Skipped: reason") tuple, else its text."""
    longrepr = report.longrepr
    text = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
    return text.removeprefix("Skipped: ")


def _outcome(report, so_far: Optional[str]) -> Optional[str]:
    wasxfail = hasattr(report, "wasxfail")
    if report.when in ("call", "???"):  # "???": xdist's report for a test whose worker crashed
        if wasxfail:
            return "xfailed" if report.skipped else "xpassed"
        return report.outcome
    if report.when == "setup":
        if report.failed:
            return "error"
        if report.skipped:
            return "xfailed" if wasxfail else "skipped"
        return so_far
    return "error" if report.failed else so_far  # teardown


class Recording:
    """The run-time hooks of one run, bound to its config."""

    def __init__(self, config, run: Run):
        self.config, self.run = config, run
        self.controller = run.worker is None
        self.errors = []  # stale known findings: they fail the run

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node):
        """xdist controller: workers write into the controller's report dir."""
        node.workerinput["sdpa_report_dir"] = str(self.run.report_dir)
        node.workerinput["sdpa_run_id"] = self.run.run_id
        node.workerinput["sdpa_compile_cache"] = self.run.compile_cache
        node.workerinput["sdpa_cache_warm"] = self.run.cache_warm
        node.workerinput["sdpa_dist"] = getattr(node.config.option, "dist", None)  # workers' own option reads "no"

    def pytest_unconfigure(self, config):
        previous_findings, previous_recorder = self.run.restore
        findings.activate(previous_findings)
        from kernels import cache

        cache.restore(self.run.compile_cache_previous)
        for name, value in self.run.env_before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        if self.run.recording:
            recorder.close_shard(previous_recorder)

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_modifyitems(self, items):
        mapping = {}
        for item in items:
            mapping[item.nodeid] = _property_of(item)
        recorder.write({"kind": "collected", "tests": mapping, "t": time.time(), "t_loaded": LOADED})

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item):
        recorder.set_test(item.nodeid)
        try:
            return (yield)
        finally:
            recorder.set_test(None)

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_call(self, item):
        recorder.set_test(item.nodeid, **_adapter_used(item, self.run))  # fixtures are set up by now

    @pytest.hookimpl(wrapper=True, tryfirst=True)  # outermost: sees the report after xfail handling
    def pytest_runtest_makereport(self, item, call):
        report = yield
        xfailed = report.skipped and hasattr(report, "wasxfail")
        if not self.run.recording or call.excinfo is None or report.when != "call" or not (report.failed or xfailed):
            return report
        exc = call.excinfo.value
        text = "\n".join([*getattr(exc, "__notes__", []), getattr(item, "hypothesis_report_information", ""), str(report.longrepr)])
        cases = _failing_cases(exc)
        env = dict(environment(self.run), **_adapter_used(item, self.run))
        hyp, commands = _hypothesis(item, text), []
        for prop, case, params, summary, detail in cases:
            path = casefile.write(
                self.run.report_dir,
                property=prop,
                case=case.to_dict(),
                params=params,
                summary=summary,
                detail=detail,
                nodeid=item.nodeid,
                environment=env,
                hypothesis=hyp,
                digest=casefile.inputs_digest(case),
                needs_gpu="gpu" in getattr(item, "fixturenames", ()),
            )
            cmd = casefile.repro_command(path)
            recorder.write(
                {
                    "kind": "failure",
                    "nodeid": item.nodeid,
                    "property": prop,
                    "case": case.to_dict(),
                    "params": params,
                    "summary": summary,
                    "case_file": str(path),
                    "repro": cmd,
                    "hypothesis": hyp,
                }
            )
            commands.append(cmd if len(cases) == 1 else f"{cmd}    # {prop}: {summary[:120]}")
        if commands and report.failed:
            title, body = "sdpa-conformance: reproduce with", "\n".join(commands)
            if hasattr(report.longrepr, "addsection"):
                report.longrepr.addsection(title, body)
            else:
                report.sections.append((title, body))
        return report

    def pytest_runtest_logreport(self, report):
        """Controller only: one test record per test from the reports it sees
        (its own, or the ones xdist forwards from workers)."""
        if not (self.controller and self.run.recording):
            return
        st = self.run.pending.setdefault(report.nodeid, {"outcome": None, "duration": 0.0, "message": ""})
        st["outcome"] = _outcome(report, st["outcome"])
        st["duration"] += getattr(report, "duration", 0.0) or 0.0
        if report.failed and not st["message"]:
            crash = getattr(report.longrepr, "reprcrash", None)
            st["message"] = (crash.message if crash is not None else str(report.longrepr))[:500]
        elif report.skipped and not hasattr(report, "wasxfail") and not st["message"]:
            st["message"] = _skip_reason(report)[:500]
        if report.when in ("teardown", "???"):
            self._flush_test(report.nodeid)

    def _flush_test(self, nodeid: str) -> None:
        st = self.run.pending.pop(nodeid)
        recorder.write({"kind": "test", "nodeid": nodeid, **st, "outcome": st["outcome"] or "passed"})

    def pytest_sessionfinish(self, session, exitstatus):
        run = self.run
        if not (self.controller and run.recording):
            return
        for nodeid in list(run.pending):  # interrupted (-x, Ctrl-C) before teardown
            self._flush_test(nodeid)
        # Strict known findings, judged on the examples of every process (not
        # on the rendered report: a report that fails to render hides nothing).
        read = None
        if session.exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED):
            read = shards.read(run.report_dir, run.run_id)
            self.errors = findings.stale(findings.statuses(findings.active(), findings.property_test_observations(read[0])))
            if self.errors:
                session.exitstatus = pytest.ExitCode.TESTS_FAILED
        end = time.time()
        env = environment(run)
        record = {
            "kind": "session",
            "environment": env,
            "start": run.start,
            "end": end,
            "wall_seconds": end - run.start,
            "exitstatus": int(session.exitstatus),
            "findings": [f.to_dict() for f in findings.active()],
            "findings_file": str(run.findings_file) if run.findings_file else None,
            "args": list(self.config.invocation_params.args),
        }
        recorder.write(record)
        if read is not None:  # the report merges what was read, and the session record as the shard holds it
            read[0].append(shards.as_read(record, recorder.shard_path()))
        import reports

        try:
            run.summary, run.paths = reports.build(run.report_dir, run.run_id, read=read)
        except Exception as e:  # noqa: BLE001 - a broken report must not hide the test results
            warnings.warn(pytest.PytestWarning(f"sdpa-conformance: rendering the report failed: {type(e).__name__}: {e}"))

    def pytest_terminal_summary(self, terminalreporter):
        s, tr = self.run.summary, terminalreporter
        if s is None and not self.errors:
            return
        tr.write_sep("-", "sdpa-conformance")
        if s is not None:
            rate = s["run"]["examples_per_minute"]
            counts = {
                k: sum(1 for e in s["findings"]["entries"] if e["status"] == k)
                for k in (findings.REPRODUCED, findings.STALE, findings.NOT_EXERCISED, findings.STEERED)
            }
            tr.write_line(
                f"{s['run']['examples']} examples"
                + (f" ({rate:.0f}/min)" if rate else "")
                + f", {len(s['failures'])} failing case(s); known findings: "
                + ", ".join(f"{n} {k}" for k, n in counts.items())
                + f"; report: {casefile.display_path(self.run.paths['html'])}"
            )
            for f in s["failures"]:
                tr.write_line(f"  {f['repro']}    # {f['property']}: {(f.get('summary') or '')[:100]}")
            for e in s["findings"]["entries"]:  # crash findings: what the tests drew instead of the Cases that fault
                if e.get("check") == findings.CRASH:
                    steer = ", ".join(f"{k}={v!r}" for k, v in (e.get("steer") or {}).items())
                    tr.write_line(f"  crash finding {e['id']} ({e.get('source') or '-'}): {e.get('steered', 0)} example(s) steered ({steer})")
        for e in self.errors:  # stale known findings: they failed the run
            tr.write_line(f"ERROR stale known finding: {e}", red=True)
