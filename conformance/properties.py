"""The properties: plain functions ``check(case, adapter) -> Observation``.

pytest (conformance/test_*.py), the repro command and the mutant harness all
call these same functions, so a case file replays exactly what failed. Each
raises PropertyFailure when the property does not hold; where the case
matches a known finding (known_findings.toml) the failure is returned as an
``xfailed`` Observation instead, and the report lists it.
"""

from __future__ import annotations

import time
from typing import Callable, Dict

import torch

from conformance import judge, recorder
from conformance.case import Case
from conformance.data import FINITE_PAD, TORCH_DTYPES, flat_storage, make_inputs, make_outputs
from conformance.outcome import Observation, PropertyFailure


class NoGPU(RuntimeError):
    """Raised by properties that launch kernels when no CUDA device exists."""


def device() -> torch.device:
    if not torch.cuda.is_available():
        raise NoGPU("no CUDA GPU found: launching the kernels under test needs one")
    return torch.device("cuda", torch.cuda.current_device())


def _finish(name: str, case: Case, start: float, run, *, finding_of=None, **fields) -> Observation:
    """Run ``run()`` (the judging), turning a failure on a known finding into
    an xfailed Observation; record the Observation either way. ``finding_of``
    maps a failure to a finding id (default: the known-findings file)."""
    from conformance import findings

    obs = Observation(name, case, **fields)
    try:
        obs.ratios = run() or {}
    except PropertyFailure as failure:
        if finding_of is not None:
            known = finding_of(failure)
        else:
            entry = findings.match(name, case)
            known = entry.id if entry is not None else None
        obs.notes["summary"] = failure.summary
        obs.seconds = time.perf_counter() - start
        if known is None:
            failure.observation = obs
            obs.outcome = "failed"
            recorder.observe(obs)
            raise
        obs.outcome, obs.finding = "xfailed", known
    obs.seconds = time.perf_counter() - start
    recorder.observe(obs)
    return obs


# ------------------------------------------------------------------ regions
TILE_M = 128  # Q rows per CTA in every SM80 flavor (config_sm80 *_CFG)
def row_regions(case: Case, inputs) -> Callable[[dict], str]:
    """coords -> the region an output row sits in, for failure reports. The
    visible-key counts are computed on the first call only: passing examples
    never pay for them."""
    from functools import cache

    from reference.attention import visible_counts

    counts = cache(lambda: visible_counts(case, inputs))  # dense (B, H, SQ) / THD (H, T_q)

    def region(c: dict) -> str:
        if case.is_thd:
            if "sequence" not in c:
                return "capacity tail (no sequence)"
            n = int(counts()[c["head"], c["packed_token"]])
            seq_len = case.q_lens[c["sequence"]]
            tile_edge = c["token"] // TILE_M == (seq_len - 1) // TILE_M and seq_len % TILE_M
        else:
            if c["token"] >= case.q_lengths()[c["batch"]]:
                return "padded Q row (past seq_q_len)"
            n = int(counts()[c["batch"], c["head"], c["token"]])
            tile_edge = c["token"] // TILE_M == (case.s_q - 1) // TILE_M and case.s_q % TILE_M
        if n == 0:
            return "row with no visible key"
        return "last partial Q tile" if tile_edge else "interior row"

    return region


def _row_mask(case: Case, inputs, quantity: str, shape) -> torch.Tensor:
    """Rows the contract defines a value for: dense every row (padded rows
    are 0 / -inf by contract), THD the live packed rows."""
    if not case.is_thd:
        return torch.ones(shape, dtype=torch.bool, device=inputs.q.device)
    live = inputs.q_live.to(inputs.q.device)
    return live[:, None, None].expand(shape) if quantity == "o" else live[None, :].expand(shape)


# ----------------------------------------------------------------- numerics
def contract_rows(case: Case, inputs, visible: torch.Tensor):
    """(O rows, LSE rows) whose value the contract fixes exactly, in the LSE
    layout: dense rows past seq_q_len (O = 0, LSE = -inf even with sinks) and
    rows with no visible key (O = 0; LSE = -inf, or the sink when there are
    sinks: that one is a computed value, judged by the model)."""
    no_key = visible == 0
    padded = torch.zeros_like(no_key)
    if not case.is_thd:
        padded = ~inputs.q_live.to(visible.device)[:, None, :].expand_as(no_key)
    o_rows = padded | no_key
    return o_rows, padded | (no_key if inputs.sinks is None else torch.zeros_like(no_key))


