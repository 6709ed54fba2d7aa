"""The mutant catalogue and harness on CPU: the catalogue is well formed and
applies to the installed sources, stale mutants are stale (never killed), the
search loop's verdicts with stand-in properties, the arithmetic, the table,
the CLI's exit codes, known findings excusing exactly what they describe,
and (compile tier) every mutated template still compiles for sm_80."""

from __future__ import annotations

import itertools
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from conformance.kill import catalogue as C
from conformance.kill import cli as CLI
from conformance.kill import failures as F
from conformance.kill import kinds as K
from conformance.kill import processes as P
from conformance.kill import search as S
from conformance.kill import tally as T
from ground import findings
from ground.case import Case
from ground.outcome import Observation, PropertyFailure
from ground.tables import NO_GPU, flavor_of
from kernels import mutants as catalogue
from kernels.mutants import MUTANTS, Mutant
from kernels.source import TARGETS, Rewrite, check_rewrites
from properties import CHECKS
from properties.matrix import TRANSFORM

# The bug classes: the catalogue must keep covering every one of them.
REQUIRED_CLASSES = (
    "bias",
    "off_envelope",
    "compile_key",
    "cu_seqlens",
    "causal_diagonal",
    "sliding_window",
    "bottom_right",
    "kv_zero_fill",
    "lse_units",
    "sink_units",
    "last_partial_tile",
    "gqa_mapping",
    "output_tail",
    "precision",
)  # (precision: the error model's mutants, tests/test_error_model.py)
# The dev profile's example counts (10 per numerics stratum): few draws, and no time limit
# (the cap stays at its default): a verdict never depends on how fast this machine is.
FAST = dict(profile="dev")


# -------------------------------------------------------------- catalogue
def test_catalogue_is_well_formed():
    names = [m.name for m in MUTANTS]
    assert len(names) == len(set(names)) and len(names) >= 12 and C.CONTROL.name not in names
    covered = {m.bug_class for m in MUTANTS}
    assert set(REQUIRED_CLASSES) <= set(catalogue.BUG_CLASSES) and set(REQUIRED_CLASSES) <= covered
    assert covered <= set(catalogue.BUG_CLASSES)
    for m in MUTANTS:
        assert m.rewrites and m.why.strip() and m.expected_killer in K.KIND_NAMES, m.name
        assert set(m.targets) <= set(TARGETS) and all(rw.pattern != rw.replacement for rw in m.rewrites), m.name
        # A template bug lives in both templates unless the mutant says why not.
        one_family = len({"f16", "d256"} & set(m.targets)) == 1 or m.targets == ("host",)
        assert not one_family or m.scope.strip(), f"{m.name}: targets {m.targets} but no scope note"
        assert Case(**m.probe).structural_problem() is None, m.name


@pytest.mark.parametrize("mutant", MUTANTS, ids=lambda m: m.name)
def test_every_rewrite_applies_exactly_once(mutant):
    check_rewrites(mutant.rewrites)


def test_flavors_follow_the_rewritten_files():
    mk = lambda *targets: Mutant("x", "bias", tuple(Rewrite(t, "a", "b") for t in targets), "numerics_dense", "w")  # noqa: E731
    assert K.flavors_for(mk("d256")) == ("qwen",)
    assert K.flavors_for(mk("f16")) == ("gptoss", "llama", "dsv3")
    assert K.flavors_for(mk("f16", "d256")) == K.flavors_for(mk("host")) == K.flavors_for(C.CONTROL) == ("gptoss", "llama", "dsv3", "qwen")


# ------------------------------------------------------------------ search
def _fails_on(pred, exc=PropertyFailure):
    """A stand-in property failing where ``pred`` says, on a mutant's kernels only
    (an adapter with rewrites): the pristine kernels, which replay a kill, pass it."""

    def check(kind, case, adapter):
        if adapter.rewrites and pred(kind, case):
            raise exc(kind.property, case, "planted") if exc is PropertyFailure else exc("kernel crashed")
        return Observation(kind.property, case, ratios={"o": 0.5})

    return check


ALWAYS = _fails_on(lambda k, c: True)


@pytest.mark.parametrize("pattern", ["this text is not in prefill_f16", "cutlass.Int32("], ids=["absent", "many"])
def test_stale_mutant_is_stale_not_killed(pattern):
    stale = Mutant("stale", "bias", (Rewrite("f16", pattern, "x"),), "numerics_dense", "w")
    rec = S.run_mutant(stale, check=ALWAYS, **FAST)
    assert rec["verdict"] == "stale" and "expected exactly once" in rec["error"] and rec["killed_by"] is None
    t = T.tally([rec, {"verdict": "killed"}])
    assert (t["stale"], t["counted"], t["kill_rate"]) == (1, 1, 1.0)


