"""numerics: O and LSE against the float64 reference under the error model
of the kernel's own arithmetic (ground.tolerances.kernel_bounds)."""

from __future__ import annotations

import time

import torch

from ground.case import Case
from ground.data import FINITE_PAD, TORCH_DTYPES, make_inputs, make_outputs
from ground.outcome import Observation
from properties import judge, recorder
from properties.common import device, finish, launched_buffers, lse_untouched, row_mask, row_regions


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
    from ground.tolerances import legacy_bound, max_abs_error
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


def forward_model(case: Case, inputs):
    """(O, LSE, model) of forward Case ``case`` on ``inputs``: the float64
    reference and the error model of its family (``bounds_for``)."""
    from ground.tolerances import bounds_for
    from reference.attention import reference_for_case

    ref_o, ref_lse, model = reference_for_case(case, inputs, torch.float64, extra=lambda it: bounds_for(case.family)(it, case.dtype))
    if not model:  # THD without a single Q row: no attention call, no row to judge
        model = {"o": torch.full_like(ref_o, float("nan")), "lse": torch.full_like(ref_lse, float("nan")), "visible": torch.full_like(ref_lse, float("nan"))}
    return ref_o, ref_lse, model


# The check ids a forward verdict fails under: numerics' own; the backward's when it judges the O and LSE its
# forward kernel handed it (inputs_from "kernel": its bound charges their error, so they are judged too).
FORWARD_CHECKS = {"numerics": ("contract rows", "error model"), "backward": ("handed forward", "handed forward")}


def judge_forward(property: str, case: Case, inputs, outputs, result, forward, regions, notes: dict, *, legacy: bool = False) -> dict:
    """O and LSE of a forward launch (``result``) against ``forward``
    (``forward_model``'s): the rows the contract fixes exactly, the rest
    within the error model; the ratios. Inside a ``judged`` (judge.collecting)."""
    fixed_check, model_check = FORWARD_CHECKS[property]
    ref_o, ref_lse, model = forward
    o_rows = row_mask(case, inputs, "o", ref_o.shape)
    lse_rows = row_mask(case, inputs, "lse", ref_lse.shape)
    visible = torch.where(lse_rows, model["visible"], torch.ones_like(model["visible"]))
    o_fixed, lse_fixed = contract_rows(case, inputs, visible)
    if case.is_thd:  # O is (T_q, H, D), the row masks (H, T_q)
        o_fixed = o_fixed.T[..., None].expand_as(ref_o)
    else:
        o_fixed = o_fixed[..., None].expand_as(ref_o)
    o_what, lse_what = (
        "O rows the contract fixes (padded Q rows, rows with no visible key: 0)",
        "LSE rows the contract fixes (padded Q rows, rows with no visible key: -inf)",
    )
    judge.exactly(property, case, "o", result.o, ref_o, o_rows & o_fixed, o_what, regions, check=fixed_check, defer=True)
    if not case.has_lse:  # no Stats output: O alone is judged; the LSE buffer was never handed
        lse_untouched(property, case, outputs[1])
        if legacy:
            notes["legacy_ratios"] = {"o": legacy_ratios(case, inputs, result.o, ref_lse, o_rows, lse_rows)["o"]}
        return {"o": judge.within_model(property, case, "o", result.o, ref_o, model["o"], o_rows & ~o_fixed, regions, check=model_check)}
    judge.exactly(property, case, "lse", result.lse, ref_lse, lse_rows & lse_fixed, lse_what, regions, check=fixed_check, defer=True)
    if legacy:
        notes["legacy_ratios"] = legacy_ratios(case, inputs, result.o, result.lse, o_rows, lse_rows)
    # Inside finish every check is judged (judge.collecting): both ratios are recorded either way.
    return judge.within_models(
        property,
        case,
        [("o", result.o, ref_o, model["o"], o_rows & ~o_fixed), ("lse", result.lse, ref_lse, model["lse"], lse_rows & ~lse_fixed)],
        regions,
        check=model_check,
    )


def check_numerics(case: Case, adapter, *, legacy: bool = False, tails: bool = False) -> Observation:
    """O and LSE against the float64 reference under the error model of the
    Case's kernel family (``bounds_for(case.family)``: per O element, per LSE row); rows whose value the
    contract fixes (``contract_rows``) exactly. The input storage outside
    the live tokens is poisoned: NaN, except dense rows past the padding
    lengths, which hold FINITE_PAD (their NaN is check_tails'). ``legacy``
    also records the replaced rule's ratios in the notes
    (tools/calibrate_error_model.py). ``tails`` (THD): the launch is exactly
    check_tails' (NaN behind every dead input, NaN in the output buffers) in
    the output mode the adapter ran (its ``initialize_outputs`` note), so its
    checks are judged on it too and recorded as a tails example of their
    own: one launch, both properties."""
    recorder.begin("numerics", case, **({"legacy": True} if legacy else {}))
    start = time.perf_counter()
    dev = device()
    inputs = make_inputs(case, dev, poison=True, pad_fill=FINITE_PAD)
    outputs = make_outputs(case, dev)
    result = adapter.run(case, inputs, outputs)
    forward = forward_model(case, inputs)
    regions = row_regions(case, inputs)
    notes = dict(result.notes)

    def judged():
        judge.guards_intact("numerics", case, launched_buffers(inputs, outputs, result))
        return judge_forward("numerics", case, inputs, outputs, result, forward, regions, notes, legacy=legacy)

    observed = finish("numerics", case, start, judged, compile=result.compile.to_dict(), notes=notes)
    if tails and case.is_thd:
        from properties.tails import judge_tails

        # The tails of the output mode the launch ran: the SM80 hosts zero the capacity when asked (the
        # default); a host without that option (sm90) leaves it as the caller's bytes and says so.
        ran = result.notes.get("initialize_outputs", True)
        recorder.begin("tails", case, initialize_outputs=ran)  # its case file names the property that judges next
        judge_tails(case, inputs, outputs, result, ran, time.perf_counter(), own_launch=False)
    return observed
