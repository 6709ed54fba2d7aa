"""The backward properties: gradients against the float64 closed form under
the backward error model, and bitwise determinism.

The backward of a Case is handed O and LSE from the reference (O rounded to
the I/O dtype, LSE fp32) or from the forward kernel under test (the same
adapter), ``case.inputs_from``, and dO (ground.data.make_grad_output).
Its gradients are judged element by element (dQ, dK, dV, dBias) and per head
(dSink) under ``ground.tolerances.backward_bounds``, which charges
the handed O/LSE's own distance from the exact forward; gradients the
kernel's gating makes exactly 0 (rows with no visible key, padded rows, keys
no live row sees, masked dBias cells: reference.backward.structural_zeros)
are judged bit for bit (as values: -0 == 0).
"""

from __future__ import annotations

import time

import torch

from ground.case import Case
from ground.data import FINITE_PAD, bits_of, dbias_dtype_of, make_grad_output, make_grad_outputs, make_inputs, make_outputs
from ground.outcome import Observation, PropertyFailure
from properties import judge, recorder
from properties.common import accepted, device, finish, launched_buffers, row_regions

GRADS = ("dq", "dk", "dv", "dbias", "dsink")


def forward_of(case: Case) -> Case:
    """The forward Case a backward Case's O and LSE come from."""
    return case.replace(direction="fwd", deterministic=False, inputs_from="reference")


def handed_inputs(case: Case, adapter, inputs, dev):
    """(O, LSE, forward KernelResult or None): what the backward is handed, in
    make_outputs' layouts and guard bands. Reference: the float64 forward,
    O rounded to the I/O dtype; rows outside every THD sequence 0 (what the
    initializing forward host leaves there). Kernel: the adapter's forward."""
    from reference.attention import reference_for_case

    o, lse = make_outputs(case, dev)
    if case.inputs_from == "kernel":
        fwd = adapter.run(forward_of(case), inputs, (o, lse))
        if fwd.o.data_ptr() != o.data_ptr():  # an adapter with its own outputs (the public wrapper)
            o[..., : case.d_v].copy_(fwd.o)
            lse.copy_(fwd.lse)
        return o, lse, fwd
    ref_o, ref_lse = reference_for_case(forward_of(case), inputs, torch.float64)
    o.copy_(torch.nan_to_num(ref_o, nan=0.0).to(o.dtype))
    lse.copy_(torch.where(torch.isnan(ref_lse), torch.zeros_like(ref_lse), ref_lse).to(lse.dtype))
    return o, lse, None


def reference_with_model(case: Case, inputs, do, o, lse):
    """The float64 gradients, their bounds ("bound:<g>") and structural zeros ("zero:<g>")."""
    from ground.tolerances import backward_bounds
    from reference.backward import backward_for_case, structural_zeros

    def extra(it, grads, o_given, lse_given):
        bounds = backward_bounds(it, grads, case.dtype, o_given=o_given, lse_given=lse_given, dbias_dtype=dbias_dtype_of(case))
        zeros = structural_zeros(it, grads)
        return {**{f"bound:{n}": x for n, x in bounds.items()}, **{f"zero:{n}": x for n, x in zeros.items()}}

    return backward_for_case(case, inputs, do, extra=extra, o=o.to(torch.float64), lse=lse.to(torch.float64))


def _live(case: Case, inputs, name: str, shape) -> torch.Tensor:
    """Elements the contract defines: dense every one; THD the rows of live tokens."""
    dev = inputs.q.device
    if not case.is_thd or name == "dsink":
        return torch.ones(shape, dtype=torch.bool, device=dev)
    live = (inputs.q_live if name == "dq" else inputs.kv_live).to(dev)
    return live[:, None, None].expand(shape)


def _launch_inputs(case: Case, adapter):
    """(device, poisoned inputs, poisoned dO, (O, LSE, forward result)) of one backward example."""
    dev = device()
    inputs = make_inputs(case, dev, poison=True, pad_fill=FINITE_PAD)
    do = make_grad_output(case, dev, poison=True, pad_fill=FINITE_PAD)
    return dev, inputs, do, handed_inputs(case, adapter, inputs, dev)


def _launch_twice(property: str, case: Case, adapter, inputs, o, lse, do, dev, start: float):
    """Two backward launches on the same inputs into fresh gradient buffers:
    ((first result, its buffers, a copy of its gradients), (second result,
    its buffers)). The copy: the wrapper may hand the second launch the first
    one's memory."""
    first_bufs, second_bufs = make_grad_outputs(case, dev), make_grad_outputs(case, dev)
    first = accepted(property, case, start, lambda: adapter.backward(case, inputs, o, lse, do, first_bufs))
    kept = {n: t.clone() for n, t in first.grads.items()}
    second = accepted(property, case, start, lambda: adapter.backward(case, inputs, o, lse, do, second_bufs))
    return (first, first_bufs, kept), (second, second_bufs)


