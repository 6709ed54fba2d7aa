"""The metamorphic relations exact for the sm90 family (properties.metamorphic.SM90_EXACT), on the CPU:
the emulated sm90 kernel (tests/kernel_emulation_sm90.py) keeps each on dense sm90 Cases, and planted
faults (a batch entry's lengths read at another index, a rounding that does not scale with V) fail them;
on THD Cases, the reference stand-in that stores as the SM90 THD host does keeps each THD relation, and
one whose result depends on where a sequence sits in the pack fails the sequence permutation.
On a Hopper GPU the same property launches Sm90Adapter.run (conformance/test_sm90_metamorphic.py)."""

from __future__ import annotations

import dataclasses
from unittest import mock

import pytest
import torch

from ground.case import Case
from ground.outcome import PropertyFailure, Unsupported
from properties import metamorphic
from tests.kernel_emulation_sm90 import EmulatedSm90Adapter, ReferenceSm90Thd

CASES = {
    "padded": Case(family="sm90", batch=3, s_q=40, s_kv=72, h_q=4, h_kv=2, seq_q_lens=(40, 9, 31), seq_kv_lens=(72, 5, 60), seed=3),
    "packed": Case(family="sm90", dtype="bfloat16", batch=2, s_q=33, s_kv=65, h_q=4, h_kv=1, pack_gqa=True, causal=True, sinks=True, seed=5),
}


def run(case: Case, relation: str, adapter=None):
    with mock.patch.object(metamorphic, "device", lambda: torch.device("cpu")):
        return metamorphic.check_metamorphic(case, adapter or EmulatedSm90Adapter(store=True), relation=relation)


@pytest.mark.parametrize("relation", sorted(r for r in metamorphic.SM90_EXACT if "dense" in metamorphic.RELATIONS[r].layouts))
@pytest.mark.parametrize("name", sorted(CASES))
def test_the_emulated_sm90_kernel_keeps_each_relation(name, relation):
    obs = run(CASES[name], relation)
    assert obs.outcome == "passed" and obs.notes["exact"] == metamorphic.SM90_EXACT[relation]


class FirstEntryLengths(EmulatedSm90Adapter):
    """Planted: every batch entry reads entry 0's padding lengths."""

    def run(self, case, inputs, outputs=None, **kw):
        first = lambda t: None if t is None else t[:1].expand_as(t).clone()  # noqa: E731
        return super().run(case, dataclasses.replace(inputs, seq_q_lens=first(inputs.seq_q_lens), seq_kv_lens=first(inputs.seq_kv_lens)), outputs, **kw)


class OffsetO(EmulatedSm90Adapter):
    """Planted: O gains a constant before its rounding (an error that does not scale with V)."""

    def run(self, case, inputs, outputs=None, **kw):
        result = super().run(case, inputs, outputs, **kw)
        result.o.copy_((result.o.float() + 2.0**-6).to(result.o.dtype))
        return result


@pytest.mark.parametrize("relation, plant", [("batch_perm", FirstEntryLengths), ("v_pow2", OffsetO)])
def test_planted_faults_fail_their_relation(relation, plant):
    with pytest.raises(PropertyFailure) as failure:
        run(CASES["padded"], relation, plant(store=True))
    assert failure.value.check in ("o", "lse", "subnormal rescale")


THD_CASES = {
    "slack": Case(family="sm90", layout="thd", q_lens=(17, 40, 5), kv_lens=(30, 8, 70), h_q=4, h_kv=2, q_slack=9, kv_slack=3, seed=3),
    "sinks": Case(
        family="sm90",
        layout="thd",
        dtype="bfloat16",
        q_lens=(64, 1),
        kv_lens=(65, 130),
        h_q=2,
        h_kv=1,
        causal=True,
        sinks=True,
        lse_layout="token_major",
        seed=4,
    ),
}
THD_RELATIONS = sorted(r for r in metamorphic.SM90_EXACT if "thd" in metamorphic.RELATIONS[r].layouts)


@pytest.mark.parametrize("relation", THD_RELATIONS)
@pytest.mark.parametrize("name", sorted(THD_CASES))
def test_the_thd_stand_in_keeps_each_thd_relation(name, relation):
    obs = run(THD_CASES[name], relation, ReferenceSm90Thd())
    assert obs.outcome == "passed" and obs.notes["exact"] == metamorphic.SM90_EXACT[relation]


def test_the_sm90_thd_relations_include_the_sequence_permutation():
    assert "seq_perm" in THD_RELATIONS and "position" not in metamorphic.SM90_EXACT


@pytest.mark.parametrize("name", sorted(THD_CASES))
def test_a_result_that_depends_on_the_pack_position_fails_seq_perm(name):
    with pytest.raises(PropertyFailure) as failure:
        run(THD_CASES[name], "seq_perm", ReferenceSm90Thd("by_position"))
    assert failure.value.check in ("o", "lse")


def test_relations_sm90_does_not_keep_are_refused_before_any_launch():
    for relation in sorted(set(metamorphic.RELATIONS) - set(metamorphic.SM90_EXACT)):
        with pytest.raises(Unsupported, match="sm90 family"):
            run(CASES["padded"].replace(layout="thd", batch=1, seq_q_lens=None, seq_kv_lens=None, q_lens=(3, 4), kv_lens=(5, 6)), relation)