def legacy_ratios(case: Case, inputs, o, lse, o_live, lse_live) -> dict:
    """error / bound under the rule the error model replaced (2x a same-dtype
    run's error, against the fp32 reference); diagnostics only."""
    from conformance.tolerances import legacy_bound, max_abs_error
    from reference.attention import reference_for_case

    ref = reference_for_case(case, inputs, torch.float32)
    low = reference_for_case(case, inputs, TORCH_DTYPES[case.dtype])
    out = {}
    for i, (quantity, got, live) in enumerate((("o", o, o_live), ("lse", lse, lse_live))):
        finite = ref[i][live][torch.isfinite(ref[i][live])]
        b = legacy_bound(quantity, case.dtype, max_abs_error(low[i], ref[i], live), float(finite.abs().max()) if finite.numel() else 0.0)
        err = max_abs_error(got, ref[i], live)
        out[quantity] = err / b if b > 0 else (0.0 if err == 0 else float("inf"))
    return out


def check_numerics(case: Case, adapter, *, legacy: bool = False) -> Observation:
    """O and LSE against the float64 reference under the error model
    (``conformance.tolerances.kernel_bounds``: per O element, per LSE row);
    rows whose value the contract fixes (``contract_rows``) bit for bit. The
    input storage outside the live tokens is poisoned: NaN, except dense rows
    past the padding lengths, which hold FINITE_PAD (their NaN is
    check_tails'). ``legacy`` also records the replaced rule's ratios in the
    notes (tools/calibrate_error_model.py)."""
    from conformance.tolerances import kernel_bounds
    from reference.attention import reference_for_case

    recorder.begin("numerics", case)
    start = time.perf_counter()
    dev = device()
    inputs = make_inputs(case, dev, poison=True, pad_fill=FINITE_PAD)
    outputs = make_outputs(case, dev)
    result = adapter.run(case, inputs, outputs)
    ref_o, ref_lse, model = reference_for_case(case, inputs, torch.float64, extra=lambda it: kernel_bounds(it, case.dtype))
    if not model:  # THD without a single Q row: no attention call, no row to judge
        model = {"o": torch.full_like(ref_o, float("nan")), "lse": torch.full_like(ref_lse, float("nan")), "visible": torch.full_like(ref_lse, float("nan"))}
    regions = row_regions(case, inputs)
    notes = dict(result.notes)

    def judged():
        o_rows = _row_mask(case, inputs, "o", ref_o.shape)
        lse_rows = _row_mask(case, inputs, "lse", ref_lse.shape)
        visible = torch.where(lse_rows, model["visible"], torch.ones_like(model["visible"]))
        o_fixed, lse_fixed = contract_rows(case, inputs, visible)
        if case.is_thd:  # O is (T_q, H, D), the row masks (H, T_q)
            o_fixed = o_fixed.T[..., None].expand_as(ref_o)
        else:
            o_fixed = o_fixed[..., None].expand_as(ref_o)
        judge.exactly("numerics", case, "o", result.o, ref_o, o_rows & o_fixed, "O rows the contract fixes (padded Q rows, rows with no visible key: 0)", regions)
        judge.exactly("numerics", case, "lse", result.lse, ref_lse, lse_rows & lse_fixed, "LSE rows the contract fixes (padded Q rows, rows with no visible key: -inf)", regions)
        if legacy:
            notes["legacy_ratios"] = legacy_ratios(case, inputs, result.o, result.lse, o_rows, lse_rows)
        ratios, failures = {}, []
        for quantity, got, ref, live in (("o", result.o, ref_o, o_rows & ~o_fixed), ("lse", result.lse, ref_lse, lse_rows & ~lse_fixed)):
            try:
                ratios[quantity] = judge.within_model("numerics", case, quantity, got, ref, model[quantity], live, regions)
            except PropertyFailure as failure:  # judge both, then report the first with both ratios
                ratios[quantity] = failure.detail.get("ratio", float("inf"))
                failures.append(failure)
        if failures:
            failures[0].detail["ratios"] = ratios
            raise failures[0]
        return ratios

    return _finish("numerics", case, start, judged, compile=result.compile.to_dict(), notes=notes)


# -------------------------------------------------------------------- tails
def _storage_outside_view(view: torch.Tensor) -> torch.Tensor:
    """A bool mask over ``view``'s whole storage: True where no element of
    the view lives (the pad columns of a padded layout)."""
    n = view.untyped_storage().nbytes() // view.element_size()
    used = torch.zeros(n, dtype=torch.bool, device=view.device)
    idx = torch.arange(n, device=view.device).as_strided(view.shape, view.stride(), view.storage_offset())
    used[idx.flatten()] = True
    return ~used