def test_failure_kills_and_is_shrunk():
    """Shrinking ends by Hypothesis' own count limits, not a time budget: the
    case is fully shrunk on a busy machine too (a 10 s shrinking budget once
    left case_size 256 on a loaded 2-core runner)."""
    check = _fails_on(lambda k, c: k.name == "numerics_thd" and c.h_q > 1 and len(c.q_lens) > 1)
    rec = S.run_mutant(MUTANTS[0], check=check, **FAST)
    assert rec["verdict"] == "killed" and rec["killed_by"] == "numerics_thd" and rec["property"] == "numerics"
    shrunk = Case.from_dict(rec["case"])
    assert shrunk.h_q == 2 and len(shrunk.q_lens) == 2 and rec["case_size"] == K.case_size(shrunk) <= 2 * 2 * 2 and not rec["shrink_capped"]
    assert [k["name"] for k in rec["kinds"]] == ["numerics_dense", "numerics_thd"] and rec["first_failure_s"] is not None
    dense = rec["kinds"][0]  # searched in full before numerics_thd: every stratum its count
    assert dense["examples"] == dense["planned"] == 8 * S.planned_examples("dev", K.KINDS[0]) and not dense["cut"]
    assert flavor_of(shrunk.d_qk, shrunk.d_v) in K.flavors_for(MUTANTS[0])


def test_max_shrinks_bounds_shrinking_by_count_not_the_verdict():
    """--max-shrinks: after N shrink candidates the search checks nothing more
    and the smallest failure so far stands; the verdict, its killer and the
    examples drawn are the unbounded search's (fixed when the failure is found)."""
    check = _fails_on(lambda k, c: k.name == "numerics_thd" and c.h_q > 1 and len(c.q_lens) > 1)
    full = S.run_mutant(MUTANTS[0], check=check, **FAST)
    bounded = {n: S.run_mutant(MUTANTS[0], check=check, max_shrinks=n, **FAST) for n in (0, 3)}
    for n, rec in bounded.items():
        assert (rec["verdict"], rec["killed_by"], rec["kinds"][-1]["examples"]) == (full["verdict"], full["killed_by"], full["kinds"][-1]["examples"])
        # shrinks: the candidates checked, and Hypothesis' last replay of the failure
        assert rec["shrink_capped"] and rec["kinds"][-1]["shrinks"] <= n + 1 < full["kinds"][-1]["shrinks"]
        assert K.case_size(Case.from_dict(rec["case"])) >= full["case_size"]
    assert Case.from_dict(bounded[0]["case"]) == Case.from_dict(full["first_case"])  # no shrink: the first failure stands


CUDNN = "/site-packages/cudnn/sdpa/fwd/kernels/sm80/prefill_f16.py"  # a frame of the kernels under test


def test_crash_is_an_error_verdict():
    crash = _fails_on(lambda k, c: True, lambda *_: _raised_in(CUDNN, RuntimeError("kernel crashed")))
    rec = S.run_mutant(MUTANTS[0], check=crash, kinds=("numerics_dense",), **FAST)
    assert rec["verdict"] == "error" and "RuntimeError: kernel crashed" in rec["summary"] and rec["first_case"]


def test_a_rejected_draw_is_no_verdict():
    """A property that rejects a draw (hypothesis.reject(), as a permutation
    relation does for a Case it does not move) lets the search go on: seen on
    the H200 as an 'error' verdict for the control and five mutants."""
    from hypothesis import reject

    def rejecting(kind, case, adapter):
        if case.batch == 1:
            reject()
        return Observation(kind.property, case, ratios={"o": 0.5})

    rec = S.run_mutant(MUTANTS[0], check=rejecting, kinds=("numerics_dense",), **FAST)
    assert rec["verdict"] == "survived" and rec["error"] is None and rec["summary"] is None, rec
    assert rec["kinds"][0]["examples"] > 0


def _raised_in(filename: str, exc: BaseException) -> BaseException:
    """``exc`` as if raised by code in ``filename`` (its innermost frame)."""
    try:
        exec(compile("raise exc", filename, "exec"), {"exc": exc})
    except BaseException as e:  # noqa: BLE001
        return e


def test_an_exception_of_the_suites_own_code_is_a_harness_error():
    """A KeyError in conformance/ (a suite bug) must not count as a kill, nor
    a CUDA error's text there while the context works (tests/test_kill_verdicts.py:
    the rest); anything raised in the kernel's code is the mutant's crash."""
    own = str(Path(F.__file__).parents[1] / "ground" / "data.py")
    assert F.crash_or_harness(_raised_in(own, KeyError("none"))) == "harness_error"
    assert F.crash_or_harness(_raised_in(own, RuntimeError("CUDA error: an illegal memory access was encountered"))) == "harness_error"
    assert F.crash_or_harness(_raised_in(CUDNN, ValueError("x"))) == "error"
    rec = S.run_mutant(MUTANTS[0], check=_fails_on(lambda k, c: True, lambda *_: _raised_in(own, KeyError("rope"))), kinds=("numerics_dense",), **FAST)
    assert rec["verdict"] == "harness_error" and "KeyError" in rec["summary"]


