"""What every property shares: the device, the refusal policy
(``refusal_policy``), the verdict/recording step, and where an output row
sits (for failure reports)."""

from __future__ import annotations

import functools
import time
from contextvars import ContextVar
from typing import Callable, NoReturn, Optional, TypeVar

import torch

from ground import phases
from ground.case import Case
from ground.outcome import Observation, PropertyFailure, Unsupported
from ground.tables import NO_GPU, TILE_M
from properties import recorder

# The entry point (adapter) the example runs against, set by ``served``: findings
# that only one entry point shows select by it (finish's default ``entry``).
_ENTRY: ContextVar[Optional[str]] = ContextVar("property_entry", default=None)
T = TypeVar("T")


class Refused(PropertyFailure):
    """The entry point raised on a valid Case (the "launch" check): nothing
    came back to judge; ``served`` sends it through ``finish`` so a known
    finding can excuse exactly it."""

    def __init__(self, property: str, case: Case, exc: BaseException, start: float):
        from properties.watchdog import first_line

        super().__init__(
            property,
            case,
            f"the entry point refused a valid Case: {first_line(exc)}",
            {"exception": type(exc).__name__},
            check="launch",
            observed=type(exc).__name__,
        )
        self.start = start


def accepted(property: str, case: Case, start: float, launch: Callable[[], T]) -> T:
    """``launch()`` (an adapter's call into a kernel entry point); an
    exception the kernels under test raise on the valid ``case`` becomes the
    "launch" check's failure (Refused). Re-raised as they are: a CUDA fault
    (the context is gone: conformance.isolation), a refusal (``Unsupported``:
    no verdict), and anything else raised by the suite's own code (a bug of
    the suite)."""
    from properties.watchdog import looks_like_cuda_error, raised_by_kernels

    try:
        return launch()
    except Unsupported:
        raise
    except Exception as e:  # noqa: BLE001 - only the kernels' own refusals are judged
        if looks_like_cuda_error(e) or not raised_by_kernels(e):
            raise
        raise Refused(property, case, e, start) from e


def compiles_live() -> bool:
    """Whether a property's ``compile_only`` compiles for the live device: on a
    GPU, an artifact the run's compiled cache keeps (a warm run asks it again);
    without one, for sm_80 (the CPU compile tier)."""
    return torch.cuda.is_available()


def device() -> torch.device:
    """The CUDA device the properties launch on; refused (``Unsupported``, scope "machine") where there is none."""
    if not torch.cuda.is_available():
        raise Unsupported.machine(NO_GPU)
    return torch.device("cuda", torch.cuda.current_device())


def refusal_policy(refusal: Unsupported) -> NoReturn:
    """Apply the refusal policy (``ground.outcome.REFUSALS``) to ``refusal``
    where a property runs: inside a Hypothesis example, a scope whose policy
    is "reject" (a Case the entry point cannot express, a relation that does
    not move it) rejects the example (``hypothesis.reject()``: no verdict,
    another is drawn); every other refusal, and any refusal outside an
    example, is raised as it is: a ``unittest.SkipTest``, so pytest skips
    with its reason, and the front ends exit with its status. ``served``
    applies it to every property."""
    from hypothesis import currently_in_test_context, reject

    # After an example of this test failed, Hypothesis is shrinking: a refused Case there is no verdict on the
    # test (it would turn a failing test into a skipped one), only that example's rejection.
    if currently_in_test_context() and (refusal.policy.in_example == "reject" or recorder.failures_in_test()):
        recorder.rejected(str(refusal) or type(refusal).__name__)
        reject()
    raise refusal


def finish(name: str, case: Case, start: float, run, *, entry: Optional[str] = None, params: Optional[dict] = None, **fields) -> Observation:
    """Judge one example and record its Observation. ``run()`` (the judging)
    runs every check (properties.judge collects the failing ones;
    a PropertyFailure raised directly ends it); ground.findings
    then excuses each failure that a known finding in force describes
    exactly. Any other failure is raised (the first, naming the rest); if all
    were excused the Observation is ``xfailed``. ``entry``: the entry point
    the example ran against (contract findings select by it); ``params``:
    property parameters a finding may select by (e.g. initialize_outputs)."""
    from ground import findings
    from properties import judge

    entry = entry if entry is not None else _ENTRY.get()
    obs = Observation(name, case, **fields)
    with phases.phase("judge"), judge.collecting() as failures:  # deferred checks settle inside "judge"
        try:
            obs.ratios = run() or {}
        except PropertyFailure as failure:
            failures.append(failure)
    verdict = findings.judge(name, case, failures, entry=entry, params=params)
    obs.exercised, obs.findings = verdict.exercised, verdict.reproduced
    obs.seconds = time.perf_counter() - start
    obs.phases = phases.take((obs.compile or {}).get("seconds") or 0.0)
    if verdict.excused:
        obs.notes["excused"] = [{"finding": f.id, "check": x.check, "summary": x.summary} for x, f in verdict.excused]
    if verdict.unexcused:
        failure = _raised(verdict)
        obs.notes["summary"] = failure.summary
        failure.observation = obs
        obs.outcome = "failed"
        recorder.observe(obs)
        raise failure
    if verdict.excused:
        obs.outcome = "xfailed"
        obs.notes["summary"] = "; ".join(f"known finding {f.id}: {x.summary}" for x, f in verdict.excused)
    recorder.observe(obs)
    return obs