def tail_expectation(initialize_outputs: bool) -> float:
    """What output storage outside the live rows holds after a launch.

    THD: ``prepared_host.thd_host`` zeroes the whole O and Stats capacity
    before attention when ``initialize_outputs`` (``zero_outputs``, the mode
    the public wrapper uses: "Wrapper outputs retain zeroed holes/tails");
    without it nothing outside the live rows is written, so the caller's
    bytes (our NaN poison) must survive. Dense pad columns are never written.
    """
    return 0.0 if initialize_outputs else float("nan")


def check_tails(case: Case, adapter, *, initialize_outputs: bool = True) -> Observation:
    """Output storage outside the live rows ends exactly as the contract says,
    and every output row the contract defines is written and free of the NaN
    poisoned into all input storage outside the live tokens (dense padded
    rows included)."""
    recorder.begin("tails", case, initialize_outputs=initialize_outputs)
    start = time.perf_counter()
    dev = device()
    inputs = make_inputs(case, dev, poison=True)
    o, lse = make_outputs(case, dev)
    result = adapter.run(case, inputs, (o, lse), initialize_outputs=initialize_outputs)
    init = result.notes.get("initialize_outputs", initialize_outputs)
    regions = row_regions(case, inputs)

    def judged():
        if case.is_thd:
            want = tail_expectation(init)
            for quantity, got in (("o", result.o), ("lse", result.lse)):
                dead = ~_row_mask(case, inputs, quantity, got.shape)
                judge.exactly("tails", case, quantity, got, torch.full_like(got, want), dead, f"{quantity.upper()} capacity outside the live tokens", regions)
        else:
            pad = _storage_outside_view(result.o)
            flat = flat_storage(result.o)
            judge.exactly("tails", case, "o", flat, torch.full_like(flat, float("nan")), pad, "O pad columns (never written)")
        for quantity, got in (("o", result.o), ("lse", result.lse)):
            live = _row_mask(case, inputs, quantity, got.shape)
            judge.exactly("tails", case, quantity, torch.isnan(got), torch.zeros_like(got, dtype=torch.bool), live, "live outputs (poison left or NaN produced)", regions)
        return {}

    return _finish("tails", case, start, judged, compile=result.compile.to_dict(), notes={**result.notes, "initialize_outputs": init})


# ----------------------------------------------------------- compile reuse
def runtime_variants(case: Case):
    """Cases that differ from ``case`` only in runtime facts: the compile key
    must not see them. Data seed and addresses always; THD token totals,
    capacities and first offsets; dense padding-length values and the scale's
    magnitude (its sign is compiled in)."""
    yield "new data and addresses", case.replace(seed=case.seed + 1)
    if case.is_thd:
        grow = tuple(n + 1 for n in case.q_lens)
        yield "new token totals", case.replace(q_lens=grow, kv_lens=tuple(n + 3 for n in case.kv_lens))
        yield "new capacities and first offsets", case.replace(q_base=case.q_base + 5, kv_base=case.kv_base + 2, q_slack=case.q_slack + 7, kv_slack=case.kv_slack + 1)
    else:
        if case.seq_kv_lens is not None:
            yield "new padding lengths", case.replace(seq_kv_lens=tuple(max(0, n - 1) for n in case.seq_kv_lens))
        if case.seq_q_lens is not None:
            yield "new Q padding lengths", case.replace(seq_q_lens=tuple(case.s_q - n for n in case.seq_q_lens))
    if case.softmax_scale != 0:
        yield "new scale of the same sign", case.replace(scale=case.softmax_scale * 1.75)


# Counters one runtime-only call may move: nothing compiled, no new module.
NO_COMPILE = {"misses": 0, "thd_lru_misses": 0, "modules": 0}


def check_compile_reuse(case: Case, adapter, *, launch: bool = True) -> Observation:
    """After ``case`` compiled once, runtime-only variants mint no compile and
    no template module; for THD a new sequence count mints at most one
    compile and returning to the seen count is a pure hit. ``launch=False``
    checks compile_only (the CPU tier)."""
    recorder.begin("compile_reuse", case, launch=launch)
    start = time.perf_counter()

    def call(c: Case):
        if not launch:
            return adapter.compile_only(c)
        dev = device()
        return adapter.run(c, make_inputs(c, dev, poison=True), make_outputs(c, dev)).compile

    first = call(case)

    def judged():
        for what, variant in runtime_variants(case):
            judge.compile_delta("compile_reuse", variant, call(variant), NO_COMPILE, what)
        if case.is_thd:
            more = case.replace(q_lens=case.q_lens + (1,), kv_lens=case.kv_lens + (1,))
            judge.compile_delta("compile_reuse", more, call(more), {"misses": 1, "modules": 0}, "a new sequence count")
            judge.compile_delta("compile_reuse", case, call(case), NO_COMPILE, "back to a seen sequence count")
        return {}

    return _finish("compile_reuse", case, start, judged, compile=first.to_dict())