def _nan_rows(live_too: bool):
    """A stand-in tails property judged through the real finish(): NaN in the
    O rows past seq_q_len (what dense-padded-q-rows-nan describes), and with
    ``live_too`` also in the first live row (a different failure); the
    pristine kernels (no rewrites, replaying a kill) write no NaN."""
    import torch

    from properties import judge
    from properties.common import finish

    def check(kind, case, adapter):
        o = torch.zeros(case.batch, case.h_q, case.s_q, 2)
        for b, n in enumerate(case.q_lengths()):
            o[b, :, n:] = float("nan") if adapter.rewrites else 0.0
            if live_too and n and adapter.rewrites:
                o[b, :, 0] = float("nan")
        nan = torch.isnan(o)
        every_row = torch.ones_like(nan)
        return finish(
            kind.property,
            case,
            time.perf_counter(),
            lambda: judge.exactly(kind.property, case, "o", nan, torch.zeros_like(nan), every_row, "live outputs", check="no nan") or {},
        )

    return check


PADDED_Q = findings.parse(
    {"finding": [{"id": "q-nan", "reason": "r", "property": "tails", "check": "no nan", "quantity": "o", "region": "padded_q_rows"}]}, checks=CHECKS
)


def test_known_findings_excuse_exactly_what_they_describe():
    xfailed = lambda k, c, a: Observation(k.property, c, outcome="xfailed", findings=["f"])  # noqa: E731
    rec = S.run_mutant(MUTANTS[0], check=xfailed, kinds=("numerics_dense",), **FAST)
    assert rec["verdict"] == "survived" and rec["kinds"][0]["excused"] == rec["kinds"][0]["examples"] > 0
    ci = dict(FAST, profile="ci")  # derandomized: padded Q rows are drawn
    with findings.applied(PADDED_Q):
        rec = S.run_mutant(MUTANTS[0], check=_nan_rows(live_too=False), kinds=("padding_poison",), **ci)
        assert rec["verdict"] == "survived" and rec["kinds"][0]["excused"] > 0
        # The same examples with NaN in a live row too: not what the finding describes.
        rec = S.run_mutant(MUTANTS[0], check=_nan_rows(live_too=True), kinds=("padding_poison",), **ci)
        assert rec["verdict"] == "killed" and "live outputs" in rec["summary"]
    with findings.applied([]):
        assert S.run_mutant(MUTANTS[0], check=_nan_rows(live_too=False), kinds=("padding_poison",), **ci)["verdict"] == "killed"


def test_the_large_tier_is_searched_only_by_its_mutants():
    large = [k.name for k in K.KINDS if k.examples == C.LARGE_BUDGET]
    assert large == ["numerics_large_offsets", "sm90_numerics_large_offsets"]  # the sm90 one: tests/test_kill_sm90.py
    by_name = {m.name: m for m in MUTANTS}
    assert "numerics_large_offsets" in [k.name for k in K.searched(by_name["kv_offset_int32"])]
    assert not set(large) & {k.name for k in K.searched(by_name["bias_not_unscaled"])}
    assert large[0] in {k.name for k in K.searched(C.CONTROL)}  # the pristine kernels get every search of their family
    assert large[0] in {k.name for k in K.searched(by_name["bias_not_unscaled"], large, explicit=True)}


QWEN_ONLY = Mutant("qwen_only", "bias", (Rewrite("d256", "a", "b"),), "tails_dense", "w")  # 2 strata per kind; run with no adapter


def stand_in(rewrites):
    """An adapter that launches nothing, carrying its rewrites (the stand-in properties fail on a mutant's only)."""
    return SimpleNamespace(rewrites=tuple(rewrites))


NO_ADAPTER = dict(adapter_factory=stand_in)


