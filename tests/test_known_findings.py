"""Known findings, the model (ground.findings) on CPU: a finding
excuses exactly the failure it describes, the properties judge every check
of an example, the regions of the padding findings, contract findings
through the real rejection property, run statuses, and the repository's
known_findings.toml against its case files.

(The plugin end to end, strict by default: tests/test_plugin.py. The case
files replayed on a GPU: conformance/test_findings.py.)"""

from __future__ import annotations

import dataclasses
import glob
import json
import pathlib
import re
import time

import pytest
import torch

from ground import data, findings
from ground.case import Case, load_case_file
from ground.contracts import CONFIG, rule
from ground.outcome import PropertyFailure
from ground.tables import TILE_N
from properties import CHECKS, PROPERTIES, check_rejection, judge
from properties.common import finish
from properties.compile_cache import runtime_variants

ROOT = pathlib.Path(__file__).resolve().parents[1]
FILE = findings.load(ROOT / "known_findings.toml", checks=CHECKS)
BY_ID = {f.id: f for f in FILE}
CASE_FILES = sorted(glob.glob(str(ROOT / "findings" / "*.json")))


def _copy(fid: str, **changes) -> findings.Finding:
    """A repository finding under another id: these tests run inside a suite
    run, whose strictness counts the file's ids."""
    return dataclasses.replace(BY_ID[fid], id="test-copy:" + fid, **changes)


def _nan_failure(case: Case, rows: torch.Tensor, quantity: str = "o", check: str = "no nan", prop: str = "tails") -> PropertyFailure:
    """The failure a tails rows check (default: the NaN check) raises when the
    given rows (canonical layout: dense (B, H, S), THD (H, T_q)) of O / LSE
    are wrong."""
    width = {"o": case.d_v, "dq": case.d_qk, "dk": case.d_qk, "dv": case.d_v}  # O and the gradients: an element per head dim
    where = rows[..., None].expand(*rows.shape, width[quantity]) if quantity in width else rows
    return PropertyFailure(prop, case, "NaN", {"quantity": quantity}, check=check, where=where)


def _used_lse(case: Case, n: int) -> torch.Tensor:
    """The cells of a THD head-padded LSE body the (H, T_q) view holds."""
    used = torch.zeros(n, dtype=torch.bool)
    used[(torch.arange(case.h_q)[:, None] * data.thd_lse_pitch(case) + torch.arange(case.t_q)[None, :]).flatten()] = True
    return used


def _rows(case: Case, *coords, space: str = "q") -> torch.Tensor:
    rows = torch.zeros(findings.row_shape(case, space), dtype=torch.bool)
    for c in coords:
        rows[c] = True
    return rows


# --------------------------------------------------------------- the rule
Q_CASE = Case(s_q=6, s_kv=6, batch=2, h_q=2, h_kv=2, seq_q_lens=(4, 6))  # batch 0: rows 4, 5 padded
KV_CASE = Case(s_q=3, s_kv=70, batch=3, seq_kv_lens=(5, 64, 70))  # batch 0: V rows 5..63 loaded past seq_kv_len


def test_a_failure_inside_the_region_is_excused_and_one_row_outside_is_not():
    q = BY_ID["dense-padded-q-rows-nan"]
    padded = findings.REGIONS["padded_q_rows"].rows(Q_CASE)
    assert padded.sum() == 2 * 2 and padded[0, :, 4:].all()
    assert q.excuses(_nan_failure(Q_CASE, padded))
    assert q.excuses(_nan_failure(Q_CASE, _rows(Q_CASE, (0, 1, 5))))  # part of the region is enough
    assert not q.excuses(_nan_failure(Q_CASE, padded | _rows(Q_CASE, (0, 0, 3))))  # the last live row of batch 0
    assert not q.excuses(_nan_failure(Q_CASE, _rows(Q_CASE, (1, 0, 5))))  # batch 1 has no padding
    assert not q.excuses(_nan_failure(Q_CASE, padded, "lse"))  # another quantity
    other_check = _nan_failure(Q_CASE, padded)
    other_check.check = "capacity"
    assert not q.excuses(other_check)
    assert not q.excuses(PropertyFailure("numerics", Q_CASE, "x", {"quantity": "o"}, check="no nan", where=other_check.where))
    flat = PropertyFailure("tails", Q_CASE, "x", {"quantity": "o"}, check="no nan", where=torch.ones(100, dtype=torch.bool))
    assert not q.excuses(flat)  # not a mask over O: nothing to bound


def test_the_kv_region_is_the_live_rows_behind_a_padded_last_kv_tile():
    kv = BY_ID["dense-padded-kv-rows-nan"]
    rows = findings.REGIONS["live_rows_loading_padded_kv"].rows(KV_CASE)
    # Batch 0 (seq_kv_len 5: its last tile holds rows 5..63 of padding) only;
    # batch 1 ends on a tile edge (64), batch 2 is not padded.
    assert rows[0].all() and not rows[1:].any()
    assert kv.excuses(_nan_failure(KV_CASE, rows))
    assert not kv.excuses(_nan_failure(KV_CASE, rows | _rows(KV_CASE, (1, 0, 0))))
    assert not BY_ID["dense-padded-q-rows-nan"].excuses(_nan_failure(KV_CASE, rows))
    for lens, hit in (((0,), False), ((TILE_N - 1,), True), ((TILE_N,), False), ((TILE_N + 1,), True), ((100,), False)):
        case = Case(s_q=2, s_kv=100, seq_kv_lens=lens, seq_q_lens=(1,))
        region = findings.REGIONS["live_rows_loading_padded_kv"].rows(case)
        assert bool(region.any()) is hit, lens
        assert not region[0, :, 1].any()  # a padded Q row is not a live row
    assert not findings.REGIONS["live_rows_loading_padded_kv"].rows(Case(layout="thd", q_lens=(3,), kv_lens=(5,), kv_slack=4)).any()


