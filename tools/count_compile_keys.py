#!/usr/bin/env python3
"""Count the compiles a GPU run of the suite asks for, on any machine.

    PYTHONPATH=$PWD python3 tools/count_compile_keys.py                 # ci profile, the profile's geometry
    PYTHONPATH=$PWD python3 tools/count_compile_keys.py --geometry free # every shape fact drawn freely
    PYTHONPATH=$PWD python3 tools/count_compile_keys.py --json out.json

It runs the suite's GPU property tests (``pytest -m gpu conformance``) in
this process with every property check replaced by a recorder, so Hypothesis
draws exactly the examples the profile draws (the ``ci`` profile is
derandomized: the same draws on every machine), and computes the prepared
adapter's compile key of each example (``kernels.prepared.compile_key``: the
geometry and constexprs a dense run hands ``compile_host``, the lru arguments
of ``compile_thd_host``; for the backward's properties
``kernels.backward.compile_key``, plus the forward's when O and LSE come from
the forward kernel) without compiling anything. It reports, per
property, the examples, the distinct keys and examples per key; a run shares
one on-disk compiled cache, so the run-wide distinct keys are the compiles a
cold GPU run pays (each ~1.5-2.6 s). ``own`` counts a property's keys no
other property asks for: what it compiles beyond the rest of the run.

The contract rejections (``rejection_keys``): a violating Case compiles
where its entry point reaches a compile before (or instead of) refusing it:
the prepared entry wherever the suite's specialization takes the Case (the
kernels check nothing past it), the public wrapper where a known finding
says it accepts the rule or compiles first. ``--compile-tier`` also draws
the CPU compile tier's tests (the ``compile`` marker, run by the gate too,
those marked ``cpu_tier`` with ``--cpu-tier``; their rejections compile for
the live device there).

What it cannot see: on a GPU the numerics tests call ``hypothesis.target``
with their error ratios, which steers the second half of each test's
examples; the recorder reports no ratio, so that half is this script's
approximation (under pool geometry the keys stay inside the pools either
way). The public wrapper's compiles (its own plans and staging copies) are
not counted beyond its contract tests' estimate above: the prepared adapter
is the default, and the wrapper's own keys are not readable without a GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections import Counter, defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# Properties that launch kernels and so pay a compile per new key.
LAUNCHING = (
    "numerics",
    "tails",
    "compile_reuse",
    "graph_replay",
    "launch_hygiene",
    "metamorphic",
    "backward",
    "backward_tails",
    "determinism",
    "backward_addressing",
)
BACKWARD = ("backward", "backward_tails", "determinism", "backward_addressing")


class Recorder:
    """A pytest plugin: after collection, every property check (wherever a test
    module imported it) records its call instead of running, and CUDA is
    reported present so the ``gpu`` fixture lets the tests run."""

    def __init__(self):
        self.calls = []  # (property, Case, params)

    def _stub(self, name):
        from ground.outcome import Observation

        def check(case, adapter=None, **params):
            self.calls.append((name, case, params))
            return Observation(name, case)

        return check

    @pytest.hookimpl(wrapper=True)
    def pytest_runtestloop(self, session):
        import torch

        import properties
        from kernels import get_adapter

        real = torch.cuda.is_available, torch.cuda.current_device, properties.entry_adapter
        torch.cuda.is_available, torch.cuda.current_device = (lambda: True), (lambda: 0)
        properties.entry_adapter = get_adapter  # the contract fixtures' adapters, without probing a device
        try:
            return (yield)
        finally:
            torch.cuda.is_available, torch.cuda.current_device, properties.entry_adapter = real

    def pytest_collection_finish(self, session):
        import dataclasses

        import properties

        originals = {name: prop.check for name, prop in properties.PROPERTIES.items()}
        stubs = {name: self._stub(name) for name in originals}
        properties.PROPERTIES.update({name: dataclasses.replace(prop, check=stubs[name]) for name, prop in properties.PROPERTIES.items()})
        for mod in list(sys.modules.values()):
            if not getattr(mod, "__name__", "").startswith("conformance"):
                continue
            for attr, value in list(vars(mod).items()):
                for name, fn in originals.items():
                    if value is fn:
                        setattr(mod, attr, stubs[name])


def keys_of(prop: str, case, params: dict) -> list:
    """The compile keys one example of ``prop`` asks for (prepared adapter):
    forward keys as kernels.prepared.compile_key gives them, backward ones as
    ("bwd", kernels.backward.compile_key) plus the forward's when the backward
    takes O and LSE from the forward kernel. A metamorphic relation's second
    launch keeps the compile key (its own test), but the entry relation's
    second entry point (the wrapper) is not counted."""
    from kernels.prepared import compile_key

    if prop == "rejection":
        return rejection_keys(case, params)
    if prop not in LAUNCHING or case.violation:
        return []
    if prop in BACKWARD or case.is_bwd:  # compile_reuse of a backward Case: the backward on reference O/LSE
        from kernels.backward import compile_key as backward_key
        from properties.backward import forward_of

        init = params.get("initialize_outputs", True)  # the backward tails' no-init chain is a key of its own
        keys = [("bwd", backward_key(case, initialize_outputs=init))] + (
            [compile_key(forward_of(case))] if case.inputs_from == "kernel" and prop in BACKWARD else []
        )
        if prop == "compile_reuse" and case.is_thd:
            keys.append(("bwd", backward_key(case.replace(q_lens=case.q_lens + (1,), kv_lens=case.kv_lens + (1,)))))
        return keys
    init = params.get("initialize_outputs", True)
    keys = [compile_key(case, initialize_outputs=init)]
    if prop == "compile_reuse" and case.is_thd:  # the property's new-sequence-count call
        keys.append(compile_key(case.replace(q_lens=case.q_lens + (1,), kv_lens=case.kv_lens + (1,))))
    return keys


def rejection_keys(case, params: dict) -> list:
    """The compile keys one rejection example asks for (see the module's
    docstring), by the prepared entry's keys: its own compile (the tampered
    specialization), the wrapper's kernel (the Case as the wrapper expresses
    it) or, where the THD wrapper pads off-envelope head dims first, its
    packed copy kernel (heads and widths). A compile-only example (the CPU
    tier) compiles for the live device on a GPU, as a launch does: the same key."""
    from ground import contracts
    from kernels.prepared import _dense_key, _tampered, _thd_key, meta_dense_geometry
    from kernels.specialize import specialize

    entry, rule = params.get("entry"), contracts.rule(case.violation)
    if entry == contracts.PREPARED:
        try:
            spec = _tampered(specialize(case), case, rule.tamper)
        except Exception:  # noqa: BLE001 - refused before compiling
            return []
        key = _thd_key(case, spec, True) if case.is_thd else _dense_key(spec, meta_dense_geometry(case, spec))
        return [key]  # compile_only (the CPU tier's, launch=False) compiles for the live device on a GPU
    found = [f for f in _known() if f.selects("rejection", case, entry)] if entry == contracts.WRAPPER else []
    if not found:
        return []
    wrapped = case.expressed(entry).replace(violation=None)
    keys = []
    fdqk, fdv = specialize(wrapped).envelope
    if wrapped.is_thd and (wrapped.d_qk < fdqk or wrapped.d_v < fdv):  # copy_packed_half, before any check
        keys.append(("thd-copy", case.dtype, case.h_q, case.h_kv, case.d_qk, case.d_v, fdqk, fdv))
    if not (wrapped.is_thd and all(f.check == "compiles nothing" for f in found)):  # the kernel itself
        keys += keys_of("numerics", wrapped, {})
    return keys


_KNOWN = []


def _known() -> list:
    """The known findings (known_findings.toml), read once."""
    if not _KNOWN:
        from ground import findings
        from properties import CHECKS

        _KNOWN.extend(findings.load(ROOT / "known_findings.toml", checks=CHECKS))
    return _KNOWN


def _unvisited_rows(examples) -> dict:
    """stratum -> the pool rows (dense "d<i>", THD "t<i>") no numerics example drew."""
    from ground.tables import STRATA
    from kernels.prepared import compile_key
    from strategies import geometry

    seen = {compile_key(case) for case, _ in examples if not case.violation}
    out = {}
    for f, d in STRATA:
        rows = [(f"d{i}", g.case(d)) for i, g in enumerate(geometry.dense_pool(f, d))]
        rows += [(f"t{i}", g.case(f, d)) for i, g in enumerate(geometry.thd_pool(f, d))]
        missing = [name for name, c in rows if compile_key(c) not in seen]
        if missing:
            out[f"{f}-{d}"] = missing
    return out


def _label_gaps(cases) -> dict:
    """stratum -> feature labels (ground.coverage) of a pool that the
    stratum's numerics examples never reached (runtime-only labels aside)."""
    from ground.coverage import labels
    from ground.tables import STRATA, flavor_of
    from strategies import geometry

    out = {}
    for f, d in STRATA:
        pool = [g.case(d) for g in geometry.dense_pool(f, d)] + [g.case(f, d) for g in geometry.thd_pool(f, d)]
        want = set().union(*(labels(c) for c in pool)) - {"thd:one_len"}
        got = set().union(*(labels(c) for c in cases if c.dtype == d and flavor_of(c.d_qk, c.d_v) == f))
        if want - got:
            out[f"{f}-{d}"] = sorted(want - got)
    return out


