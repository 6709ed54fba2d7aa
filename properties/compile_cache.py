"""Compile-cache properties: runtime data mints no compile (compile_reuse),
the on-disk cache serves a second process (disk_reuse), and every valid Case
compiles for sm_80 without a GPU (compiles)."""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Mapping

from ground.case import FACTS, Case, Fact, runtime_facts, varied
from ground.data import make_grad_output, make_grad_outputs, make_inputs, make_outputs
from ground.outcome import Observation, PropertyFailure
from properties import judge, recorder
from properties.common import accepted, device, finish, launched_buffers


# ----------------------------------------------------------- compile reuse
def runtime_variants(case: Case):
    """Cases that differ from ``case`` only in runtime facts: the compile key
    must not see them. Data seed and addresses always; THD token totals,
    capacities and first offsets; dense padding-length values and the scale's
    magnitude (its sign is compiled in); then the other value of any bool or
    choice fact declared runtime (``fact(compiled=False)``)."""
    yield "new data and addresses", case.replace(seed=case.seed + 1)
    if case.is_thd:
        grow = tuple(n + 1 for n in case.q_lens)
        yield "new token totals", case.replace(q_lens=grow, kv_lens=tuple(n + 3 for n in case.kv_lens))
        yield (
            "new capacities and first offsets",
            case.replace(q_base=case.q_base + 5, kv_base=case.kv_base + 2, q_slack=case.q_slack + 7, kv_slack=case.kv_slack + 1),
        )
    else:
        if case.seq_kv_lens is not None:
            yield "new padding lengths", case.replace(seq_kv_lens=tuple(max(0, n - 1) for n in case.seq_kv_lens))
        if case.seq_q_lens is not None:
            yield "new Q padding lengths", case.replace(seq_q_lens=tuple(case.s_q - n for n in case.seq_q_lens))
    if case.softmax_scale != 0:
        yield "new scale of the same sign", case.replace(scale=case.softmax_scale * 1.75)
    # Any other runtime fact (``fact(compiled=False)``) of a bool or choice domain: its other
    # values, where valid on their own (no other fact changed: a variant is runtime-only).
    for name in runtime_facts():
        values = FACTS[name].other_values()
        for value in values + (FACTS[name].default,) if values else ():
            other = case.replace(**{name: value})
            if other != case and other.structural_problem() is None:
                yield f"new {name}", other
                break


# Counters one runtime-only call may move: nothing compiled, no new module.
NO_COMPILE = {"misses": 0, "thd_lru_misses": 0, "modules": 0}
NEW_SEQUENCE_COUNT = {"misses": 1, "modules": 0}

# How compile_reuse judges a call (the Observation's notes say which one ran).
REUSE_RULES = {
    "entries": "the compiled-cache entries each call asks for (cudnn.frost.compiled_cache.record_entries(), memo hits included), the memos "
    "in front of compile_cached forgotten before each call: a function of the Case alone; counters (compiles, template modules) too",
    "keys": "record_entries() recorded nothing (no device manifest: the CPU tier; or the compiled cache disabled): the compile_cached keys each "
    "call asks for instead (compiled_cache._record, what record_entries() is built on), the memos in front forgotten before each call: "
    "a function of the Case alone; counters (compiles, template modules) too",
    "counters": "today's counters rule alone (no request could be observed): history-dependent, a key an earlier example of this process "
    "compiled is answered by a memo and passes unseen",
}


@contextmanager
def _asked(recording: bool):
    """Around one adapter call: with ``recording``, the memos in front of
    compile_cached forgotten (compiled_cache's own memo kept: its hits are
    recorded, and nothing is reloaded or recompiled) and what the call asks
    for recorded (``kernels.counters.Asked``); else nothing (None)."""
    if not recording:
        yield None
        return
    from kernels.counters import asking, memos_forgotten

    with memos_forgotten(compiled=False), asking() as box:
        yield box


def _requests(box, rule: str) -> dict:
    return {} if box is None else (box.entries if rule == "entries" else box.keys if rule == "keys" else {})


