"""One assertion helper per kind of check. Each raises PropertyFailure with
the worst elements located (batch/sequence, head, token, dim, region), and
returns what the report records.

- ``within_model``: numerics against the reference under the error model
  (a bound per element, ``ground.tolerances.kernel_bounds``).
- ``exactly``: storage whose value the contract fixes bit for bit (tails,
  untouched buffers, -inf/0 conventions).
- ``raises_contract``: a contract rejection (type + message naming the argument).
- ``compile_delta``: compile counters around one call against a budget.
- ``guards_intact``: every buffer's guard bands still hold their sentinels
  (no out-of-bounds write).

Each failure carries its structured key (``check``, the quantity, ``where``
or ``observed``: see PropertyFailure) for ground.findings.
Inside ``collecting()`` (a property judging one example) a failing check is
recorded and the helper returns, so every check of the example is judged;
outside it the helper raises.
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Callable, Dict, List, Mapping, Optional, Sequence

import torch

from ground.case import Case
from ground.data import POISON, bits_of, guard_bits
from ground.outcome import PropertyFailure
from ground.tolerances import abs_diff

WORST = 5  # elements listed in a failure

_SINK: ContextVar[Optional[List[PropertyFailure]]] = ContextVar("judge_sink", default=None)


@contextmanager
def collecting():
    """Within the block, failing checks are appended to the yielded list
    instead of raised; deferred checks (``_fail_if``) are settled when the
    block ends, each failure in its place."""
    token = _SINK.set([])
    try:
        sink = _SINK.get()
        yield sink
        _settle(sink)
    finally:
        _SINK.reset(token)


def _fail(failure: PropertyFailure) -> None:
    sink = _SINK.get()
    if sink is None:
        raise failure
    sink.append(failure)


class _Deferred:
    """A check whose verdict, the 0-d bool tensor ``flag``, is read at the end
    of ``collecting()`` with every other one in a single host sync (a GPU wait
    per check is most of a passing example's judging); ``build()`` makes its
    failure."""

    __slots__ = ("flag", "build")

    def __init__(self, flag: torch.Tensor, build: Callable[[], PropertyFailure]):
        self.flag, self.build = flag, build


def _fail_if(flag: torch.Tensor, build: Callable[[], PropertyFailure], defer: bool) -> None:
    """Fail with ``build()`` where ``flag`` holds: at once, or (``defer``,
    inside ``collecting()``) when the block ends. A deferred check must judge
    tensors nothing writes before the block ends."""
    sink = _SINK.get()
    if sink is not None and defer:
        sink.append(_Deferred(flag, build))
    elif bool(flag):
        _fail(build())


def _settle(sink: list) -> None:
    deferred = [x for x in sink if isinstance(x, _Deferred)]
    if not deferred:
        return
    held = iter(torch.stack([x.flag.to(deferred[0].flag.device) for x in deferred]).tolist())
    sink[:] = [x if not isinstance(x, _Deferred) else (x.build() if next(held) else None) for x in sink]
    sink[:] = [x for x in sink if x is not None]


# ----------------------------------------------------------------- locating
GRAD_COORDS = {"dbias": ("bias_batch", "head", "q_token", "kv_token"), "dsink": ("head",)}


def _coords(case: Case, quantity: str, index: Sequence[int]) -> dict:
    """Name the coordinates of one element of O or LSE in the suite layouts."""
    idx = [int(i) for i in index]
    if len(idx) == 1:  # a flat storage view (e.g. an LSE buffer never handed)
        return {"element": idx[0]}
    if quantity in GRAD_COORDS:  # backward: dBias cells, dSink heads
        return dict(zip(GRAD_COORDS[quantity], idx))
    side = "kv" if quantity in ("dk", "dv") else "q"
    row_like = quantity in ("o", "dq", "dk", "dv")
    if not case.is_thd:
        names = ("batch", "head", "token", "dim") if row_like else ("batch", "head", "token")
        return dict(zip(names, idx))
    if row_like:
        token, head, dim = idx
        out = {"packed_token": token, "head": head, "dim": dim}
    else:
        head, token = idx
        out = {"packed_token": token, "head": head}
    cu = case.cu_seqlens(side)
    for s in range(case.n_seq):
        if cu[s] <= token < cu[s + 1]:
            out.update(sequence=s, token=token - cu[s])
            break
    return out


def worst_elements(case: Case, quantity: str, got: torch.Tensor, want: torch.Tensor, mask: torch.Tensor, regions=None, n: int = WORST, bound=None) -> list:
    """The ``n`` elements of ``mask`` where ``got`` and ``want`` differ most
    (NaN and a one-sided inf rank first); with ``bound`` (same shape), the
    ones furthest over it, each listed with its bound and ratio."""
    g, w = got.to(torch.float64), want.to(torch.float64)
    diff = abs_diff(g, w, nan_equal=True)
    err = diff
    if bound is not None:
        b = bound.to(torch.float64)
        diff = _ratio(diff, b)
    diff = torch.where(mask, diff, torch.full_like(diff, -1.0))
    flat = diff.flatten()
    k = min(n, int(mask.sum()))
    if k == 0:
        return []
    vals, pos = torch.topk(flat, k)
    out = []
    for val, p in zip(vals.tolist(), pos.tolist()):
        if val <= 0:
            break
        index = torch.unravel_index(torch.tensor(p), diff.shape)
        coords = _coords(case, quantity, [int(i) for i in index])
        out.append(
            {
                "quantity": quantity,
                **coords,
                "region": regions(coords) if regions is not None else "live",
                "got": float(g.flatten()[p]),
                "want": float(w.flatten()[p]),
                **({"error": float(err.flatten()[p]), "bound": float(b.flatten()[p]), "ratio": val} if bound is not None else {}),
            }
        )
    return out


def _ratio(err: torch.Tensor, bound: torch.Tensor) -> torch.Tensor:
    """err / bound elementwise (err >= 0, as abs_diff gives it); 0 where both
    are 0, inf where only the bound is. 0/0 is the only NaN of a finite,
    non-negative bound: one that is not is a broken model, failed before any
    ratio is read (``within_models``). Two launches."""
    return torch.nan_to_num(err / bound, nan=0.0, posinf=math.inf)


# ------------------------------------------------------------------- checks
def within_model(property: str, case: Case, quantity: str, got, ref, bound, live, regions=None, *, check: str = "error model") -> float:
    """Assert |got - ref| <= bound element by element over ``live`` (``bound``
    shaped like ``ref``: per element for O, per row for LSE); return the worst
    error/bound. A bound that is not finite on a judged element fails: the
    error model itself broke, so nothing it would accept can be trusted."""
    return within_models(property, case, [(quantity, got, ref, bound, live)], regions, check=check)[quantity]


def within_models(property: str, case: Case, judged: Sequence[tuple], regions=None, *, check: str = "error model") -> Dict[str, float]:
    """``within_model`` for each (quantity, got, ref, bound, live) of
    ``judged``, in order: quantity -> its worst error/bound. The facts every
    verdict reads are read in one host sync (a GPU wait per quantity
    otherwise); failures are built only for the quantities that fail."""
    seen, facts = [], []
    for quantity, got, ref, bound, live in judged:
        b = bound.to(torch.float64)
        broken = live & ~(torch.isfinite(b) & (b >= 0))
        err = abs_diff(got, ref)
        ratio = torch.where(live, _ratio(err, b), torch.zeros_like(err))
        worst = ratio.max() if ratio.numel() else torch.zeros((), dtype=torch.float64, device=ratio.device)
        facts += [broken.any(), live.any(), worst]
        seen.append((quantity, got, ref, live, b, broken, err, ratio))
    read = torch.stack([f.to(torch.float64).to(facts[0].device) for f in facts]).tolist() if facts else []
    out: Dict[str, float] = {}
    for i, (quantity, got, ref, live, b, broken, err, ratio) in enumerate(seen):
        any_broken, any_live, worst = read[3 * i : 3 * i + 3]
        if any_broken:
            _fail(
                PropertyFailure(
                    property,
                    case,
                    f"{quantity.upper()}: the error model is non-finite on {int(broken.sum())} judged element(s); nothing can be accepted",
                    {
                        "quantity": quantity,
                        "model_non_finite": int(broken.sum()),
                        "worst": worst_elements(case, quantity, b, torch.zeros_like(b), broken, regions),
                    },
                    check="model finite",
                )
            )
            out[quantity] = float("inf")
            continue
        if not any_live:
            out[quantity] = 0.0
            continue
        if not worst <= 1.0:
            at = int(ratio.flatten().argmax())
            e, bb = float(err.flatten()[at]), float(b.flatten()[at])
            over = int((ratio > 1).sum())
            _fail(
                PropertyFailure(
                    property,
                    case,
                    f"{quantity.upper()} |kernel - ref| = {e:.3g} exceeds its bound {bb:.3g} (ratio {worst:.3g}; {over} element(s) over)",
                    {
                        "quantity": quantity,
                        "error": e,
                        "bound": bb,
                        "ratio": worst,
                        "over": over,
                        "worst": worst_elements(case, quantity, got, ref, live, regions, bound=b),
                    },
                    check=check,
                    where=live & (ratio > 1),
                )
            )
        out[quantity] = worst
    return out


def exactly(property: str, case: Case, quantity: str, got, want, where, what: str, regions=None, *, check: Optional[str] = None, defer: bool = False) -> None:
    """Assert ``got`` equals ``want`` value for value on ``where`` (in
    float64: a NaN matches any NaN, -0 matches +0), the check of a value the
    contract fixes or a relation predicts; storage that must keep its bytes
    is ``untouched``'s. ``defer``: settled at the end of ``collecting()``
    (``_fail_if``)."""
    # Compared in their own dtype when they share it (exact either way: fewer launches); NaN only where it can be.
    g, w = (got, want) if got.dtype == want.dtype else (got.to(torch.float64), want.to(torch.float64))
    same = g == w
    if g.is_floating_point():
        same = same | (torch.isnan(g) & torch.isnan(w))
    bad = where & ~same

    def failure() -> PropertyFailure:
        return PropertyFailure(
            property,
            case,
            f"{quantity.upper()}: {int(bad.sum())} element(s) of {what} differ from the contract",
            {
                "quantity": quantity,
                "what": what,
                "count": int(bad.sum()),
                "nan_only": bool(got.is_floating_point() and torch.isnan(got[bad]).all()),  # what a NaN-leak finding bounds
                "worst": worst_elements(case, quantity, got, want, bad, regions),
            },
            check=check or what,
            where=bad,
        )

    _fail_if(bad.any(), failure, defer)


def untouched(property: str, case: Case, quantity: str, got, where, what: str, regions=None, *, check: str, defer: bool = True) -> None:
    """Assert the storage ``got`` still holds, on ``where``, the bits the
    suite filled it with (ground.data.POISON, as make_outputs fills every
    output): a kernel that stores there, even a NaN of another payload (a
    GPU's computed NaN, a value read from poison), fails."""
    bad = where & (bits_of(got) != bits_of(torch.full((), POISON, dtype=got.dtype, device=got.device).expand(got.shape)))

    def failure() -> PropertyFailure:
        n = int(bad.sum())
        return PropertyFailure(
            property,
            case,
            f"{quantity.upper()}: {n} element(s) of {what} were written (the suite's fill changed)",
            {"quantity": quantity, "what": what, "count": n, "worst": worst_elements(case, quantity, got, torch.full_like(got, POISON), bad, regions)},
            check=check,
            where=bad,
        )

    _fail_if(bad.any(), failure, defer)


def same_bits(property: str, case: Case, quantity: str, a, b, where, what: str, *, check: str) -> None:
    """Assert ``a`` and ``b`` hold the same bits on ``where``; the failure
    ("<what>: <quantity> in <n> element(s)") counts the elements that differ.
    Settled with the example's other deferred checks (``_fail_if``)."""
    bad = (bits_of(a) != bits_of(b)) & where

    def failure() -> PropertyFailure:
        n = int(bad.sum())
        return PropertyFailure(property, case, f"{what}: {quantity} in {n} element(s)", {"quantity": quantity, "count": n}, check=check, where=bad)

    _fail_if(bad.any(), failure, True)


def raises_contract(property: str, case: Case, call: Callable[[], object], exc_type, fragment: str, *, check: str = "rejects") -> Optional[BaseException]:
    """Assert ``call`` raises ``exc_type`` with ``fragment`` in its message.
    ``observed`` on failure: "accepted", the exception type's name, or
    "<type> not naming <fragment>"."""
    try:
        call()
    except BaseException as e:  # noqa: BLE001 - judged below
        if isinstance(e, exc_type) and fragment.lower() in str(e).lower():
            return e
        failure = PropertyFailure(
            property,
            case,
            f"rule {case.violation!r}: expected {exc_type.__name__} naming {fragment!r}, got {type(e).__name__}: {str(e)[:300]}",
            {"expected": exc_type.__name__, "fragment": fragment, "got_type": type(e).__name__, "got_message": str(e)[:2000]},
            check=check,
            observed=type(e).__name__ if not isinstance(e, exc_type) else f"{type(e).__name__} not naming {fragment}",
        )
        failure.__cause__ = e
        _fail(failure)
        return e
    _fail(
        PropertyFailure(
            property,
            case,
            f"rule {case.violation!r}: expected {exc_type.__name__} naming {fragment!r}, but the call returned normally",
            {"expected": exc_type.__name__, "fragment": fragment},
            check=check,
            observed="accepted",
        )
    )
    return None


def failed(property: str, case: Case, summary: str, detail: dict, *, check: str, observed: Optional[str] = None) -> None:
    """A failed check that is an outcome, not a comparison (e.g. a launch
    that synchronized): ``observed`` names what happened."""
    _fail(PropertyFailure(property, case, summary, detail, check=check, observed=observed))


def compile_delta(property: str, case: Case, delta, budget: dict, what: str, *, check: str = "compile budget") -> None:
    """Assert one call's counter deltas stay within ``budget`` (counter name ->
    maximum), e.g. {"misses": 0, "thd_lru_misses": 0, "modules": 0}."""
    d = delta.to_dict() if hasattr(delta, "to_dict") else dict(delta)
    over = {k: d.get(k, 0) for k, most in budget.items() if d.get(k, 0) > most}
    if over:
        _fail(
            PropertyFailure(
                property,
                case,
                f"{what}: counters over budget {over} (budget {budget})",
                {"delta": d, "budget": budget, "what": what},
                check=check,
            )
        )


def guards_intact(property: str, case: Case, buffers: Mapping[str, torch.Tensor]) -> int:
    """Assert the guard bands of every buffer in ``buffers`` (name -> tensor
    made by ground.data.guarded, or a view of one) are bit for
    bit what was written: an out-of-bounds write fails the property, naming
    the buffer and the element/byte range written (relative to the buffer's
    first element: negative before it, >= its length after it) with the
    addresses. Buffers sharing an allocation are checked once. Returns how
    many allocations were checked. A buffer without bands is a suite bug
    (ValueError), never a pass. Inside ``collecting()`` the verdict settles
    with the other deferred checks (``_fail_if``): the bands are compared
    when this is called, so a later launch into other buffers changes
    nothing."""
    seen, banded = set(), []
    for name, t in buffers.items():
        if t is None:
            continue
        key = (t.device, t.untyped_storage().data_ptr())
        if key in seen:
            continue
        seen.add(key)
        try:
            banded.append((name, t, *guard_bits(t)))
        except ValueError as e:
            raise ValueError(f"buffer {name!r}: {e}") from None
    # One comparison per kind of band (device, bits dtype, sentinel), all its bands
    # concatenated, read with the example's other deferred checks: one host sync for
    # all, and two launches per kind (two more for the verdict) where a flag per band
    # took two per band (on a GPU that 16 workers share, the launches are the cost).
    # The comparison is kept as made now; the bands that differ are located from it
    # only for the failure.
    if not banded:
        return len(seen)
    kinds: Dict[tuple, list] = {}
    for i, (_, _, front, back, want) in enumerate(banded):
        kinds.setdefault((front.device, front.dtype, want), []).append(i)
    differs, masks = {}, []  # differs: allocation -> (front, back) masks of the elements that differ
    for (_, _, want), members in kinds.items():
        bands = [b for i in members for b in banded[i][2:4]]
        ne = torch.cat(bands) != want
        masks.append(ne)
        parts = ne.split([b.numel() for b in bands])  # views: no launch
        for k, i in enumerate(members):
            differs[i] = (parts[2 * k], parts[2 * k + 1])
    touched = (masks[0] if len(masks) == 1 else torch.cat([m.to(masks[0].device) for m in masks])).any()

    def failure() -> PropertyFailure:
        hits = []
        for i, (name, t, front, back, want) in enumerate(banded):
            g, size = front.numel(), t.element_size()
            n = t.untyped_storage().nbytes() // size - 2 * g
            base = t.untyped_storage().data_ptr() + g * size  # address of the buffer's first element
            for side, band, first, ne in zip(("before the start", "after the end"), (front, back), (-g, n), differs[i]):
                bad = ne.nonzero().flatten()
                if not bad.numel():
                    continue
                lo, hi = first + int(bad.min()), first + int(bad.max()) + 1
                hits.append(
                    {
                        "buffer": name,
                        "side": side,
                        "count": int(bad.numel()),
                        "elements": [lo, hi],
                        "bytes": [lo * size, hi * size],
                        "addresses": [hex(base + lo * size), hex(base + hi * size)],
                        "length": n,
                        "dtype": str(t.dtype).replace("torch.", ""),
                        "sentinel_bits": hex(want & ((1 << (8 * size)) - 1)),
                        "found_bits": [hex(int(x) & ((1 << (8 * size)) - 1)) for x in band[bad[:4]].tolist()],
                    }
                )
        said = "; ".join(
            f"{h['buffer']}: {h['count']} element(s) {h['side']} in elements [{h['elements'][0]}, {h['elements'][1]}) "
            f"(bytes {h['bytes'][0]:+d}..{h['bytes'][1]:+d}, {h['addresses'][0]}-{h['addresses'][1]}; the buffer has {h['length']} {h['dtype']} elements)"
            for h in hits
        )
        return PropertyFailure(property, case, f"out-of-bounds write: {said}", {"guards": hits}, check="guards")

    _fail_if(touched, failure, defer=True)
    return len(seen)
