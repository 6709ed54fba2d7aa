"""The kill harness on the sm90 family, on the CPU with stand-in properties
(as tests/test_mutants.py does for the SM80 family): the sm90 kinds draw
their example counts (counts, not time) from strategies.sm90, a mutant the
stand-in fails is killed and one it passes survives, the sm90 control must
survive, each family's mutants search only its own kinds, and the table and
exit status carry both controls. Compile tier: a planted sm90 mutant reaches
the property through ``Sm90Adapter(rewrites)`` (its compile asks for keys the
pristine kernels never do). What a Hopper GPU would judge is unverified here."""

from __future__ import annotations

import pytest

from conformance.kill import catalogue as C
from conformance.kill import cli as CLI
from conformance.kill import kinds as K
from conformance.kill import search as S
from conformance.kill import tally as T
from conformance.kill_sm90 import PENDING, SM90_KINDS, hopper_refusal
from ground.case import Case
from ground.outcome import Observation, PropertyFailure
from kernels.mutants import SM90_MUTANTS, Mutant
from kernels.sm90.adapter import Sm90Adapter
from kernels.source import Rewrite
from strategies.sm90_large import S_KV

BY_NAME = {m.name: m for m in SM90_MUTANTS}
NUMERICS = BY_NAME["sm90_lse_in_log2_units"]  # expected killer sm90_numerics_dense
TAILS = BY_NAME["sm90_o_store_past_d_v"]  # expected killer sm90_tails_dense
SM90_KIND_NAMES = [k.name for k in SM90_KINDS]


def _checked(seen, fails=lambda kind, case, adapter: False):
    """A stand-in property: records (kind, Case, adapter) and fails where ``fails`` says."""

    def check(kind, case, adapter):
        seen.append((kind.name, case, adapter))
        if fails(kind, case, adapter):
            raise PropertyFailure(kind.property, case, "planted")
        return Observation(kind.property, case, ratios={"o": 0.5})

    return check


LARGE = "sm90_numerics_large_offsets"


def test_each_sm90_mutant_searches_the_sm90_kinds_only():
    """Its own family's kinds; the large tier's (gigabytes per example) only
    for the mutant that names it and for the control."""
    assert SM90_KIND_NAMES == ["sm90_numerics_dense", "sm90_numerics_thd", "sm90_tails_dense", "sm90_compile_reuse_dense", LARGE]
    assert set(SM90_KIND_NAMES) <= set(K.KIND_NAMES) and not set(PENDING) & set(K.KIND_NAMES)
    for m in SM90_MUTANTS:
        kinds = [k.name for k in K.searched(m)]
        assert sorted(kinds) == sorted(n for n in SM90_KIND_NAMES if n != LARGE or m.expected_killer == LARGE), (m.name, kinds)
        assert kinds[0] == m.expected_killer, (m.name, kinds)
    assert [k.name for k in K.searched(C.CONTROL_SM90)] == SM90_KIND_NAMES
    assert not set(SM90_KIND_NAMES) & {k.name for k in K.searched(C.CONTROL)}  # the SM80 control: its own kernels
    assert [k.name for k in K.searched(NUMERICS, ["numerics_dense"], explicit=True)] == []  # the other family's kinds, even named
    assert [k.name for k in K.searched(BY_NAME["sm90_thd_kv_origin_from_q"])][0] == "sm90_numerics_thd"
    assert BY_NAME["sm90_batch_stride_int32"].expected_killer == LARGE and not PENDING  # every expected killer runs


def test_sm90_kinds_draw_their_counts_and_the_control_survives():
    """Every sm90 kind draws its planned count (one search: the pytest test is
    one test over both dtypes) of sm90 Cases, on the adapter the harness built
    for the mutant: an Sm90Adapter holding the mutant's rewrites."""
    seen = []
    rec = S.run_mutant(C.CONTROL_SM90, check=_checked(seen), profile="ci")
    assert rec["verdict"] == "survived" and rec["complete"] and rec["family"] == "sm90"
    planned = {k.name: S.planned_examples("ci", k) for k in SM90_KINDS}
    # ci: 40 x KIND_SCALE numerics 1.0, tails 0.5, compile_reuse 0.25 (test_sm90_runtime_facts_mint_no_compile's 10),
    # large 0.1 (the SM80 numerics_large_offsets' count)
    assert planned == {"sm90_numerics_dense": 40, "sm90_numerics_thd": 40, "sm90_tails_dense": 20, "sm90_compile_reuse_dense": 10, LARGE: 4}
    assert planned[LARGE] == S.planned_examples("ci", K.KINDS[K.KIND_NAMES.index("numerics_large_offsets")])
    assert [(k["name"], k["examples"], k["planned"], k["strata"]) for k in rec["kinds"]] == [(n, planned[n], planned[n], 1) for n in SM90_KIND_NAMES]
    assert len(seen) == sum(planned.values())
    assert all(c.family == "sm90" and c.is_thd == (k == "sm90_numerics_thd") and isinstance(a, Sm90Adapter) and a.rewrites == () for k, c, a in seen)
    assert {c.dtype for _, c, _ in seen} == {"float16", "bfloat16"}  # one search over both dtypes, as the test draws
    assert {k for k, c, _ in seen if c.s_kv == S_KV} == {LARGE} and sum(k == LARGE for k, _, _ in seen) == 4  # the large tier's Cases
    seen.clear()
    assert S.run_mutant(TAILS, check=_checked(seen), profile="ci")["verdict"] == "survived"
    assert {a.rewrites for _, _, a in seen} == {TAILS.rewrites} and seen[0][0] == "sm90_tails_dense"  # its expected killer first


