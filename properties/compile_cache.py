"""Compile-cache properties: runtime data mints no compile (compile_reuse),
a compile-key fact gets a kernel per value (compile_distinct), the on-disk
cache serves a second process (disk_reuse), and every valid Case compiles
for sm_80 without a GPU (compiles)."""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Dict, Mapping, Optional, Tuple

from ground.case import DIRECTIONS, FACTS, LAYOUTS, Case, Fact, runtime_facts
from ground.data import make_grad_output, make_grad_outputs, make_inputs, make_outputs
from ground.outcome import DELIBERATE_COMPILES, Observation, PropertyFailure, Unsupported
from properties import judge, recorder
from properties.common import accepted, compiles_live, device, finish, launched_buffers


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
    "counters": "no request could be observed: the counters alone (compiles, template modules), the Case and its variants on a fresh, "
    "private compiled cache with cold memos, the Case first (a deliberate compile)",
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
    named = []  # the compile key each launch's notes name (the first: the Case's own)
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
            named.append(result.notes.get("compile_key"))
            return result.compile, box
        with _asked(recording) as box:
            result = adapter.run(c, inputs, outputs)
        unchecked.append((c, launched_buffers(inputs, outputs, result)))
        named.append(result.notes.get("compile_key"))
        return result.compile, box

    def guards():
        while unchecked:
            judge.guards_intact("compile_reuse", *unchecked.pop(0))

    first, seen = call(case)
    rule = "entries" if seen is not None and seen.entries else "keys" if seen is not None and seen.keys else "counters"
    base = _requests(seen, rule)
    notes = {"rule": rule, "why": REUSE_RULES[rule], "case_requests": len(base)}
    key = _first_key(case, launch, named, first)
    if key:
        notes["compile_key"] = key  # the Observation's compile counters are the first call's: the Case's own key
    if rule == "counters" and recording:
        notes["why"] += " (the Case asked compile_cached for no keyed artifact)"
    if why := _deliberate(rule, launch):  # launch=False: the CPU tier's compile_only
        notes[DELIBERATE_COMPILES] = why

    def judge_call(c: Case, made, what: str, most: int, budget: dict):
        delta, box = made
        # A THD variant with another packed capacity (token totals, capacities, first offsets, a sequence
        # more) is its own check: a host that plans per capacity fails it and nothing else.
        check = "capacity budget" if c.is_thd and (c.t_q, c.t_kv) != (case.t_q, case.t_kv) else "compile budget"
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
                    check=check,
                )
        if recording:  # the forgotten THD lrus miss by design (the requests stand for them)
            budget = {k: v for k, v in budget.items() if k != "thd_lru_misses"}
        judge.compile_delta("compile_reuse", c, delta, budget, what, check=check)

    def variants():
        for what, variant in runtime_variants(case):
            judge_call(variant, call(variant), what, 0, NO_COMPILE)
            guards()
        if case.is_thd:
            more = case.replace(q_lens=case.q_lens + (1,), kv_lens=case.kv_lens + (1,))
            judge_call(more, call(more), "a new sequence count", 1, NEW_SEQUENCE_COUNT)
            guards()
            judge_call(case, call(case), "back to a seen sequence count", 0, NO_COMPILE)
            guards()

    def judged():
        guards()
        if rule != "counters":
            variants()
            return {}
        # No request to observe: the counters alone, on a fresh private cache with cold memos, where the
        # Case compiles first, so no key an earlier example of this process compiled answers silently.
        with _private_compile_cache():
            call(case)
            guards()
            variants()
        return {}

    return finish("compile_reuse", case, start, judged, compile=first.to_dict(), notes=notes)


def _first_key(case: Case, launch: bool, named: list, delta) -> str:
    """The compile key of the Case's own first call, "" where it asked for
    nothing: a launch's notes name it; compile_only compiles for sm_80
    (kernels.prepared.named_key), an artifact of its own."""
    if not (delta.misses or delta.hits or delta.memo_hits):
        return ""
    if launch:
        return (named[0] or "") if named else ""
    from kernels.prepared import named_key

    return named_key(case, arch="sm_80")