# The sm90 failure as the H200 showed it: B=2, S_q=65, one live row per entry; every row of the first
# Q tile NaN (the live row and 63 padded ones), the second tile (row 64) written 0.
SM90_KV_CASE = Case(family="sm90", batch=2, s_q=65, s_kv=64, h_q=4, h_kv=2, seq_q_lens=(1, 1), seq_kv_lens=(1, 1))


def test_a_finding_judges_its_own_family_only():
    """An SM80 finding (no ``when.family``) never excuses an sm90 failure, nor the sm90 one an SM80 failure."""
    sm90, sm80 = BY_ID["sm90-dense-padded-kv-rows-nan"], BY_ID["dense-padded-kv-rows-nan"]
    assert sm90.family == "sm90" and sm80.family == "sm80"
    first_tile = _rows(SM90_KV_CASE, (slice(None), slice(None), slice(0, 64)))
    assert sm90.excuses(_nan_failure(SM90_KV_CASE, first_tile))
    live = _rows(SM90_KV_CASE, (slice(None), slice(None), 0))
    assert not sm80.excuses(_nan_failure(SM90_KV_CASE, live)) and not sm80.exercised_by("tails", SM90_KV_CASE)
    sm80_case = SM90_KV_CASE.replace(family="sm80")
    assert not sm90.excuses(_nan_failure(sm80_case, live)) and sm80.excuses(_nan_failure(sm80_case, live))


def test_the_sm90_region_is_every_row_of_the_q_tiles_that_visit_the_padded_kv_tile():
    sm90 = BY_ID["sm90-dense-padded-kv-rows-nan"]
    region = findings.REGIONS["q_tiles_loading_padded_kv"].rows(SM90_KV_CASE)
    assert region[:, :, :64].all() and not region[:, :, 64:].any()  # the second Q tile starts past seq_q_len
    assert not sm90.excuses(_nan_failure(SM90_KV_CASE, _rows(SM90_KV_CASE, (0, 0, 64))))  # a row of a tile that never ran
    # PackGQA: a Q tile holds 64 / ratio tokens (here 32), so the tile past seq_q_len starts at token 32.
    packed = findings.REGIONS["q_tiles_loading_padded_kv"].rows(SM90_KV_CASE.replace(pack_gqa=True))
    assert packed[:, :, :32].all() and not packed[:, :, 32:].any()
    for lens, hit in (((0,), False), ((63,), True), ((64,), False)):  # the last KV tile reaches the padding or not
        assert bool(findings.REGIONS["q_tiles_loading_padded_kv"].rows(SM90_KV_CASE.replace(batch=1, seq_q_lens=(1,), seq_kv_lens=lens)).any()) is hit


def test_exercised_means_the_described_failure_can_occur_on_the_case():
    q = BY_ID["dense-padded-q-rows-nan"]
    assert q.exercised_by("tails", Q_CASE)
    assert not q.exercised_by("tails", Q_CASE.replace(seq_q_lens=(6, 6)))  # no padded row
    assert not q.exercised_by("tails", Case(s_q=6, s_kv=6))
    assert not q.exercised_by("numerics", Q_CASE)
    first = BY_ID["contract:thd_cu_k_missing@wrapper:compiles-first"]
    thd = Case(layout="thd", q_lens=(2,), kv_lens=(2,), violation="thd_cu_k_missing")
    assert first.exercised_by("rejection", thd.replace(d_qk=40, d_v=40), "wrapper")  # off the envelope
    assert not first.exercised_by("rejection", thd, "wrapper")  # 64 x 64: the gptoss envelope
    assert not first.exercised_by("rejection", thd.replace(d_qk=40, d_v=40), "prepared")


# ------------------------------------------------- every check is judged
def test_every_failing_check_of_an_example_is_judged_and_only_the_described_one_excused():
    case = Q_CASE
    o = torch.zeros(case.batch, case.h_q, case.s_q, case.d_v)
    o[0, :, 4:] = float("nan")  # the finding
    lse = torch.zeros(case.batch, case.h_q, case.s_q)
    lse[1, 0, 0] = float("nan")  # something else, in the same example

    def judged():
        for quantity, got in (("o", o), ("lse", lse)):
            nan = torch.isnan(got)
            judge.exactly("tails", case, quantity, nan, torch.zeros_like(nan), torch.ones_like(nan), "live outputs", check="no nan")
        return {}

    with findings.applied([]), pytest.raises(PropertyFailure) as none:
        finish("tails", case, time.perf_counter(), judged)
    assert [f.detail["quantity"] for f in none.value.failures] == ["o", "lse"] and "also failed: no nan: LSE" in none.value.summary

    q = _copy("dense-padded-q-rows-nan")
    with findings.applied([q]), pytest.raises(PropertyFailure) as one:
        finish("tails", case, time.perf_counter(), judged)
    assert [f.detail["quantity"] for f in one.value.failures] == ["lse"] and f"excused: no nan: known finding {q.id}" in one.value.summary
    assert one.value.observation.exercised == [q.id] and one.value.observation.findings == [q.id]

    lse[1, 0, 0] = 0.0
    with findings.applied([q]):
        obs = finish("tails", case, time.perf_counter(), judged)
    assert (obs.outcome, obs.findings) == ("xfailed", [q.id]) and q.id in obs.notes["summary"]