def test_a_failing_sm90_mutant_is_killed_and_shrunk():
    """The stand-in fails only where the adapter carries rewrites and the Case
    pads D_V under 512 columns: the mutant dies by its expected killer on a
    shrunk sm90 Case, the control (the same stand-in, no rewrites) survives."""
    fails = lambda kind, case, adapter: bool(adapter.rewrites) and kind.name == "sm90_tails_dense" and case.d_v < 512  # noqa: E731
    rec = S.run_mutant(TAILS, check=_checked([], fails), profile="ci")
    assert rec["verdict"] == "killed" and rec["killed_by"] == TAILS.expected_killer == "sm90_tails_dense" and rec["property"] == "tails"
    shrunk = Case.from_dict(rec["case"])
    assert shrunk.family == "sm90" and (shrunk.batch, shrunk.h_q, shrunk.d_v, shrunk.dtype) == (1, 1, 64, "float16")
    assert rec["kinds"] == [{**rec["kinds"][0], "name": "sm90_tails_dense", "failed": True}]
    control = S.run_mutant(C.CONTROL_SM90, check=_checked([], fails), profile="ci")
    assert control["verdict"] == "survived" and T.controls_problem([control]) is None


def test_a_stale_sm90_mutant_is_stale():
    """Sm90Adapter applies rewrites only when it compiles: the harness checks them first."""
    stale = Mutant("stale90", "scheduler", (Rewrite("sm90", "not in prefill_d512_f16", "x"),), "sm90_numerics_dense", "w", family="sm90")
    rec = S.run_mutant(stale, check=_checked([]), profile="dev")
    assert rec["verdict"] == "stale" and "expected exactly once" in rec["error"] and rec["kinds"] == []


def test_the_table_and_exit_status_carry_both_controls():
    seen, fails = [], (lambda kind, case, adapter: bool(adapter.rewrites))
    sm90 = [S.run_mutant(m, check=_checked(seen, fails), profile="dev") for m in (NUMERICS, TAILS)]
    control_sm90 = S.run_mutant(C.CONTROL_SM90, check=_checked(seen), profile="dev")
    sm80 = {"name": "a", "family": "sm80", "bug_class": "bias", "targets": ["f16"], "verdict": "survived", "expected_killer": "numerics_dense"}
    control = {**sm80, "name": "control", "bug_class": "control"}
    mutants = sm90 + [sm80]
    doc = {
        "run": dict(profile="dev", examples_scale=1.0, budget_s=3600, jobs=2, goal=0.9, wall_s=1, gpu=None, mode=None),
        "control": control,
        "controls": [control, control_sm90],
        "mutants": mutants,
        "tally": T.tally(mutants),
        "tally_by_family": {f: T.tally([r for r in mutants if r["family"] == f]) for f in ("sm80", "sm90")},
    }
    md = T.render_markdown(doc)
    drew = ", ".join(f"{k.name} {n}/{n}" for k in SM90_KINDS for n in [S.planned_examples("dev", k)])
    assert f"| control_sm90 | control | - | survived | - | - | - | - | - | {drew} |" in md and "sm90_compile_reuse_dense 2/2" in drew
    assert "| sm90_lse_in_log2_units | lse_units | sm90_common | killed | sm90_numerics_dense | sm90_numerics_dense |" in md
    assert "- sm90: kill rate: 100% = (killed 2 + error 0)" in md and "- sm80: kill rate: 0% = (killed 0 + error 0)" in md and "INVALID" not in md
    assert T.exit_code(doc["tally"], doc["controls"], goal=0.5) == 0
    doc["controls"][1] = {**control_sm90, "verdict": "killed", "killed_by": "sm90_tails_dense", "summary": "NaN"}
    assert T.controls_problem(doc["controls"]).startswith("control_sm90: the control (no rewrites) failed sm90_tails_dense")
    assert T.exit_code(doc["tally"], doc["controls"], goal=0.0) == 1 and "**INVALID RUN**: control_sm90:" in T.render_markdown(doc)


def _main(argv, capsys):
    code = CLI.main(CLI.parser().parse_args(argv))
    return code, capsys.readouterr()