# The disk property is about the cache, not the shape: one small Case per layout.
DISK_CASES = {
    "dense": Case(s_q=65, s_kv=129, causal=True),
    "thd": Case(layout="thd", q_lens=(3, 64), kv_lens=(65, 1), q_base=2),
}

# Why a compile check's compiles are its own, not the run's (the notes' DELIBERATE_COMPILES):
COLD = {
    "fresh": "compiled into a fresh, empty compiled cache on purpose",
    "sm80": "compile_only compiles for sm_80 whatever the live device: an artifact only an sm_80 device's launches could load",
}


def _deliberate(rule: str, live: bool) -> Optional[str]:
    """Why a compile check's compiles are its own (the notes' DELIBERATE_COMPILES), or None where they
    are the run's: a fresh private cache under the counters rule, else sm_80 artifacts unless compiled live."""
    return COLD["fresh"] if rule == "counters" else None if live else COLD["sm80"]


# One launch in a fresh process on the named adapter; prints its counters, then what
# its guard bands say (None: untouched) and a digest of the O and LSE bits it wrote.
_PROBE = """
import hashlib, json, sys
from kernels.source import use_kernels_source
use_kernels_source()  # $SDPA_KERNELS_SOURCE, inherited: the same kernels as this run
#PRELUDE
import torch
from ground.case import Case
from ground.data import make_inputs, make_outputs
from ground.outcome import PropertyFailure
from kernels import get_adapter
from properties import judge
from properties.common import launched_buffers
case = Case.from_json(sys.argv[1])
inputs, outputs = make_inputs(case, "cuda"), make_outputs(case, "cuda")
result = get_adapter(sys.argv[2]).run(case, inputs, outputs)
print("COUNTERS " + json.dumps(result.compile.to_dict()))
try:
    judge.guards_intact("disk_reuse", case, launched_buffers(inputs, outputs, result))
    guards = None
except PropertyFailure as e:
    guards = e.summary
bits = hashlib.sha256()
for t in (result.o, result.lse):
    if t is not None:
        bits.update(t.detach().contiguous().view(-1).view(torch.uint8).cpu().numpy().tobytes())
print("LAUNCH " + json.dumps({"guards": guards, "output": bits.hexdigest()}))
"""


def _launch_in_new_process(case: Case, adapter, cache_dir, prelude: str) -> Tuple[dict, dict]:
    """(compile counters, {"guards": a guard failure's summary or None, "output": digest of the O and LSE bits}) of one launch in a fresh process."""
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
    said = {tag: [line[len(tag) + 1 :] for line in done.stdout.splitlines() if line.startswith(tag + " ")] for tag in ("COUNTERS", "LAUNCH")}
    if done.returncode != 0 or not all(said.values()):
        raise RuntimeError(f"the probe process failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(said["COUNTERS"][-1]), json.loads(said["LAUNCH"][-1])


def check_disk_reuse(case: Case, adapter, *, prelude: str = "") -> Observation:
    """CUDNN_FRONTEND_COMPILED_CACHE across processes: a first process on a
    fresh, empty cache directory compiles ``case``; a second process on the
    same directory serves it from disk (counters read around its one launch).
    Each process checks its launch's guard bands, and the kernel served from
    disk must write the bits the freshly compiled one wrote (the forward is
    bitwise repeatable: another kernel under the key would differ).
    ``prelude`` is code the probe processes run first (the power test plants
    a broken key there)."""
    import tempfile

    recorder.begin("disk_reuse", case)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="sdpa-disk-cache-") as where:
        first, first_launch = _launch_in_new_process(case, adapter, where, prelude)
        seen = {"first process": first, DELIBERATE_COMPILES: COLD["fresh"]}  # the Observation's notes: both processes' counters

        def guarded(which: str, launch: dict) -> None:
            if launch["guards"] is not None:
                raise PropertyFailure("disk_reuse", case, f"the {which} process' launch: {launch['guards']}", {which: launch}, check="guards")

        def judged():
            guarded("first", first_launch)
            if first.get("misses", 0) < 1:
                raise PropertyFailure("disk_reuse", case, f"the first process found {where} warm: {first}", {"first": first}, check="cold first process")
            second, second_launch = _launch_in_new_process(case, adapter, where, prelude)
            seen["second process"] = second
            guarded("second", second_launch)
            # Only compiles count: a new process's in-process memos (the THD lrus,
            # the template modules) start empty, so they miss once per key by design.
            judge.compile_delta("disk_reuse", case, second, {"misses": 0}, "a second process on the same on-disk cache")
            if second.get("hits", 0) < 1:
                raise PropertyFailure(
                    "disk_reuse", case, f"the second process neither compiled nor read the on-disk cache: {second}", {"second": second}, check="disk hit"
                )
            if second_launch["output"] != first_launch["output"]:
                raise PropertyFailure(
                    "disk_reuse",
                    case,
                    "the kernel the on-disk cache served wrote other O / LSE bits than the one the first process compiled",
                    {"first": first_launch, "second": second_launch},
                    check="same output",
                )
            return {}

        return finish("disk_reuse", case, start, judged, compile=first, notes=seen)