def _guards(property: str, case: Case, inputs, o, lse, do, result, bufs) -> None:
    buffers = launched_buffers(inputs, (o, lse), result)
    buffers.update({f"{n} (caller)": t for n, t in bufs.items()}, do=do)
    judge.guards_intact(property, case, buffers)


def _bitwise(case: Case, inputs, kept, second) -> None:
    """The determinism check ("determinism" / "bitwise"): the two launches'
    gradients equal bit for bit where the contract defines them, one failure
    per gradient (a finding names the one it excuses)."""
    for name, a in kept.items():
        live = _live(case, inputs, name, a.shape)
        judge.same_bits("determinism", case, name, a, second.grads[name], live, "deterministic=True, two launches differ bitwise", check="bitwise")


def check_backward(case: Case, adapter) -> Observation:
    """dQ, dK, dV (dBias, dSink) of the backward against the float64 closed
    form under the backward error model; structural zeros bit for bit; guard
    bands of every buffer handed. A deterministic Case launches twice and
    also gets the determinism check (``check_determinism``'s "bitwise", under
    its property's name): one compile, both verdicts; the ci run has no
    separate determinism test (it paid a compile per example: 59 keys for 64)."""
    if not case.is_bwd:
        raise ValueError(f"check_backward judges backward Cases (direction 'bwd'); got {case.describe()}")
    recorder.begin("backward", case)
    start = time.perf_counter()
    dev, inputs, do, (o, lse, fwd) = _launch_inputs(case, adapter)
    again = None
    if case.deterministic:
        (result, grads, kept), again = _launch_twice("backward", case, adapter, inputs, o, lse, do, dev, start)
    else:
        grads = make_grad_outputs(case, dev)
        result = accepted("backward", case, start, lambda: adapter.backward(case, inputs, o, lse, do, grads))
        kept = result.grads
    ref = reference_with_model(case, inputs, do, o, lse)
    notes = dict(result.notes)
    forward = None
    if fwd is not None:  # the forward kernel's O and LSE: the backward's bound charges their error, so they are judged too
        from properties.numerics import forward_model

        notes["forward"] = {k: fwd.notes.get(k) for k in ("compile_key", "mode", "arch")}
        forward = forward_model(forward_of(case), inputs)
    if again is not None:
        notes["launches"] = 2

    def judged():
        _guards("backward", case, inputs, o, lse, do, result, grads)
        if fwd is not None:  # the forward launch's own staging copies (its inputs and outputs are checked above)
            judge.guards_intact("backward", case, {f"{n} (forward launch)": t for n, t in launched_buffers(None, None, fwd).items()})
        if forward is not None:
            from properties.numerics import judge_forward

            notes["handed_forward_ratios"] = judge_forward("backward", case, inputs, (o, lse), fwd, forward, row_regions(case, inputs), notes)
        if again is not None:
            _guards("backward", case, inputs, o, lse, do, *again)
            _bitwise(case, inputs, kept, again[0])
        missing = [n for n in GRADS if n in ref and n not in kept]
        if missing:
            raise PropertyFailure("backward", case, f"the backward returned no {', '.join(missing)}", {"missing": missing}, check="outputs")
        modelled = []
        for name in GRADS:
            if name not in ref:
                continue
            got, want = kept[name], ref[name]
            live = _live(case, inputs, name, want.shape)
            zero = ref.get(f"zero:{name}")
            fixed = (zero == 1.0) & live if zero is not None else torch.zeros_like(live)
            judge.exactly(
                "backward",
                case,
                name,
                got,
                torch.zeros_like(want),
                fixed,
                f"{name} the kernel's gating makes exactly 0 (no visible key, padded rows, unseen keys, masked cells)",
                check="contract rows",
                defer=True,
            )
            modelled.append((name, got, want, ref.get(f"bound:{name}", torch.zeros_like(want)), live & ~fixed))
        return judge.within_models("backward", case, modelled)

    return finish("backward", case, start, judged, compile=result.compile.to_dict(), notes=notes)


ADDRESSING = "backward_addressing"


