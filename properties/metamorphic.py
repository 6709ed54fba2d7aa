"""metamorphic: relations between two launches that hold bit for bit.

No reference and no tolerance: the second launch's Case and inputs are
derived from the first's (``RELATIONS``: how, and why the relation is exact
in the kernel's arithmetic), and its O and LSE must equal the first launch's,
moved the way the inputs moved, bit for bit (NaN equals NaN; -0 equals +0).
Where a reference comparison weakens (long rows, many sequences: its bound
grows with the row) these stay exact, so a key read from the wrong sequence
or a tile anchored to the packed offset fails here whatever its size.

Every variation (permutation, changed sequence, power, shift, data seed) is
drawn from ``random.Random(f"{relation}:{case.seed}")``: the case file (the
Case and ``relation``) replays both launches exactly; the observation notes
and the failure summary name the variation.

Both launches' guard bands are checked; where the relation keeps the compile
key (every relation but ``entry``) the second launch must compile nothing.
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Tuple

import torch

from ground.case import Case
from ground.data import FINITE_PAD, TORCH_DTYPES, CaseTensors, make_inputs, make_outputs
from ground.outcome import Observation, Unsupported
from ground.tables import TILE_N
from properties import judge, recorder
from properties.common import device, finish, launched_buffers, row_mask, row_regions

NAME = "metamorphic"
MAX_POWER = 12  # V * 2^k: k in [1, MAX_POWER], and at most what keeps |V| * 2^k <= max / 2 of the I/O dtype
NO_COMPILE = {"misses": 0, "modules": 0, "thd_lru_misses": 0}


# ------------------------------------------------------------------ plans
@dataclass
class Plan:
    """The second launch of a relation: its Case and inputs, and how the
    first launch's outputs map to what it must give (``expect(o1, lse1)`` ->
    (O, LSE, O elements asserted, LSE elements asserted), in the second
    launch's layouts)."""

    case: Case
    inputs: CaseTensors
    expect: Callable
    notes: dict = field(default_factory=dict)
    other: Optional[object] = None  # the second launch's adapter (entry); None: the same


@dataclass(frozen=True)
class Relation:
    name: str
    layouts: Tuple[str, ...]
    derive: Callable[..., Plan]  # (case, first inputs, rng, adapter) -> Plan
    exact: str  # why the relation holds bit for bit in the kernel's arithmetic
    same_key: bool = True  # the second launch has the first's compile key (it must compile nothing)
    # Whether the relation moves anything on this Case (a permutation of one batch
    # entry, head or sequence is the identity: only a determinism check).
    moves: Callable[[Case], bool] = lambda case: True
    other_entry: bool = False  # the second launch runs on the other entry point (other_entry_name): its Case must be expressible there too


def _fresh(case: Case, dev, **kw) -> CaseTensors:
    return make_inputs(case, dev, poison=True, pad_fill=FINITE_PAD, **kw)


def _defined(case: Case, x: CaseTensors, o_shape, lse_shape):
    return row_mask(case, x, "o", o_shape), row_mask(case, x, "lse", lse_shape)


def _perm(rng: random.Random, n: int, *, identity: bool = False) -> List[int]:
    """A permutation of range(n); never the identity when n > 1 unless ``identity``."""
    p = list(range(n))
    rng.shuffle(p)
    if not identity and n > 1 and p == sorted(p):
        p = p[1:] + p[:1]
    return p


def _same(o1, lse1, x2, case2):
    o_where, lse_where = _defined(case2, x2, o1.shape, lse1.shape)
    return o1, lse1, o_where, lse_where


def _set_sinks(dst: torch.Tensor, values: torch.Tensor) -> None:
    """Write the second launch's sink logits. A broadcast sink buffer
    (sink_layout "broadcast", stride 0) holds one logit for every head: any
    permutation of it is itself, and its one element is written once."""
    if dst.dim() and dst.stride(0) == 0:
        dst[:1].copy_(values[:1])
    else:
        dst.copy_(values)


