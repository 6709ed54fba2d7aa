"""Known findings: real discrepancies of the kernels under test, each excusing
exactly the failure it describes.

This module is the whole concept, with one rule: the findings file and its
validation (``load``/``parse``), the selector model (``Finding``), the
findings in force (``activate``/``applied``), the verdict of one example
(``judge``: which check failures are excused, by which finding) and the
status of every entry at the end of a run (``statuses``: reproduced, stale,
not exercised). docs/known_findings.md documents the format.

What a property reports. Every check that fails on an example is a
``PropertyFailure`` with a structured key: the property, the check (one of
the property's ``checks``), the quantity (o / lse) and what failed: the failing elements
(``where``, a bool mask over the quantity) or the observed outcome
(``observed``, e.g. "accepted" where a rejection was due). The properties
judge every check of an example (a failing check does not stop the others).

The rule. A finding excuses a check failure iff

1. it selects the example: the same property; the same kernel family
   (``when.family``, else the default family sm80); its Case facts (``when``)
   hold; for a contract finding, the Case breaks its ``rule`` at its
   ``entry`` point;
2. it names the same check (and quantity);
3. what failed lies inside what it describes: every failing element sits in
   an output row of its ``region`` (``REGIONS``), or the observed outcome is
   its ``observed``.

An example whose failures are all excused is an ``xfailed`` observation
naming the findings; one failure that no finding excuses fails the example.

Strictness. A finding is *exercised* by an example it selects on which the
failure it describes can occur (its region holds rows of the Case); it is
*reproduced* by an example where it excused a failure. An example on which
an earlier entry that also selects it describes every failure this one does
(``Finding.covers``) does not exercise it: the earlier entry is credited with
any such failure, so the example cannot show this one. At the end of a run a
finding that was exercised and never reproduced is *stale*: the run fails
naming the entry and its line (the kernel changed: remove or fix the entry).
A finding no example exercised (a subset or CPU-only run) is *not
exercised*, which fails nothing.

Crash findings (``check = "crash"``). Where the entry point faults (the
CUDA context is lost) no check is judged, so a crash finding excuses
nothing: it names the entry point, the Cases (``when``) and a ``steer``, Case
facts the tests draw instead while it is in force (``steer``: exactly its
region is replaced, conformance.testgen; parse insists that a steer leaves
the region). Its status in a run is *steered* (with the count of steered
examples) or not exercised, never stale: conformance/test_findings.py
replays its case file in a subprocess and fails once it no longer crashes.
"""

from __future__ import annotations

import json
import os
import re
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

import torch

from . import contracts
from .case import FACTS, Case, CaseFileError, coerce_fact
from .families import DEFAULT_FAMILY, FAMILIES
from .tables import ADAPTERS, FLAVORS, TILE_M, TILE_N, flavor_of, off_envelope

# ------------------------------------------------------------------- checks
# How a check's failure says what failed, which is what a finding must bound:
ROWS = "rows"  # ``where``: a mask over an output quantity; a finding names a row region
STORAGE = "storage"  # a mask over whole flat storage (no rows): no finding can bound it
OUTCOME = "outcome"  # ``observed``: what the call did; a finding names that outcome
PLAIN = "plain"  # the check as a whole; a finding needs Case facts or a contract rule

# The checks a finding may name: property -> check id -> (kind, what the check
# asserts). The properties own them (``Property.checks``, properties/registry.py;
# ``properties.CHECKS`` is their union) and name their failures with these ids
# (properties.judge ``check=``); ``load`` / ``parse`` take the vocabulary from
# their caller (ground is below the properties).
Checks = Mapping[str, Mapping[str, Tuple[str, str]]]

QUANTITIES = ("o", "lse")
# Gradients with rows (a failure's mask over one has them, so a finding on a plain backward check may
# bound it with a region): dQ is laid out as Q (dense (B, H, S_q, D), THD (T_q, H, D)), the rows of O;
# dK and dV as K/V (dense (B, H_kv, S_kv, D), THD (T_kv, H_kv, D)), K/V rows (a region's space "kv").
ROW_GRADS = ("dq", "dk", "dv")
KV_QUANTITIES = ("dk", "dv")
# The backward's gradients: a plain backward/determinism check's failure names one (detail "quantity").
GRAD_QUANTITIES = ("dq", "dk", "dv", "dbias", "dsink")
# Gradients only some Cases have (ground.data.make_grads allocates them): a
# finding about one is not exercised by a Case without it, so it cannot go
# stale in a run whose padded Cases happened to draw no bias or no sinks.
PRODUCED_WHEN = {"dbias": lambda c: c.bias is not None and not c.is_thd, "dsink": lambda c: c.sinks}
ACCEPTED = "accepted"  # the ``observed`` outcome of a call that returned normally
# Checks that judge a NaN mask (torch.isnan of an output) against none: a failing element is NaN by
# definition and the judge sees booleans, so ``nan = true`` (a bound to NaN values) would excuse nothing.
NAN_MASK_CHECKS = frozenset({"no nan"})


# ------------------------------------------------------------------ regions
# A region is a set of output rows, in one canonical layout: dense (B, H_q,
# S_q), THD (H_q, T_q) (the LSE layouts). An O element lies in a region when
# its row does. A region of space "kv" is a set of K/V rows (dense (B, H_kv,
# S_kv), THD (H_kv, T_kv)), where dK and dV elements lie.
@dataclass(frozen=True)
class Region:
    doc: str
    rows: Callable[[Case], torch.Tensor]
    space: str = "q"


def row_shape(case: Case, space: str = "q") -> Tuple[int, ...]:
    if space == "kv":
        return (case.h_kv, case.t_kv) if case.is_thd else (case.batch, case.h_kv, case.s_kv)
    return (case.h_q, case.t_q) if case.is_thd else (case.batch, case.h_q, case.s_q)