# The disk property is about the cache, not the shape: one small Case per layout.
DISK_CASES = {
    "dense": Case(s_q=65, s_kv=129, causal=True),
    "thd": Case(layout="thd", q_lens=(3, 64), kv_lens=(65, 1), q_base=2),
}

# One launch in a fresh process on the named adapter; prints its counters.
_PROBE = """
import json, sys
from kernels.source import use_kernels_source
use_kernels_source()  # $SDPA_KERNELS_SOURCE, inherited: the same kernels as this run
#PRELUDE
from conformance.case import Case
from conformance.data import make_inputs, make_outputs
from kernels import get_adapter
case = Case.from_json(sys.argv[1])
result = get_adapter(sys.argv[2]).run(case, make_inputs(case, "cuda"), make_outputs(case, "cuda"))
print("COUNTERS " + json.dumps(result.compile.to_dict()))
"""


def _launch_in_new_process(case: Case, adapter, cache_dir, prelude: str) -> dict:
    import json
    import os
    import subprocess
    import sys

    from kernels.wrapper import COMPAT_ENV

    env = {**os.environ, "CUDNN_FRONTEND_COMPILED_CACHE": str(cache_dir)}
    env.pop("CUDNN_FRONTEND_DISABLE_COMPILED_CACHE", None)
    if getattr(adapter, "sm80_compat", False):
        env[COMPAT_ENV] = "1"  # the mode this run's wrapper adapter is in
    done = subprocess.run([sys.executable, "-c", _PROBE.replace("#PRELUDE", prelude), case.to_json(), adapter.name], env=env, capture_output=True, text=True, timeout=300)
    lines = [line for line in done.stdout.splitlines() if line.startswith("COUNTERS ")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"the probe process failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(lines[-1][len("COUNTERS ") :])


def check_disk_reuse(case: Case, adapter, *, prelude: str = "") -> Observation:
    """CUDNN_FRONTEND_COMPILED_CACHE across processes: a first process on a
    fresh, empty cache directory compiles ``case``; a second process on the
    same directory serves it from disk (counters read around its one launch).
    ``prelude`` is code the probe processes run first (the power test plants
    a broken key there)."""
    import tempfile

    recorder.begin("disk_reuse", case)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="sdpa-disk-cache-") as where:
        first = _launch_in_new_process(case, adapter, where, prelude)
        seen = {"first process": first}  # the Observation's notes: both processes' counters

        def judged():
            if first.get("misses", 0) < 1:
                raise PropertyFailure("disk_reuse", case, f"the first process found {where} warm: {first}", {"first": first})
            second = seen["second process"] = _launch_in_new_process(case, adapter, where, prelude)
            # Only compiles count: a new process's in-process memos (the THD lrus,
            # the template modules) start empty, so they miss once per key by design.
            judge.compile_delta("disk_reuse", case, second, {"misses": 0}, "a second process on the same on-disk cache")
            if second.get("hits", 0) < 1:
                raise PropertyFailure("disk_reuse", case, f"the second process neither compiled nor read the on-disk cache: {second}", {"second": second})
            return {}

        return _finish("disk_reuse", case, start, judged, compile=first, notes=seen)


# name -> check(case, adapter, **params); params are what recorder.begin saw.
PROPERTIES: Dict[str, Callable[..., Observation]] = {
    "numerics": check_numerics,
    "tails": check_tails,
    "compile_reuse": check_compile_reuse,
    "disk_reuse": check_disk_reuse,
}


# --------------------------------------------------------------- rejections
def entry_adapter(entry: str):
    """The adapter serving a contract's entry point. Off SM80 the public dense
    wrapper refuses the device before it reads any other contract, so the
    wrapper runs in its explicit SM80-compatibility mode there (the
    observation notes record the mode)."""
    from kernels import get_adapter
    from kernels.environment import detect

    if entry == "wrapper":
        return get_adapter("wrapper", sm80_compat=not detect().native)
    return get_adapter(entry)


def _attempt(call):
    try:
        call()
    except Exception as e:  # noqa: BLE001 - the property judges it
        return e
    return None