def test_family_selects_the_catalogues(capsys):
    """--list lists every family by default, --family one; a run defaults to
    the SM80 catalogue (its control alone); sm90 and all add the sm90 one."""
    code, out = _main(["--list", "--family", "sm90"], capsys)
    assert code == 0 and f"{len(SM90_MUTANTS)} mutants, 0 stale" in out.out and "killer not runnable yet" not in out.out
    args = lambda *a: CLI._validate(CLI.parser().parse_args(list(a)))  # noqa: E731
    assert [c.name for c in args()["controls"]] == ["control"] and all(m.family == "sm80" for m in args()["mutants"])
    v = args("--family", "all", "--only", "sm90_lse_in_log2_units,lse_in_log2_units")
    assert [c.name for c in v["controls"]] == ["control", "control_sm90"] and [m.name for m in v["mutants"]] == ["lse_in_log2_units", "sm90_lse_in_log2_units"]
    assert [m.name for m in args("--family", "sm90")["mutants"]] == [m.name for m in SM90_MUTANTS]


@pytest.mark.parametrize(
    "capability, why",
    [((8, 0), "this GPU is SM 8.0"), ((10, 0), "this GPU is SM 10.0"), ((9, 0), None)],
)
def test_sm90_runs_on_hopper_only(capability, why, capsys, monkeypatch):
    """--family sm90 on a GPU that is not SM 9.0 exits 2 naming Hopper (a
    stand-in torch.cuda); on SM 9.0 the run starts (stopped here where it
    first reads the environment)."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: capability)
    from kernels import environment

    class Started(Exception):
        """Past the gate: the run reads the environment first."""

    monkeypatch.setattr(environment, "detect", lambda: (_ for _ in ()).throw(Started()))
    if why is None:
        with pytest.raises(Started):
            _main(["--family", "sm90"], capsys)
    else:
        code, out = _main(["--family", "sm90"], capsys)
        assert code == 2 and why in out.err and "Hopper GPU (SM 9.0)" in out.err


# ------------------------------------------------------------ compile tier
@pytest.mark.compile
def test_a_planted_sm90_mutant_reaches_the_property_through_its_kernel():
    """The adapter the harness hands the property compiles the rewritten
    sources: on the first Case the control's (derandomized) search draws, the
    mutant's compile asks the compiled cache for keys the control's never
    does, so the stand-in fails it there (and passes every other Case): the
    mutant is killed on that Case, the control survives. Two compiles."""
    from kernels.counters import asking, forget_memos

    first, keys = [], {}

    def compiles(kind, case, adapter):
        first[:] = first or [case]  # the control searches first
        if case == first[0]:
            if adapter.rewrites not in keys:
                forget_memos()
                with asking() as asked:
                    adapter.compile_only(case)
                keys[adapter.rewrites] = set(asked.keys)
            if adapter.rewrites and not keys[()] & keys[adapter.rewrites]:
                raise PropertyFailure(kind.property, case, "compiled a kernel the control never asked for")
        return Observation(kind.property, case)

    mutant = BY_NAME["sm90_q_len_clamped_to_s_kv"]
    control = S.run_mutant(C.CONTROL_SM90, check=compiles, profile="ci", kinds=("sm90_numerics_dense",))
    assert control["verdict"] == "survived" and keys[()], control
    rec = S.run_mutant(mutant, check=compiles, profile="ci", kinds=("sm90_numerics_dense",))
    assert rec["verdict"] == "killed" and rec["killed_by"] == "sm90_numerics_dense" and Case.from_dict(rec["case"]) == first[0], rec
    assert keys[mutant.rewrites] and not keys[()] & keys[mutant.rewrites]


@pytest.mark.compile
def test_the_sm90_kinds_call_the_real_properties(monkeypatch):
    """Through the harness' own check (kind.check): sm90_compile_reuse_dense
    run as its CPU tier (compile_only: launch=False) judges the control's
    draws with the real property, which survives; the launched kinds are
    refused off a Hopper GPU (a refusal is no verdict, never a kill: it
    stops the run, as the worker records)."""
    import dataclasses

    from ground.outcome import Unsupported

    reuse = next(k for k in SM90_KINDS if k.name == "sm90_compile_reuse_dense")
    assert reuse.params == {"launch": True}  # the GPU test's; here its CPU tier
    monkeypatch.setattr(K, "KINDS", tuple(dataclasses.replace(k, params={"launch": False}) if k is reuse else k for k in K.KINDS))
    rec = S.run_mutant(C.CONTROL_SM90, profile="ci", kinds=(reuse.name,), examples_scale=0.2)  # 2 draws
    assert rec["verdict"] == "survived" and rec["kinds"][0]["examples"] == rec["kinds"][0]["planned"] == 2, rec
    import torch

    if hopper_refusal(torch.cuda.get_device_capability() if torch.cuda.is_available() else None):  # on a Hopper GPU it would launch
        with pytest.raises(Unsupported, match="SM 9.0|no CUDA GPU"):
            S.run_mutant(C.CONTROL_SM90, profile="ci", kinds=("sm90_numerics_dense",))