def check_backward_addressing(case: Case, adapter) -> Observation:
    """THD with a first cu_seqlens offset > 0: the backward handed its buffers
    as the forward takes them (from token 0, the same cu_seqlens: what a
    training step hands both) gives, bit for bit, the gradients it gives when
    handed them from token cu[0] (its own contract, kernels.backward.thd_origin).
    Two deterministic launches (so equal bits are the right answer)."""
    if not (case.is_bwd and case.is_thd and case.deterministic and (case.q_base or case.kv_base)):
        raise ValueError(f"check_backward_addressing judges deterministic THD backward Cases with cu_seqlens[0] > 0; got {case.describe()}")
    from kernels.base import require

    require(adapter, "thd-addressing", "the THD backward handed its buffers as the forward takes them")
    recorder.begin(ADDRESSING, case)
    start = time.perf_counter()
    dev, inputs, do, (o, lse, fwd) = _launch_inputs(case, adapter)
    own = accepted(ADDRESSING, case, start, lambda: adapter.backward(case, inputs, o, lse, do, make_grad_outputs(case, dev)))
    as_fwd = accepted(ADDRESSING, case, start, lambda: adapter.backward(case, inputs, o, lse, do, make_grad_outputs(case, dev), addressing="forward"))

    def judged():
        for label, result in (("own", own), ("forward", as_fwd)):
            buffers = launched_buffers(inputs, (o, lse), result)
            judge.guards_intact(ADDRESSING, case, {f"{n} ({label})": t for n, t in buffers.items()} | {"do": do})
        for name in GRADS:
            if name in own.grads:
                live = _live(case, inputs, name, own.grads[name].shape)
                judge.exactly(
                    ADDRESSING,
                    case,
                    name,
                    bits_of(as_fwd.grads[name]),
                    bits_of(own.grads[name]),
                    live,
                    f"{name} handed as the forward takes it vs from cu_seqlens[0] = ({case.q_base}, {case.kv_base})",
                    check="forward addressing",
                )
        return {}

    notes = {"own": own.notes.get("thd_origin"), "forward": as_fwd.notes.get("thd_origin"), "compile_key": own.notes.get("compile_key")}
    return finish(ADDRESSING, case, start, judged, compile=own.compile.to_dict(), notes=notes)


def check_determinism(case: Case, adapter) -> Observation:
    """deterministic=True: two launches of the backward on the same inputs
    (fresh gradient buffers) give bitwise identical dQ, dK, dV, dBias, dSink.
    (The default mode adds dQ, dBias and dSink by fp32 atomics in a free
    order: it promises the error model only, not bits.) Compared where the
    contract defines a gradient (``_live``: THD rows of live tokens): the
    wrapper returns torch.empty_like gradients and leaves MHA dK/dV capacity
    rows as they were (api_dsl.py:929-931), so two launches' tails hold
    whatever the allocator handed out (seen on the H200: dK of a zero-length
    KV sequence "differed" in all 1,152 capacity elements)."""
    if not (case.is_bwd and case.deterministic):
        raise ValueError(f"check_determinism needs a deterministic backward Case; got {case.describe()}")
    recorder.begin("determinism", case)
    start = time.perf_counter()
    dev, inputs, do, (o, lse, _) = _launch_inputs(case, adapter)
    (first, first_bufs, kept), (second, second_bufs) = _launch_twice("determinism", case, adapter, inputs, o, lse, do, dev, start)

    def judged():
        for res, bufs in ((first, first_bufs), (second, second_bufs)):
            _guards("determinism", case, inputs, o, lse, do, res, bufs)
        _bitwise(case, inputs, kept, second)
        return {}

    return finish("determinism", case, start, judged, compile=second.compile.to_dict(), notes=dict(second.notes))


def check_backward_rejection(case: Case, adapter=None) -> Observation:
    """``sdpa_bwd_wrapper_sm80`` refuses the backward contract ``rule``
    (ground.contracts.BWD_RULES) with the stated exception naming
    the argument, before compiling or launching anything. Runs on the CPU (a
    GPU when there is one)."""
    from ground.contracts import BWD_RULES
    from kernels.backward import rejected_call
    from kernels.counters import measure

    rule = case.violation
    row = next(r for r in BWD_RULES if r.name == rule)
    recorder.begin("backward_rejection", case, rule=rule)
    start = time.perf_counter()
    dev = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
    inputs = make_inputs(case, dev, poison=False)
    o, lse = make_outputs(case, dev, fill=0.0)
    do = make_grad_output(case, dev, poison=False)
    box = {}

    def call():
        with measure() as counted:
            try:
                return rejected_call(case, inputs, o, lse, do, row.change)
            finally:
                box["delta"] = counted

    def judged():
        judge.raises_contract("backward_rejection", case, call, row.expect.exception, row.expect.fragment)
        # A call the wrapper wrongly takes launches on these buffers: nothing outside them may be written.
        judge.guards_intact("backward_rejection", case, {**launched_buffers(inputs, (o, lse)), "do": do})
        delta = box["delta"].delta
        judge.compile_delta("backward_rejection", case, delta, {"misses": 0}, f"rule {rule}: refused before compiling")
        return {}

    return finish("backward_rejection", case, start, judged, entry="wrapper", notes={"rule": rule, "where": row.where})