def _dense_rows(case: Case, per_batch_row: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> torch.Tensor:
    """Dense rows selected by ``per_batch_row(token (1, S), batch (B, 1))`` for every head; THD none."""
    if case.is_thd:
        return torch.zeros(row_shape(case), dtype=torch.bool)
    token, batch = torch.arange(case.s_q)[None, :], torch.arange(case.batch)[:, None]
    return per_batch_row(token, batch)[:, None, :].expand(row_shape(case)).clone()


def _padded_q_rows(case: Case) -> torch.Tensor:
    if case.seq_q_lens is None:
        return _dense_rows(case, lambda t, b: torch.zeros(case.batch, case.s_q, dtype=torch.bool))
    q_len = torch.tensor(case.q_lengths())
    return _dense_rows(case, lambda t, b: t >= q_len[b])


def _reaches_padding(case: Case, tile_n: int) -> torch.Tensor:
    """(B,) whether each entry's last KV tile, ceil(seq_kv_len / tile_n) - 1, holds
    rows past seq_kv_len (up to the physical S_KV): rows the kernel loads."""
    kv_len = torch.tensor(case.seq_kv_lens)
    return (kv_len > 0) & (kv_len < case.s_kv) & (kv_len % tile_n != 0)


def _live_rows_of_padded_kv_entries(case: Case) -> torch.Tensor:
    if case.seq_kv_lens is None:
        return _dense_rows(case, lambda t, b: torch.zeros(case.batch, case.s_q, dtype=torch.bool))
    padded, q_len = torch.tensor([n < case.s_kv for n in case.seq_kv_lens]), torch.tensor(case.q_lengths())
    return _dense_rows(case, lambda t, b: (t < q_len[b]) & padded[b])


def _kv_rows_of_empty_q_entries(case: Case) -> torch.Tensor:
    """Dense live K/V rows (token < seq_kv_len[b]) of the batch entries with no Q row (seq_q_len[b] = 0)."""
    if case.is_thd or case.seq_q_lens is None:
        return torch.zeros(row_shape(case, "kv"), dtype=torch.bool)
    empty, kv_len = torch.tensor([n == 0 for n in case.seq_q_lens]), torch.tensor(case.kv_lengths())
    token, batch = torch.arange(case.s_kv)[None, :], torch.arange(case.batch)[:, None]
    return ((token < kv_len[batch]) & empty[batch])[:, None, :].expand(row_shape(case, "kv")).clone()


def _live_rows_loading_padded_kv(case: Case) -> torch.Tensor:
    if case.seq_kv_lens is None:
        return _dense_rows(case, lambda t, b: torch.zeros(case.batch, case.s_q, dtype=torch.bool))
    reaches_padding, q_len = _reaches_padding(case, TILE_N), torch.tensor(case.q_lengths())
    return _dense_rows(case, lambda t, b: (t < q_len[b]) & reaches_padding[b])


def _q_tiles_loading_padded_kv(case: Case) -> torch.Tensor:
    """Dense rows, live or padded, of the Q tiles that start below seq_q_len[b]
    (the tiles that run: a Q tile wholly past it visits no KV tile) in the
    batch entries whose last KV tile reaches past seq_kv_len[b]. A Q tile holds
    tile_m / (the PackGQA head ratio) tokens (ground.families)."""
    if case.seq_kv_lens is None:
        return _dense_rows(case, lambda t, b: torch.zeros(case.batch, case.s_q, dtype=torch.bool))
    fam = FAMILIES[case.family]
    tile_m, tile_n = fam.tile
    tokens = tile_m // (case.h_q // case.h_kv) if case.pack_gqa else tile_m
    reaches_padding, q_len = _reaches_padding(case, tile_n), torch.tensor(case.q_lengths())
    return _dense_rows(case, lambda t, b: (t // tokens * tokens < q_len[b]) & reaches_padding[b])


def _thd_lse_past_compact_zeroing(case: Case) -> torch.Tensor:
    """THD rows (h, t) of a "padded" LSE whose element h * pitch + t lies at or
    past H * T_q: the compact (H, T_q) extent the host's initialisation zeroes."""
    if not case.is_thd or case.lse_layout != "padded":
        return torch.zeros(row_shape(case), dtype=torch.bool)
    from ground.data import thd_lse_pitch

    h, t = torch.arange(case.h_q)[:, None], torch.arange(case.t_q)[None, :]
    return h * thd_lse_pitch(case) + t >= case.h_q * case.t_q


REGIONS: Dict[str, Region] = {
    "padded_q_rows": Region(
        "dense output rows past seq_q_len[b] (the contract: O 0, LSE -inf)",
        _padded_q_rows,
    ),
    "live_rows_loading_padded_kv": Region(
        f"dense live output rows (token < seq_q_len[b]) of the batch entries whose last KV tile "
        f"(TILE_N = {TILE_N}) reaches past seq_kv_len[b] into the padding: 0 < seq_kv_len[b] < S_KV "
        f"and seq_kv_len[b] % {TILE_N} != 0",
        _live_rows_loading_padded_kv,
    ),
    "live_rows_of_padded_kv_entries": Region(
        "dense live rows (token < seq_q_len[b]) of the batch entries with K/V rows past seq_kv_len[b]: seq_kv_len[b] < S_KV "
        "(a kernel that loads every K/V tile up to the physical S_KV, as the backward does)",
        _live_rows_of_padded_kv_entries,
    ),
    "q_tiles_loading_padded_kv": Region(
        "dense output rows, live or padded, of the Q tiles that start below seq_q_len[b] (tile_m tokens, tile_m / ratio "
        "under PackGQA: the family's tile) in the batch entries whose last KV tile reaches past seq_kv_len[b] into the "
        "padding: 0 < seq_kv_len[b] < S_KV and seq_kv_len[b] % tile_n != 0",
        _q_tiles_loading_padded_kv,
    ),
    "kv_rows_of_empty_q_entries": Region(
        "dense live K/V rows (token < seq_kv_len[b]) of the batch entries with no Q row (seq_q_len[b] = 0): dK / dV rows",
        _kv_rows_of_empty_q_entries,
        "kv",
    ),
    "thd_lse_past_compact_zeroing": Region(
        "THD LSE rows (h, t) of a head-padded Stats layout whose element h * pitch + t lies past the first H * T_q "
        "elements (what zero_outputs' compact view reaches)",
        _thd_lse_past_compact_zeroing,
    ),
}


# A storage region: cells of an output's flat storage body (a STORAGE check's
# failing mask is over that body), for the whole-storage checks a finding can
# still bound, e.g. a host that zeroes more than the view it was handed.
@dataclass(frozen=True)
class StorageRegion:
    doc: str
    applies: Callable[[Case], bool]  # the Case has such storage at all
    cells: Callable[[Case, int], torch.Tensor]  # (Case, body length) -> bool mask over the body


STORAGE_REGIONS: Dict[str, StorageRegion] = {
    "thd_lse_compact_extent": StorageRegion(
        "the first H * T_q elements of a THD head-padded Stats buffer (the compact (H, T_q) extent zero_outputs writes)",
        lambda c: c.is_thd and c.lse_layout == "padded" and c.h_q > 1,
        lambda c, n: torch.arange(n) < c.h_q * c.t_q,
    ),
}


def failing_rows(case: Case, quantity: Optional[str], where) -> Optional[torch.Tensor]:
    """The output rows holding a failing element of ``where`` (a mask over O
    or LSE in the suite layouts), canonical layout; None when ``where`` is no
    such mask (flat storage, another width)."""
    if where is None or quantity not in QUANTITIES + ROW_GRADS or not isinstance(where, torch.Tensor):
        return None
    w = where.detach().to("cpu", torch.bool)
    if quantity != "lse":  # O and the gradients: an element per head dim
        if w.dim() < 1:
            return None
        w = w.any(-1)
        if case.is_thd and w.dim() == 2:
            w = w.transpose(0, 1)  # (T, H) -> (H, T)
    return w if tuple(w.shape) == row_shape(case, "kv" if quantity in KV_QUANTITIES else "q") else None


# --------------------------------------------------------- derived Case facts
# ``when`` keys beyond the Case fields: facts the ground tables derive.
DERIVED: Dict[str, Tuple[Callable[[Case], Any], Callable[[Any], bool], str]] = {
    "off_envelope": (lambda c: off_envelope(c.d_qk, c.d_v), lambda v: isinstance(v, bool), "true/false"),
    "flavor": (lambda c: flavor_of(c.d_qk, c.d_v), lambda v: v in FLAVORS + ("none",), f"one of {', '.join(FLAVORS + ('none',))}"),
    "bias_broadcast_over_batch": (lambda c: _broadcast(c), lambda v: isinstance(v, bool), "true/false"),
    # THD with a first cu_seqlens offset > 0 on either side.
    "thd_cu_offset": (lambda c: c.is_thd and bool(c.q_base or c.kv_base), lambda v: isinstance(v, bool), "true/false"),
    # Dense seq_q_lens with an entry of no query row that still has keys (its dK rows are defined).
    "empty_q_entry_with_keys": (
        lambda c: not c.is_thd and c.seq_q_lens is not None and _empty_q_with_keys(c),
        lambda v: isinstance(v, bool),
        "true/false",
    ),
    # An entry with no Q row but keys puts NaN in its dBias cells (row 0, a key below its length): dead cells
    # of its own under a per-batch bias; under a broadcast one, dead only past every Q-row entry's length.
    "empty_q_dbias_nan_dead": (
        lambda c: not c.is_thd and _empty_q_nan_dead(c),
        lambda v: isinstance(v, bool),
        "true/false",
    ),
    # A bias broadcast over the batch sums every entry's dBias into the same cells (batch stride 0), so a
    # NaN cell of one entry is a NaN in a cell another entry makes live (row 0, a key below its length):
    # an entry with no Q row but keys (its D is read at a dead row) beside an entry with a Q row and keys;
    "broadcast_dbias_empty_q_live": (
        lambda c: not c.is_thd and _broadcast(c) and _empty_q_with_keys(c) and any(q > 0 and kv > 0 for q, kv in _lens(c)),
        lambda v: isinstance(v, bool),
        "true/false",
    ),
    # an entry with padded keys (NaN V rows past its length) beside an entry with a Q row and a longer length.
    "broadcast_dbias_padded_kv_live": (
        lambda c: not c.is_thd and _broadcast(c) and any(kv1 < kv2 for _, kv1 in _lens(c) for q2, kv2 in _lens(c) if q2 > 0),
        lambda v: isinstance(v, bool),
        "true/false",
    ),
    # THD, one head, and the Stats the backward is handed (from its origin, cu_seqlens_q[0]) keeps a longer
    # stride on its size-1 dims: a compact Stats sliced past q_base > 0, or a head-padded one.
    "thd_one_head_stats_strided": (
        lambda c: c.is_thd and c.h_q == 1 and (c.lse_layout == "padded" or (c.lse_layout == "compact" and c.q_base > 0)),
        lambda v: isinstance(v, bool),
        "true/false",
    ),
    # Dense seq_kv_lens with a length short of the physical S_KV: padded K/V rows exist.
    "kv_padded": (lambda c: not c.is_thd and c.seq_kv_lens is not None and any(n < c.s_kv for n in c.seq_kv_lens), lambda v: isinstance(v, bool), "true/false"),
    # Fused RoPE whose last partial Q tile (TILE_M rows) or K tile (TILE_N rows) reaches past the
    # angle table the caller hands (rope_rows: max(S_q, S_kv) rows): the kernel rotates every row of a tile.
    "rope_table_overread": (lambda c: rope_table_overread(c), lambda v: isinstance(v, bool), "true/false"),
    # Sinks and three or more batch entries / THD sequences with Q rows: dSink[h] sums their partials by
    # fp32 atomics (two adds onto 0 commute; a third can land in either order).
    "dsink_unordered_sum": (
        lambda c: c.sinks and sum(1 for n in (c.q_lens if c.is_thd else c.q_lengths()) if n > 0) >= 3,
        lambda v: isinstance(v, bool),
        "true/false",
    ),
}


def _broadcast(c: Case) -> bool:
    """A bias broadcast over a batch of two or more entries (one slice serves every entry)."""
    return c.bias is not None and c.bias_batch == 1 and c.batch > 1


def _lens(c: Case):
    """(seq_q_len, seq_kv_len) per dense batch entry."""
    return list(zip(c.q_lengths(), c.kv_lengths()))


def _empty_q_with_keys(c: Case) -> bool:
    """A dense batch entry with no Q row but keys (its dK/dV rows are defined, its dBias row 0 is not)."""
    return any(q == 0 and kv > 0 for q, kv in _lens(c))


def _empty_q_nan_dead(c: Case) -> bool:
    """An entry with no Q row and keys has a NaN dBias cell (row 0, a key below its length) that no entry makes live."""
    longest = max((kv for q, kv in _lens(c) if q > 0), default=0) if _broadcast(c) else 0
    return any(q == 0 and kv > longest for q, kv in _lens(c))


def rope_table_overread(case: Case) -> bool:
    """A dense RoPE Case whose tiles read (cos, sin) rows past a table of
    max(S_q, S_kv) rows: the kernel rotates every row of a Q tile (TILE_M)
    and a K tile (TILE_N), so it reads up to max(ceil(S_q / TILE_M) * TILE_M,
    ceil(S_kv / TILE_N) * TILE_N) rows."""
    from .data import rope_rows  # the table the suite's adapters hand: max(S_q, S_kv) rows

    if not case.rope or case.is_thd:
        return False
    read = max(-(-case.s_q // TILE_M) * TILE_M, -(-case.s_kv // TILE_N) * TILE_N)
    return read > rope_rows(case)


# ``when`` keys naming a parameter of the property (not a Case fact): the
# mode an example ran in, e.g. the THD tails' output initialisation. An
# example of a property without that parameter never matches.
PARAMETERS: Dict[str, Tuple[Callable[[Any], bool], str]] = {
    "initialize_outputs": (lambda v: isinstance(v, bool), "true/false (the THD host zeroes O and Stats before attention)"),
    "fact": (lambda v: isinstance(v, str) and bool(v), "the compiled-in Case fact compile_distinct varies (properties.compile_cache.COMPILED_FACTS)"),
}


def _fact(case: Case, name: str, params: Mapping[str, Any]):
    if name in PARAMETERS:
        return params.get(name)
    return DERIVED[name][0](case) if name in DERIVED else getattr(case, name)


# ------------------------------------------------------------------ entries
KEYS = ("id", "reason", "property", "check", "quantity", "region", "observed", "rule", "entry", "when", "steer", "race", "nan", "link")
# The check of a crash finding: the entry point faults (a lost CUDA context) on the
# Cases it selects. No property judges it: a fault ends the process before any
# verdict. While one is in force the tests draw around its region (``steer``).
CRASH = "crash"


class FindingsError(ValueError):
    """A findings file that cannot be used; the message names file, entry and key."""


@dataclass(frozen=True, eq=False)
class Finding:
    id: str
    reason: str
    property: str
    check: str
    quantity: Optional[str] = None
    region: Optional[str] = None
    observed: Optional[str] = None
    rule: Optional[str] = None
    entry: Optional[str] = None
    when: Mapping[str, Any] = field(default_factory=dict)
    link: Optional[str] = None
    source: str = ""  # "<file>:<line>" of the entry
    steer: Mapping[str, Any] = field(default_factory=dict)  # crash: Case facts drawn instead of its region
    # A race (e.g. unordered fp32 atomics): an example it selects may or may not fail, so a
    # run that never sees it fail does not make it stale; its case file's replay does.
    race: bool = False
    # The failing elements all hold NaN (the failure's detail "nan_only"): a check of values (e.g. a
    # capacity that must be 0) whose finding is a NaN leak excuses no other wrong value.
    nan: bool = False

    @property
    def family(self) -> str:
        """The kernel family the finding is about: its ``when.family``, else the default family."""
        return self.when.get("family", DEFAULT_FAMILY)

    @property
    def crash(self) -> bool:
        """A crash finding: excuses nothing; the tests steer around its region."""
        return self.check == CRASH

    # -- selection
    def selects(self, property: str, case: Case, entry: Optional[str] = None, params: Optional[Mapping[str, Any]] = None) -> bool:
        """The example (property, Case, entry point, property parameters) is
        one this finding is about (a crash finding without a property: every
        property that launches its entry point)."""
        if property != self.property and not (self.crash and self.property is None):
            return False
        if case.family != self.family:
            return False
        if self.rule is not None and case.violation != self.rule:
            return False
        if self.entry is not None and entry != self.entry:  # a contract finding, or one only an entry point shows
            return False
        return all(_fact(case, k, params or {}) == v for k, v in self.when.items())

    def exercised_by(self, property: str, case: Case, entry: Optional[str] = None, params: Optional[Mapping[str, Any]] = None) -> bool:
        """Selected, and the failure it describes can occur on this Case (its
        region has rows; a crash finding: selected is enough)."""
        return self.selects(property, case, entry, params) and self.can_occur(case)

    def can_occur(self, case: Case) -> bool:
        """The failure it describes can occur on ``case`` (selection aside): its
        quantity is produced and its region has rows; a crash finding: always."""
        if self.crash:
            return True
        if self.quantity in PRODUCED_WHEN and not PRODUCED_WHEN[self.quantity](case):
            return False
        if self.region in STORAGE_REGIONS:
            return STORAGE_REGIONS[self.region].applies(case)
        return self.region is None or bool(REGIONS[self.region].rows(case).any())

    # -- the rule
    def excuses(self, failure, entry: Optional[str] = None, params: Optional[Mapping[str, Any]] = None) -> bool:
        """``failure`` (a PropertyFailure) is exactly the failure this finding
        describes (a crash finding excuses nothing: its Cases are never run)."""
        if self.crash or not self.selects(failure.property, failure.case, entry, params) or getattr(failure, "check", None) != self.check:
            return False
        if self.quantity is not None and failure.detail.get("quantity") != self.quantity:
            return False
        if self.nan and failure.detail.get("nan_only") is not True:
            return False
        if self.observed is not None:
            return getattr(failure, "observed", None) == self.observed
        if self.region in STORAGE_REGIONS:  # the failing cells of the flat storage body all lie in it
            bad = getattr(failure, "where", None)
            if not isinstance(bad, torch.Tensor) or bad.dim() != 1 or not bool(bad.any()):
                return False
            return not bool((bad.cpu() & ~STORAGE_REGIONS[self.region].cells(failure.case, bad.numel())).any())
        if self.region is not None:
            rows = failing_rows(failure.case, failure.detail.get("quantity"), getattr(failure, "where", None))
            return rows is not None and bool(rows.any()) and not bool((rows & ~REGIONS[self.region].rows(failure.case)).any())
        return True  # a plain check, narrowed by its Case facts / rule (parse insists)

    def covers(self, other: "Finding") -> bool:
        """Every failure ``other`` excuses, this finding excuses too, on an
        example both select: the same check, and a description no narrower
        (any quantity or the same; NaN-only or not where ``other`` is; then,
        as ``excuses`` reads them, any outcome and rows, or the same
        observed outcome, or the same region)."""
        if self.crash or self.check != other.check or self.quantity not in (None, other.quantity) or (self.nan and not other.nan):
            return False
        if self.observed is not None:
            return other.observed == self.observed
        if self.region is not None:
            return other.observed is None and other.region == self.region
        return True

    # -- steering (crash findings)
    def steered(self, case: Case) -> Case:
        """``case`` (one this crash finding selects) with its ``steer`` facts:
        outside the region (parse insists), and still a valid Case of the same
        contract rule; FindingsError naming the entry where it is not."""
        out = case.replace(**self.steer)
        where = f"{self.source or 'known findings'}: finding {self.id!r}: key 'steer'"
        problem = out.structural_problem()
        if problem:
            raise FindingsError(f"{where}: steering {case.describe()} gives an invalid Case: {problem}")
        if case.violation is not None and case.violation in contracts.RULES_BY_NAME and not contracts.RULES_BY_NAME[case.violation].broken_by(out):
            raise FindingsError(f"{where}: steering {case.describe()} no longer breaks its contract rule {case.violation!r}")
        return out

    def describe(self) -> str:
        if self.crash:
            parts = [f"{self.property or 'every property'}: {CRASH}", f"entry {self.entry}"]
            if self.when:
                parts.append(", ".join(f"{k}={v!r}" for k, v in self.when.items()))
            parts.append("drawn instead: " + ", ".join(f"{k}={v!r}" for k, v in self.steer.items()))
            return "; ".join(parts)
        parts = [f"{self.property}: {self.check}"]
        if self.quantity:
            parts.append(self.quantity.upper())
        if self.nan:
            parts.append("NaN elements only")
        if self.region:
            parts.append(f"{'storage' if self.region in STORAGE_REGIONS else 'rows'} in {self.region}")
        if self.observed:
            parts.append(f"observed {self.observed}")
        if self.rule:
            parts.append(f"rule {self.rule}@{self.entry}")
        elif self.entry:
            parts.append(f"entry {self.entry}")
        if self.when:
            parts.append(", ".join(f"{k}={v!r}" for k, v in self.when.items()))
        return "; ".join(parts)

    def to_dict(self) -> dict:
        out = {k: getattr(self, k) for k in KEYS if getattr(self, k) not in (None, {})}
        out["when"] = {k: list(v) if isinstance(v, tuple) else v for k, v in self.when.items()}
        if self.steer:
            out["steer"] = {k: list(v) if isinstance(v, tuple) else v for k, v in self.steer.items()}
        return out | {"source": self.source, "selects": self.describe()}


def _refuse_selector(where: str, entry: dict) -> None:
    if "nodeid" in entry:
        raise FindingsError(
            f"{where}: key 'nodeid': node-id selectors are gone (they excused whole tests); "
            "name the property, check and region of the failure instead (docs/known_findings.md)"
        )


def _string(where: str, entry: dict, key: str, choices: Optional[Sequence[str]] = None, required: bool = False) -> Optional[str]:
    if key not in entry:
        if required:
            hint = f" (one of: {', '.join(choices)})" if choices else ""
            raise FindingsError(f"{where}: key {key!r} is required{hint}")
        return None
    value = entry[key]
    if not isinstance(value, str) or not value.strip():
        raise FindingsError(f"{where}: key {key!r} must be a non-empty string")
    if choices is not None and value not in choices:
        raise FindingsError(f"{where}: key {key!r}: {value!r} is not one of {', '.join(choices) or '(none)'}")
    return value


def _when(where: str, entry: dict) -> dict:
    when = entry.get("when", {})
    if not isinstance(when, dict):
        raise FindingsError(f"{where}: key 'when' must be a table of Case facts")
    facts = {}
    for name, value in when.items():
        if name in DERIVED or name in PARAMETERS:
            valid, expected = (DERIVED[name][1], DERIVED[name][2]) if name in DERIVED else PARAMETERS[name]
            if not valid(value):
                raise FindingsError(f"{where}: key 'when': {name!r}: expected {expected}, got {value!r}")
            facts[name] = value
        elif name in FACTS:
            try:
                facts[name] = coerce_fact(name, value)
            except CaseFileError as e:
                raise FindingsError(f"{where}: key 'when': {e}") from None
        else:
            raise FindingsError(
                f"{where}: key 'when': {name!r} is not a Case field, a derived fact ({', '.join(DERIVED)}) nor a property parameter ({', '.join(PARAMETERS)})"
            )
    return facts


def _entry(where: str, entry: dict, source: str, checks: Checks) -> Finding:
    _refuse_selector(where, entry)
    unknown = sorted(set(entry) - set(KEYS))
    if unknown:
        raise FindingsError(f"{where}: unknown key {unknown[0]!r} (known: {', '.join(KEYS)})")
    if entry.get("check") == CRASH:
        return _crash_entry(where, entry, source, checks)
    if "steer" in entry:
        raise FindingsError(f"{where}: key 'steer': only a crash finding (check = {CRASH!r}) steers the tests' draws")
    fid = _string(where, entry, "id", required=True)
    reason = _string(where, entry, "reason", required=True)
    prop = _string(where, entry, "property", tuple(checks), required=True)
    check = _string(where, entry, "check", tuple(checks[prop]), required=True)
    kind = checks[prop][check][0]
    quantity = _string(where, entry, "quantity", QUANTITIES + GRAD_QUANTITIES)
    region = _string(where, entry, "region", tuple(REGIONS) + tuple(STORAGE_REGIONS))
    observed = _string(where, entry, "observed")
    rule = _string(where, entry, "rule", tuple(contracts.RULES_BY_NAME))
    entry_point = _string(where, entry, "entry", tuple(contracts.ENTRY_POINTS))
    when = _when(where, entry)
    link = _string(where, entry, "link")
    race, nan = entry.get("race", False), entry.get("nan", False)
    for key, value in (("race", race), ("nan", nan)):
        if not isinstance(value, bool):
            raise FindingsError(f"{where}: key {key!r} must be true or false")
    if nan and (kind not in (ROWS, PLAIN) or quantity is None):
        raise FindingsError(f"{where}: key 'nan': only a check of an output's values (with its quantity) can be bounded to NaN elements")
    if nan and check in NAN_MASK_CHECKS:
        raise FindingsError(f"{where}: key 'nan': check {check!r} judges a NaN mask, its failures are NaN already (nan = true would excuse nothing)")
    if race and kind not in (PLAIN,):
        raise FindingsError(f"{where}: key 'race': only a plain check (e.g. determinism's bitwise) can describe a race")
    # Specific by construction: a finding bounds what failed.
    if kind == STORAGE and (region not in STORAGE_REGIONS or quantity is None):
        raise FindingsError(
            f"{where}: key 'check': {prop} check {check!r} judges whole storage; a finding must bound it with quantity and a "
            f"storage region ({', '.join(STORAGE_REGIONS)})"
        )
    if region in REGIONS and quantity is not None and (REGIONS[region].space == "kv") != (quantity in KV_QUANTITIES):
        raise FindingsError(f"{where}: key 'region': {region!r} holds {REGIONS[region].space.upper()} rows, not the rows of {quantity!r}")
    if kind != STORAGE and region in STORAGE_REGIONS:
        raise FindingsError(f"{where}: key 'region': {region!r} is a storage region; check {check!r} judges output rows")
    if kind == STORAGE:
        pass
    elif kind == ROWS:
        for key, value in (("quantity", quantity), ("region", region)):
            if value is None:
                raise FindingsError(f"{where}: key {key!r} is required for the row check {check!r} (the failing elements must lie in the region)")
    elif (region is not None and not (kind == PLAIN and quantity in ROW_GRADS)) or (
        quantity is not None and not (kind == PLAIN and quantity in GRAD_QUANTITIES)
    ):
        # (a plain backward check may name the gradient it failed on, and bound dQ's rows by a region)
        raise FindingsError(f"{where}: key {'region' if region is not None else 'quantity'!r}: check {check!r} has no output rows")
    if kind == OUTCOME and observed is None:
        raise FindingsError(f"{where}: key 'observed' is required for the check {check!r} (e.g. {ACCEPTED!r} or an exception type name)")
    if kind != OUTCOME and observed is not None:
        raise FindingsError(f"{where}: key 'observed': check {check!r} has no observed outcome")
    if kind == PLAIN and not (when or rule):
        raise FindingsError(f"{where}: key 'when' (or 'rule') is required: the check {check!r} as a whole is too broad to be one finding")
    if rule is not None and entry_point is None:
        raise FindingsError(f"{where}: key 'entry' is required with 'rule': a contract finding names the rule and the entry point")
    if prop == "rejection" and rule is None:
        raise FindingsError(f"{where}: key 'rule' is required for a rejection finding (with 'entry')")
    if rule is not None:
        if prop != "rejection":
            raise FindingsError(f"{where}: key 'rule': only the rejection property runs contract-violating Cases")
        if entry_point not in contracts.RULES_BY_NAME[rule].expect:
            raise FindingsError(f"{where}: key 'entry': rule {rule!r} targets {', '.join(contracts.RULES_BY_NAME[rule].targets)}, not {entry_point!r}")
    return Finding(fid, reason, prop, check, quantity, region, observed, rule, entry_point, when, link, source, race=race, nan=nan)


def _crash_entry(where: str, entry: dict, source: str, checks: Checks) -> Finding:
    """A crash finding: the entry point faults on the Cases ``when`` selects
    (no property verdict: the process loses its CUDA context), and the tests
    draw ``steer``'s facts instead while it is in force."""
    fid = _string(where, entry, "id", required=True)
    reason = _string(where, entry, "reason", required=True)
    prop = _string(where, entry, "property", tuple(checks))  # optional: absent, every property that launches the entry point
    for key in ("quantity", "region", "observed", "rule"):
        if key in entry:
            raise FindingsError(f"{where}: key {key!r}: a crash finding has no {key} (the entry point faults: no check is judged)")
    entry_point = _string(where, entry, "entry", tuple(ADAPTERS), required=True)
    when = _when(where, entry)
    if not when:
        raise FindingsError(f"{where}: key 'when' is required for a crash finding: the Cases the entry point faults on (its tests draw around them)")
    steer = _steer(where, entry, when, entry_point)
    link = _string(where, entry, "link")
    return Finding(fid, reason, prop, CRASH, None, None, None, None, entry_point, when, link, source, steer)


def _steer(where: str, entry: dict, when: Mapping[str, Any], entry_point: str) -> dict:
    """A crash finding's ``steer``: Case facts (of values ``entry_point`` can
    express) of which at least one is a Case fact ``when`` names, set to
    another value: every steered Case is provably outside the region."""
    steer = entry.get("steer")
    if not isinstance(steer, dict) or not steer:
        raise FindingsError(
            f"{where}: key 'steer' is required for a crash finding: a table of Case facts the tests draw instead of "
            "the Cases it selects, e.g. steer = { rope = false }"
        )
    out = {}
    for name, value in steer.items():
        if name not in FACTS:
            raise FindingsError(f"{where}: key 'steer': {name!r} is not a Case field (a steer sets Case facts; known: {', '.join(FACTS)})")
        try:
            out[name] = coerce_fact(name, value)
        except CaseFileError as e:
            raise FindingsError(f"{where}: key 'steer': {e}") from None
        f = FACTS[name]
        problem = f.problem(out[name])
        if problem:
            raise FindingsError(f"{where}: key 'steer': {problem}")
        if f.adapters is not None and entry_point not in f.adapters and out[name] != f.default:
            raise FindingsError(f"{where}: key 'steer': {name} = {value!r}: the {entry_point} adapter cannot express it (only {', '.join(f.adapters)})")
    if not any(name in when and when[name] != value for name, value in out.items()):
        named = [n for n in when if n in FACTS]
        raise FindingsError(
            f"{where}: key 'steer': {', '.join(f'{k} = {v!r}' for k, v in out.items())} does not leave the region: a steer must set "
            f"a Case fact that 'when' names ({', '.join(named) or 'none: it names only derived facts or parameters'}) to another value"
        )
    return out


def parse(doc: Any, source: str = "findings", lines: Sequence[int] = (), *, checks: Checks) -> List[Finding]:
    """Validate a parsed findings document ({"finding": [entry, ...]});
    ``lines``: the line of each entry in ``source`` (for messages);
    ``checks``: the properties and the checks an entry may name, with their
    kinds (``properties.CHECKS``)."""
    if not isinstance(doc, dict) or set(doc) - {"finding"}:
        extra = sorted(set(doc) - {"finding"}) if isinstance(doc, dict) else []
        raise FindingsError(f"{source}: top level must hold only [[finding]] entries" + (f" (found {extra[0]!r})" if extra else ""))
    entries = doc.get("finding", [])
    if not isinstance(entries, list):
        raise FindingsError(f"{source}: 'finding' must be an array of tables ([[finding]])")
    out, seen = [], set()
    for i, entry in enumerate(entries):
        at = f"{source}:{lines[i]}" if i < len(lines) else source
        if not isinstance(entry, dict):
            raise FindingsError(f"{at}: finding #{i + 1}: must be a table")
        named = isinstance(entry.get("id"), str) and entry["id"].strip()
        where = f"{at}: finding {entry['id']!r}" if named else f"{at}: finding #{i + 1}"
        f = _entry(where, entry, at, checks)
        if f.id in seen:
            raise FindingsError(f"{where}: key 'id': duplicate id")
        seen.add(f.id)
        out.append(f)
    return out


def load(path, name: Optional[str] = None, *, checks: Checks) -> List[Finding]:
    """Read a findings file (.toml, else JSON) against the vocabulary
    ``checks`` (``properties.CHECKS``); FindingsError names file (as
    ``name``, default the path), line, entry and key."""
    path = os.fspath(path)
    name = name or path
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise FindingsError(f"{name}: cannot read known findings ({e.strerror})") from None
    text = raw.decode("utf-8", errors="replace")
    try:
        if path.endswith(".json"):
            doc = json.loads(raw)
            lines: List[int] = []
        else:
            doc = _toml().loads(text)
            lines = [n for n, line in enumerate(text.splitlines(), 1) if re.match(r"\s*\[\[\s*finding\s*\]\]", line)]
    except ValueError as e:  # JSONDecodeError and TOMLDecodeError are ValueErrors
        raise FindingsError(f"{name}: not valid {'JSON' if path.endswith('.json') else 'TOML'}: {e}") from None
    return parse(doc, name, lines, checks=checks)


def _toml():
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        try:
            import tomli as tomllib
        except ModuleNotFoundError:
            raise FindingsError("reading a TOML findings file on Python 3.10 needs 'tomli' (or use a .json file)") from None
    return tomllib


# ----------------------------------------------------- the findings in force
_in_force: List[Finding] = []


def activate(entries: Iterable[Finding]) -> List[Finding]:
    """Put ``entries`` in force (the plugin, per run); returns the previous ones."""
    global _in_force
    previous, _in_force = _in_force, list(entries)
    return previous


def active() -> List[Finding]:
    return list(_in_force)


@contextmanager
def applied(entries: Iterable[Finding]):
    """``entries`` in force within the block (repro: none; the kill-rate harness: the file's)."""
    previous = activate(entries)
    try:
        yield
    finally:
        activate(previous)


# ------------------------------------------------------------- one example
@dataclass
class Verdict:
    excused: List[Tuple[Any, Finding]]  # (failure, the finding that excuses it)
    unexcused: List[Any]
    exercised: List[str]  # ids of the findings in force this example exercised

    @property
    def reproduced(self) -> List[str]:
        return sorted({f.id for _, f in self.excused})


def judge(
    property: str,
    case: Case,
    failures: Sequence,
    *,
    entry: Optional[str] = None,
    params: Optional[Mapping[str, Any]] = None,
    entries: Optional[Sequence[Finding]] = None,
) -> Verdict:
    """Partition the check failures of one example: each is excused by the
    first finding (in force, or ``entries``) that describes it exactly, or
    not at all. ``params``: the property parameters the example ran with."""
    entries = [f for f in (_in_force if entries is None else entries) if not f.crash]  # crash findings judge nothing: their Cases never run
    excused, unexcused = [], []
    for failure in failures:
        known = next((f for f in entries if f.excuses(failure, entry, params)), None)
        if known is not None:
            excused.append((failure, known))
        else:
            unexcused.append(failure)
    # A finding that an earlier one selecting this example covers is not exercised by it: any failure it
    # describes is credited to the earlier one (the first that excuses it), so the example cannot show it.
    selecting = [f for f in entries if f.selects(property, case, entry, params)]
    exercised = [f.id for i, f in enumerate(selecting) if f.can_occur(case) and not any(g.covers(f) for g in selecting[:i])]
    for _, f in excused:  # an excused failure exercised its finding, whatever the region says
        if f.id not in exercised:
            exercised.append(f.id)
    return Verdict(excused, unexcused, exercised)


# ------------------------------------------------------- steering (crashes)
def steer(
    property: str, case: Case, entries_launched: Sequence[str], params: Optional[Mapping[str, Any]] = None, entries: Optional[Sequence[Finding]] = None
) -> Tuple[Case, List[Finding]]:
    """``case`` as a test draws it while crash findings are in force (or
    ``entries``): each crash finding that selects it for one of the entry
    points the example launches (``entries_launched``: adapter names) replaces
    it with its steered Case, ``case.replace(**steer)``, until none selects
    it; every other Case is returned as it is. Returns (Case, the findings
    that steered it)."""
    crashes = [f for f in (_in_force if entries is None else entries) if f.crash]
    hit: List[Finding] = []
    while True:
        f = next((f for f in crashes for e in entries_launched if f.selects(property, case, e, params)), None)
        if f is None:
            return case, hit
        if f in hit:  # parse makes a steer leave its own region; two findings may still send a Case back and forth
            raise FindingsError(
                f"{f.source or 'known findings'}: finding {f.id!r}: key 'steer': the crash findings "
                f"{', '.join(repr(x.id) for x in hit)} steer {case.describe()} back into this one's region"
            )
        case = f.steered(case)
        hit.append(f)


# ------------------------------------------------------------ end of a run
REPRODUCED, STALE, NOT_EXERCISED, STEERED = "reproduced", "stale", "not exercised", "steered"
RACE_UNSEEN = "not seen (a race)"  # a race finding whose examples all happened to agree: its case file replays it


def statuses(entries: Sequence[Any], observations: Iterable[dict], steered: Optional[Mapping[str, int]] = None) -> List[dict]:
    """Each entry (a Finding or its to_dict()) with its status over the
    observation records of a run (``exercised`` / ``findings`` id lists). A
    crash finding's status is ``steered`` (with ``steered``: how many drawn
    examples it steered, from the run's ``steered`` records) or not
    exercised; it is never stale here (its Cases never run: its case file's
    replay, conformance/test_findings.py, says whether it still crashes)."""
    exercised, reproduced = {}, {}
    for obs in observations:
        for fid in obs.get("exercised") or ():
            exercised[fid] = exercised.get(fid, 0) + 1
        for fid in obs.get("findings") or ():
            reproduced[fid] = reproduced.get(fid, 0) + 1
    out = []
    for e in entries:
        d = e.to_dict() if isinstance(e, Finding) else dict(e)
        if d.get("check") == CRASH:
            n = (steered or {}).get(d["id"], 0)
            d.update(status=STEERED if n else NOT_EXERCISED, exercised=0, reproduced=0, steered=n)
            out.append(d)
            continue
        n_ex, n_rep = exercised.get(d["id"], 0), reproduced.get(d["id"], 0)
        status = REPRODUCED if n_rep else (RACE_UNSEEN if d.get("race") else STALE) if n_ex else NOT_EXERCISED
        d.update(status=status, exercised=n_ex, reproduced=n_rep)
        if status == STALE:
            d["message"] = (
                f"{d.get('source') or 'known findings'}: known finding {d['id']!r} did not reproduce: "
                f"{n_ex} example(s) it selects ran ({d.get('selects', '')}) and none failed as it describes; "
                "the kernel changed: remove the entry (and its case file) or correct it"
            )
        out.append(d)
    return out


def property_test_observations(records: Iterable[dict]) -> List[dict]:
    """The ``obs`` records of a run's shards that count for the findings: those
    of tests carrying a ``property`` marker (the property tests of the test
    matrix, run on the adapter under test). The suite's own tests drive the
    properties with stand-in kernels; their examples neither exercise nor
    reproduce a finding of the kernels under test."""
    records = list(records)
    marked = {nodeid for r in records if r.get("kind") == "collected" for nodeid, prop in (r.get("tests") or {}).items() if prop}
    return [r for r in records if r.get("kind") == "obs" and r.get("test") in marked]


def stale(statuses_: Sequence[dict]) -> List[str]:
    """The messages of the stale entries (they fail the run)."""
    return [s["message"] for s in statuses_ if s["status"] == STALE]