def count(profile: str = "ci", geometry: str = None, select: str = None, compile_tier: bool = False) -> dict:
    """Draw the profile's GPU examples and count their compile keys."""
    if geometry:
        os.environ["SDPA_GEOMETRY"] = geometry
    os.chdir(ROOT)
    rec = Recorder()
    with tempfile.TemporaryDirectory(prefix="sdpa-keys-") as tmp:
        args = [
            "-q",
            "-p",
            "no:cacheprovider",
            "-m",
            "gpu or compile" if compile_tier else "gpu",
            f"--hypothesis-profile={profile}",
            f"--report-dir={tmp}",
            "-W",
            "ignore",
            "--ignore=conformance/test_findings.py",
            "--family=sm80",  # the prepared adapter's keys: the sm90 family's are counted by its own tests
            "conformance",
        ]
        if select:
            args += ["-k", select]
        pytest.main(args, plugins=[rec])
    per_prop = defaultdict(lambda: {"examples": 0, "keys": set()})
    per_stratum = defaultdict(set)
    for prop, case, params in rec.calls:
        p = per_prop[prop]
        p["examples"] += 1
        for k in keys_of(prop, case, params):
            p["keys"].add(k)
            if k[0] in ("dense", "thd"):
                per_stratum[(k[1], "bfloat16" if k[2].io_bf16 else "float16")].add(k)

    numerics = [(case, params) for prop, case, params in rec.calls if prop == "numerics"]
    unvisited = _unvisited_rows(numerics)
    gaps = _label_gaps([case for case, _ in numerics])

    def row(names):
        ex = sum(per_prop[n]["examples"] for n in names)
        keys = set().union(*(per_prop[n]["keys"] for n in names)) if names else set()
        others = set().union(*(p["keys"] for n, p in per_prop.items() if n not in names))
        return {
            "own": len(keys - others),
            "examples": ex,
            "keys": len(keys),
            "examples_per_key": round(ex / len(keys), 2) if keys else None,
            "dense_keys": sum(1 for k in keys if k[0] == "dense"),
            "thd_keys": sum(1 for k in keys if k[0] == "thd"),
            "backward_keys": sum(1 for k in keys if k[0] == "bwd"),
        }

    out = {
        "profile": profile,
        "geometry": geometry or os.environ.get("SDPA_GEOMETRY") or "(profile default)",
        "properties": {n: row([n]) for n in sorted(per_prop)},
        "numerics+tails": row(["numerics", "tails"]),
        "launching": row([n for n in LAUNCHING if n in per_prop]),
        "all": row(sorted(per_prop)),
        "forward": row([n for n in LAUNCHING if n in per_prop and n not in BACKWARD]),
        "backward": row([n for n in BACKWARD if n in per_prop]),
        "numerics_rows_never_drawn": unvisited,
        "numerics_features_missing": gaps,
        "keys_per_stratum": {f"{f}-{d}": len(v) for (f, d), v in sorted(per_stratum.items())},
        "tests": dict(Counter(prop for prop, _, _ in rec.calls)),
    }
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--profile", default="ci")
    p.add_argument("--geometry", choices=("pool", "free", "mixed"), default=None, help="override the profile's geometry mode ($SDPA_GEOMETRY)")
    p.add_argument("-k", dest="select", default=None, help="pytest -k expression (a subset of the tests)")
    p.add_argument("--json", default=None, help="also write the counts here")
    p.add_argument(
        "--compile-tier", action="store_true", help="also draw the CPU compile tier's tests (the gate runs them too, the cpu_tier ones with --cpu-tier)"
    )
    args = p.parse_args(argv)
    out = count(args.profile, args.geometry, args.select, args.compile_tier)
    print(f"\nprofile {out['profile']}, geometry {out['geometry']}")
    print(f"{'property':20} {'examples':>9} {'keys':>6} {'own':>5} {'dense':>6} {'thd':>5} {'bwd':>5} {'ex/key':>7}")
    rows = list(out["properties"].items()) + [(n, out[n]) for n in ("numerics+tails", "forward", "backward", "launching", "all")]
    for name, r in rows:
        print(
            f"{name:20} {r['examples']:9d} {r['keys']:6d} {r['own']:5d} {r['dense_keys']:6d} {r['thd_keys']:5d} {r['backward_keys']:5d} {str(r['examples_per_key']):>7}"
        )
    if out["numerics_rows_never_drawn"]:
        print("numerics: pool rows never drawn: " + "; ".join(f"{k} {' '.join(v)}" for k, v in out["numerics_rows_never_drawn"].items()))
    if out["numerics_features_missing"]:
        print("numerics: pool features never drawn: " + "; ".join(f"{k} {' '.join(v)}" for k, v in out["numerics_features_missing"].items()))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