def check_compiles(case: Case, adapter) -> Observation:
    """A valid Case specializes and compiles for sm_80 without a GPU: the
    template loads per its TemplateParams and the host compiles its geometry
    (dense) or head configuration (THD). Any exception fails it, and so does
    a call that asks the compiled cache for nothing (the memos in front of it
    forgotten, so whatever this process compiled before is asked for again:
    a compile, a disk or a memo hit; none means no kernel came out of it)."""
    from kernels.counters import memos_forgotten

    recorder.begin("compiles", case)
    start = time.perf_counter()
    with memos_forgotten(compiled=False):
        delta = adapter.compile_only(case)

    def judged():
        if delta.misses + delta.hits + delta.memo_hits < 1:
            judge.failed(
                "compiles",
                case,
                f"compile_only asked the compiled cache for no kernel ({delta.to_dict()}): nothing was compiled or served",
                {"delta": delta.to_dict()},
                check="compiled",
            )
        return {}

    return finish("compiles", case, start, judged, compile=delta.to_dict(), notes={DELIBERATE_COMPILES: COLD["sm80"]})


# ---------------------------------------------------------- compile distinct
# Every compile-key fact gets a kernel per value: a Case and the Case with only
# that fact changed must ask the compiled cache for two distinct entries (the
# reverse of compile_reuse; cudnn-frontend#604's lesson: a key that omits a
# compiled-in fact hands one specialization the other's artifact). The facts
# are derived from their declarations, never listed: a compile-key fact
# (``Fact.compiled``) or one a TemplateParams field or a compile host argument
# realises (``Fact.kernel``), on each pass it applies to (``Fact.direction``)
# but those its declaration says admit no variant (``Fact.no_variant``).
# The hosts and the layout whose Cases they compile (a fact realised by one of
# their arguments is checked on that layout; another on the first layout it is
# compiled on: ground.pairs.THD_SOURCES says which reach the THD key).
HOST_LAYOUTS = {"compile_host": "dense", "compile_thd_host": "thd"}
SPECIALIZING_SOURCES = ("TemplateParams", *HOST_LAYOUTS)


def specializes(f: Fact) -> bool:
    """Whether the declaration says fact ``f`` changes the specialization:
    compiled (``Fact.compiled``) or realised by a TemplateParams field or a
    compile host argument (``Fact.kernel``)."""
    return f.compiled is True or any(e.partition(".")[0] in SPECIALIZING_SOURCES for e in f.kernel)


def specializing_facts(direction: str, facts: Optional[Mapping[str, Fact]] = None) -> Tuple[str, ...]:
    """The facts of ``direction`` that change the specialization (``specializes``), in declaration order."""
    return tuple(f.name for f in (facts or FACTS).values() if direction in f.direction and specializes(f))