def test_judge_helpers_raise_outside_a_judging():
    nan = torch.ones(2, dtype=torch.bool)
    with pytest.raises(PropertyFailure) as e:
        judge.exactly("tails", Q_CASE, "o", nan, torch.zeros_like(nan), nan, "x", check="no nan")
    assert e.value.check == "no nan" and e.value.where.tolist() == [True, True]


# ---------------------------------------------------- contract findings (CPU)
def test_a_contract_finding_excuses_exactly_its_observed_outcome():
    case = rule("flavor_unknown").transform(Case())
    known = _copy("contract:flavor_unknown@config")
    assert known.observed == "KeyError"
    with findings.applied([known]):
        obs = check_rejection(case, entry=CONFIG)
    assert (obs.outcome, obs.findings, obs.exercised) == ("xfailed", [known.id], [known.id])
    with findings.applied([dataclasses.replace(known, observed="accepted")]), pytest.raises(PropertyFailure) as e:
        check_rejection(case, entry=CONFIG)  # the entry point does something else than the finding says
    assert (e.value.check, e.value.observed) == ("rejects", "KeyError")
    with findings.applied([dataclasses.replace(known, entry="prepared")]), pytest.raises(PropertyFailure):
        check_rejection(case, entry=CONFIG)  # another entry point's finding


def test_an_accepted_contract_finding_and_a_conforming_rule():
    known = _copy("contract:params_tile_m_zero@config")
    with findings.applied([known]):
        assert check_rejection(rule("params_tile_m_zero").transform(Case()), entry=CONFIG).findings == [known.id]
        obs = check_rejection(rule("params_tile_n").transform(Case()), entry=CONFIG)  # a rule the kernels honour
    assert (obs.outcome, obs.exercised) == ("passed", [])


# ---------------------------------------------------------------- statuses
def test_statuses_of_a_run():
    entries = [_copy("dense-padded-q-rows-nan"), _copy("dense-padded-kv-rows-nan"), _copy("contract:flavor_unknown@config")]
    q, kv, flavor = (e.id for e in entries)
    observations = [{"exercised": [q, kv], "findings": [q]}, {"exercised": [kv], "findings": []}, {"exercised": [], "findings": []}]
    got = {s["id"]: s for s in findings.statuses(entries, observations)}
    assert (got[q]["status"], got[q]["exercised"], got[q]["reproduced"]) == ("reproduced", 1, 1)
    assert (got[kv]["status"], got[kv]["exercised"], got[kv]["reproduced"]) == ("stale", 2, 0)
    assert got[flavor]["status"] == "not exercised"
    (message,) = findings.stale(got.values())
    assert message.startswith(f"{entries[1].source}: known finding {kv!r} did not reproduce: 2 example(s)")


# ------------------------------------------------ the repository's findings
def test_the_repository_file_holds_the_padding_and_contract_findings():
    assert {"dense-padded-q-rows-nan", "dense-padded-kv-rows-nan"} <= set(BY_ID)
    contract = [f for f in FILE if f.property == "rejection"]
    assert len(contract) == 19 and all(f.id.startswith(f"contract:{f.rule}@{f.entry}") for f in contract)
    assert all(re.fullmatch(r"known_findings\.toml:\d+", f.source.rsplit("/", 1)[-1]) for f in FILE)