@pytest.mark.parametrize("fails", [False, True], ids=["survivor", "killed"])
def test_verdicts_and_counts_do_not_depend_on_time(fails):
    """The same mutant and property give the same verdict, the same examples
    per kind (each kind's planned count per stratum) and the same shrunk case
    with a fast check and a cap, or a slow check and a far larger cap: the
    search is bounded by example counts, time only caps it (the H200: a
    mutant survived 120 s at --jobs 16 and died in 11 s at --jobs 3)."""
    fail = (lambda k, c: k.name == "numerics_dense" and c.batch > 1) if fails else (lambda k, c: False)

    def run(delay, cap):
        inner = _fails_on(fail)
        check = lambda k, c, a: time.sleep(delay) or inner(k, c, a)  # noqa: E731
        return S.run_mutant(QWEN_ONLY, check=check, profile="ci", budget_s=cap, kinds=("numerics_dense", "tails_dense"), **NO_ADAPTER)

    fast, slow = run(0.0, 600.0), run(0.003, 1e6)
    counts = lambda r: [(k["name"], k["examples"], k["planned"], k["cut"]) for k in r["kinds"]]  # noqa: E731
    assert fast["verdict"] == slow["verdict"] == ("killed" if fails else "survived") and fast["complete"] and slow["complete"]
    assert counts(fast) == counts(slow) and fast["case"] == slow["case"] and fast["killed_by"] == slow["killed_by"]
    first = fast["kinds"][0]
    assert first["name"] == "tails_dense" and first["examples"] == first["planned"] == 2 * S.planned_examples(
        "ci", K.KINDS[3]
    )  # the expected killer first, in full
    if not fails:
        assert [k["examples"] for k in fast["kinds"]] == [40, 80] and "tails_dense 40/40, numerics_dense 80/80" in P._progress_line(fast, 1, 1)
    scaled = S.run_mutant(QWEN_ONLY, check=_fails_on(fail), profile="ci", examples_scale=2, kinds=("tails_dense",), **NO_ADAPTER)
    assert scaled["kinds"][0]["examples"] == scaled["kinds"][0]["planned"] == 2 * first["planned"]  # --examples-scale


def test_a_search_the_cap_stops_is_incomplete_not_survived():
    """The cap (--budget-s) is only a safety net: a search it stops before the
    counts were drawn is 'incomplete', counted neither as survived nor as
    killed, and an incomplete control makes the run invalid."""
    slow = lambda k, c, a: time.sleep(0.05) or Observation(k.property, c)  # noqa: E731
    rec = S.run_mutant(MUTANTS[0], check=slow, profile="dev", budget_s=0.3)
    # Merged up to the first search the cap cut (the later ones are skipped, nothing drawn, and not listed).
    assert rec["verdict"] == "incomplete" and not rec["complete"] and len(rec["kinds"]) == 1 and rec["kinds"][-1]["cut"]
    assert rec["wall_s"] < 5 and all(k["examples"] < k["planned"] for k in rec["kinds"] if k["cut"])
    t = T.tally([rec, _rec("k", "killed")])
    assert (t["incomplete"], t["survived"], t["counted"], t["kill_rate"]) == (1, 0, 1, 1.0)
    assert T.exit_code(t, _rec("control", "survived"), goal=0.5) == 1  # elsewhere it might have been killed, or survived
    control = dict(rec, name="control")
    assert "stopped by the cap" in T.control_problem(control) and T.exit_code(T.tally([_rec("k", "killed")]), control, goal=0.5) == 1
    assert "incomplete" in P._progress_line(rec, 1, 1) and " cut" in P._progress_line(rec, 1, 1)


def test_worker_processes_report_verdicts(tmp_path):
    stale = Mutant("stale", "bias", (Rewrite("f16", "not in the file", "x"),), "numerics_dense", "w")
    opts = dict(profile="dev", budget_s=5, kinds=["numerics_dense"], findings=None, log_dir=str(tmp_path), threads=1)
    lines = []
    (rec,) = P.run_all([stale], opts, jobs=1, progress=lines.append)
    assert rec["verdict"] == "stale" and lines == ["[1/1] stale     stale (" + rec["error"] + ")"]
    assert (tmp_path / "stale.log").exists()


# ------------------------------------------------------- arithmetic, table
def _rec(name, verdict, **kw):
    return {"name": name, "bug_class": "bias", "targets": ["f16"], "verdict": verdict, "expected_killer": "numerics_dense", **kw}


CASE = Case(batch=2, h_q=2, s_q=3, s_kv=5)
RECORDS = [
    _rec("a", "killed", killed_by="numerics_dense", first_failure_s=3.5, case=CASE.to_dict(), case_size=K.case_size(CASE)),
    _rec("b", "error", first_case=CASE.to_dict(), error="worker exited with code -11"),
    _rec("c", "survived", kinds=[{"name": "numerics_dense", "examples": 80, "planned": 80, "cut": False}]),
    _rec("d", "stale", error="matched 0 times"),
    _rec("e", "incomplete", complete=False, kinds=[{"name": "numerics_dense", "examples": 15, "planned": 80, "cut": True}]),
]


