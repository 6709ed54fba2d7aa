"""The tails property on sm90 Cases, on the CPU: the emulated sm90 kernel
(tests/kernel_emulation_sm90.py) storing into the caller's NaN-poisoned
buffers passes on drawn dense sm90 Cases, and two planted store faults fail
it. The same property runs on a Hopper GPU through Sm90Adapter.run
(conformance/test_sm90_numerics.py); this shows it can judge the family's
Cases and can fail."""

from __future__ import annotations

from unittest import mock

import pytest
import torch
from hypothesis import HealthCheck, given, settings

from ground import findings
from ground.case import Case
from ground.outcome import PropertyFailure
from properties import tails
from strategies.sm90 import sm90_cases
from tests.kernel_emulation_sm90 import EmulatedSm90Adapter, Sm90Plant


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