@pytest.mark.parametrize("path", CASE_FILES, ids=[pathlib.Path(p).stem for p in CASE_FILES])
def test_each_case_file_names_a_finding_that_selects_its_case(path):
    case, doc = load_case_file(path)
    named = [doc["finding"]] if isinstance(doc["finding"], str) else doc["finding"]
    for entry in (BY_ID[n] for n in named):
        params, at = doc["params"], doc["params"].get("entry") or doc["adapter"]  # the entry point the example ran against
        assert doc["property"] == entry.property or (entry.crash and entry.property is None)  # a crash finding: every property
        # compile_reuse judges its runtime variants as Cases of their own (a refused variant is its failure)
        judged = [case] + ([v for _, v in runtime_variants(case)] if doc["property"] == "compile_reuse" else [])
        assert any(entry.exercised_by(doc["property"], c, at, params) for c in judged)
        other = "wrapper" if at != "wrapper" else "prepared"
        assert entry.entry is None or not any(entry.exercised_by(doc["property"], c, other, params) for c in judged)  # only its entry point
        assert (
            not entry.exercised_by(doc["property"], case, at, {**params, "initialize_outputs": not params.get("initialize_outputs", True)})
            or "initialize_outputs" not in entry.when
        )  # a mode-specific finding selects only its mode
        if entry.region in findings.STORAGE_REGIONS:  # the storage cells it bounds: excused there, not one cell past
            n = case.h_q * data.thd_lse_pitch(case)
            inside = findings.STORAGE_REGIONS[entry.region].cells(case, n)
            assert entry.excuses(PropertyFailure("tails", case, "x", {"quantity": "lse"}, check=entry.check, where=inside & ~_used_lse(case, n)), params=params)
            past = torch.zeros(n, dtype=torch.bool)
            past[int(inside.sum())] = True
            assert not entry.excuses(PropertyFailure("tails", case, "x", {"quantity": "lse"}, check=entry.check, where=past), params=params)
            continue
        if entry.region is None:
            continue
        region = findings.REGIONS[entry.region].rows(case)
        failure = _nan_failure(case, region, entry.quantity, entry.check, entry.property)
        assert entry.excuses(failure, params=params)  # all of its region's rows failing is what it describes
        others = [f for f in FILE if f is not entry and f.excuses(failure, params=params)]
        assert others == []  # and no other finding describes it


def test_the_checks_the_properties_report_are_the_vocabulary_findings_select():
    used = set()
    for path in (ROOT / "properties").glob("*.py"):
        used |= set(re.findall(r'check="([^"]+)"', path.read_text()))
    declared = {c for prop in PROPERTIES.values() for c in prop.checks}
    assert used <= declared and {"no nan", "rejects", "compiles nothing"} <= used
    # The vocabulary findings are validated against is the union of the properties' own checks.
    assert dict(CHECKS) == {name: prop.checks for name, prop in PROPERTIES.items()}
    assert all(f.property in PROPERTIES and (f.crash or f.check in PROPERTIES[f.property].checks) for f in FILE if f.property)


# ------------------------------------------------------- crash findings
CRASH_ID = "wrapper-rope-table-overread"
CRASH_FILE = ROOT / "findings" / f"{CRASH_ID}.json"


def _crash_entry(**changes) -> dict:
    entry = {"id": "c", "reason": "r", "check": "crash", "entry": "wrapper", "when": {"rope": True, "rope_table_overread": True}, "steer": {"rope": False}}
    entry.update(changes)
    return {k: v for k, v in entry.items() if v is not None}


def test_the_crash_entry_parses_and_selects_its_case_file_on_its_entry_point_only():
    crash = BY_ID[CRASH_ID]
    assert crash.crash and (crash.check, crash.entry, crash.property) == ("crash", "wrapper", None)
    assert dict(crash.when) == {"rope": True, "rope_table_overread": True} and dict(crash.steer) == {"rope": False}
    assert "drawn instead: rope=False" in crash.describe() and crash.to_dict()["steer"] == {"rope": False}
    case, doc = load_case_file(CRASH_FILE)
    assert doc["finding"] == CRASH_ID and doc["adapter"] == "wrapper" and doc["sm80_compat"] is True
    assert findings.DERIVED["rope_table_overread"][0](case)  # S_q 129 (Q tiles read 256 rows), S_kv 63: a table of 129 rows
    for prop in ("metamorphic", "numerics", "tails"):  # no property: every property that launches the wrapper
        assert crash.selects(prop, case, "wrapper", doc["params"])
        assert not crash.selects(prop, case, "prepared", doc["params"])


@pytest.mark.parametrize(
    "s_q, s_kv, over",
    [(129, 63, True), (128, 64, False), (128, 63, False), (64, 63, True), (1, 1, True), (256, 200, False), (200, 256, False), (130, 190, True)],
)
def test_the_overread_is_the_tiles_reach_past_the_table(s_q, s_kv, over):
    case = Case(s_q=s_q, s_kv=s_kv, rope=True)
    assert findings.rope_table_overread(case) is over
    assert not findings.rope_table_overread(case.replace(rope=False))


def test_steering_moves_exactly_the_region():
    crash = BY_ID[CRASH_ID]
    case, doc = load_case_file(CRASH_FILE)
    got, by = findings.steer(doc["property"], case, ("wrapper",), doc["params"], entries=[crash])
    assert got == case.replace(rope=False) and by == [crash] and not crash.selects(doc["property"], got, "wrapper")
    assert got.structural_problem() is None
    for outside in (case.replace(s_q=128, s_kv=64), case.replace(rope=False), case.replace(s_q=128)):
        assert findings.steer("numerics", outside, ("wrapper",), entries=[crash]) == (outside, [])
    assert findings.steer("numerics", case, ("prepared",), entries=[crash]) == (case, [])  # another entry point: as drawn
    assert findings.steer("numerics", case, ("prepared", "wrapper"), entries=[crash])[0] == got  # the entry relation launches both
    with findings.applied([crash]):  # the findings in force by default
        assert findings.steer("tails", case, ("wrapper",))[0] == got
    with findings.applied([]):
        assert findings.steer("tails", case, ("wrapper",)) == (case, [])


