"""The metamorphic property on the CPU, through the emulated kernel
(tests/kernel_emulation.py):

- every relation holds on the emulation (fixed cases and drawn ones);
- each relation fails on a planted bug;
- the neighbour-key bug (one key's V read from the previous sequence in a
  row of 4,096 keys) passes the reference comparison at the same shape (its
  effect on O sits inside the error model) and fails isolation and the
  sequence permutation; a KV tiling anchored to the packed offset passes
  numerics and fails position;
- the variation is a function of the Case and the relation (a case file
  replays it), and every relation but ``entry`` keeps the compile key.
"""

from __future__ import annotations

from contextlib import contextmanager
from unittest import mock

import pytest
import torch
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from ground.case import Case
from ground.data import FINITE_PAD, make_inputs
from ground.outcome import PropertyFailure
from properties import check_metamorphic, check_numerics
from properties import metamorphic as M
from properties import numerics as N
from strategies import dense_cases, thd_cases
from tests.kernel_emulation import EmulatedAdapter, Plant

SETTINGS = dict(deadline=None, database=None, derandomize=True, suppress_health_check=list(HealthCheck))
CPU = torch.device("cpu")

DENSE = Case(batch=3, h_q=4, h_kv=2, s_q=70, s_kv=90, seq_q_lens=(70, 33, 5), seq_kv_lens=(90, 64, 17), bias="float32", sinks=True, seed=5)
THD = Case(
    layout="thd", h_q=4, h_kv=2, q_lens=(5, 70, 0, 9), kv_lens=(9, 130, 3, 66), q_base=3, kv_base=1, q_slack=8, kv_slack=8, sinks=True, causal=True, seed=7
)
CASES = {"dense": DENSE, "thd": THD}
# A long-row THD case: bf16, 4,096 keys per sequence, a flat softmax (the pools' scale 1/32).
LONG = Case(layout="thd", dtype="bfloat16", q_lens=(8, 8), kv_lens=(4096, 4096), scale=0.03125, seed=0)
NEIGHBOUR = Plant(neighbour_v_min_keys=512)


@contextmanager
def on_cpu(second=None):
    """The launching properties on the CPU; ``entry`` launches ``second``."""
    with (
        mock.patch.object(M, "device", lambda: CPU),
        mock.patch.object(N, "device", lambda: CPU),
        mock.patch.object(M, "other_adapter", lambda adapter: second or EmulatedAdapter()),
    ):
        yield


def metamorphic(case: Case, relation: str, plant: Plant = Plant(), second=None):
    with on_cpu(second):
        return check_metamorphic(case, EmulatedAdapter(plant=plant), relation=relation)


def _pairs():
    return [(layout, r) for layout, rels in (("dense", M.DENSE_RELATIONS), ("thd", M.THD_RELATIONS)) for r in rels]


@pytest.mark.parametrize("layout,relation", _pairs(), ids=[f"{a}-{b}" for a, b in _pairs()])
def test_every_relation_holds_on_the_emulation(layout, relation):
    obs = metamorphic(CASES[layout], relation)
    assert obs.outcome == "passed" and obs.notes["variation"]["relation"] == relation


@pytest.mark.parametrize("relation", M.THD_RELATIONS)
def test_thd_relations_hold_without_any_q_row(relation):
    """Every q length 0 and no base or slack: the first launch has no Q row
    at all (capacity 0) while the repacked one may have some (position shifts
    the base). Seen as an IndexError in the H200 kill table of 2026-12-03.
    A case the relation does not move (one head, one sequence; isolation:
    no Q row left to compare) is refused (scope "case": no verdict) before
    anything runs."""
    from ground.outcome import Unsupported

    cases = (Case(layout="thd", q_lens=(0,), kv_lens=(3,)), Case(layout="thd", q_lens=(0, 0), kv_lens=(0, 0), kv_slack=1))
    cases += tuple(c.replace(h_q=2, h_kv=2) for c in cases)  # a head permutation moves these
    moved = 0
    for case in cases:
        assert case.t_q == 0
        if M.RELATIONS[relation].moves(case):
            assert metamorphic(case, relation).outcome == "passed"
            moved += 1
            continue
        with pytest.raises(Unsupported, match=f"relation {relation!r} does not move") as refused:
            metamorphic(case, relation)
        assert refused.value.scope == "case"
    assert moved == 0 if relation == "isolation" else moved >= 2


def _seed_changing(case: Case, relation: str, good) -> Case:
    """``case`` with the first seed whose variation satisfies ``good(notes)``."""
    for seed in range(64):
        c = case.replace(seed=seed)
        if good(M.plan(c, make_inputs(c, CPU, pad_fill=FINITE_PAD), relation).notes):
            return c
    raise AssertionError(f"no seed below 64 draws the wanted {relation} variation")