def test_tally_and_exit_code():
    t = T.tally(RECORDS)
    assert (t["killed"], t["error"], t["survived"], t["stale"], t["incomplete"], t["counted"]) == (1, 1, 1, 1, 1, 3)
    assert t["kill_rate"] == pytest.approx(2 / 3) and K.case_size(CASE) == 60
    control = _rec("control", "survived")
    assert T.exit_code(t, control, goal=0.6) == 1  # an incomplete mutant: not a complete measurement
    t = T.tally(RECORDS[:4])
    assert T.exit_code(t, control, goal=0.6) == 0 and T.exit_code(t, control, goal=0.9) == 1
    assert T.exit_code(t, _rec("control", "killed", killed_by="padding_poison"), goal=0.1) == 1
    assert T.exit_code(T.tally([RECORDS[3]]), control, goal=0.0) == 1  # nothing counted
    assert (
        "67% = (killed 1 + error 1) / (killed 1 + error 1 + survived 1) = 2/3; excluded (no verdict): 0 pristine_fails, "
        "0 compile_error, 0 infra, 0 harness_error, 0 short, 1 incomplete, 1 stale; goal 90%"
    ) in T.kill_rate_line(T.tally(RECORDS), 0.9)


def test_markdown_table():
    run = dict(profile="ci", examples_scale=1.0, budget_s=3600, jobs=16, goal=0.9, wall_s=400, gpu="NVIDIA H200", mode="sm80 code on sm_90")
    doc = {"run": run, "control": _rec("control", "survived"), "mutants": RECORDS, "tally": T.tally(RECORDS)}
    md = T.render_markdown(doc)
    assert "| " + " | ".join(T.COLUMNS) + " |" in md and "INVALID" not in md and "example counts x1 " in md and "cap 3600 s per mutant" in md
    assert "| a | bias | f16 | killed | numerics_dense | numerics_dense | 3.5 | 60 | dense B=2 S=3x5 bshd fp16 H=2/1 D=64 mask=none seed=0 | - |" in md
    assert "| c | bias | f16 | survived | - | numerics_dense | - | - | - | numerics_dense 80/80 |" in md and "| d | bias | f16 | stale |" in md
    assert "| e | bias | f16 | incomplete | - | numerics_dense | - | - | - | numerics_dense 15/80 cut |" in md
    doc["control"] = _rec("control", "killed", killed_by="padding_poison", summary="NaN", case_text="B=1")
    assert "**INVALID RUN**: the control (no rewrites) failed padding_poison on B=1: NaN" in T.render_markdown(doc)
    doc["control"] = RECORDS[4] | {"name": "control"}
    assert (
        "**INVALID RUN**: the control's search was stopped by the cap (--budget-s) before its example counts (numerics_dense 15/80 cut)"
        in T.render_markdown(doc)
    )