def check_compile_reuse(case: Case, adapter, *, launch: bool = True) -> Observation:
    """After ``case`` compiled once, runtime-only variants ask the compiled
    cache for nothing ``case`` itself did not ask for and mint no compile and
    no template module; for THD a new sequence count asks for at most one new
    entry (at most one compile) and returning to the seen count asks for none.
    Each call runs with the memos in front of compile_cached forgotten, so the
    verdict is a function of the Case, not of what the process compiled
    before (``REUSE_RULES``: entries on a GPU, the frontend's own keys on the
    CPU tier; counters alone only where no request can be observed).
    ``launch=False`` checks compile_only (the CPU tier). Every launch must
    leave the guard bands of its buffers intact."""
    from kernels.counters import can_observe_requests, label

    recorder.begin("compile_reuse", case, launch=launch)
    start = time.perf_counter()
    unchecked = []  # (case, buffers) of the launches whose guard bands are still to check
    recording = can_observe_requests()

    def call(c: Case):
        """(CompileDelta, Asked or None) of the adapter's call on ``c``."""
        if not launch:
            with _asked(recording) as box:
                delta = adapter.compile_only(c)
            return delta, box
        dev = device()
        inputs, outputs = make_inputs(c, dev, poison=True), make_outputs(c, dev)
        if c.is_bwd:  # the backward on reference O/LSE (O and LSE stand for the forward's outputs)
            from properties.backward import handed_inputs

            o, lse, _ = handed_inputs(c.replace(inputs_from="reference"), adapter, inputs, dev)
            do, grads = make_grad_output(c, dev), make_grad_outputs(c, dev)
            with _asked(recording) as box:  # the backward's requests only
                result = accepted("compile_reuse", c, start, lambda: adapter.backward(c, inputs, o, lse, do, grads))
            buffers = launched_buffers(inputs, (o, lse), result)
            buffers.update({f"{n} (caller)": t for n, t in grads.items()}, do=do)
            unchecked.append((c, buffers))
            return result.compile, box
        with _asked(recording) as box:
            result = adapter.run(c, inputs, outputs)
        unchecked.append((c, launched_buffers(inputs, outputs, result)))
        return result.compile, box

    def guards():
        while unchecked:
            judge.guards_intact("compile_reuse", *unchecked.pop(0))

    first, seen = call(case)
    rule = "entries" if seen is not None and seen.entries else "keys" if seen is not None and seen.keys else "counters"
    base = _requests(seen, rule)
    notes = {"rule": rule, "why": REUSE_RULES[rule], "case_requests": len(base)}
    if rule == "counters" and recording:
        notes["why"] += " (the Case asked compile_cached for no keyed artifact)"

    def judge_call(c: Case, made, what: str, most: int, budget: dict):
        delta, box = made
        if rule != "counters":
            new = {k: v for k, v in _requests(box, rule).items() if k not in base}
            notes.setdefault("new_requests", {})[what] = len(new)
            if len(new) > most:
                names = "; ".join(label(v) for v in new.values())
                judge.failed(
                    "compile_reuse",
                    c,
                    f"{what}: asked the compiled cache for {len(new)} {'entry' if len(new) == 1 else 'entries'} the Case did not (at most {most}): {names}",
                    {"what": what, "rule": rule, "new": list(new.values()), "case_requests": len(base), "delta": delta.to_dict()},
                    check="compile budget",
                )
        if recording:  # the forgotten THD lrus miss by design (the requests stand for them)
            budget = {k: v for k, v in budget.items() if k != "thd_lru_misses"}
        judge.compile_delta("compile_reuse", c, delta, budget, what)

    def judged():
        guards()
        for what, variant in runtime_variants(case):
            judge_call(variant, call(variant), what, 0, NO_COMPILE)
            guards()
        if case.is_thd:
            more = case.replace(q_lens=case.q_lens + (1,), kv_lens=case.kv_lens + (1,))
            judge_call(more, call(more), "a new sequence count", 1, NEW_SEQUENCE_COUNT)
            guards()
            judge_call(case, call(case), "back to a seen sequence count", 0, NO_COMPILE)
            guards()
        return {}

    return finish("compile_reuse", case, start, judged, compile=first.to_dict(), notes=notes)


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
from ground.case import FACTS, Case, Fact, runtime_facts, varied
from ground.data import make_inputs, make_outputs
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

    from ground.tables import COMPAT_ENV

    env = {**os.environ, "CUDNN_FRONTEND_COMPILED_CACHE": str(cache_dir)}
    env.pop("CUDNN_FRONTEND_DISABLE_COMPILED_CACHE", None)
    if getattr(adapter, "sm80_compat", False):
        env[COMPAT_ENV] = "1"  # the mode this run's wrapper adapter is in
    done = subprocess.run(
        [sys.executable, "-c", _PROBE.replace("#PRELUDE", prelude), case.to_json(), adapter.name], env=env, capture_output=True, text=True, timeout=300
    )
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
                raise PropertyFailure("disk_reuse", case, f"the first process found {where} warm: {first}", {"first": first}, check="cold first process")
            second = seen["second process"] = _launch_in_new_process(case, adapter, where, prelude)
            # Only compiles count: a new process's in-process memos (the THD lrus,
            # the template modules) start empty, so they miss once per key by design.
            judge.compile_delta("disk_reuse", case, second, {"misses": 0}, "a second process on the same on-disk cache")
            if second.get("hits", 0) < 1:
                raise PropertyFailure(
                    "disk_reuse", case, f"the second process neither compiled nor read the on-disk cache: {second}", {"second": second}, check="disk hit"
                )
            return {}

        return finish("disk_reuse", case, start, judged, compile=first, notes=seen)


