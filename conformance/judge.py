"""One assertion helper per kind of check. Each raises PropertyFailure with
the worst elements located (batch/sequence, head, token, dim, region), and
returns what the report records.

- ``within_model``: numerics against the reference under the error model
  (a bound per element, ``conformance.tolerances.kernel_bounds``).
- ``exactly``: storage whose value the contract fixes bit for bit (tails,
  untouched buffers, -inf/0 conventions).
- ``raises_contract``: a contract rejection (type + message naming the argument).
- ``compile_delta``: compile counters around one call against a budget.
"""

from __future__ import annotations

from typing import Callable, Sequence

import torch

from conformance.case import Case
from conformance.outcome import PropertyFailure
from conformance.tolerances import abs_diff

WORST = 5  # elements listed in a failure


# ----------------------------------------------------------------- locating
def _coords(case: Case, quantity: str, index: Sequence[int]) -> dict:
    """Name the coordinates of one element of O or LSE in the suite layouts."""
    idx = [int(i) for i in index]
    if not case.is_thd:
        names = ("batch", "head", "token", "dim") if quantity == "o" else ("batch", "head", "token")
        return dict(zip(names, idx))
    if quantity == "o":
        token, head, dim = idx
        out = {"packed_token": token, "head": head, "dim": dim}
    else:
        head, token = idx
        out = {"packed_token": token, "head": head}
    cu = case.cu_seqlens("q")
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
    """err / bound elementwise; 0 where both are 0, inf where only the bound is."""
    safe = torch.where(bound > 0, bound, torch.ones_like(bound))
    return torch.where(bound > 0, err / safe, torch.where(err == 0, torch.zeros_like(err), torch.full_like(err, float("inf"))))


# ------------------------------------------------------------------- checks
def within_model(property: str, case: Case, quantity: str, got, ref, bound, live, regions=None) -> float:
    """Assert |got - ref| <= bound element by element over ``live`` (``bound``
    shaped like ``ref``: per element for O, per row for LSE); return the worst
    error/bound. A bound that is not finite on a judged element fails: the
    error model itself broke, so nothing it would accept can be trusted."""
    b = bound.to(torch.float64)
    broken = live & ~(torch.isfinite(b) & (b >= 0))
    if bool(broken.any()):
        raise PropertyFailure(
            property,
            case,
            f"{quantity.upper()}: the error model is non-finite on {int(broken.sum())} judged element(s); nothing can be accepted",
            {"quantity": quantity, "model_non_finite": int(broken.sum()), "worst": worst_elements(case, quantity, b, torch.zeros_like(b), broken, regions)},
        )
    if not bool(live.any()):
        return 0.0
    err = abs_diff(got, ref)
    ratio = torch.where(live, _ratio(err, b), torch.zeros_like(err))
    worst = float(ratio.max())
    if not worst <= 1.0:
        at = int(ratio.flatten().argmax())
        e, bb = float(err.flatten()[at]), float(b.flatten()[at])
        over = int((ratio > 1).sum())
        raise PropertyFailure(
            property,
            case,
            f"{quantity.upper()} |kernel - ref| = {e:.3g} exceeds its bound {bb:.3g} (ratio {worst:.3g}; {over} element(s) over)",
            {"quantity": quantity, "error": e, "bound": bb, "ratio": worst, "over": over, "worst": worst_elements(case, quantity, got, ref, live, regions, bound=b)},
        )
    return worst


def exactly(property: str, case: Case, quantity: str, got, want, where, what: str, regions=None) -> None:
    """Assert ``got`` equals ``want`` bit for bit on ``where`` (NaN == NaN)."""
    g, w = got.to(torch.float64), want.to(torch.float64)
    bad = where & ~((g == w) | (torch.isnan(g) & torch.isnan(w)))
    if bool(bad.any()):
        raise PropertyFailure(
            property,
            case,
            f"{quantity.upper()}: {int(bad.sum())} element(s) of {what} differ from the contract",
            {"quantity": quantity, "what": what, "count": int(bad.sum()), "worst": worst_elements(case, quantity, got, want, bad, regions)},
        )


def raises_contract(property: str, case: Case, call: Callable[[], object], exc_type, fragment: str) -> BaseException:
    """Assert ``call`` raises ``exc_type`` with ``fragment`` in its message."""
    try:
        call()
    except BaseException as e:  # noqa: BLE001 - judged below
        if isinstance(e, exc_type) and fragment.lower() in str(e).lower():
            return e
        raise PropertyFailure(
            property,
            case,
            f"rule {case.violation!r}: expected {exc_type.__name__} naming {fragment!r}, got {type(e).__name__}: {str(e)[:300]}",
            {"expected": exc_type.__name__, "fragment": fragment, "got_type": type(e).__name__, "got_message": str(e)[:2000]},
        ) from e
    raise PropertyFailure(
        property,
        case,
        f"rule {case.violation!r}: expected {exc_type.__name__} naming {fragment!r}, but the call returned normally",
        {"expected": exc_type.__name__, "fragment": fragment},
    )


def compile_delta(property: str, case: Case, delta, budget: dict, what: str) -> None:
    """Assert one call's counter deltas stay within ``budget`` (counter name ->
    maximum), e.g. {"misses": 0, "thd_lru_misses": 0, "modules": 0}."""
    d = delta.to_dict() if hasattr(delta, "to_dict") else dict(delta)
    over = {k: d.get(k, 0) for k, most in budget.items() if d.get(k, 0) > most}
    if over:
        raise PropertyFailure(
            property,
            case,
            f"{what}: counters over budget {over} (budget {budget})",
            {"delta": d, "budget": budget, "what": what},
        )
