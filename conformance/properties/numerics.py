"""numerics: O and LSE against the fp32 reference under the error model."""

from __future__ import annotations

import time

import torch

from conformance.ground.case import Case
from conformance.ground.data import FINITE_PAD, TORCH_DTYPES, make_inputs, make_outputs
from conformance.ground.outcome import Observation
from conformance.properties import judge, recorder
from conformance.properties.common import device, finish, launched_buffers, row_mask, row_regions


def check_numerics(case: Case, adapter) -> Observation:
    """O and LSE against the fp32 reference under the error model, with the
    input storage outside the live tokens poisoned: NaN, except dense rows past
    the padding lengths, which hold FINITE_PAD (their NaN is check_tails')."""
    from reference.attention import reference_for_case

    recorder.begin("numerics", case)
    start = time.perf_counter()
    dev = device()
    inputs = make_inputs(case, dev, poison=True, pad_fill=FINITE_PAD)
    outputs = make_outputs(case, dev)
    result = adapter.run(case, inputs, outputs)
    ref_o, ref_lse = reference_for_case(case, inputs, torch.float32)
    low_o, low_lse = reference_for_case(case, inputs, TORCH_DTYPES[case.dtype])
    regions = row_regions(case, inputs)

    def judged():
        judge.guards_intact("numerics", case, launched_buffers(inputs, outputs, result))
        o_live = row_mask(case, inputs, "o", ref_o.shape)
        lse_live = row_mask(case, inputs, "lse", ref_lse.shape)
        return {
            "o": judge.within_model("numerics", case, "o", result.o, ref_o, low_o, o_live, regions),
            "lse": judge.within_model("numerics", case, "lse", result.lse, ref_lse, low_lse, lse_live, regions),
        }

    return finish("numerics", case, start, judged, compile=result.compile.to_dict(), notes=dict(result.notes))