def _EXPOSES_REPEAT(notes) -> bool:
    """A head permutation under which h % H_kv (H_kv = 2) reads another KV head
    than the Q head it moved: new head i reads new KV head i % 2, which holds
    old KV head kv_heads[i % 2], where the first launch read q_heads[i] % 2
    (a reversal of both, e.g., moves nothing that h % 2 sees)."""
    return any(notes["kv_heads"][i % 2] != q % 2 for i, q in enumerate(notes["q_heads"]))


# (relation, layout, plant or second adapter, why it must fail, the variation it needs)
PLANTED = [
    ("batch_perm", "dense", Plant(kv_lens_of_batch0=True), "every batch entry masked with batch 0's kv length", None),
    ("head_perm", "dense", Plant(kv_heads_repeated=True), "GQA heads read KV head h % H_kv", _EXPOSES_REPEAT),
    ("head_perm", "thd", Plant(kv_heads_repeated=True), "GQA heads read KV head h % H_kv", _EXPOSES_REPEAT),
    ("seq_perm", "thd", Plant(neighbour_v_min_keys=64), "a sequence's first V from the previous sequence", None),
    ("position", "thd", Plant(absolute_kv_tiles=True), "KV tiles anchored to the packed offset", None),
    (
        "isolation",
        "thd",
        Plant(neighbour_v_min_keys=64),
        "a sequence's first V from the previous sequence",
        lambda n: n["changed"] == 0,
    ),  # the neighbour of the long sequence 1
    # (the previous entry's last physical row: live in entry 0 (90 keys), padding in entry 1 (64))
    ("isolation", "dense", Plant(neighbour_v_min_keys=16), "a batch entry's first V from the previous entry", lambda n: n["changed"] in (0, "padding")),
    ("v_pow2", "dense", Plant(v_offset=2.0**-10), "V shifted before P@V", None),
    ("v_pow2", "thd", Plant(v_offset=2.0**-10), "V shifted before P@V", None),
    ("determinism", "dense", Plant(nondeterministic=True), "LSE one ulp off every other launch", None),
    ("determinism", "thd", Plant(nondeterministic=True), "LSE one ulp off every other launch", None),
    ("entry", "dense", EmulatedAdapter(plant=Plant(scale_factor=1 + 2.0**-16)), "the second entry folds another scale", None),
    ("entry", "thd", EmulatedAdapter(plant=Plant(scale_factor=1 + 2.0**-16)), "the second entry folds another scale", None),
]


@pytest.mark.parametrize("relation,layout,bug,why,wanted", PLANTED, ids=[f"{r}-{l}" for r, l, *_ in PLANTED])
def test_each_relation_fails_on_a_planted_bug(relation, layout, bug, why, wanted):
    case = CASES[layout]
    if wanted is not None:
        case = _seed_changing(case, relation, wanted)
    second = bug if isinstance(bug, EmulatedAdapter) else None
    plant = Plant() if second is not None else bug
    metamorphic(case, relation)  # the honest emulation passes this very variation
    with pytest.raises(PropertyFailure, match=f"{relation}"):
        metamorphic(case, relation, plant, second=second)


def test_the_neighbour_key_passes_numerics_and_fails_isolation_and_permutation():
    """One key's V read from the neighbouring sequence in rows of 4,096 keys:
    O moves by P_0 |v - v'| ~ 1e-3, inside the error model (bf16), so the
    reference comparison at this very shape passes; the relations do not."""
    adapter = EmulatedAdapter(plant=NEIGHBOUR)
    with on_cpu():
        obs = check_numerics(LONG, adapter)
        assert obs.outcome == "passed" and 0 < obs.ratios["o"] < 1
        for relation in ("isolation", "seq_perm"):
            with pytest.raises(PropertyFailure, match=f"O of the second launch \\({relation}"):
                check_metamorphic(LONG, adapter, relation=relation)
        check_metamorphic(LONG, adapter, relation="position")  # the neighbour moves along: not this relation's bug


def test_tiles_anchored_to_the_pack_pass_numerics_and_fail_position():
    """A KV tiling from the packed offset regroups the fp32 sums: inside the
    error model, caught bit for bit by moving the pack."""
    case = Case(layout="thd", q_lens=(16, 16), kv_lens=(200, 300), kv_base=5, seed=1)
    adapter = EmulatedAdapter(plant=Plant(absolute_kv_tiles=True))
    with on_cpu():
        assert check_numerics(case, adapter).outcome == "passed"
        with pytest.raises(PropertyFailure, match="position"):
            check_metamorphic(case, adapter, relation="position")