# ----------------------------------------------------------- batch (dense)
def _batch_perm(case: Case, x1: CaseTensors, rng, adapter) -> Plan:
    p = _perm(rng, case.batch)
    pick = lambda lens: None if lens is None else tuple(lens[i] for i in p)  # noqa: E731
    case2 = case.replace(seq_q_lens=pick(case.seq_q_lens), seq_kv_lens=pick(case.seq_kv_lens))
    x2 = _fresh(case2, x1.q.device)
    idx = torch.tensor(p, device=x1.q.device)
    for name in ("q", "k", "v"):
        getattr(x2, name).copy_(getattr(x1, name)[idx])
    if x1.bias is not None:
        x2.bias.copy_(x1.bias)
    if x1.sinks is not None:
        _set_sinks(x2.sinks, x1.sinks)
    return Plan(case2, x2, lambda o1, lse1: _same(o1[idx], lse1[idx], x2, case2), {"permutation": p})


# ----------------------------------------------------------------- heads
def _head_order(case: Case, rng) -> Tuple[List[int], List[int]]:
    """(sigma, tau): new Q head i holds old Q head sigma[i], new KV head j old
    KV head tau[j]; Q heads move with their KV group (a group of new KV head j
    is old group tau[j], its heads shuffled), so head i still reads the KV head
    of the Q head it holds."""
    g = case.h_q // case.h_kv
    tau = _perm(rng, case.h_kv, identity=True)
    inner = [_perm(rng, g, identity=True) for _ in range(case.h_kv)]
    if case.h_q > 1 and tau == sorted(tau) and all(r == sorted(r) for r in inner):  # moves nothing: rotate
        if case.h_kv > 1:
            tau = tau[1:] + tau[:1]
        else:
            inner[0] = inner[0][1:] + inner[0][:1]
    sigma = [tau[i // g] * g + inner[i // g][i % g] for i in range(case.h_q)]
    return sigma, tau


def _head_perm(case: Case, x1: CaseTensors, rng, adapter) -> Plan:
    sigma, tau = _head_order(case, rng)
    dev = x1.q.device
    x2 = _fresh(case, dev)
    s, t = torch.tensor(sigma, device=dev), torch.tensor(tau, device=dev)
    axis = 1  # dense (B, H, S, D) and THD (T, H, D) alike
    x2.q.copy_(x1.q.index_select(axis, s))
    x2.k.copy_(x1.k.index_select(axis, t))
    x2.v.copy_(x1.v.index_select(axis, t))
    if x1.bias is not None:
        x2.bias.copy_(x1.bias.index_select(1, s))
    if x1.sinks is not None:
        _set_sinks(x2.sinks, x1.sinks[s])
    lse_axis = 0 if case.is_thd else 1  # THD LSE is (H, T)
    return Plan(case, x2, lambda o1, lse1: _same(o1.index_select(1, s), lse1.index_select(lse_axis, s), x2, case), {"q_heads": sigma, "kv_heads": tau})


# ------------------------------------------------------------ THD packing
def _moved_rows(case1: Case, case2: Case, order: List[int], which: str, capacity: int) -> torch.Tensor:
    """For every packed row of ``case2``, the row of ``case1`` it holds (-1:
    outside every sequence); sequence i of case2 is sequence order[i] of case1."""
    cu1, cu2 = case1.cu_seqlens(which), case2.cu_seqlens(which)
    idx = torch.full((capacity,), -1, dtype=torch.int64)
    for i, j in enumerate(order):
        n = cu2[i + 1] - cu2[i]
        idx[cu2[i] : cu2[i] + n] = torch.arange(cu1[j], cu1[j] + n)
    return idx


def _rows(x: torch.Tensor, dim: int, idx: torch.Tensor) -> torch.Tensor:
    """``x``'s rows ``idx`` along ``dim``; a first launch with no Q rows at
    all (every q length 0, no base or slack: capacity 0) gives zeros, which
    no live row reads (the second launch may still have capacity: a shifted base)."""
    if x.shape[dim] == 0:
        return x.new_zeros(x.shape[:dim] + (idx.numel(),) + x.shape[dim + 1 :])
    return x.index_select(dim, idx)


def _repack(case: Case, case2: Case, x1: CaseTensors, order: List[int]):
    """The second launch's inputs (poisoned outside its live rows) holding
    the first's sequences in ``order``, and the Q row map."""
    dev = x1.q.device
    x2 = _fresh(case2, dev)
    iq = _moved_rows(case, case2, order, "q", case2.t_q).to(dev)
    ik = _moved_rows(case, case2, order, "kv", case2.t_kv).to(dev)
    for name, idx in (("q", iq), ("k", ik), ("v", ik)):
        live = idx >= 0
        getattr(x2, name)[live] = getattr(x1, name)[idx[live]]
    if x1.sinks is not None:
        _set_sinks(x2.sinks, x1.sinks)

    def expect(o1, lse1):
        live = iq >= 0
        src = torch.where(live, iq, torch.zeros_like(iq))
        o_where, lse_where = _defined(case2, x2, (case2.t_q,) + tuple(o1.shape[1:]), (lse1.shape[0], case2.t_q))
        return _rows(o1, 0, src), _rows(lse1, 1, src), o_where & live[:, None, None], lse_where & live[None, :]

    return x2, expect


def _seq_perm(case: Case, x1: CaseTensors, rng, adapter) -> Plan:
    order = _perm(rng, case.n_seq)
    case2 = case.replace(q_lens=tuple(case.q_lens[j] for j in order), kv_lens=tuple(case.kv_lens[j] for j in order))
    x2, expect = _repack(case, case2, x1, order)
    return Plan(case2, x2, expect, {"sequence_order": order})


def _shift(rng) -> int:
    """A shift of the packed offsets that is no multiple of the KV tile."""
    return rng.choice([d for d in range(1, 3 * TILE_N) if d % TILE_N])


def _position(case: Case, x1: CaseTensors, rng, adapter) -> Plan:
    dq, dk = _shift(rng), _shift(rng)
    case2 = case.replace(q_base=case.q_base + dq, kv_base=case.kv_base + dk)
    x2, expect = _repack(case, case2, x1, list(range(case.n_seq)))
    return Plan(case2, x2, expect, {"q_shift": dq, "kv_shift": dk})


# -------------------------------------------------------------- isolation
def _isolation_targets(case: Case) -> list:
    """What isolation may change on ``case`` so that something else is still
    compared, from the Case alone: a batch entry / sequence while another one
    has Q rows, or the storage outside the live rows ("padding" dense,
    "capacity" THD) where there is some and a Q row is live. Empty: the
    relation moves nothing (a dense batch of one without padding, a single THD
    sequence in a full pack: the second launch would repeat the first)."""
    q, kv = case.q_lengths(), case.kv_lengths()  # a batch entry / sequence with no live row changes nothing
    others_have_rows = lambda j: any(n > 0 for i, n in enumerate(q) if i != j)  # noqa: E731
    if case.is_thd:
        units = [j for j in range(case.n_seq) if (q[j] or kv[j]) and others_have_rows(j)]
        dead = bool(case.q_base or case.q_slack or case.kv_base or case.kv_slack)
        return units + ["capacity"] * (dead and sum(q) > 0)
    padded = any(n < case.s_q for n in q) or any(n < case.s_kv for n in kv)
    entries = [b for b in range(case.batch) if (q[b] or kv[b]) and others_have_rows(b)]
    return entries + ["padding"] * (padded and sum(q) > 0)


def _isolation(case: Case, x1: CaseTensors, rng, adapter) -> Plan:
    dev = x1.q.device
    seed2 = rng.randrange(1, 2**31)
    seed2 += seed2 == case.seed
    x2 = _fresh(case, dev)  # the first launch's bits, in a fresh allocation
    other = make_inputs(case.replace(seed=seed2), dev, poison=False)  # finite everywhere
    targets = _isolation_targets(case)
    if not targets:
        raise ValueError(f"isolation moves nothing on {case.describe()} (RELATIONS['isolation'].moves refuses it)")
    target = rng.choice(targets)
    if case.is_thd:
        q_rows, kv_rows = _unit_rows(case, target, x1)
        q_rows, kv_rows = q_rows.to(dev), kv_rows.to(dev)
        for name, rows in (("q", q_rows), ("k", kv_rows), ("v", kv_rows)):
            getattr(x2, name)[rows] = getattr(other, name)[rows]
        kept_q = ~q_rows if target != "capacity" else torch.ones_like(q_rows)

        def expect(o1, lse1):
            o_where, lse_where = _defined(case, x2, o1.shape, lse1.shape)
            return o1, lse1, o_where & kept_q[:, None, None], lse_where & kept_q[None, :]
    else:
        for name in ("q", "k", "v"):
            t2, t1, fresh = getattr(x2, name), getattr(x1, name), getattr(other, name)
            if target == "padding":  # the rows past the padding lengths: FINITE_PAD -> other finite values
                live = (x1.q_live if name == "q" else x1.kv_live).to(dev)[:, None, :, None]
                t2.copy_(torch.where(live, t1, fresh))
            else:
                t2[target] = fresh[target].where((x1.q_live if name == "q" else x1.kv_live).to(dev)[target][None, :, None], t1[target])
        kept = torch.ones(case.batch, dtype=torch.bool, device=dev)
        if target != "padding":
            kept[target] = False

        def expect(o1, lse1):
            o_where, lse_where = _defined(case, x2, o1.shape, lse1.shape)
            return o1, lse1, o_where & kept[:, None, None, None], lse_where & kept[:, None, None]

    return Plan(case, x2, expect, {"changed": target, "data_seed": seed2})


def _unit_rows(case: Case, target, x1: CaseTensors) -> Tuple[torch.Tensor, torch.Tensor]:
    """Bool masks over the packed Q and KV rows of ``target`` (a sequence
    index, or "capacity": the rows outside every sequence)."""
    if target == "capacity":
        return ~x1.q_live.cpu(), ~x1.kv_live.cpu()
    masks = []
    for which, capacity in (("q", case.t_q), ("kv", case.t_kv)):
        cu = case.cu_seqlens(which)
        m = torch.zeros(capacity, dtype=torch.bool)
        m[cu[target] : cu[target + 1]] = True
        masks.append(m)
    return masks[0], masks[1]


# ------------------------------------------------------------- V scaling
def _v_power(case: Case, x1: CaseTensors, rng) -> int:
    """k in [1, MAX_POWER] with max |live V| * 2^k <= max / 2 of the I/O dtype
    (computed from the data: no overflow; scaling up never underflows)."""
    live = x1.kv_live.to(x1.v.device)
    mask = live[:, None, :, None].expand_as(x1.v) if not case.is_thd else live[:, None, None].expand_as(x1.v)
    values = x1.v[mask].float().abs()
    biggest = float(values.max()) if values.numel() else 0.0
    fmax = torch.finfo(TORCH_DTYPES[case.dtype]).max
    most = MAX_POWER if biggest == 0 else min(MAX_POWER, int(math.floor(math.log2(fmax / 2 / biggest))))
    return rng.randint(1, max(1, most))


def _v_pow2(case: Case, x1: CaseTensors, rng, adapter) -> Plan:
    k = _v_power(case, x1, rng)
    x2 = _fresh(case, x1.q.device)
    live = x1.kv_live.to(x1.v.device)
    mask = live[:, None, :, None].expand_as(x1.v) if not case.is_thd else live[:, None, None].expand_as(x1.v)
    x2.v.copy_(torch.where(mask, x1.v * (2.0**k), x1.v))  # exact: a power of two, in range

    def expect(o1, lse1):
        o_where, lse_where = _defined(case, x2, o1.shape, lse1.shape)
        return (o1.double() * 2.0**k), lse1, o_where, lse_where

    return Plan(case, x2, expect, {"v_power": k})


# ----------------------------------------------------- same launch again
def _determinism(case: Case, x1: CaseTensors, rng, adapter) -> Plan:
    x2 = _fresh(case, x1.q.device)
    return Plan(case, x2, lambda o1, lse1: _same(o1, lse1, x2, case), {})


def other_entry_name(name: str) -> str:
    """The other entry point than adapter ``name``: the public wrapper for the prepared adapter, and back."""
    return "wrapper" if name == "prepared" else "prepared"


def entries_launched(relation: str, entry: str) -> Tuple[str, ...]:
    """The adapters (names) the two launches of ``relation`` run on when the
    first runs on ``entry`` (conformance.testgen projects and steers a drawn
    Case for each)."""
    return (entry, other_entry_name(entry)) if RELATIONS[relation].other_entry else (entry,)


def other_adapter(adapter):
    """The other entry point than ``adapter``'s: the public wrapper (in its
    SM80-compatibility mode off SM80) for the prepared adapter, and back."""
    from properties.common import entry_adapter

    return entry_adapter(other_entry_name(getattr(adapter, "name", "prepared")))


def _entry(case: Case, x1: CaseTensors, rng, adapter) -> Plan:
    other = other_adapter(adapter)
    x2 = _fresh(case, x1.q.device)
    return Plan(case, x2, lambda o1, lse1: _same(o1, lse1, x2, case), {"second_adapter": getattr(other, "label", other.name)}, other)


def _expressible(case: Case, other) -> None:
    """Refuse (``Unsupported``, scope "case": a Hypothesis rejection inside a
    test, which conformance.testgen never reaches: it draws the Case
    projected for both entry points, ``entries_launched``) a Case the second
    entry point cannot be asked for (e.g. lse_log2 through the wrapper):
    there is nothing to compare with. Before anything is recorded."""
    case.require_expressible(getattr(other, "name", ""))


# ------------------------------------------------------------------ table
DENSE, THD = ("dense",), ("thd",)
BOTH = DENSE + THD
RELATIONS: Dict[str, Relation] = {
    r.name: r
    for r in (
        Relation(
            "batch_perm",
            DENSE,
            _batch_perm,
            moves=lambda c: c.batch > 1,
            exact="a CTA computes one (batch, head, Q tile) from that batch entry's rows and padding lengths alone "
            "(prefill_f16.py block_idx -> batch_idx; Q/K/V/O/LSE offsets batch_idx * stride; seq lens [batch_idx]); "
            "the bias is one [1, H, SQ, SKV] for every entry (kept); the scheduler only renames CTAs",
        ),
        Relation(
            "head_perm",
            BOTH,
            _head_perm,
            moves=lambda c: c.h_q > 1,
            exact="a CTA's head reads its own Q head, bias head (head_idx * SQ * SKV) and sink, and KV head head // group: "
            "moving Q heads with their KV group (and the bias heads and sinks with them) moves every operand of a head",
        ),
        Relation(
            "seq_perm",
            THD,
            _seq_perm,
            moves=lambda c: c.n_seq > 1,
            exact="a THD sequence is addressed from cu_seqlens[b] alone and tiled from its own first row "
            "(q_row_base = tile * TILE_M, KV tiles kv_iter * TILE_N from kv_seq_origin): moving whole sequences "
            "(rows and cu_seqlens) moves their outputs; the sequence count (the compile key) is kept",
        ),
        Relation(
            "position",
            THD,
            _position,
            "the same: the packed offset of a sequence enters only as the origin of its addresses, never a tile "
            "boundary or a mask position; shifts that are no multiple of TILE_N would expose a tile anchored to the pack",
        ),
        Relation(
            "isolation",
            BOTH,
            _isolation,
            moves=lambda c: bool(_isolation_targets(c)),
            exact="no CTA reads another batch entry's / sequence's rows; storage outside the live rows is either never "
            "loaded (THD: rows past a sequence are predicated off and zero-filled) or weighted P = 0 (dense padded "
            "K/V rows of the last tile: 0 x finite = 0; NaN there is the known finding dense-padded-kv-rows-nan, "
            "so this relation changes finite values only): changing those leaves every other output identical",
        ),
        Relation(
            "v_pow2",
            BOTH,
            _v_pow2,
            "V enters only P@V: p * v * 2^k is exact, the fp32 accumulation's rounding (alignment grid at the "
            "largest term) and acc * (1/l) scale with it, so O scales by 2^k where the I/O dtype rounds it as a "
            "normal number (tolerances.SUBNORMAL_RESCALE_ULPS below); LSE never reads V",
        ),
        Relation("determinism", BOTH, _determinism, "no atomics, no split-KV reduction: every output element is computed by one CTA in a fixed order"),
        Relation(
            "entry",
            BOTH,
            _entry,
            "the public wrapper launches the same template arithmetic (same TemplateParams arithmetic, the same "
            "scale * log2(e) and 1 / scale launch arguments: api_dsl.py 7005-7031, kernels.prepared); its padding "
            "copies add zero columns (exact no-ops in q.k and P@V) and its scheduler only renames CTAs",
            same_key=False,
            other_entry=True,
        ),
    )
}
# The relations exact for the sm90 family's template (cudnn/sdpa/fwd/kernels/sm90/prefill_d512_f16.py), and
# why; the rest are SM80 statements (position moves the packed origins, which the sm90 THD host normalizes
# away: cu prefixes less their first entry; entry is the SM80 wrapper).
_PF = "prefill_d512_f16.py"
SM90_EXACT: Dict[str, str] = {
    "batch_perm": f"a work item's operands are sliced at (batch, head) ({_PF}:336) and its lengths read at [batch] "
    f"({_PF}:812-846), its masks from those alone ({_PF}:484-487); the LPT schedulers only reorder work items",
    "head_perm": f"a Q head reads K/V head head // qh_per_kh (PackGQA: its packed group) ({_PF}:871) and its own sink; "
    "a row's softmax and P@V read no other row, so moving Q heads with their KV group moves every operand of a head",
    "isolation": "no work item reads another batch entry's rows; K/V rows past a padding length are masked to P = 0 "
    "(finite values only, as for SM80: 0 x finite = 0), Q rows past it are not judged",
    "seq_perm": f"a THD work item reads its sequence at the cu prefixes' origins ({_PF}:824-828, the TMA coordinates "
    f"of Q, K and V at :363 and :399) and tiles from its first row; an overhanging tile's reads of the next sequence "
    f"are masked (S) or zero-filled (V), and O is stored through the sequence's own clipped map (:829-833): moving whole "
    "sequences (rows and prefixes) moves their outputs; the sequence count and the Q total (the compile key) are kept",
    "v_pow2": f"V enters only P@V (P in the I/O dtype, {_PF}:669, :717): p * v * 2^k is exact, the fp32 accumulation "
    f"and the 1/l rescale ({_PF}:739) scale with it; LSE and the sink term never read V",
    "determinism": "no atomics and no split-KV (the planner refuses split_kv): each output element is computed by one work item in a fixed order",
}
assert set(SM90_EXACT) <= set(RELATIONS)
# Per family other than the SM80 one (whose statements RELATIONS holds): the relations it keeps exactly, and why.
FAMILY_EXACT: Dict[str, Dict[str, str]] = {"sm90": SM90_EXACT}
DENSE_RELATIONS = tuple(n for n, r in RELATIONS.items() if "dense" in r.layouts)
THD_RELATIONS = tuple(n for n, r in RELATIONS.items() if "thd" in r.layouts)


def plan(case: Case, x1: CaseTensors, relation: str, adapter=None) -> Plan:
    """The second launch of ``relation`` for ``case`` (deterministic in the
    case's seed)."""
    rel = RELATIONS[relation]
    if case.layout not in rel.layouts:
        raise ValueError(f"relation {relation!r} is for {'/'.join(rel.layouts)} Cases, not {case.layout}")
    return rel.derive(case, x1, random.Random(f"{relation}:{case.seed}"), adapter)


# --------------------------------------------------------------- property
def check_metamorphic(case: Case, adapter, *, relation: str) -> Observation:
    """Launch ``case`` and the second launch ``relation`` derives from it;
    O and LSE of the second must equal the first's, moved the same way, bit
    for bit (``RELATIONS``: how and why); both launches' guard bands intact;
    a relation that keeps the compile key compiles nothing the second time.
    A Case the relation does not move, or (``entry``) that the other entry
    point cannot express, is refused (``Unsupported``, scope "case": no
    verdict) before anything is recorded."""
    rel = RELATIONS[relation]
    exact = rel.exact
    kept = FAMILY_EXACT.get(case.family)
    if kept is not None:
        if relation not in kept:
            raise Unsupported.case(
                f"relation {relation!r} is not one the {case.family} family keeps exactly (FAMILY_EXACT)", adapter=getattr(adapter, "name", None)
            )
        exact = kept[relation]
    if relation == "entry":
        _expressible(case, other_adapter(adapter))
    if not rel.moves(case):  # no verdict: a test draws a Case the relation moves
        raise Unsupported.case(
            f"relation {relation!r} does not move {case.describe()}: its second launch would repeat the first, "
            "which is the determinism relation's check, not this one's",
            adapter=getattr(adapter, "name", None),
        )
    recorder.begin(NAME, case, relation=relation)
    start = time.perf_counter()
    dev = device()
    x1 = _fresh(case, dev)
    p = plan(case, x1, relation, adapter)
    out1 = make_outputs(case, dev)
    r1 = adapter.run(case, x1, out1)
    out2 = make_outputs(p.case, dev)
    r2 = (p.other or adapter).run(p.case, p.inputs, out2)
    variation = {"relation": relation, **p.notes}
    said = ", ".join(f"{k}={v}" for k, v in p.notes.items())
    notes = {**r1.notes, "variation": variation, "second": r2.notes, "second_compile": r2.compile.to_dict(), "exact": exact}
    # Failures name the first Case (the case file replays both launches from it); the elements listed are the
    # second launch's, located in its layout: where that moved the rows (a repacking), no region is named.
    regions = row_regions(case, p.inputs) if p.case == case else None
    where = "" if p.case == case else "; elements at the second launch's rows"

    def judged():
        buffers = {f"first launch {k}": t for k, t in launched_buffers(x1, out1, r1).items()}
        buffers.update({f"second launch {k}": t for k, t in launched_buffers(p.inputs, out2, r2).items()})
        judge.guards_intact(NAME, case, buffers)
        if rel.same_key:
            judge.compile_delta(NAME, case, r2.compile, NO_COMPILE, f"the second launch of {relation} (same compile key)", check="same compile")
        o_want, lse_want, o_where, lse_where = p.expect(r1.o, r1.lse)
        what = f"the second launch ({relation}: {said or 'same inputs'}{where})"
        o_exact = o_where
        if relation == "v_pow2":  # O of the first launch rounded on the subnormal grid: judged within the double rounding (tolerances)
            from ground.tolerances import subnormal_rescale

            sub, bound = subnormal_rescale(r1.o, o_where, TORCH_DTYPES[case.dtype])
            o_exact = o_where & ~sub
            k = p.notes["v_power"]
            judge.within_model(NAME, case, "o", r2.o.double() / 2.0**k, r1.o.double(), bound, sub, regions, check="subnormal rescale")
        judge.exactly(NAME, case, "o", r2.o, o_want, o_exact, f"O of {what}", regions, check="o", defer=True)
        judge.exactly(NAME, case, "lse", r2.lse, lse_want, lse_where, f"LSE of {what}", regions, check="lse", defer=True)
        return {}

    return finish(NAME, case, start, judged, compile=r1.compile.to_dict(), notes=notes)