def test_a_crash_finding_excuses_nothing_and_is_never_stale_in_a_run():
    crash = _copy(CRASH_ID)
    case, doc = load_case_file(CRASH_FILE)
    failure = PropertyFailure("metamorphic", case, "x", {}, check="o")
    verdict = findings.judge("metamorphic", case, [failure], entry="wrapper", params=doc["params"], entries=[crash])
    assert verdict.unexcused == [failure] and verdict.exercised == []
    got = {s["id"]: s for s in findings.statuses([crash], [{"exercised": [crash.id], "findings": []}], {crash.id: 7})}
    assert (got[crash.id]["status"], got[crash.id]["steered"]) == (findings.STEERED, 7)
    assert findings.statuses([crash], [])[0]["status"] == findings.NOT_EXERCISED and findings.stale(findings.statuses([crash], [])) == []


def test_the_matrix_steers_a_drawn_case_and_the_report_counts_it(tmp_path):
    """testgen.drawn through a family whose strategy draws the case file's
    Case: under the wrapper it is steered (a Hypothesis event and a
    ``steered`` record), under the prepared adapter it is served as drawn;
    the report lists the crash finding with the count."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from conformance import testgen
    from properties import recorder
    from properties.matrix import Family
    from reports import summary

    crash = _copy(CRASH_ID)
    case, _ = load_case_file(CRASH_FILE)
    fam = Family("test_rope", "conformance/test_numerics.py", "numerics", "numerics", (), (), lambda **_: st.just(case))
    got = []

    class StandIn:
        def __init__(self, name):
            self.name = name

    def run(name):
        given(st.data())(settings(max_examples=3, database=None)(lambda data: got.append(testgen.drawn(fam, {}, data, StandIn(name)))))()

    shard = tmp_path / "main-1.jsonl"
    previous = recorder.open_shard(str(shard))
    try:
        recorder.set_test("conformance/test_numerics.py::test_rope")
        with findings.applied([crash]):
            run("wrapper")
            assert set(got) == {case.replace(rope=False)}
            got.clear()
            run("prepared")
            assert set(got) == {case}
        recorder.set_test(None)
    finally:
        recorder.close_shard(previous)
    records = [json.loads(line) for line in shard.read_text().splitlines()]
    steered = [r for r in records if r["kind"] == "steered"]
    assert steered and {r["finding"] for r in steered} == {crash.id} and all(r["entries"] == ["wrapper"] for r in steered)
    records += [
        {"kind": "collected", "tests": {"conformance/test_numerics.py::test_rope": "numerics"}},
        {"kind": "session", "findings": [crash.to_dict()], "findings_file": "known_findings.toml"},
    ]
    entry = summary.merge(records)["findings"]["entries"][0]
    assert (entry["id"], entry["status"], entry["steered"]) == (crash.id, findings.STEERED, len(steered))


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"steer": {"ropee": False}}, "key 'steer': 'ropee' is not a Case field"),
        ({"steer": {"rope": True}}, "key 'steer': rope = True does not leave the region"),
        ({"steer": {"s_q": 128}}, "does not leave the region: a steer must set a Case fact that 'when' names \\(rope\\)"),
        ({"steer": {"rope": "no"}}, "key 'steer': case field 'rope': expected true/false"),
        ({"steer": {"rope": False, "lse_log2": True}}, "key 'steer': lse_log2 = True: the wrapper adapter cannot express it"),
        ({"steer": None}, "key 'steer' is required for a crash finding"),
        ({"steer": {}}, "key 'steer' is required for a crash finding"),
        ({"when": None}, "key 'when' is required for a crash finding"),
        ({"entry": None}, "key 'entry' is required"),
        ({"entry": "config"}, "key 'entry': 'config' is not one of prepared, wrapper"),
        ({"region": "padded_q_rows"}, "key 'region': a crash finding has no region"),
        ({"observed": "accepted"}, "key 'observed': a crash finding has no observed"),
        ({"property": "numeric"}, "key 'property': 'numeric' is not one of"),
        ({"stear": {"rope": False}}, "unknown key 'stear'"),
    ],
)
def test_a_malformed_crash_entry_is_refused(changes, message):
    with pytest.raises(findings.FindingsError, match=message):
        findings.parse({"finding": [_crash_entry(**changes)]}, "kf.toml", [4], checks=CHECKS)


def test_only_a_crash_finding_steers():
    entry = {"id": "x", "reason": "r", "property": "tails", "check": "no nan", "quantity": "o", "region": "padded_q_rows", "steer": {"rope": False}}
    with pytest.raises(findings.FindingsError, match="key 'steer': only a crash finding"):
        findings.parse({"finding": [entry]}, "kf.toml", [4], checks=CHECKS)
    assert findings.parse({"finding": [_crash_entry(property="metamorphic")]}, checks=CHECKS)[0].property == "metamorphic"


def test_a_steer_into_an_invalid_case_is_refused_when_it_steers():
    crash = findings.parse({"finding": [_crash_entry(when={"sinks": True}, steer={"sinks": False})]}, "kf.toml", [4], checks=CHECKS)[0]
    case = Case(s_q=4, s_kv=4, sinks=True, sink_layout="broadcast")  # a sink layout needs sinks
    with pytest.raises(findings.FindingsError, match="kf.toml:4: finding 'c': key 'steer': steering .* gives an invalid Case"):
        findings.steer("numerics", case, ("wrapper",), entries=[crash])


RACE = {
    "id": "r",
    "reason": "unordered atomics",
    "property": "determinism",
    "check": "bitwise",
    "quantity": "dsink",
    "when": {"deterministic": True, "dsink_unordered_sum": True},
    "race": True,
}


def test_a_race_that_happened_to_agree_is_not_stale_but_its_twin_without_race_is():
    race = findings.parse({"finding": [RACE]}, checks=CHECKS)[0]
    plain = findings.parse({"finding": [{**RACE, "race": False}]}, checks=CHECKS)[0]
    obs = [{"exercised": ["r"], "findings": []}]
    assert [s["status"] for s in findings.statuses([race], obs)] == [findings.RACE_UNSEEN]
    assert [s["status"] for s in findings.statuses([plain], obs)] == [findings.STALE]
    assert [s["status"] for s in findings.statuses([race], [{"exercised": ["r"], "findings": ["r"]}])] == [findings.REPRODUCED]


def test_only_a_plain_check_describes_a_race():
    bad = {"id": "x", "reason": "r", "property": "numerics", "check": "error model", "quantity": "o", "region": "padded_q_rows", "race": True}
    with pytest.raises(findings.FindingsError, match="race"):
        findings.parse({"finding": [bad]}, checks=CHECKS)
    with pytest.raises(findings.FindingsError, match="race"):
        findings.parse({"finding": [{**RACE, "race": "yes"}]}, checks=CHECKS)


def test_the_dsink_sum_is_unordered_from_three_row_groups():
    f = findings.DERIVED["dsink_unordered_sum"][0]
    thd = Case(layout="thd", q_lens=(1, 16, 0, 1), kv_lens=(63, 2, 65, 1), h_q=8, h_kv=2, sinks=True, direction="bwd", deterministic=True)
    assert f(thd) and not f(thd.replace(q_lens=(1, 0, 0, 1))) and not f(thd.replace(sinks=False))
    assert f(Case(batch=3, sinks=True)) and not f(Case(batch=2, sinks=True))


def test_a_gradient_finding_is_exercised_only_by_cases_that_have_the_gradient():
    """The padded-K/V dBias finding selects every padded backward Case, but
    only one with a bias has a dBias that can fail: a run whose padded Cases
    drew no bias must not call it stale (its dK twin stays exercised)."""
    entries = {f.id: f for f in findings.load(str(ROOT / "known_findings.toml"), checks=CHECKS)}
    dbias, dk = entries["bwd-dense-padded-kv-nan-dbias"], entries["bwd-dense-padded-kv-nan-dk-rows"]
    padded = Case(batch=2, s_q=4, s_kv=8, seq_q_lens=(4, 4), seq_kv_lens=(3, 8), direction="bwd")
    with_bias = dataclasses.replace(padded, bias="float16")
    assert dk.exercised_by("backward_tails", padded) and dk.exercised_by("backward_tails", with_bias)
    assert dbias.selects("backward_tails", padded) and not dbias.exercised_by("backward_tails", padded)
    assert dbias.exercised_by("backward_tails", with_bias)
    # a run whose only padded example had no bias: the dK twin reproduced, the dBias one is not stale
    verdict = findings.judge("backward_tails", padded, [], entries=[dbias, dk])
    run = [{"exercised": verdict.exercised, "findings": [dk.id]}]
    status = {e["id"]: e["status"] for e in findings.statuses([dbias, dk], run)}
    assert status == {dbias.id: findings.NOT_EXERCISED, dk.id: findings.REPRODUCED}


# ------------------------------------- the backward's NaN leaks, bounded
PADDED_BWD = Case(batch=2, h_q=2, h_kv=1, s_q=70, s_kv=90, seq_q_lens=(70, 40), seq_kv_lens=(90, 50), direction="bwd", seed=3)


def _dq_failure(case: Case, rows: torch.Tensor) -> PropertyFailure:
    return _nan_failure(case, rows, "dq", "no nan", "backward_tails")


def test_the_dq_leak_is_excused_in_the_padded_entrys_live_rows_only():
    """bwd-dense-padded-kv-nan-dq bounds the NaN to the live dQ rows of the
    batch entries whose K/V are padded: entry 1 (50 < 90 keys) here; a NaN
    in entry 0 (no padding) or in entry 1's padded rows is another failure."""
    entry = BY_ID["bwd-dense-padded-kv-nan-dq"]
    assert entry.exercised_by("backward_tails", PADDED_BWD, "prepared", {})
    live_1 = _rows(PADDED_BWD, (1, slice(None), slice(0, 40)))
    assert entry.excuses(_dq_failure(PADDED_BWD, live_1))
    assert not entry.excuses(_dq_failure(PADDED_BWD, _rows(PADDED_BWD, (0, 0, 5))))  # an entry without padded K/V
    assert not entry.excuses(_dq_failure(PADDED_BWD, _rows(PADDED_BWD, (1, 0, 45))))  # a padded Q row: not a live one