def check_compiles(case: Case, adapter) -> Observation:
    """A valid Case specializes and compiles for sm_80 without a GPU: the
    template loads per its TemplateParams and the host compiles its geometry
    (dense) or head configuration (THD). Any exception fails it."""
    recorder.begin("compiles", case)
    start = time.perf_counter()
    delta = adapter.compile_only(case)
    return finish("compiles", case, start, lambda: {}, compile=delta.to_dict())


# ---------------------------------------------------------- compile distinct
# Facts the kernels compile in, each with the other value of a Case and the
# source that bakes it in. A Case and its variant must not share a kernel:
# on a cache that holds only the Case's artifact, the variant must compile
# (the reverse of compile_reuse; cudnn-frontend#604's lesson: a key that
# omits a compiled-in fact hands one specialization the other's artifact).
@dataclass(frozen=True)
class CompiledFact:
    """One compiled-in fact, drawn on dense Cases (backward ones for a
    backward fact, case.BACKWARD_FACTS)."""

    other: Callable[[Case], Case]
    source: str
    options: Mapping[str, Any] = field(default_factory=dict)  # strategy options the fact needs (a bias for dBias)


def _compiled_fact(f: Fact) -> CompiledFact:
    """The compile_distinct row of a fact declared with ``distinct=``: its
    other value (``ground.case.varied``: base-2 Stats gain the Stats output
    they need), the source it names, the facts it ``needs`` drawn on."""
    return CompiledFact(lambda c: varied(c, f.name), f.distinct, {name: True for name in f.needs})


# fact -> its compile_distinct row, from the declarations (``fact(distinct=...)``).
COMPILED_FACTS: Dict[str, CompiledFact] = {f.name: _compiled_fact(f) for f in FACTS.values() if f.distinct}


@contextmanager
def _private_compile_cache():
    """A fresh, empty compiled cache for this process and cold in-process
    memos; afterwards what the private cache produced is dropped and the run's
    own cache and memos are back."""
    import os
    import tempfile

    from kernels.cache import CACHE_ENV
    from kernels.counters import forget_memos, memos_forgotten

    before = os.environ.get(CACHE_ENV)
    with tempfile.TemporaryDirectory(prefix="sdpa-distinct-") as where, memos_forgotten():
        os.environ[CACHE_ENV] = where
        try:
            yield where
        finally:
            if before is None:
                os.environ.pop(CACHE_ENV, None)
            else:
                os.environ[CACHE_ENV] = before
            forget_memos()  # the private cache's artifacts go before the run's memos come back


def check_compile_distinct(case: Case, adapter, *, fact: str) -> Observation:
    """``case`` and its variant in the compiled-in ``fact``
    (``COMPILED_FACTS``) get a kernel each: on a fresh cache holding only
    ``case``'s artifact, compiling the variant compiles (a zero-miss compile
    means it was handed ``case``'s kernel). Compile only: the CPU tier."""
    row = COMPILED_FACTS[fact]
    other = row.other(case)
    recorder.begin("compile_distinct", case, fact=fact)
    start = time.perf_counter()
    with _private_compile_cache():
        first = adapter.compile_only(case)
        second = adapter.compile_only(other)

    def judged():
        if first.misses < 1:
            raise PropertyFailure(
                "compile_distinct",
                case,
                f"a fresh compiled cache served {case.describe()} without compiling: {first.to_dict()}",
                {"first": first.to_dict()},
                check="cold first compile",
            )
        if second.misses < 1:
            judge.failed(
                "compile_distinct",
                case,
                f"{fact}={getattr(other, fact)!r} compiled nothing after {fact}={getattr(case, fact)!r}: it was handed the other "
                f"value's kernel ({second.to_dict()}); compiled in by {row.source}",
                {"fact": fact, "delta": second.to_dict()},
                check="distinct kernel",
            )
        return {}

    return finish("compile_distinct", case, start, judged, compile=second.to_dict(), params={"fact": fact})
