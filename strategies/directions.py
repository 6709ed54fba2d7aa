"""A forward Case as the backward serves it: the map the backward strategies
draw through (strategies.backward) and the covering of the pools counts with
(strategies.covering: a pool row serves both passes). No strategy here, and
nothing of the pools: geometry and backward both import it.
"""

from __future__ import annotations

from itertools import product
from typing import Tuple

from ground.case import BACKWARD_FACTS, FACTS, FORWARD_ONLY_FACTS, Case

SINK_FACTS = ("sinks", "sink_log2", "sink_dtype", "sink_layout")


def to_backward(c: Case, deterministic: bool, inputs_from: str, per_batch_bias: bool = False) -> Case:
    """The backward Case nearest to forward facts ``c`` that the backward serves
    (a map, never a filter: every draw is used and shrinks like the forward's).
    ``per_batch_bias``: a bias over B > 1 gets its own batch extent, [B, H, SQ,
    SKV] (the forward takes only the broadcast one, contract bias_batch_gt_1;
    the backward takes both, and reduces dBias over B only for the broadcast)."""
    scale = None if c.scale is None or c.scale == 0 else abs(c.scale)
    forward_only = {name: FACTS[name].default for name in FORWARD_ONLY_FACTS}  # what the backward serves
    changes = dict(forward_only, direction="bwd", deterministic=deterministic, inputs_from=inputs_from, lse_log2=False, scale=scale)
    if c.d_qk < c.d_v:  # the backward needs d_qk >= d_v (off-envelope draws only)
        changes["d_v"] = c.d_qk
    if c.bias is not None and c.bias not in ("float32", c.dtype):
        changes["bias"] = c.dtype
    # Deterministic draws take the per-batch bias too: known finding bwd-deterministic-dbias-broadcast (the SM80
    # backward accepts a broadcast one and sums its dBias over B by unordered atomics, its sm120 sibling refuses
    # it; a race, replayed from its case file).
    if c.bias is not None and c.batch > 1 and (per_batch_bias or deterministic):
        changes["bias_batch"] = c.batch
        # The forward kernel takes no per-batch bias (contract bias_batch_gt_1; the compile entry points accept
        # it and read bias[0] for every entry): its O and LSE come from the reference.
        changes["inputs_from"] = "reference"
    # Deterministic draws with sinks keep at most two batch entries / sequences with Q rows: known finding
    # bwd-deterministic-dsink-atomics (dSink sums the partials of three or more by unordered atomics, a race,
    # replayed from its case file; two partials add the same in either order, so their dSink is still judged).
    if deterministic and c.sinks and sum(1 for n in c.q_lengths() if n > 0) >= 3:
        changes.update({name: FACTS[name].default for name in SINK_FACTS})
    if c.is_thd and c.t_q < 1:
        changes["q_slack"] = c.q_slack + 1
    if c.is_thd and c.t_kv < 1:
        changes["kv_slack"] = c.kv_slack + 1
    return c.replace(**changes)


def served_as_is(c: Case) -> bool:
    """Whether the backward strategies serve backward Case ``c`` as it stands
    (``to_backward`` of its facts leaves it unchanged)."""
    return to_backward(c, c.deterministic, c.inputs_from, c.bias_batch > 1) == c


def backward_views(c: Case) -> Tuple[Case, ...]:
    """The backward Cases the backward strategies make of forward facts ``c``:
    deterministic or not, a per-batch bias or not (both drawn per example;
    where O and LSE come from is no kernel fact)."""
    return tuple(dict.fromkeys(to_backward(c, det, "reference", per_batch) for det, per_batch in product((False, True), repeat=2)))


def to_forward(c: Case) -> Case:
    """The forward facts a backward Case ``c`` is drawn from (``backward_views``
    of the result holds ``c``'s compile-key values): the backward-only facts
    at their defaults, a per-batch bias broadcast (the backward's draws give
    it back per batch)."""
    return c.replace(**{name: FACTS[name].default for name in BACKWARD_FACTS}, bias_batch=1)
