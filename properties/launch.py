"""Launch properties upstream's SM80 tests check (cudnn-frontend
test/python/sdpa/frost/test_sdpa_execute_is_async.py: an execute reads no
device memory to the host and is CUDA-graph capturable, its replay equal to
the eager result):

- graph_replay: one launch captured in a CUDA graph, every runtime input
  (Q/K/V data, sinks, cu_seqlens or padding lengths) then changed IN PLACE,
  the replay equals an eager launch of the changed Case bit for bit, and
  nothing compiles on the way;
- launch_hygiene: a warm launch performs no host synchronization (torch's
  sync debug mode set to "error", and the host-read entry points upstream
  forbids made to raise) and no device allocation (the caching allocator's
  counters), and still writes the eager launch's result.

Both drive ``PreparedAdapter.prepare`` (``launch()`` is the kernel alone),
on geometries whose operands are handed as they are (no staging copy:
strategies.large.REPLAY_ROWS), so a change in place reaches the kernel.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import List

import torch

from ground.case import Case
from ground.data import body_storage, make_inputs, make_outputs
from ground.outcome import Observation, PropertyFailure
from properties import judge, recorder
from properties.common import device, finish, launched_buffers

# A replayed or warm launch compiles nothing and loads no template module.
NO_COMPILE = {"misses": 0, "thd_lru_misses": 0, "modules": 0}
# Caching-allocator counters a launch must not move (torch.cuda.memory_stats).
ALLOCATION_COUNTERS = ("allocation.all.allocated", "segment.all.allocated")
# What upstream's test makes raise during one execute: host reads of device
# memory and blocking calls (the list cannot be exhaustive; the sync debug
# mode and the graph capture are the backstops).
HOST_READS = ("item", "tolist", "cpu", "numpy", "__bool__", "__float__", "__int__", "__index__")
BLOCKING = ((torch.cuda, "synchronize"), (torch.cuda.Stream, "synchronize"), (torch.cuda.Event, "synchronize"), (torch, "equal"))


def replay_variant(case: Case) -> Case:
    """``case`` with every runtime input changed and every value the capture
    froze kept: new data and sinks (seed), the THD sequences in another order
    (cu_seqlens change; token totals, capacities and the longest sequence,
    which sized the captured grid, stay), dense padding lengths reversed
    across the batch. The scale is a launch argument bound at capture: kept."""
    out = case.replace(seed=case.seed + 1)
    if case.is_thd:
        pairs = list(zip(case.q_lens, case.kv_lens))
        moved = pairs[::-1] if pairs[::-1] != pairs else pairs[1:] + pairs[:1]
        return out.replace(q_lens=tuple(p[0] for p in moved), kv_lens=tuple(p[1] for p in moved))
    for side in ("seq_q_lens", "seq_kv_lens"):
        lens = getattr(case, side)
        if lens is not None:
            out = out.replace(**{side: tuple(reversed(lens))})
    return out


def _copy_in_place(dst, src) -> None:
    """Every input buffer of ``dst`` overwritten with ``src``'s (their bodies,
    the same shapes by construction; the guard bands keep what the launches
    before did to them until they are judged)."""
    for name in ("q", "k", "v", "bias", "sinks", "seq_q_lens", "seq_kv_lens", "cu_q", "cu_kv"):
        a, b = getattr(dst, name), getattr(src, name)
        if (a is None) != (b is None):
            raise ValueError(f"replay variant changed the presence of {name}")
        if a is not None:
            body_storage(a).copy_(body_storage(b))


def _repoison(case: Case, outputs, dev) -> None:
    """The output buffers back to what ``make_outputs`` writes (poison), so a
    launch that writes nothing cannot pass for one that does."""
    fresh = make_outputs(case, dev)
    for mine, new in zip(outputs, fresh):
        body_storage(mine).copy_(body_storage(new))  # the bands keep the earlier launches' evidence


def _bits_equal(property: str, case: Case, quantity: str, got: torch.Tensor, want: torch.Tensor, what: str, check: str) -> None:
    """The same kernel on the same inputs: the same bits everywhere (NaN payloads and signed zeros included)."""
    everywhere = torch.ones(got.shape, dtype=torch.bool, device=got.device)
    judge.same_bits(property, case, quantity, got, want, everywhere, what, check=check)


def _fresh_eager(adapter, case: Case, dev):
    inputs, outputs = make_inputs(case, dev, poison=True), make_outputs(case, dev)
    return adapter.run(case, inputs, outputs), inputs, outputs


def _require_unstaged(prepared, case: Case) -> None:
    if prepared.staged:
        raise ValueError(
            f"{case.describe()}: operands {prepared.staged} are staged copies; a change in place would not reach the kernel "
            "(draw on-envelope dims: strategies.large.REPLAY_ROWS)"
        )


def check_graph_replay(case: Case, adapter) -> Observation:
    """Capture one launch of ``case``, change its inputs in place to
    ``replay_variant(case)``'s, replay: O and LSE equal an eager launch of
    the variant bit for bit; capture, replay and the eager launch compile
    nothing; every guard band intact."""
    from kernels.counters import measure

    recorder.begin("graph_replay", case)
    start = time.perf_counter()
    dev = device()
    after = replay_variant(case)
    inputs, outputs = make_inputs(case, dev, poison=True), make_outputs(case, dev)
    prepared = adapter.prepare(case, inputs, outputs)
    _require_unstaged(prepared, case)
    side = torch.cuda.Stream(dev)  # warm up off the capture stream, as torch.cuda.graph asks
    side.wait_stream(torch.cuda.current_stream(dev))
    with torch.cuda.stream(side):
        prepared.launch()
    torch.cuda.current_stream(dev).wait_stream(side)
    torch.cuda.synchronize(dev)
    captured_error = None
    with measure() as counters:
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph):
                prepared.launch()
        except RuntimeError as e:  # a launch that syncs, allocates or reads back cannot be captured
            captured_error = e
        if captured_error is None:
            changed = make_inputs(after, dev, poison=True)
            _copy_in_place(inputs, changed)
            _repoison(after, outputs, dev)
            graph.replay()
            torch.cuda.synchronize(dev)
            replayed = prepared.result()
            eager, eager_inputs, eager_outputs = _fresh_eager(adapter, after, dev)
            torch.cuda.synchronize(dev)

    def judged():
        if captured_error is not None:
            judge.guards_intact("graph_replay", case, launched_buffers(inputs, outputs))  # the warm-up launch's
            raise PropertyFailure(
                "graph_replay",
                case,
                f"the launch cannot be captured in a CUDA graph: {captured_error}",
                {"error": str(captured_error)},
                check="capture",
                observed="capture failed",
            )
        judge.guards_intact("graph_replay", case, launched_buffers(inputs, outputs, replayed))
        judge.guards_intact("graph_replay", case, launched_buffers(eager_inputs, eager_outputs, eager))
        judge.compile_delta("graph_replay", case, counters.delta, NO_COMPILE, "capture, in-place change, replay and eager launch of the variant")
        _bits_equal(
            "graph_replay", case, "o", replayed.o, eager.o, "the replayed O (after the inputs changed in place) vs an eager launch", "replay equals eager"
        )
        _bits_equal("graph_replay", case, "lse", replayed.lse, eager.lse, "the replayed LSE vs an eager launch", "replay equals eager")
        return {}

    return finish("graph_replay", case, start, judged, notes={"variant": after.describe()})


@contextmanager
def host_touches():
    """Within the block, every call of ``HOST_READS`` (any tensor) and of
    ``BLOCKING`` raises and is listed in the yielded list; restored after."""
    caught: List[str] = []
    saved = []

    def forbid(owner, name, label):
        original = getattr(owner, name)
        saved.append((owner, name, original))

        def guard(*a, **kw):
            caught.append(label)
            raise RuntimeError(f"{label} called inside a launch")

        setattr(owner, name, guard)

    try:
        for name in HOST_READS:
            forbid(torch.Tensor, name, f"Tensor.{name}")
        for owner, name in BLOCKING:
            forbid(owner, name, f"{getattr(owner, '__name__', owner)}.{name}")
        yield caught
    finally:
        for owner, name, original in reversed(saved):
            setattr(owner, name, original)


def _allocations(dev) -> dict:
    stats = torch.cuda.memory_stats(dev)
    return {k: stats.get(k, 0) for k in ALLOCATION_COUNTERS}


def check_launch_hygiene(case: Case, adapter) -> Observation:
    """A warm launch of ``case`` (prepared and launched once before) under
    torch's sync debug mode "error" and ``host_touches``: no synchronization,
    no host read, no caching-allocator allocation, nothing compiled; its
    outputs equal an eager launch's bit for bit (the launch did the work)."""
    from kernels.counters import measure

    recorder.begin("launch_hygiene", case)
    start = time.perf_counter()
    dev = device()
    inputs, outputs = make_inputs(case, dev, poison=True), make_outputs(case, dev)
    prepared = adapter.prepare(case, inputs, outputs)
    prepared.launch()  # the first launch may load modules and bind the context
    _repoison(case, outputs, dev)
    torch.cuda.synchronize(dev)
    before = _allocations(dev)
    mode = torch.cuda.get_sync_debug_mode()
    error = None
    with measure() as counters:
        torch.cuda.set_sync_debug_mode("error")
        try:
            with host_touches() as caught:
                prepared.launch()
        except RuntimeError as e:
            error = e
        finally:
            torch.cuda.set_sync_debug_mode(mode)
    after = _allocations(dev)
    torch.cuda.synchronize(dev)
    result = prepared.result()
    eager, eager_inputs, eager_outputs = _fresh_eager(adapter, case, dev)

    def judged():
        judge.guards_intact("launch_hygiene", case, launched_buffers(inputs, outputs, result))
        judge.guards_intact("launch_hygiene", case, launched_buffers(eager_inputs, eager_outputs, eager))
        if error is not None or caught:
            judge.failed(
                "launch_hygiene",
                case,
                f"the launch synchronizes with or reads back to the host: {caught or error}",
                {"calls": caught, "error": str(error)},
                check="no host synchronization",
                observed="synchronized",
            )
        moved = {k: after[k] - before[k] for k in ALLOCATION_COUNTERS if after[k] != before[k]}
        if moved:
            judge.failed(
                "launch_hygiene", case, f"the launch allocated device memory: {moved}", {"allocations": moved}, check="no allocation", observed="allocated"
            )
        judge.compile_delta("launch_hygiene", case, counters.delta, NO_COMPILE, "a warm launch")
        _bits_equal("launch_hygiene", case, "o", result.o, eager.o, "O of the watched launch vs an eager launch", "launch did the work")
        _bits_equal("launch_hygiene", case, "lse", result.lse, eager.lse, "LSE of the watched launch vs an eager launch", "launch did the work")
        return {}

    return finish("launch_hygiene", case, start, judged)