def check_rejection(case: Case, adapter=None, *, entry: str, launch: bool = True) -> Observation:
    """A contract-violating Case is refused by ``entry`` ("wrapper",
    "prepared" or "config") with the stated exception naming the argument,
    before anything is compiled, launched or written (``launch=False``:
    through compile_only, the CPU tier; nothing can be written then). Rules the installed
    kernels are known to break (``known_finding`` in conformance.contracts)
    must behave exactly as the finding says (strict: a finding that no longer
    reproduces fails, so the table is kept honest)."""
    from conformance import contracts
    from kernels.counters import NO_COMPILE_REQUEST, forget_memos, measure

    rule = contracts.rule(case.violation)
    expect = rule.expect[entry]
    if entry != contracts.CONFIG and getattr(adapter, "name", None) != entry:
        adapter = entry_adapter(entry)  # e.g. a repro of a wrapper rule from a prepared run
    recorder.begin("rejection", case, entry=entry, launch=launch)
    start = time.perf_counter()
    outputs = inputs = None
    if entry == contracts.CONFIG:
        call = lambda: contracts.run_config(rule, case)  # noqa: E731
    elif expect.unsafe_launch or not launch:
        # unsafe_launch: accepting it is the finding; a launch would read out of bounds.
        call = lambda: adapter.compile_only(case, tamper=rule.tamper)  # noqa: E731
    else:
        dev = device()
        inputs = make_inputs(case, dev, poison=True)
        outputs = make_outputs(case, dev)
        call = lambda: adapter.run(case, inputs, outputs, tamper=rule.tamper)  # noqa: E731
    forget_memos()
    with measure() as box:
        error = _attempt(call)
    finding_id = f"contract:{rule.name}@{entry}"
    compiles_first = expect.compiles_first_for(case)

    def judged():
        if expect.known_finding:
            observed = "accepted" if error is None else f"{type(error).__name__}: {error}"
            reproduces = error is None if expect.observed is None else isinstance(error, expect.observed)
            if reproduces:
                raise PropertyFailure("rejection", case, f"known finding {finding_id}: {expect.known_finding} (observed: {observed[:200]})", {"finding": finding_id})
            if not (isinstance(error, expect.exception) and expect.fragment.lower() in str(error).lower()):
                raise PropertyFailure("rejection", case, f"{finding_id}: neither the finding nor the contract holds; observed {observed[:300]}", {"observed": observed})
            raise PropertyFailure("rejection", case, f"{finding_id} no longer reproduces: the entry point now conforms; remove the known_finding", {"stale_finding": finding_id})
        judge.raises_contract("rejection", case, lambda: _reraise(error), expect.exception, expect.fragment)
        if outputs is not None:
            for quantity, buf in zip(("o", "lse"), outputs):
                flat = flat_storage(buf)
                judge.exactly("rejection", case, quantity, flat, torch.full_like(flat, float("nan")), torch.ones_like(flat, dtype=torch.bool), "caller output storage after a rejection")
        asked = any(getattr(box.delta, k) > 0 for k in NO_COMPILE_REQUEST)
        if compiles_first and asked:
            raise PropertyFailure("rejection", case, f"known finding {finding_id}:compiles-first: {compiles_first}", {"finding": f"{finding_id}:compiles-first"})
        if compiles_first:
            raise PropertyFailure("rejection", case, f"{finding_id}:compiles-first no longer reproduces (no compile asked for); remove it from the table", {"stale_finding": finding_id})
        judge.compile_delta("rejection", case, box.delta, NO_COMPILE_REQUEST, "a rejected call")
        return {}

    return _finish(
        "rejection",
        case,
        start,
        judged,
        finding_of=lambda f: f.detail.get("finding"),  # the table's findings, not the file's
        compile=box.delta.to_dict(),
        notes={"entry": entry, "rule": rule.name, "adapter": getattr(adapter, "label", entry)},
    )


def _reraise(error):
    if error is not None:
        raise error


PROPERTIES["rejection"] = check_rejection


# ------------------------------------------------------------ compile tier
def check_compiles(case: Case, adapter) -> Observation:
    """A valid Case specializes and compiles for sm_80 without a GPU: the
    template loads per its TemplateParams and the host compiles its geometry
    (dense) or head configuration (THD). Any exception fails it."""
    recorder.begin("compiles", case)
    start = time.perf_counter()
    delta = adapter.compile_only(case)
    return _finish("compiles", case, start, lambda: {}, compile=delta.to_dict())


PROPERTIES["compiles"] = check_compiles