def _raised(verdict) -> PropertyFailure:
    """The failure to raise: the first unexcused one, naming the others."""
    first, rest = verdict.unexcused[0], verdict.unexcused[1:]
    if not rest and not verdict.excused:
        return first
    more = [f"{x.check}: {x.summary}" for x in rest]
    known = [f"{x.check}: known finding {f.id}" for x, f in verdict.excused]
    summary = first.summary + "".join(f" (+{label}: {'; '.join(items)})" for label, items in (("also failed", more), ("excused", known)) if items)
    detail = dict(first.detail)
    if rest:
        detail["also_failed"] = [{"check": x.check, "summary": x.summary, **({"worst": x.detail["worst"]} if "worst" in x.detail else {})} for x in rest]
    if known:
        detail["excused"] = known
    failure = PropertyFailure(first.property, first.case, summary, detail, check=first.check, where=first.where, observed=first.observed)
    failure.failures = list(verdict.unexcused)
    failure.__cause__ = first.__cause__
    return failure


# ------------------------------------------------------------------ regions
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


def row_mask(case: Case, inputs, quantity: str, shape) -> torch.Tensor:
    """Rows the contract defines a value for: dense every row (padded rows
    are 0 / -inf by contract), THD the live packed rows."""
    if not case.is_thd:
        return torch.ones(shape, dtype=torch.bool, device=inputs.q.device)
    live = inputs.q_live.to(inputs.q.device)
    return live[:, None, None].expand(shape) if quantity == "o" else live[None, :].expand(shape)


def launched_buffers(inputs, outputs=None, result=None) -> dict:
    """name -> buffer, for judge.guards_intact after a launch: the Case's
    inputs, the caller's output buffers, and whatever the adapter handed the
    kernel (staging copies named "<role> (staged copy)")."""
    out = dict(inputs.buffers()) if inputs is not None else {}
    if outputs is not None:
        out.update(o=outputs[0], lse=outputs[1])
    if result is not None:
        staged = set(result.notes.get("staged") or ())
        for role, t in result.handed.items():
            out[f"{role} (staged copy)" if role in staged else role] = t
    return out


def served(check):
    """``check`` under the refusal policy (``refusal_policy``): every
    ``Unsupported`` it raises is rejected or raised as its scope says. First
    of all it refuses a Case its adapter cannot express (a fact value the
    entry point has no argument for: ``Case.unexpressible``, from the fact
    declarations; scope "case"): a direct call (repro of a case file recorded
    on another adapter) raises it, exit 2. A test of the matrix never hands
    one: it draws the Case projected for its adapter (conformance.testgen,
    ``Case.expressed``); any other Hypothesis test that does sees the example
    rejected (no verdict: there is nothing to ask the entry point). The
    adapter is the rejection property's ``entry`` where it names one, else
    ``adapter``."""

    @functools.wraps(check)
    def run(case: Case, adapter=None, **params):
        try:
            return judged(case, adapter, **params)
        except Unsupported:
            raise
        except Exception as e:
            from hypothesis.errors import UnsatisfiedAssumption

            if not isinstance(e, UnsatisfiedAssumption):
                recorder.failed_here()  # later refusals of this test are rejections (refusal_policy)
            raise

    def judged(case: Case, adapter=None, **params):
        name = params.get("entry") or getattr(adapter, "name", None)
        token = _ENTRY.set(name)
        try:
            if name:
                case.require_expressible(name)
            return check(case, adapter, **params)
        except Unsupported as refusal:
            refusal_policy(refusal)
        except Refused as refused:  # judged like any check: a finding may excuse exactly it
            err = refused

            def raised():
                raise err

            return finish(err.property, case, err.start, raised, params={k: v for k, v in params.items() if k != "entry"})
        finally:
            _ENTRY.reset(token)

    return run


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


def lse_untouched(property: str, case, lse) -> int:
    """Without a Stats output (``case.has_lse`` false) the LSE buffer is never
    handed to the kernel: its whole body must still hold the NaN it was filled
    with (a kernel whose compiled-out LSE block still stores somewhere shows
    here or in a guard band). Returns the elements checked."""
    import torch

    from ground.data import body_storage
    from properties import judge

    flat = body_storage(lse)
    judge.untouched(
        property, case, "lse", flat, torch.ones_like(flat, dtype=torch.bool), "LSE buffer of a run without a Stats output (never handed)", check="lse untouched"
    )
    return int(flat.numel())


def storage_outside_view(view: torch.Tensor) -> torch.Tensor:
    """A bool mask over ``view``'s storage body (guard bands excluded: those
    are judge.guards_intact's): True where no element of the view lives (the
    pad columns of a padded layout)."""
    from ground.data import guard_bands

    n = view.untyped_storage().nbytes() // view.element_size()
    used = torch.zeros(n, dtype=torch.bool, device=view.device)
    idx = torch.arange(n, device=view.device).as_strided(view.shape, view.stride(), view.storage_offset())
    used[idx.flatten()] = True
    bands = guard_bands(view)
    outside = ~used
    return outside if bands is None else outside[bands[0] : bands[0] + bands[1]]


def lse_pitch_untouched(property: str, case, lse) -> int:
    """The LSE storage between a strided layout's elements (a padded pitch) is
    never written. Returns the elements checked."""

    from ground.data import body_storage, guard_bands
    from properties import judge

    if guard_bands(lse) is None:
        return 0
    pad = storage_outside_view(lse)
    flat = body_storage(lse)
    judge.untouched(property, case, "lse", flat, pad, "LSE pitch padding (never written)", check="lse pitch")
    return pad.numel() - lse.numel()  # the body less the view's distinct elements: counted on the host (no host sync)