def test_a_nan_leak_finding_excuses_nan_elements_only():
    """The capacity findings of the padded-K/V leak (dK rows, dBias cells)
    excuse a failure whose wrong elements are all NaN, as their reason says,
    and not a finite wrong value in the same storage; judge.exactly says which."""
    where = torch.zeros(2, 1, 90, 64, dtype=torch.bool)
    where[1, 0, 60] = True
    for value, excused in ((float("nan"), True), (3.0, False)):
        got = torch.zeros(2, 1, 90, 64)
        got[where] = value
        with pytest.raises(PropertyFailure) as failed:
            judge.exactly("backward_tails", PADDED_BWD, "dk", got, torch.zeros_like(got), where, "dk padded rows", check="capacity")
        assert failed.value.detail["nan_only"] is excused
        assert BY_ID["bwd-dense-padded-kv-nan-dk-rows"].excuses(failed.value) is excused


@pytest.mark.parametrize(
    "extra,message",
    [
        ({"check": "launch", "observed": "ValueError", "quantity": "dq", "nan": True}, "key 'nan'"),
        ({"check": "no nan", "quantity": "dk", "region": "live_rows_of_padded_kv_entries"}, "key 'region'"),
        ({"check": "no nan", "quantity": "dq", "nan": "yes"}, "key 'nan' must be true or false"),
        # "no nan" judges a NaN mask: its failures are NaN by definition and nan_only never holds (excuses nothing)
        ({"check": "no nan", "quantity": "dbias", "nan": True}, "key 'nan': check 'no nan'"),
    ],
)
def test_gradient_bounds_are_refused_where_they_mean_nothing(extra, message):
    entry = {"id": "x", "reason": "r", "property": "backward_tails", "when": {"kv_padded": True}, **extra}
    with pytest.raises(findings.FindingsError, match=message):
        findings.parse({"finding": [entry]}, checks=CHECKS)


