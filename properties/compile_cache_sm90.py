"""Compile-cache properties of the sm90 family (compile_reuse, compile_distinct).

The family's own contract, from the template (cudnn/sdpa/fwd/kernels/sm90/
prefill_d512_f16.py): ``compile()`` (:1490-1503) takes the declared problem
(B, H_q, H_kv, S_q, S_kv), the four (B, H, S, D) stride tuples, the Stats
strides and the real head dims; "packed capacities and scale stay dynamic"
(:1505); under THD B is the sequence count and S_q/S_kv are zeroed out of the
key (:1508-1509, :1523-1524); ``_compile`` is keyed on exactly these
arguments plus the template's source digest (:1527-1533), which holds its
TemplateParams. So the key is what ``kernels.sm90.specialize`` reads off the
kernels' own plan (``Sm90Specialization.key``), and:

- runtime (no new request): the data seed, the scale's magnitude (its sign is
  ``scale_mode``), dense padding-length values within the declared arrays
  (the arrays' presence is compiled: ``seq_*_lens_present``), THD K/V lengths
  and capacity (with a window, the longest K/V length kept: the planner
  declares the longest sequences as S_q / S_kv and drops a window at or past
  S_q + S_kv, a TemplateParams change), THD Q lengths at the same Q total;
- compiled (a request of its own): any TemplateParams field (the causal
  flag and the scale's sign here), dense S_q, S_kv and batch (the dense grid
  is compile-time), the THD sequence count.

The THD Q total is runtime except where it is a stride: head-major Stats
((H, T_q): ``lse_layout`` compact or padded) have head stride T_q, and the
Stats strides are a ``compile()`` argument, so a new Q total compiles there
(docs/sm90.md, observed behaviour against the "capacities stay dynamic"
sentence); with token-major Stats or none it is runtime. Both are judged here.
"""

from __future__ import annotations

import time
from typing import Iterator, Tuple

from ground.case import Case
from ground.data import make_inputs, make_outputs
from ground.families import sm90_q_total_is_runtime as q_total_is_runtime
from ground.outcome import Observation
from properties import judge, recorder
from properties.common import device, finish, launched_buffers
from properties.compile_cache import NO_COMPILE, _asked, _requests


def sm90_runtime_variants(case: Case) -> Iterator[Tuple[str, Case]]:
    """Variants of ``case`` the family's contract keeps out of the compile key (module doc)."""
    yield "new data", case.replace(seed=case.seed + 1)
    if case.softmax_scale != 0:
        yield "new scale of the same sign", case.replace(scale=case.softmax_scale * 1.75)
    if case.is_thd:
        # The planner declares the longest sequences as S_q / S_kv and drops a window at or past
        # S_q + S_kv (api_dsl.py:5266-5270): with a window, the longest K/V length is kept.
        longest = max(case.kv_lens) if case.window_left >= 0 or case.window_right >= 0 else -1
        kv_lens = tuple(n if n == longest else (max(0, n - 1) if longest >= 0 else n + 3) for n in case.kv_lens)
        yield "new K/V lengths and capacity", case.replace(kv_lens=kv_lens, kv_slack=case.kv_slack + 2)
        if len(case.q_lens) > 1 and (case.q_lens[0] != case.q_lens[1] if longest >= 0 else case.q_lens[0] > 0):
            # One token moved between the first two sequences (with a window: the two swapped, the longest kept).
            first = (case.q_lens[1], case.q_lens[0]) if longest >= 0 else (case.q_lens[0] - 1, case.q_lens[1] + 1)
            yield "new Q lengths, same Q total", case.replace(q_lens=(*first, *case.q_lens[2:]))
        if q_total_is_runtime(case):
            yield "new Q total (token-major or no Stats)", case.replace(q_lens=tuple(n + 1 for n in case.q_lens), q_slack=case.q_slack + 3)
    else:
        if case.seq_kv_lens is not None:
            yield "new K/V padding lengths", case.replace(seq_kv_lens=tuple(case.s_kv - n for n in case.seq_kv_lens))
        if case.seq_q_lens is not None:
            yield "new Q padding lengths", case.replace(seq_q_lens=tuple(case.s_q - n for n in case.seq_q_lens))


def sm90_compiled_variants(case: Case) -> Iterator[Tuple[str, Case]]:
    """Variants of ``case`` that change a ``compile()`` argument or a TemplateParams field: each compiles."""
    if case.is_thd:
        yield "a new sequence count", case.replace(q_lens=case.q_lens + (1,), kv_lens=case.kv_lens + (1,))
        if not q_total_is_runtime(case):
            yield "a new Q total under head-major Stats", case.replace(q_slack=case.q_slack + 3)
        return
    yield "a new dense S_q and S_kv", case.replace(s_q=case.s_q + 1, s_kv=case.s_kv + 1)  # padding lengths stay within
    more = {n: getattr(case, n) + getattr(case, n)[-1:] for n in ("seq_q_lens", "seq_kv_lens") if getattr(case, n) is not None}
    yield "a new dense batch", case.replace(batch=case.batch + 1, **more)
    yield "the other causal flag", case.replace(causal=not case.causal, bottom_right=False, window_right=-1)
    if case.softmax_scale != 0:  # scale_mode: the sign is compiled, the magnitude is not
        yield "the other scale sign", case.replace(scale=-case.softmax_scale)