def _layouts(f: Fact) -> Tuple[str, ...]:
    """Where fact ``f``'s families draw their Cases: the layouts whose host
    takes it as an argument (``HOST_LAYOUTS``), else the first layout its
    compile key reaches (THD: ground.pairs.THD_SOURCES, or no kernel entry)."""
    from ground.pairs import THD_SOURCES

    sources = [e.partition(".")[0] for e in f.kernel]
    compiled = tuple(x for x in LAYOUTS if x != "thd" or not sources or any(s in THD_SOURCES for s in sources))
    hosts = [x for x in compiled if any(HOST_LAYOUTS.get(s) == x for s in sources)]
    return tuple(hosts) or compiled[:1]


@dataclass(frozen=True)
class CompiledFact:
    """One compile-key fact's compile_distinct families: ``places``, the
    (pass, layout) of each; ``source``, where the kernels compile it in
    (``Fact.distinct``, else its ``Fact.kernel`` entries); ``excluded``,
    (pass, reason) of the passes its declaration gives no variant on."""

    name: str
    source: str
    places: Tuple[Tuple[str, str], ...]
    excluded: Tuple[Tuple[str, str], ...] = ()


def compiled_fact_rows(facts: Optional[Mapping[str, Fact]] = None) -> Dict[str, CompiledFact]:
    """fact -> its compile_distinct row, from the declarations ``facts``
    (default: ``FACTS``): every fact that ``specializes`` on some pass, with
    a place per (pass, layout) the pass does not exclude (``Fact.no_variant``)."""
    out = {}
    for f in (facts or FACTS).values():
        if not specializes(f):
            continue
        excluded = dict(f.no_variant)
        places = tuple((d, x) for d in DIRECTIONS if d in f.direction and d not in excluded for x in _layouts(f))
        source = f.distinct or ", ".join(f.kernel) or "its declaration (compiled=True)"
        out[f.name] = CompiledFact(f.name, source, places, tuple(f.no_variant))
    return out


# fact -> its compile_distinct row (``compiled_fact_rows``): a family per place.
COMPILED_FACTS: Dict[str, CompiledFact] = compiled_fact_rows()