# --------------------------------------------------------- drawn cases
@pytest.mark.parametrize("layout", ["dense", "thd"])
def test_relations_hold_on_drawn_cases(layout):
    strategy = dense_cases(max_tokens=256) if layout == "dense" else thd_cases(max_tokens=600)
    relations = M.DENSE_RELATIONS if layout == "dense" else M.THD_RELATIONS

    @settings(max_examples=12, **SETTINGS)
    @given(case=strategy, relation=st.sampled_from(relations))
    def run(case, relation):
        assert metamorphic(case, relation).outcome == "passed"

    run()


def test_the_variation_is_a_function_of_the_case_and_relation():
    """A case file (Case + relation) replays the same second launch."""
    for case, relations in ((DENSE, M.DENSE_RELATIONS), (THD, M.THD_RELATIONS)):
        for relation in relations:
            with on_cpu():
                a, b = (M.plan(case, make_inputs(case, CPU, pad_fill=FINITE_PAD), relation, EmulatedAdapter()) for _ in range(2))
            assert a.notes == b.notes and a.case == b.case, relation
            for name in ("q", "k", "v"):
                assert torch.equal(torch.nan_to_num(getattr(a.inputs, name), 7.0), torch.nan_to_num(getattr(b.inputs, name), 7.0))
            other = (
                M.plan(case.replace(seed=case.seed + 1), make_inputs(case, CPU, pad_fill=FINITE_PAD), relation, EmulatedAdapter())
                if relation not in ("determinism", "entry")
                else None
            )
            assert other is None or other.notes != a.notes or relation in ("v_pow2",), relation


@pytest.mark.parametrize("layout", ["dense", "thd"])
def test_relations_keep_the_compile_key(layout):
    """Permutations, isolation, position, V * 2^k and determinism launch the
    first launch's specialization again: the second launch compiles nothing
    (the property also checks the counters on the GPU)."""
    from kernels.prepared import compile_key

    strategy = dense_cases() if layout == "dense" else thd_cases()
    relations = [r for r in (M.DENSE_RELATIONS if layout == "dense" else M.THD_RELATIONS) if M.RELATIONS[r].same_key]

    @settings(max_examples=25, **SETTINGS)
    @given(case=strategy, data=st.data())
    def run(case, data):
        # only a relation that moves the Case plans a second launch (the property refuses the others first)
        moving = [r for r in relations if M.RELATIONS[r].moves(case)]
        assume(moving)
        relation = data.draw(st.sampled_from(moving), label="relation")
        p = M.plan(case, make_inputs(case, CPU, pad_fill=FINITE_PAD), relation)
        assert compile_key(p.case) == compile_key(case), (relation, p.notes)

    run()
    assert not M.RELATIONS["entry"].same_key


def test_entry_skips_what_the_other_entry_point_cannot_express():
    """lse_log2 through the wrapper: no second launch to compare with (a
    Hypothesis rejection in a test, a refusal of scope "case" outside), nothing recorded."""
    from ground.outcome import Unsupported
    from properties import recorder

    class Wrapperish(EmulatedAdapter):
        name = "wrapper"

    recorder.set_test(None)
    with on_cpu(Wrapperish()), pytest.raises(Unsupported, match="lse_log2") as refused:
        check_metamorphic(DENSE.replace(lse_log2=True), EmulatedAdapter(), relation="entry")
    assert refused.value.scope == "case" and refused.value.exit_status == 2
    assert recorder.last_begun() is None


def test_the_matrix_binds_every_relation_per_stratum():
    from ground.tables import STRATA
    from properties.matrix import FAMILIES

    for test, relations in (("test_metamorphic_dense", M.DENSE_RELATIONS), ("test_metamorphic_thd", M.THD_RELATIONS)):
        ids = FAMILIES[test].nodeids()
        assert len(ids) == len(STRATA) * len(relations) and all(any(i.endswith(f"-{r}]") for i in ids) for r in relations)
    for name, rel in M.RELATIONS.items():
        assert rel.exact.strip() and set(rel.layouts) <= {"dense", "thd"}, name