def _keeps_key(case: Case, variant: Case) -> bool:
    """Whether the kernels' plan gives ``variant`` the compile key of ``case`` (``Sm90Specialization.key``)."""
    from kernels.sm90.specialize import compile_key

    return compile_key(variant) == compile_key(case)


def _forget_template_lru(c: Case, adapter) -> None:
    """Forget the template's own lru (``_compile``, prefill_d512_f16.py:1527) for ``c``'s params, which
    a launch's compile() reaches first (api_dsl.py:5338-5339): the launch then asks the compiled cache
    (a memo hit where it holds the artifact), so what it asks for is a function of the Case.
    compile_only forgets it itself (kernels.sm90.adapter.compile_spec)."""
    from kernels.sm90.adapter import template_module
    from kernels.sm90.specialize import specialize
    from kernels.source import sm90_sources

    with sm90_sources(getattr(adapter, "rewrites", ())):
        template_module(specialize(c).params)._compile.cache_clear()


def _caller(adapter, launch: bool, prop: str):
    """call(c) -> (CompileDelta, Asked): ``adapter.compile_only`` (the CPU) or a
    guarded ``adapter.run`` whose guard bands are judged (a Hopper GPU); the
    memos in front of compile_cached forgotten, what it asks for recorded."""

    def call(c: Case):
        if not launch:
            with _asked(True) as box:
                delta = adapter.compile_only(c)
            return delta, box
        dev = device()
        inputs, outputs = make_inputs(c, dev, poison=True), make_outputs(c, dev)
        _forget_template_lru(c, adapter)
        with _asked(True) as box:
            result = adapter.run(c, inputs, outputs)
        judge.guards_intact(prop, c, launched_buffers(inputs, outputs, result))
        return result.compile, box

    return call


def _new(box, rule: str, base: dict) -> list:
    return [v for k, v in _requests(box, rule).items() if k not in base]


def _judge_variants(prop: str, case: Case, adapter, launch: bool, variants, check) -> Observation:
    recorder.begin(prop, case, launch=launch)
    start = time.perf_counter()
    call = _caller(adapter, launch, prop)
    first, seen = call(case)
    rule = "entries" if seen.entries else "keys"
    base = _requests(seen, rule)
    if not base:  # nothing observed: "no entry the Case did not ask for" would hold of anything
        raise RuntimeError(f"{prop}: {case.describe()} asked the compiled cache for nothing observable ({first.to_dict()}): no verdict can be drawn")
    notes = {"rule": rule, "case_requests": len(base), "new_requests": {}}

    def judged():
        for what, variant in variants(case):
            delta, box = call(variant)
            new = _new(box, rule, base)
            notes["new_requests"][what] = len(new)
            check(variant, what, delta, new, _keeps_key(case, variant))
        return {}

    return finish(prop, case, start, judged, compile=first.to_dict(), notes=notes)


def check_sm90_compile_reuse(case: Case, adapter, *, launch: bool = False) -> Observation:
    """After sm90 ``case`` compiled once, each runtime variant
    (``sm90_runtime_variants``) asks the compiled cache for no entry the Case
    did not ask for, compiles nothing, and keeps the kernels' plan's compile
    key. Requests are observed with the memos in front of compile_cached
    forgotten (the frontend's keys on the CPU tier, record_entries() on a
    GPU): a function of the Case. ``launch=False`` compiles through
    ``adapter.compile_only`` (the CPU); ``launch=True`` runs dense Cases
    through ``adapter.run`` on a Hopper GPU, judging every launch's guard bands."""

    def check(variant: Case, what: str, delta, new: list, kept: bool) -> None:
        if new or not kept:
            judge.failed(
                "compile_reuse",
                variant,
                f"{what}: asked the compiled cache for {len(new)} entries the Case did not"
                + ("" if kept else "; the kernels' plan changes the compile key")
                + ": a runtime fact in the key (compile(), prefill_d512_f16.py:1490-1533)",
                {"what": what, "new": new, "key_kept": kept, "delta": delta.to_dict()},
                check="compile budget",
            )
        judge.compile_delta("compile_reuse", variant, delta, NO_COMPILE, what)

    return _judge_variants("compile_reuse", case, adapter, launch, sm90_runtime_variants, check)


def check_sm90_compile_distinct(case: Case, adapter) -> Observation:
    """Each compiled variant of sm90 ``case`` (``sm90_compiled_variants``: a
    ``compile()`` argument or TemplateParams field changed) has a compile key
    of its own in the kernels' plan and asks the compiled cache for an entry
    ``case`` did not: not handed the Case's artifact. Compile only (the CPU)."""

    def check(variant: Case, what: str, delta, new: list, kept: bool) -> None:
        if not new or kept:
            judge.failed(
                "compile_distinct",
                variant,
                f"{what}: asked the compiled cache for {len(new)} entries of its own"
                + ("; the kernels' plan keeps the compile key" if kept else "")
                + ": handed the Case's artifact for a compiled fact (compile(), prefill_d512_f16.py:1490-1533)",
                {"what": what, "new": new, "key_kept": kept, "delta": delta.to_dict()},
                check="distinct kernel",
            )

    return _judge_variants("compile_distinct", case, adapter, False, sm90_compiled_variants, check)