# --------------------------------------------------------------------- CLI
def _main(argv, capsys):
    code = CLI.main(CLI.parser().parse_args(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_list_checks_the_catalogue(capsys, monkeypatch):
    code, out, _ = _main(["--list"], capsys)
    assert code == 0 and f"{len(catalogue.CATALOGUE)} mutants, 0 stale" in out and all(m.name in out for m in catalogue.CATALOGUE)
    assert out.count("sm90: --family sm90 on a Hopper GPU)") == len(catalogue.SM90_MUTANTS)
    code, out, _ = _main(["--list", "--family", "sm80"], capsys)
    assert code == 0 and f"{len(MUTANTS)} mutants, 0 stale" in out and "sm90_" not in out
    monkeypatch.setattr(C, "MUTANTS", MUTANTS + (Mutant("gone", "bias", (Rewrite("d256", "no such text", "x"),), "numerics_dense", "w"),))
    code, out, _ = _main(["--list", "--only", "gone,lse_in_log2_units"], capsys)
    assert code == 1 and "STALE" in out and "2 mutants, 1 stale" in out


def test_plan_prints_what_a_run_searches_without_a_gpu(capsys):
    """--plan: each control's and mutant's searches and planned examples (the
    control's per kind), the total their sum, --examples-scale applied; the
    same counts a run's workers draw (search.planned_examples per unit)."""
    code, out, _ = _main(["--plan", "--family", "all", "--only", "control,control_sm90,lse_in_log2_units", "--examples-scale", "0.5"], capsys)
    assert code == 0
    opts = CLI._validate(CLI.parser().parse_args(["--family", "all", "--only", "control,control_sm90,lse_in_log2_units"]))
    want = {}
    for m in opts["controls"] + opts["mutants"]:
        units = P.mutant_units(m, opts | {"examples_scale": 0.5})
        want[m.name] = (len(units), sum(S.unit_planned(opts["profile"], u, 0.5) for u in units))
    assert set(want) == {"control", "control_sm90", "lse_in_log2_units"}
    rows = {line.split()[0]: line for line in out.splitlines() if line.split() and line.split()[0] in want}
    for name, (n_units, n_examples) in want.items():
        assert f"{n_units} searches {n_examples:>8,} examples" in rows[name], rows[name]
    assert "numerics_dense " in rows["control"] and "sm90_numerics_dense " in rows["control_sm90"] and ":" not in rows["lse_in_log2_units"]
    assert f"3 runs, profile ci x0.5: at most {sum(n for _, n in want.values()):,} examples" in out
    # A long run's strata in parts (search.PART_EXAMPLES): counted at the run's scale, as its workers search them.
    code, out, _ = _main(["--plan", "--family", "sm90", "--only", "control_sm90", "--profile", "nightly", "--examples-scale", "0.4"], capsys)
    units = P.mutant_units(C.CONTROLS["sm90"], opts | {"profile": "nightly", "examples_scale": 0.4})
    assert code == 0 and len(units) == 12 and f"{'control_sm90':<32} {len(units):>4} searches {1140:>8,} examples" in out, out


@pytest.mark.parametrize(
    "argv",
    [
        ["--only", "nope"],
        ["--only", "sm90_lse_in_log2_units"],  # an sm90 mutant: --family sm90 runs it
        ["--family", "sm90", "--only", "lse_in_log2_units"],  # and an SM80 one the SM80 family
        ["--family", "sm90", "--properties", "numerics_dense"],  # no kind of its family: its mutants would search nothing
        ["--properties", "sm90_numerics_large_offsets"],  # a kind that cannot run yet (conformance.kill_sm90.PENDING)
        ["--properties", "numerics"],
        ["--goal", "1.5"],
        ["--jobs", "0"],
        ["--examples-scale", "0"],
        ["--budget-s", "0"],
        ["--profile", "nope", "--list"],
    ],
)
def test_bad_arguments_exit_2(argv, capsys):
    code, _, err = _main(argv, capsys)
    assert code == 2 and "sdpa-conformance mutants: error:" in err


def test_without_a_gpu_exit_2(capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    code, _, err = _main(["--only", "lse_in_log2_units"], capsys)
    assert code == 2 and NO_GPU in err and "Hopper" not in err
    for family in ("sm90", "all"):
        code, _, err = _main(["--family", family], capsys)
        assert code == 2 and NO_GPU in err and "need a Hopper GPU (SM 9.0)" in err


def test_node_ids_name_the_collected_tests(tmp_path):
    """Every node id a search can report (node-id known findings excuse
    failures there) names a collected test: each stratum, each drawn value."""
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--collect-only",
            "-q",
            "-p",
            "no:xdist",
            "--report-dir",
            str(tmp_path),
            "conformance/test_numerics.py",
            "conformance/test_tails.py",
            "conformance/test_compile.py",
            "conformance/test_large.py",
            "conformance/test_metamorphic.py",
            "conformance/test_backward.py",
            "conformance/test_sm90_numerics.py",
            "conformance/test_sm90_compile.py",
            "conformance/test_sm90_large.py",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    collected = {line.strip() for line in r.stdout.splitlines() if "::" in line}
    from properties.metamorphic import DENSE_RELATIONS, THD_RELATIONS
    from strategies.pools import FLAVOR_ENVELOPES

    assert [k.name for k in K.KINDS] == [
        "numerics_dense",
        "numerics_thd",
        "tails_thd_noinit",
        "tails_dense",
        "padding_poison",
        "compile_reuse_dense",
        "compile_reuse_thd",
        "numerics_large_offsets",
    ] + [f"metamorphic_dense_{r}" for r in DENSE_RELATIONS] + [f"metamorphic_thd_{r}" for r in THD_RELATIONS] + [
        "backward_dense",
        "backward_thd",
        "backward_tails_dense",
        "backward_tails_thd_init",
        "backward_tails_thd_noinit",
        "backward_compile_reuse_dense",
        "backward_compile_reuse_thd",
        "sm90_numerics_dense",
        "sm90_numerics_thd",
        "sm90_tails_dense",
        "sm90_compile_reuse_dense",
        "sm90_numerics_large_offsets",
    ]
    for kind in K.KINDS:
        if kind.family_name == "sm90":  # one test each (the compile entry's parameter)
            assert K.node_id(kind, Case(family="sm90")) in collected, K.node_id(kind, Case(family="sm90"))
            continue
        drawn_axes = [a for a in kind.family.axes if a.role == TRANSFORM]
        for flavor, (dq, dv) in FLAVOR_ENVELOPES.items():
            for dtype in ("float16", "bfloat16"):
                for combo in itertools.product(*(a.values for a in drawn_axes)):
                    drawn = {arg: v for a, vals in zip(drawn_axes, combo) for arg, v in zip(a.args, vals)}
                    case = Case(d_qk=dq, d_v=dv, dtype=dtype)
                    assert flavor_of(case.d_qk, case.d_v) == flavor and K.node_id(kind, case, drawn) in collected, K.node_id(kind, case, drawn)


# ------------------------------------------------------------ compile tier
@pytest.mark.compile
@pytest.mark.parametrize("mutant", MUTANTS, ids=lambda m: m.name)
def test_mutated_templates_compile_for_sm80(mutant, tmp_path, monkeypatch):
    """The probe of every touched template family compiles: a mutant that does
    not compile would only measure the compiler."""
    from kernels.prepared import PreparedAdapter

    monkeypatch.setenv("CUDNN_FRONTEND_COMPILED_CACHE", str(tmp_path / "compiled"))
    from kernels.counters import forget_memos

    forget_memos()  # an earlier test of this process may have compiled the same probe
    adapter = PreparedAdapter(rewrites=mutant.rewrites)
    probe = Case(**mutant.probe)
    dims = [(64, 64)] * ("f16" in mutant.targets) + [(256, 256)] * ("d256" in mutant.targets) or [(probe.d_qk, probe.d_v)]
    for dq, dv in dims:
        delta = adapter.compile_only(probe.replace(d_qk=dq, d_v=dv))
        assert delta.misses >= 1 and delta.modules <= 1


def test_a_mutant_meets_its_expected_killer_first():
    """thd_neighbour_key is meant for a metamorphic relation, the last kinds
    of the table: the harness searches that kind first, with the full budget
    left, instead of after ~20 others."""
    by_name = {m.name: m for m in MUTANTS}
    for name in ("thd_neighbour_key", "bias_not_unscaled"):
        kinds = [k.name for k in K.searched(by_name[name])]
        assert kinds[0] == by_name[name].expected_killer and sorted(kinds) == sorted(set(kinds)), kinds


def test_every_search_runs_to_its_count_under_one_cap(monkeypatch):
    """No time slicing: the expected killer searches first, and every kind's
    every stratum gets the same deadline (the mutant's cap, a safety net) and
    its planned count; a fast search passes nothing on, a slow one takes
    nothing from the others."""
    m = {m.name: m for m in MUTANTS}["bias_not_unscaled"]
    chosen = K.searched(m)[:5]
    calls, clock = [], [0.0]
    monkeypatch.setattr(S.time, "perf_counter", lambda: clock[0])

    def fake_search(unit, adapter, flavors, *, profile, until, t0, check, scale=1.0, max_shrinks=None):
        calls.append((unit.kind.name, until))
        clock[0] += 1.0
        n = S.unit_planned(profile, unit, scale)
        return S._Search(examples=n, planned=n)

    monkeypatch.setattr(S, "search", fake_search)
    rec = {"expected_killer": m.expected_killer, "kinds": [], "complete": True, "verdict": "survived"}
    S._search_kinds(rec, chosen, None, K.flavors_for(m), profile="ci", deadline=100.0, t0=0.0, check=None, scale=3)
    assert chosen[0].name == m.expected_killer and {until for _, until in calls} == {100.0} and rec["verdict"] == "survived"
    for k, kind in zip(rec["kinds"], chosen):
        assert k["examples"] == k["planned"] == 3 * S.planned_examples("ci", kind) * len(S.search_strata(kind, K.flavors_for(m))), k


def test_a_kind_is_searched_per_stratum_as_the_gate_tests_it(monkeypatch):
    """numerics_dense over every flavor is 8 searches (one per stratum, each
    restricted to it, each one test's examples), over qwen alone 2; a family
    without a stratum axis is one search over the flavors; a kill in one
    stratum ends the kind."""
    kinds = {k.name: k for k in K.KINDS}
    every, qwen = ("gptoss", "llama", "dsv3", "qwen"), ("qwen",)
    assert len(S.search_strata(kinds["numerics_dense"], every)) == 8
    assert S.search_strata(kinds["numerics_dense"], qwen) == [("qwen", "float16"), ("qwen", "bfloat16")]
    assert all(S.gate_tests(k) >= 1 for k in K.KINDS)
    calls = []

    def fake_search(unit, adapter, flavors, *, profile, until, t0, check, scale=1.0, max_shrinks=None):
        stratum = unit.stratum
        calls.append(stratum)
        s = S._Search(examples=3)
        if stratum == ("llama", "bfloat16"):
            from ground.case import Case

            s.first = s.last = (Case(), RuntimeError("boom"), 1.0)
        return s

    monkeypatch.setattr(S, "search", fake_search)
    rec = {"expected_killer": "numerics_dense", "kinds": [], "complete": True, "verdict": "survived"}
    S._search_kinds(rec, [kinds["numerics_dense"]], None, every, profile="ci", deadline=1e9, t0=0.0, check=None)
    assert calls == S.search_strata(kinds["numerics_dense"], every)[: calls.index(("llama", "bfloat16")) + 1]
    assert rec["kinds"][0]["examples"] == 3 * len(calls) and rec["kinds"][0]["failed"] and rec["killed_by"] == "numerics_dense"


def test_each_strata_search_draws_its_own_sequence():
    """A derandomized search is seeded from its function, the same for every
    stratum; pytest's parameters of one test draw different sequences, and so
    do the harness's strata (a seed per kind and stratum): the pool rows drawn
    in gptoss-fp16 and gptoss-bf16 differ, and each is the same run to run."""
    import time

    kind = {k.name: k for k in K.KINDS}["numerics_dense"]

    def rows(stratum):
        seen = []
        S.search(S.Unit(kind, stratum), None, ("gptoss",), profile="ci", until=time.perf_counter() + 1e9, t0=0.0, check=lambda k, c, a: seen.append(c))
        return [(c.s_q, c.s_kv, c.batch, c.h_q) for c in seen]

    a, b = rows(("gptoss", "float16")), rows(("gptoss", "bfloat16"))
    assert a != b and a == rows(("gptoss", "float16"))


def test_the_ci_search_reaches_the_rows_the_rope_mutant_fails_on():
    """rope_k_tile_local_positions fails numerics exactly on RoPE rows whose
    keys run past the first KV tile with a non-zero scale (H200, 2026-12-03:
    9 of the 12 pool rows with RoPE past a tile failed, the 3 passing ones ran
    scale 0), and survived 320 draws of the old one-search harness. A
    stand-in property failing exactly there: the per-stratum ci search of its
    expected killer must reach such a row early (drawing only: no kernel)."""
    from ground.tables import TILE_N

    rope = {m.name: m for m in MUTANTS}["rope_k_tile_local_positions"]
    seen = []

    def fails_where_the_mutant_does(kind, case, adapter):
        seen.append(case)
        if adapter.rewrites and case.rope and case.s_kv > TILE_N and case.scale != 0:
            raise PropertyFailure(kind.property, case, "keys past the first KV tile rotated with tile-local positions")
        return Observation(kind.property, case)

    rec = S.run_mutant(rope, check=fails_where_the_mutant_does, profile="ci", kinds=(rope.expected_killer,), **NO_ADAPTER)
    assert rec["verdict"] == "killed" and rec["killed_by"] == rope.expected_killer
    assert rec["kinds"][0]["examples"] <= 40, rec["kinds"][0]  # within one stratum's base count (10 on 2026-12-03)


def _relay_visitors(case: Case, tile_q: int = 64, tile_kv: int = 64) -> int:
    """The most KV tiles that add into one q tile's dQ (smallest backward
    tiles: the fewest visitors any flavor has)."""
    import torch

    from reference.masks import band

    most = 0
    for q, kv in zip(case.q_lengths(), case.kv_lengths()):
        if q and kv:
            vis = band(
                torch.arange(q)[:, None],
                torch.arange(kv)[None, :],
                q,
                kv,
                causal=case.causal,
                bottom_right=case.bottom_right,
                window_left=case.window_left,
                window_right=case.window_right,
            )
            for row in range(0, q, tile_q):
                most = max(most, len(set((vis[row : row + tile_q].any(0).nonzero().flatten() // tile_kv).tolist())))
    return most


def test_the_ci_search_reaches_contended_relays():
    """bwd_dq_relay_no_acquire makes deterministic dQ depend on the order its
    KV tiles arrive in, which only shows with three or more of them adding
    into one q tile (two adds onto 0 commute): it survived 92 dense examples
    on the H200 (dense pools reach at most 3 visitors) and died at S_kv = 1024.
    A stand-in failing on deterministic Cases with 4+ visitors: the ci search
    of its expected killer must reach one within a few draws."""
    relay = {m.name: m for m in MUTANTS}["bwd_dq_relay_no_acquire"]

    def fails_where_the_race_can_show(kind, case, adapter):
        if adapter.rewrites and case.deterministic and _relay_visitors(case) >= 4:
            raise PropertyFailure(kind.property, case, "dQ atomics of one q tile in another order")
        return Observation(kind.property, case)

    rec = S.run_mutant(relay, check=fails_where_the_race_can_show, profile="ci", kinds=(relay.expected_killer,), **NO_ADAPTER)
    assert rec["verdict"] == "killed" and rec["killed_by"] == relay.expected_killer == "backward_thd"
    assert rec["kinds"][0]["examples"] <= 10, rec["kinds"][0]