# A dense twin of LONG: bf16, 4,096 keys per row, the pools' flat softmax.
LONG_DENSE = Case(dtype="bfloat16", batch=2, h_q=4, h_kv=2, s_q=8, s_kv=4096, scale=0.03125, seed=0)
# Per relation, a planted bug that the reference comparison at the same shape
# lets through (inside the error model) and the relation catches bit for bit.
BLIND = [
    ("batch_perm", LONG_DENSE, Plant(neighbour_v_min_keys=512), None),
    ("head_perm", LONG_DENSE, Plant(neighbour_head_v_min_keys=512), None),
    ("seq_perm", LONG, NEIGHBOUR, None),
    ("isolation", LONG, NEIGHBOUR, None),
    ("position", Case(layout="thd", q_lens=(16, 16), kv_lens=(200, 300), kv_base=5, seed=1), Plant(absolute_kv_tiles=True), None),
    ("v_pow2", DENSE, Plant(v_offset=2.0**-16), None),
    ("determinism", DENSE, Plant(nondeterministic=True), None),
    ("entry", DENSE, Plant(), EmulatedAdapter(plant=Plant(scale_factor=1 + 2.0**-22))),
]


@pytest.mark.parametrize("relation,case,plant,second", BLIND, ids=[b[0] for b in BLIND])
def test_each_relation_catches_a_bug_the_reference_comparison_lets_through(relation, case, plant, second):
    """The bar: every relation fails on a planted bug whose effect on
    O and LSE sits inside the error model at the very same shape."""
    with on_cpu():
        obs = check_numerics(case, second or EmulatedAdapter(plant=plant))
    assert obs.outcome == "passed" and obs.ratios["o"] < 1
    with pytest.raises(PropertyFailure, match=relation):
        metamorphic(case, relation, plant, second=second)
    metamorphic(case, relation)  # the honest emulation holds the relation at this shape


# Seen on the H200 on the unmodified kernels (a kill-rate control search): fp16,
# scale 0 (O averages V), one O element a subnormal midpoint (-6.10054e-5) that the
# first launch rounds up to -2^-14, fp16's smallest normal, while V * 2^12 keeps
# it exact (-0.249878). The emulation rounds the same way.
SMALLEST_NORMAL = Case(
    layout="thd",
    q_lens=(300, 1),
    kv_lens=(300, 1),
    q_slack=1,
    kv_slack=8,
    h_q=3,
    h_kv=1,
    bottom_right=True,
    window_left=64,
    sinks=True,
    lse_layout="token_major",
    sink_dtype="bfloat16",
    sink_layout="broadcast",
    prefix_dtype="int64",
    scale=0.0,
    seed=0,
)


def test_v_pow2_judges_the_smallest_normal_as_rounded_on_the_subnormal_grid():
    obs = metamorphic(SMALLEST_NORMAL, "v_pow2")
    assert obs.outcome == "passed"


ISOLATION_CASES = [
    (Case(batch=1, s_q=70, s_kv=90), False),  # one entry, no padding: nothing to change
    (Case(batch=1, s_q=70, s_kv=90, seq_q_lens=(70,), seq_kv_lens=(90,)), False),  # lengths at full size: still no padding
    (Case(batch=1, s_q=70, s_kv=90, seq_kv_lens=(64,)), True),  # padded K/V rows
    (Case(batch=2, s_q=70, s_kv=90, seq_q_lens=(0, 0), seq_kv_lens=(90, 90)), False),  # no Q row anywhere: nothing compared
    (DENSE, True),
    (Case(layout="thd", q_lens=(5,), kv_lens=(9,)), False),  # one sequence, a full pack
    (Case(layout="thd", q_lens=(5,), kv_lens=(9,), kv_slack=3), True),  # the capacity past it
    (Case(layout="thd", q_lens=(5, 0), kv_lens=(9, 0)), False),  # the second sequence is empty
    (Case(layout="thd", q_lens=(0, 5), kv_lens=(4, 9)), True),  # the first one's K/V rows
    (THD, True),
]


@pytest.mark.parametrize("case,moves", ISOLATION_CASES)
def test_isolation_changes_inputs_and_compares_outputs(case, moves):
    """Isolation moves a Case exactly when its second launch has other
    inputs and some O element is still compared (from the Case alone); a
    Case it does not move is refused, never judged on nothing."""
    assert M.RELATIONS["isolation"].moves(case) is moves
    if not moves:
        return
    for seed in range(4):
        c = case.replace(seed=seed)
        x1 = make_inputs(c, CPU, poison=True, pad_fill=FINITE_PAD)
        p = M.plan(c, x1, "isolation")
        assert any(not torch.equal(getattr(x1, n), getattr(p.inputs, n)) for n in ("q", "k", "v")), p.notes
        o = torch.zeros(x1.q.shape[:-1] + (c.d_v,))
        lse = torch.zeros(x1.q.shape[:-1]).transpose(-1, -2) if not c.is_thd else torch.zeros(c.h_q, c.t_q)
        _, _, o_where, _ = p.expect(o, lse)
        assert o_where.any(), p.notes