# Another value of a fact, by its type (a bool or choice fact: its other
# values, the next first; others below), tried in order: the first that gives
# a valid Case the suite specializes differently is the variant.
def _numbers(case: Case, v: int) -> tuple:
    return (v + 1, v - 1, 2 * v, v // 2)


def _scales(case: Case, v) -> tuple:
    return (None, 0.0, -1.0, 1.0) + ((-v,) if v else ())


def _lengths(case: Case, v) -> tuple:
    """Present lengths: absent, one entry more, one fewer; absent: the live
    lengths the Case has (every Q row, every K/V row)."""
    return (case.q_lengths(), case.kv_lengths()) if v is None else (None, v + v[-1:], v[:-1])


OTHER_VALUES: Dict[Any, Callable[[Case, Any], tuple]] = {int: _numbers, Optional[float]: _scales, Optional[Tuple[int, ...]]: _lengths}


def tried_values(case: Case, name: str) -> tuple:
    """The values ``case``'s fact ``name`` is tried at, in order, without its own."""
    f, value = FACTS[name], getattr(case, name)
    if f.type is bool:
        values: tuple = (not value,)
    elif f.choices is not None:
        i = f.choices.index(value) if value in f.choices else -1
        values = ((None,) if f.kind.optional and value is not None else ()) + f.choices[i + 1 :] + f.choices[: max(i, 0)]
    else:
        values = OTHER_VALUES[f.type](case, value)
    return tuple(dict.fromkeys(v for v in values if v != value))


def _in_step(case: Case, name: str, value) -> Case:
    """``case`` with fact ``name`` at ``value``; a length list that grows or
    shrinks takes the other length lists as long as it was along (THD K/V
    lengths with the Q lengths: the sequence count is theirs together)."""
    old = getattr(case, name)
    changes = {name: value}
    if isinstance(old, tuple) and isinstance(value, tuple) and len(value) != len(old):
        for f in FACTS.values():
            other = getattr(case, f.name)
            if f.name != name and f.type == FACTS[name].type and isinstance(other, tuple) and len(other) == len(old):
                changes[f.name] = other[: len(value)] + other[-1:] * max(0, len(value) - len(other))
    return case.replace(**changes)


def serves(case: Case, adapter: str = "prepared") -> bool:
    """A Case the suite calls valid (ground.pairs.valid: well formed, no
    contract rule broken) that ``adapter`` expresses; a backward one as the
    backward strategies serve it as it stands (strategies.directions.served_as_is)."""
    from ground.pairs import valid
    from strategies.directions import served_as_is

    if case.structural_problem() is not None or not valid(case) or case.unexpressible(adapter) is not None:
        return False
    return not case.is_bwd or served_as_is(case)


def specialization(case: Case):
    """What the suite specializes ``case`` into, from its facts alone: the
    forward's flavor, TemplateParams and compile host arguments
    (kernels.prepared.compile_key), the backward's compile facts
    (kernels.backward.compile_key). Raises the kernels' ValueError for a Case
    they do not specialize."""
    from kernels import backward, prepared

    return backward.compile_key(case) if case.is_bwd else prepared.compile_key(case)


def _specialized(case: Case):
    try:
        return specialization(case)
    except ValueError:
        return None


def _bases(case: Case, name: str, adapter: str) -> list:
    """The Cases a variant of fact ``name`` is made from, in order: ``case``
    with the facts ``name`` needs switched on (``Fact.needs``: each value of
    theirs in turn) where they are off, then ``case``; a numeric fact at its
    default first moved off it (two values of its own compared: two window
    widths, not a window against none)."""
    f = FACTS[name]
    bases = [case]
    for need in f.needs:
        if getattr(case, need) == FACTS[need].default:
            bases = [b.replace(**{need: v}) for b in bases for v in tried_values(b, need)] + bases
    if f.type is int and f.choices is None:
        bases = [m for b in bases for m in ([_in_step(b, name, v) for v in tried_values(b, name)] if getattr(b, name) == f.default else []) + [b]]
    return [b for b in dict.fromkeys(bases) if serves(b, adapter) and _specialized(b) is not None]


def distinct_pair(case: Case, name: str, adapter: str = "prepared") -> Tuple[Case, Optional[Case], int]:
    """(base, variant, tried) for fact ``name`` of ``case``: the first valid
    Case (``serves``) that differs from a base (``_bases``) in ``name`` alone
    (length lists in step) and that the suite specializes differently
    (``specialization``); ``tried``: the valid variants looked at. No
    variant: no Case around ``case`` varies the fact (``tried`` 0), or every
    valid value leaves the specialization as it was (a value within a class
    the kernels pad or fold: a head dim inside its flavor's envelope)."""
    tried = 0
    for base in _bases(case, name, adapter):
        key = _specialized(base)
        for value in tried_values(base, name):
            other = _in_step(base, name, value)
            if other == base or not serves(other, adapter):
                continue
            theirs = _specialized(other)
            if theirs is None:
                continue
            tried += 1
            if theirs != key:
                return base, other, tried
    return case, None, tried


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


# How compile_distinct judges a pair (the Observation's notes say which one ran).
DISTINCT_RULES = {
    "entries": "the compiled-cache entries each Case asks for (record_entries(), memo hits included), the memos in front of compile_cached "
    "forgotten before each call: the variant must ask for one the base did not",
    "keys": "the compile_cached keys each Case asks for (compiled_cache._record, memo hits included; record_entries() records nothing "
    "without a device manifest: the CPU tier), the memos in front forgotten before each call: the variant must ask for one the base did not",
    "counters": "no request of both could be observed: both compiled on a fresh, private compiled cache with cold memos; the variant must compile",
}


def check_compile_distinct(case: Case, adapter, *, fact: str) -> Observation:
    """``case`` and its variant in the compile-key ``fact``
    (``COMPILED_FACTS``; the pair: ``distinct_pair``, only ``fact`` changed,
    the variant valid and specialized differently by the suite) get a
    kernel each: compiling the variant asks the compiled cache for an entry
    the base did not (``DISTINCT_RULES``: the requests of each call, the
    memos in front of compile_cached forgotten, compiled_cache's own kept, so
    a base compiled by an earlier example is not compiled again; counters on
    a fresh private cache only where no request can be observed). A Case
    around which no such pair exists is rejected (another draw). Compile
    only: the CPU tier; on a GPU for the live device, both passes
    (``compiles_live``). Its requests are what the check judges, so artifacts
    that the run's compiled cache keeps judge the same, and a warm run asks
    the cache again instead of compiling sm_80 artifacts no launch there loads
    (53 compiles, 130 worker-seconds compiling, of a warm ci run on the H200
    when neither pass compiled live; 24 of the ci draws' 56 examples are
    backward)."""
    from kernels.counters import can_observe_requests, label

    row = COMPILED_FACTS[fact]
    entry = getattr(adapter, "name", "prepared")
    base, other, tried = distinct_pair(case, fact, entry)
    if other is None:  # no variant around this Case (tests/test_fact_roles.py: every place has some): another draw
        why = "varies it alone" if not tried else f"of the {tried} that vary it alone changes the suite's specialization"
        raise Unsupported.case(f"no valid Case around {case.describe()} {why} ({fact!r})", adapter=entry)
    recorder.begin("compile_distinct", case, fact=fact)
    start = time.perf_counter()
    notes: Dict[str, Any] = {"base": base.describe(), "source": row.source}
    notes.update(variant=other.describe(), changed={n: [getattr(base, n), getattr(other, n)] for n in FACTS if getattr(base, n) != getattr(other, n)})
    recording = can_observe_requests()
    live = {"live": True} if compiles_live() else {}
    with _asked(recording) as seen:
        first = adapter.compile_only(base, **live)
    with _asked(recording) as asked:
        second = adapter.compile_only(other, **live)
    rule = "entries" if seen is not None and seen.entries else "keys" if seen is not None and seen.keys else "counters"
    if rule != "counters" and not _requests(asked, rule):
        rule = "counters"
    if rule == "counters":
        with _private_compile_cache():
            first = adapter.compile_only(base)
            second = adapter.compile_only(other)
    notes.update(rule=rule, why=DISTINCT_RULES[rule])
    if why := _deliberate(rule, bool(live)):  # else the run's own artifacts: a warm run compiles nothing here
        notes[DELIBERATE_COMPILES] = why
    was, now = f"{fact}={getattr(base, fact)!r}", f"{fact}={getattr(other, fact)!r}"

    def judged():
        if rule == "counters":
            if first.misses < 1:
                raise PropertyFailure(
                    "compile_distinct",
                    case,
                    f"a fresh compiled cache served {base.describe()} without compiling: {first.to_dict()}",
                    {"first": first.to_dict()},
                    check="cold first compile",
                )
            if second.misses < 1:
                judge.failed(
                    "compile_distinct",
                    case,
                    f"{now} compiled nothing after {was}: it was handed the other value's kernel ({second.to_dict()}); compiled in by {row.source}",
                    {"fact": fact, "delta": second.to_dict()},
                    check="distinct kernel",
                )
            return {}
        mine, theirs = _requests(seen, rule), _requests(asked, rule)
        new = [k for k in theirs if k not in mine]
        notes.update(base_requests=len(mine), variant_requests=len(theirs), new_requests=len(new))
        if not new:
            judge.failed(
                "compile_distinct",
                case,
                f"{now} asked the compiled cache for no entry {was} did not: it was handed the other value's kernel "
                f"({'; '.join(label(v) for v in theirs.values())}), though the suite specializes the two differently; compiled in by {row.source}",
                {"fact": fact, "rule": rule, "base": base.to_dict(), "variant": other.to_dict(), "shared": list(theirs.values())},
                check="distinct kernel",
            )
        return {}

    return finish("compile_distinct", case, start, judged, compile=second.to_dict(), notes=notes, params={"fact": fact})