def test_the_empty_q_entry_leak_is_excused_in_that_entrys_dk_rows_only():
    """bwd-dense-empty-q-entry-nan-dk bounds the NaN to the live dK rows of
    the entries with no Q row (K/V rows, the region's space "kv"); a NaN dK
    row of an entry with queries is another failure."""
    case = Case(batch=2, h_q=2, h_kv=1, s_q=20, s_kv=30, seq_q_lens=(0, 20), seq_kv_lens=(25, 30), direction="bwd", seed=1)
    entry = BY_ID["bwd-dense-empty-q-entry-nan-dk"]
    assert entry.exercised_by("backward_tails", case, "prepared", {})

    def dk_failure(rows):
        return _nan_failure(case, rows, "dk", "no nan", "backward_tails")

    kv_rows = lambda *coords: _rows(case, *coords, space="kv")  # noqa: E731
    assert entry.excuses(dk_failure(kv_rows((0, 0, slice(0, 25)))))
    assert not entry.excuses(dk_failure(kv_rows((1, 0, 3))))  # the entry with queries
    assert not entry.excuses(dk_failure(kv_rows((0, 0, 27))))  # a padded K row of the empty entry


def test_a_region_holds_the_rows_of_its_quantity_only():
    entry = {"id": "x", "reason": "r", "property": "backward_tails", "check": "no nan", "when": {"kv_padded": True}}
    with pytest.raises(findings.FindingsError, match="holds KV rows, not the rows of 'dq'"):
        findings.parse({"finding": [{**entry, "quantity": "dq", "region": "kv_rows_of_empty_q_entries"}]}, checks=CHECKS)
    with pytest.raises(findings.FindingsError, match="holds Q rows, not the rows of 'dv'"):
        findings.parse({"finding": [{**entry, "quantity": "dv", "region": "live_rows_of_padded_kv_entries"}]}, checks=CHECKS)


@pytest.mark.parametrize(
    "fid,q,kv,bias_batch,selected",
    [
        # padded keys: the NaN at an entry's keys past its length reaches a cell only a longer entry with a Q row makes live
        ("bwd-dense-padded-kv-nan-dbias-broadcast", (1, 1), (1, 2), 1, True),
        ("bwd-dense-padded-kv-nan-dbias-broadcast", (1, 1, 1), (1, 1, 1), 1, False),  # equal lengths: every NaN cell dead
        ("bwd-dense-padded-kv-nan-dbias-broadcast", (1, 0), (1, 2), 1, False),  # the longer entry has no Q row
        ("bwd-dense-padded-kv-nan-dbias-broadcast", (1, 1), (1, 2), 2, False),  # a per-batch bias: cells of its own
        # an entry with no Q row: its NaN at row 0 reaches cell (0, 0) when another entry has a Q row and a key
        ("bwd-dense-empty-q-entry-nan-dbias-broadcast", (0, 1), (1, 1), 1, True),
        ("bwd-dense-empty-q-entry-nan-dbias-broadcast", (0, 0), (1, 1), 1, False),  # no live cell at all
        ("bwd-dense-empty-q-entry-nan-dbias-broadcast", (0, 1), (1, 0), 1, False),  # the entry with a Q row has no key
        ("bwd-dense-empty-q-entry-nan-dbias-broadcast", (0, 1), (1, 1), 2, False),
        # its dead cells: its own under a per-batch bias; under a broadcast one, past every Q-row entry's length
        ("bwd-dense-empty-q-entry-nan-dbias", (0,), (1,), 1, True),
        ("bwd-dense-empty-q-entry-nan-dbias", (0, 1), (1, 1), 2, True),
        ("bwd-dense-empty-q-entry-nan-dbias", (0, 1), (1, 1), 1, False),  # cell (0, 0) is live for entry 1
        ("bwd-dense-empty-q-entry-nan-dbias", (0, 1), (2, 1), 1, True),  # cell (0, 1) is dead for both
        ("bwd-dense-empty-q-entry-nan-dbias", (0, 0), (1, 1), 1, True),
        ("bwd-dense-empty-q-entry-nan-dbias", (0, 1), (0, 1), 2, False),  # no key in the empty entry
    ],
)
def test_a_dbias_leak_is_selected_where_its_nan_cell_is_what_it_describes(fid, q, kv, bias_batch, selected):
    """The two leaks under a bias broadcast over the batch fail "no nan" only
    where a NaN cell of one entry is live for another, the empty entry's
    "capacity" only where its NaN cell is dead for every entry: a finding
    selecting a Case where that cannot happen would go stale on correct
    kernels (a ci draw of three equal lengths did)."""
    case = Case(batch=len(q), s_q=1, s_kv=max(kv), seq_q_lens=q, seq_kv_lens=kv, bias="float16", bias_batch=bias_batch, direction="bwd")
    assert BY_ID[fid].exercised_by("backward_tails", case, "prepared", {"initialize_outputs": True}) is selected


