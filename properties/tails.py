"""tails: output storage outside the live rows ends as the contract says, and
NaN poisoned into dead input storage never reaches a defined output."""

from __future__ import annotations

import time

import torch

from ground.case import Case
from ground.data import body_storage, make_inputs, make_outputs
from ground.outcome import Observation
from kernels.base import CompileDelta, require
from properties import judge, recorder
from properties.common import device, finish, launched_buffers, lse_pitch_untouched, lse_untouched, row_mask, row_regions, storage_outside_view


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
    rows included); no guard band of any buffer is touched.

    What is judged is the memory the kernel wrote (``KernelResult.o``/``lse``:
    the caller's buffers, the adapter's staging copy, or the public wrapper's
    own outputs). THD ``initialize_outputs=False`` needs an adapter that
    declares "no-init": any other refuses (``Unsupported``, scope "adapter")
    before anything runs (the test skips, naming the adapter), never a check
    of the other mode."""
    if case.is_thd and not initialize_outputs:
        require(adapter, "no-init", "the THD tails with initialize_outputs=False")
    recorder.begin("tails", case, initialize_outputs=initialize_outputs)
    start = time.perf_counter()
    dev = device()
    inputs = make_inputs(case, dev, poison=True)
    o, lse = make_outputs(case, dev)
    result = adapter.run(case, inputs, (o, lse), initialize_outputs=initialize_outputs)
    return judge_tails(case, inputs, (o, lse), result, initialize_outputs, start)


def judge_tails(case: Case, inputs, outputs, result, initialize_outputs: bool, start: float, *, own_launch: bool = True) -> Observation:
    """The tails checks of one launch (``result`` of ``inputs``, NaN-poisoned
    dead storage, into ``outputs``, NaN-filled), recorded as a tails
    Observation. Shared by check_tails and by the THD numerics, whose launch
    is exactly this one (one launch, both properties' checks): there
    ``own_launch=False``, and the launch's compiles stay the numerics
    Observation's alone (recorded twice, one compile would count as two in
    the report's compile statistics)."""
    o, lse = outputs
    ran = result.notes.get("initialize_outputs", initialize_outputs)
    if case.is_thd and ran != initialize_outputs:
        raise RuntimeError(
            f"adapter {result.notes.get('adapter', '?')!r} ran initialize_outputs={ran} when asked for {initialize_outputs}: it must refuse (Unsupported) instead"
        )
    regions = row_regions(case, inputs)
    checked = {}

    def judged():
        judge.guards_intact("tails", case, launched_buffers(inputs, (o, lse), result))
        # Without a Stats output the LSE buffer is never handed: all of it untouched.
        quantities = (("o", result.o), ("lse", result.lse)) if case.has_lse else (("o", result.o),)
        if not case.has_lse:
            checked["lse untouched"] = lse_untouched("tails", case, lse)
        elif case.lse_layout != "compact" and "lse" not in result.notes.get("staged", ()):
            checked["lse pitch"] = lse_pitch_untouched("tails", case, result.lse)
        if case.is_thd:
            want = tail_expectation(initialize_outputs)
            for quantity, got in quantities:
                dead = ~row_mask(case, inputs, quantity, got.shape)
                # counted on the host (a device count is a host sync): the rows outside [cu[0], cu[-1]);
                # an empty pack (T_q = 0) has none
                checked[f"{quantity} capacity tail"] = got.numel() // case.t_q * (case.t_q - sum(case.q_lens)) if case.t_q else 0
                what = f"{quantity.upper()} capacity outside the live tokens"
                if initialize_outputs:  # zeroed by the host: the value 0
                    judge.exactly("tails", case, quantity, got, torch.full_like(got, want), dead, what, regions, check="capacity", defer=True)
                else:  # never written: the caller's bytes, bit for bit
                    judge.untouched("tails", case, quantity, got, dead, what, regions, check="capacity")
        else:
            # The pad columns of the O the kernel was handed: the caller's when
            # it went natively; a compact staging copy or the wrapper's own O
            # have none (then nothing is checked here, and the notes say so).
            handed = result.handed.get("o", result.o)
            pad = storage_outside_view(handed)
            flat = body_storage(handed)
            checked["o pad columns"] = pad.numel() - handed.numel()  # the body less the view's distinct elements: no host sync
            judge.untouched("tails", case, "o", flat, pad, "O pad columns (never written)", check="pad columns")
        for quantity, got in quantities:
            live = row_mask(case, inputs, quantity, got.shape)
            judge.exactly(
                "tails",
                case,
                quantity,
                torch.isnan(got),
                torch.zeros_like(got, dtype=torch.bool),
                live,
                "live outputs (poison left or NaN produced)",
                regions,
                check="no nan",
                defer=True,
            )
        return {}

    notes = {**result.notes, "initialize_outputs": initialize_outputs, "checked_elements": checked}
    compile = (result.compile if own_launch else CompileDelta()).to_dict()
    return finish("tails", case, start, judged, params={"initialize_outputs": initialize_outputs}, compile=compile, notes=notes)
