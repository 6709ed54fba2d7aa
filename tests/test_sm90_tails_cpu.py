"""The tails property on sm90 Cases, on the CPU: the emulated sm90 kernel
(tests/kernel_emulation_sm90.py) storing into the caller's NaN-poisoned
buffers passes on drawn dense sm90 Cases, and two planted store faults fail
it; on THD Cases, a reference stand-in storing as the SM90 THD host does
(live rows only) passes the numerics launch judged by the tails too, and
three planted stores outside the live rows fail it. The same property runs
on a Hopper GPU through Sm90Adapter.run (conformance/test_sm90_numerics.py);
this shows it can judge the family's Cases and can fail."""

from __future__ import annotations

from contextlib import contextmanager
from unittest import mock

import pytest
import torch
from hypothesis import HealthCheck, given, settings

from ground import findings
from ground.case import Case
from ground.outcome import PropertyFailure
from properties import numerics, recorder, tails
from strategies.sm90 import sm90_cases
from tests.kernel_emulation_sm90 import EmulatedSm90Adapter, ReferenceSm90Thd, Sm90Plant


def run_tails(case: Case, plant: Sm90Plant = Sm90Plant()):
    # No finding in force: the planted dead-K/V read is what sm90-dense-padded-kv-rows-nan describes.
    with mock.patch.object(tails, "device", lambda: torch.device("cpu")), findings.applied([]):
        return tails.check_tails(case, EmulatedSm90Adapter(plant=plant, store=True))


@settings(max_examples=20, deadline=None, database=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(sm90_cases(layouts=("dense",)))
def test_tails_pass_on_drawn_sm90_cases(case):
    """The correct emulated kernel: pad columns untouched, no poison in a defined output, no Stats no LSE store."""
    obs = run_tails(case)
    assert obs.outcome == "passed", obs.notes


PADDED = Case(family="sm90", s_q=64, s_kv=129, h_q=2, h_kv=1, memory="bshd_padded", seq_q_lens=(40,), seq_kv_lens=(70,), seed=2)


@pytest.mark.parametrize(
    "plant, check",
    [(Sm90Plant(reads_dead_kv=True), "no nan"), (Sm90Plant(pad_columns_written=True), "pad columns")],
    ids=["reads_dead_kv", "pad_columns_written"],
)
def test_planted_store_faults_fail_the_tails(plant, check):
    """NaN from K/V rows past seq_kv_len reaching O, and an O store over the pad columns, each fail their check."""
    assert run_tails(PADDED).outcome == "passed"
    with pytest.raises(PropertyFailure) as failure:
        run_tails(PADDED, plant)
    assert failure.value.check == check


@contextmanager
def recorded():
    """The Observations the properties record meanwhile (their verdicts, in order)."""
    seen = []
    with mock.patch.object(recorder, "observe", seen.append):
        yield seen


def run_thd(case: Case, plant: str = ""):
    """check_numerics with ``tails=True`` (what test_sm90_numerics_thd runs) on the stand-in."""
    with mock.patch.object(numerics, "device", lambda: torch.device("cpu")), findings.applied([]):
        return numerics.check_numerics(case, ReferenceSm90Thd(plant), tails=True)


@settings(max_examples=20, deadline=None, database=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(sm90_cases(layouts=("thd",)))
def test_thd_tails_pass_on_drawn_sm90_cases(case):
    """Live rows stored, the capacity and the Stats pitch left as the caller's poison: numerics and tails pass,
    and the tails were judged in the no-init mode (a capacity check per output the launch wrote)."""
    with recorded() as observations:
        run_thd(case)
    tails_obs = [o for o in observations if o.property == "tails"]
    assert [o.outcome for o in observations] == ["passed", "passed"] and len(tails_obs) == 1


# Capacity past the live tokens (q_slack) and a head-major Stats pitch past T_q (lse_layout "padded").
SLACK = Case(family="sm90", layout="thd", q_lens=(17, 40), kv_lens=(30, 8), h_q=2, h_kv=1, q_slack=9, lse_layout="padded", seed=3)


@pytest.mark.parametrize("plant, check", [("o_capacity", "capacity"), ("stats_capacity", "capacity"), ("stats_pitch", "lse pitch")])
def test_planted_thd_store_faults_fail_the_tails(plant, check):
    """An O or Stats store past the last sequence, and a Stats store over the pitch, each fail their tails check."""
    assert run_thd(SLACK).outcome == "passed"
    with pytest.raises(PropertyFailure) as failure:
        run_thd(SLACK, plant)
    assert failure.value.property == "tails" and failure.value.check == check, failure.value


def test_the_sm90_compile_entry_declares_its_thd_output_mode():
    """The compile entry serves "no-init" (its THD host's one mode) and notes it on THD launches; the public
    wrapper, which allocates its outputs itself, still refuses it."""
    from kernels.sm90.adapter import THD_INIT, Sm90Adapter
    from kernels.sm90.wrapper import Sm90WrapperAdapter

    assert THD_INIT is False and "no-init" in Sm90Adapter.supports
    assert "no-init" not in Sm90WrapperAdapter.supports and "no-init" in Sm90WrapperAdapter.lacks


class CompilingThd(ReferenceSm90Thd):
    """The THD stand-in, its launch reporting one compile (as a cold launch does)."""

    def run(self, *args, **kwargs):
        from kernels.base import CompileDelta

        result = super().run(*args, **kwargs)
        result.compile = CompileDelta(misses=1, modules=1, seconds=2.5)
        return result


def test_one_launch_judged_twice_counts_its_compile_once():
    """The THD numerics launch judged by the tails too: its compile is the numerics
    Observation's alone, or the report's compile statistics count it twice."""
    with recorded() as observations, mock.patch.object(numerics, "device", lambda: torch.device("cpu")), findings.applied([]):
        numerics.check_numerics(SLACK, CompilingThd(), tails=True)
    compiles = {o.property: (o.compile["misses"], o.compile["seconds"]) for o in observations}
    assert compiles == {"numerics": (1, 2.5), "tails": (0, 0.0)}