def test_a_finding_an_earlier_one_covers_is_not_exercised_where_both_select():
    """A ci draw (two entries, seq_q_lens (0, 5), keys padded in both, a
    per-batch bias) is selected by both dBias NaN findings: the padded-K/V one
    comes first in the file and describes every failure the empty-Q-entry one
    does (capacity, dBias, NaN only), so it takes the credit for the NaN cells
    and the example cannot show the second. Counting it exercised made the
    second stale on the unmodified kernels (an H100 ci gate). The case file
    of the second (no padded key) exercises it alone."""
    padded, empty = BY_ID["bwd-dense-padded-kv-nan-dbias"], BY_ID["bwd-dense-empty-q-entry-nan-dbias"]
    assert padded.covers(empty) and not empty.covers(BY_ID["bwd-dense-empty-q-entry-nan-dk"])
    case = Case(batch=2, s_q=64, s_kv=128, seq_q_lens=(0, 5), seq_kv_lens=(43, 12), bias="float16", bias_batch=2, direction="bwd")
    params = {"initialize_outputs": True}
    assert padded.selects("backward_tails", case, "prepared", params) and empty.exercised_by("backward_tails", case, "prepared", params)
    where = torch.zeros(2, 2, 64, 128, dtype=torch.bool)
    where[0, :, 0, :43] = True  # the empty entry's row 0 under its keys
    got = torch.where(where, torch.tensor(float("nan")), torch.tensor(0.0))
    with pytest.raises(PropertyFailure) as failed:
        judge.exactly("backward_tails", case, "dbias", got, torch.zeros_like(got), where, "dbias dead cells", check="capacity")
    assert empty.excuses(failed.value, "prepared", params)  # it does describe the failure, as the earlier one does
    for failures in ([failed.value], []):  # the kernel as it is; one with the empty entry's read mended
        verdict = findings.judge("backward_tails", case, failures, entry="prepared", params=params, entries=[padded, empty])
        assert verdict.exercised == [padded.id]
        assert [f.id for _, f in verdict.excused] == [padded.id] * len(failures)
    run = [{"exercised": verdict.exercised, "findings": []}]
    status = {e["id"]: e["status"] for e in findings.statuses([padded, empty], run)}
    assert status[empty.id] == findings.NOT_EXERCISED
    (own,) = [p for p in CASE_FILES if p.endswith("/bwd-dense-empty-q-entry-nan-dbias.json")]
    own_case, doc = load_case_file(own)
    verdict = findings.judge("backward_tails", own_case, [], entry=doc["adapter"], params=doc["params"], entries=[padded, empty])
    assert verdict.exercised == [empty.id]


@pytest.mark.parametrize(
    "wide,narrow,covers",
    [
        ({}, {"region": "padded_q_rows"}, True),  # any rows covers a region
        ({"region": "padded_q_rows"}, {}, False),
        ({"region": "padded_q_rows"}, {"region": "padded_q_rows"}, True),
        ({"quantity": None}, {"quantity": "lse"}, True),
        ({"quantity": "lse"}, {}, False),  # the base is about O
        ({"check": "capacity"}, {}, False),
        ({}, {"nan": True}, True),
        ({"nan": True}, {}, False),
        ({"observed": "accepted"}, {"observed": "accepted"}, True),
        ({"observed": "accepted"}, {"observed": "ValueError"}, False),
        ({"region": "padded_q_rows"}, {"observed": "accepted"}, False),  # an outcome finding is not bounded by rows
    ],
)
def test_covers_reads_a_description_as_excuses_does(wide, narrow, covers):
    base = findings.Finding(id="x", reason="r", property="tails", check="no nan", quantity="o")
    assert dataclasses.replace(base, **wide).covers(dataclasses.replace(base, id="y", **narrow)) is covers
