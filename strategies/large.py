"""The large tier and the upstream-parity shapes: production-scale Cases from
a few fixed geometries, runtime facts drawn per example.

Every geometry below is a compile key (dense: every shape and stride of the
operands; THD: heads, sequence count, mask family, window size, sinks, sign:
``kernels.prepared.compile_key``), so each shape names one to three rows and
no more: a row costs one compile (~2 s) per (flavor, dtype) it lists. What is
drawn per example never reaches a key: the data seed, the scale's magnitude,
dense padding-length values, THD per-sequence lengths, first offsets and
capacity slack (tools/count_compile_keys.py).

``SHAPES`` is the table: name -> ``Shape``. ``large_cases(shape)`` draws from
one. Sizes (``reference_pairs``, ``input_bytes``) are computed from the Case,
so tests/test_large.py bounds what every drawn Case costs the float64
reference (row-chunked: reference.attention.REF_CHUNK_ELEMS) and the GPU.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Dict, Optional, Sequence, Tuple

from hypothesis import strategies as st

from ground.case import Case
from ground.data import WRAP
from ground.tables import FLAVOR_ENVELOPES

# Production-scale targets: dense S up to 32k, THD >= 64 sequences
# and >= 64k live tokens, H_q 64 with GQA 8:1.
LONG = 32768
THD_TOKENS = 65536


@dataclass(frozen=True)
class Shape:
    """One family of large Cases: ``rows`` are the compile-key facts (Case
    fields, flavor dims included) of each geometry; ``runtime(draw, row)``
    draws the rest (Case fields) per example."""

    doc: str
    rows: Tuple[dict, ...]
    runtime: Callable
    why: str = ""
    extra: dict = field(default_factory=dict)


def _dims(flavor: str) -> dict:
    d_qk, d_v = FLAVOR_ENVELOPES[flavor]
    return {"d_qk": d_qk, "d_v": d_v}


def _seed(draw) -> int:
    return draw(st.integers(0, 2**31 - 1))


def _scale(draw, row: dict) -> Optional[float]:
    # The sign is compiled (positive here); the magnitude is a launch argument.
    return draw(st.sampled_from((None, 0.5, 0.125, 0.03125)))


def _dense_runtime(draw, row: dict) -> dict:
    """Seed, scale magnitude, and the padding-length values of the sides the
    row pads (each batch entry's in [0, physical], the extremes included)."""
    out = {"seed": _seed(draw), "scale": _scale(draw, row)}
    for side, phys in (("seq_q_lens", row["s_q"]), ("seq_kv_lens", row["s_kv"])):
        if row.get(side):
            # Simplest first is the full length (a budget of 2-3 examples must not spend
            # one on rows with no key), then the edges, then anything.
            edge = st.sampled_from((phys, phys - 1, 1, 0))
            out[side] = tuple(draw(st.one_of(edge, st.integers(0, phys).map(lambda n, p=phys: p - n))) for _ in range(row.get("batch", 1)))
    return out


def _thd_lengths(draw, n: int, total: int, longest: int) -> Tuple[int, ...]:
    """n lengths in [0, longest] (a few zero-length sequences) summing to at
    least ``total``: drawn, then the shortfall spread over the non-empty ones."""
    lens = [draw(st.one_of(st.just(0), st.integers(1, longest))) if i % 16 == 7 else draw(st.integers(1, longest)) for i in range(n)]
    short = total - sum(lens)
    live = [i for i, x in enumerate(lens) if x]
    while short > 0:
        room = [i for i in live if lens[i] < longest]
        if not room:
            break
        for i in room:
            add = min(longest - lens[i], -(-short // len(room)))
            lens[i] += add
            short -= add
            if short <= 0:
                break
    return tuple(lens)


def _thd_runtime(draw, row: dict) -> dict:
    """Per-sequence lengths (``tokens`` live tokens at least on each side,
    each sequence at most ``longest``), first offsets and slack, seed."""
    n, tokens, longest = row["n_seq"], row["tokens"], row["longest"]
    q_lens = _thd_lengths(draw, n, tokens, longest)
    kv_lens = tuple(q if q == 0 else min(longest, q + draw(st.integers(0, 64))) for q in q_lens)
    base = row.get("kv_base_min", 0)
    return {
        "q_lens": q_lens,
        "kv_lens": kv_lens,
        "seed": _seed(draw),
        "scale": _scale(draw, row),
        "q_base": draw(st.integers(0, 64)),
        "q_slack": draw(st.integers(0, 64)),
        "kv_base": base + draw(st.integers(0, row.get("kv_base_span", 64))),
        "kv_slack": draw(st.integers(0, 64)),
    }


def _thd_row(flavor: str, dtype: str, h_q: int, h_kv: int, n_seq: int, tokens: int, longest: int, **more) -> dict:
    return {"layout": "thd", "flavor": flavor, "dtype": dtype, "h_q": h_q, "h_kv": h_kv, "n_seq": n_seq, "tokens": tokens, "longest": longest, **more}


def _dense_row(flavor: str, dtype: str, **facts) -> dict:
    return {"layout": "dense", "flavor": flavor, "dtype": dtype, "memory": "bshd", **facts}


# kv_base putting every live K/V element of a 64-wide, one-head row past 2^32
# (the decoys of ground.data.wrapped_span sit 2^32 lower), and one
# putting them in [2^31, 2^32) for a 128-wide row (a 32-bit signed offset goes
# negative: out of the allocation).
KV_PAST_2_32 = WRAP // 64 + 4096
KV_PAST_2_31 = WRAP // 2 // 128 + 4096

SHAPES: Dict[str, Shape] = {
    # ---------------------------------------------------------- large tier
    "long": Shape(
        "dense S = 32k x 32k: 512 KV tiles per row, 256 Q tiles",
        (
            _dense_row("gptoss", "float16", batch=1, h_q=1, h_kv=1, s_q=LONG, s_kv=LONG, causal=True),
            _dense_row("gptoss", "bfloat16", batch=1, h_q=1, h_kv=1, s_q=LONG, s_kv=LONG, causal=True, bottom_right=True, window_left=4096, seq_kv_lens=True),
        ),
        _dense_runtime,
    ),
    "decode": Shape(
        "S_q = 1 rows against 32k (padded) KV, H_q 64 with GQA 8:1",
        (
            _dense_row("llama", "bfloat16", batch=4, h_q=64, h_kv=8, s_q=1, s_kv=LONG, seq_kv_lens=True),
            _dense_row("qwen", "float16", batch=2, h_q=16, h_kv=2, s_q=1, s_kv=LONG // 2, causal=True, bottom_right=True, seq_kv_lens=True),
        ),
        _dense_runtime,
    ),
    "gqa64": Shape(
        "H_q = 64 over 8 KV heads (8:1), S 2048: 1,024 CTAs",
        (_dense_row("llama", "float16", batch=1, h_q=64, h_kv=8, s_q=2048, s_kv=2048, causal=True),),
        _dense_runtime,
    ),
    "grid": Shape(
        "many CTAs: B 2 x H 16 x 32 Q tiles (1,024 CTAs), GQA 8:1, ragged Q and KV lengths",
        (_dense_row("dsv3", "bfloat16", batch=2, h_q=16, h_kv=2, s_q=4096, s_kv=1024, seq_q_lens=True, seq_kv_lens=True),),
        _dense_runtime,
    ),
    "thd_seqs": Shape(
        ">= 64 packed sequences, >= 64k live tokens, GQA 8:1",
        (_thd_row("gptoss", "float16", 8, 1, 64, THD_TOKENS, 2048, causal=True), _thd_row("llama", "bfloat16", 8, 1, 128, THD_TOKENS, 1024)),
        _thd_runtime,
    ),
    "offsets": Shape(
        "THD K/V element offsets past 2^32 (decoys 2^32 lower) and in [2^31, 2^32)",
        (
            _thd_row("gptoss", "float16", 1, 1, 4, 4096, 2048, kv_base_min=KV_PAST_2_32, kv_base_span=1 << 16),
            _thd_row("llama", "bfloat16", 1, 1, 4, 4096, 2048, causal=True, kv_base_min=KV_PAST_2_31, kv_base_span=1 << 16),
        ),
        _thd_runtime,
    ),
    # -------------------------------------------------- the ci slice of it
    "decode_slice": Shape(
        "S_q = 1 rows against 8k (padded) KV, GQA 8:1 (the ci slice of 'decode')",
        (_dense_row("gptoss", "float16", batch=2, h_q=8, h_kv=1, s_q=1, s_kv=8192, seq_kv_lens=True),),
        _dense_runtime,
    ),
    "thd_seqs_slice": Shape(
        "64 packed sequences, GQA 8:1, 8k tokens (the ci slice of 'thd_seqs': the same compile key)",
        (_thd_row("gptoss", "float16", 8, 1, 64, 8192, 256, causal=True),),
        _thd_runtime,
    ),
    # ---------------------------------------------------- upstream parity
    "gqa_8_4": Shape("GQA group 8:4", (_dense_row("gptoss", "float16", batch=2, h_q=8, h_kv=4, s_q=257, s_kv=1000, causal=True),), _dense_runtime),
    "gqa_8_2": Shape(
        "GQA group 8:2", (_dense_row("llama", "bfloat16", batch=2, h_q=8, h_kv=2, s_q=257, s_kv=1000, causal=True, bottom_right=True),), _dense_runtime
    ),
    "gqa_8_1": Shape("GQA group 8:1", (_dense_row("qwen", "float16", batch=2, h_q=8, h_kv=1, s_q=257, s_kv=1000),), _dense_runtime),
    "lse_pad_d64_aligned": Shape(
        "padded Q rows, S_q tile-aligned, d 64", (_dense_row("gptoss", "float16", batch=3, h_q=2, h_kv=1, s_q=256, s_kv=300, seq_q_lens=True),), _dense_runtime
    ),
    "lse_pad_d64_unaligned": Shape(
        "padded Q rows, S_q unaligned, d 64",
        (_dense_row("gptoss", "bfloat16", batch=3, h_q=2, h_kv=1, s_q=200, s_kv=300, seq_q_lens=True, sinks=True),),
        _dense_runtime,
    ),
    "lse_pad_d256_aligned": Shape(
        "padded Q rows, S_q tile-aligned, d 256", (_dense_row("qwen", "bfloat16", batch=3, h_q=2, h_kv=1, s_q=256, s_kv=300, seq_q_lens=True),), _dense_runtime
    ),
    "lse_pad_d256_unaligned": Shape(
        "padded Q rows, S_q unaligned, d 256",
        (_dense_row("qwen", "float16", batch=3, h_q=2, h_kv=1, s_q=200, s_kv=300, seq_q_lens=True, causal=True),),
        _dense_runtime,
    ),
}

# Which shapes each test of properties/matrix.py draws.
LARGE_SHAPES = ("long", "decode", "gqa64", "grid", "thd_seqs")
OFFSET_SHAPES = ("offsets",)
SLICE_SHAPES = ("decode_slice", "thd_seqs_slice")
GQA_SHAPES = ("gqa_8_4", "gqa_8_2", "gqa_8_1")
LSE_PAD_SHAPES = ("lse_pad_d64_aligned", "lse_pad_d64_unaligned", "lse_pad_d256_aligned", "lse_pad_d256_unaligned")
# Replay and launch-hygiene checks: one dense and one THD geometry whose operands are handed
# to the kernel as they are (on-envelope dims, no staging copy), with sinks and lengths to change.
REPLAY_ROWS = {
    "dense": _dense_row("llama", "float16", batch=2, h_q=8, h_kv=2, s_q=300, s_kv=700, seq_kv_lens=True, seq_q_lens=True, sinks=True, causal=True),
    "thd": _thd_row("gptoss", "bfloat16", 8, 1, 8, 2048, 512, sinks=True, causal=True),
}

_ROW_ONLY = ("flavor", "tokens", "longest", "n_seq", "kv_base_min", "kv_base_span")


def case_of(row: dict, runtime: dict) -> Case:
    """The Case of a geometry row with its runtime facts."""
    facts = {k: v for k, v in row.items() if k not in _ROW_ONLY}
    for side in ("seq_q_lens", "seq_kv_lens"):
        facts.pop(side, None)
    return Case(**facts, **_dims(row["flavor"]), **runtime)


def _rows(shape: str, flavors: Optional[Sequence[str]], dtypes: Optional[Sequence[str]]) -> Tuple[dict, ...]:
    rows = tuple(r for r in SHAPES[shape].rows if (flavors is None or r["flavor"] in flavors) and (dtypes is None or r["dtype"] in dtypes))
    if not rows:
        raise ValueError(f"large shape {shape!r}: no geometry for flavors {flavors} / dtypes {dtypes}")
    return rows


def large_cases(shape: str, *, flavors: Optional[Sequence[str]] = None, dtypes: Optional[Sequence[str]] = None) -> st.SearchStrategy[Case]:
    """Cases of ``SHAPES[shape]``: a geometry row (shrinks to the first), then
    its runtime facts. ``flavors``/``dtypes`` keep the rows they name."""
    rows = _rows(shape, flavors, dtypes)
    runtime = SHAPES[shape].runtime

    @st.composite
    def draw_case(draw) -> Case:
        row = draw(st.sampled_from(rows))
        return case_of(row, runtime(draw, row))

    return draw_case()


def replay_cases(layout: str, *, flavors: Optional[Sequence[str]] = None, dtypes: Optional[Sequence[str]] = None) -> st.SearchStrategy[Case]:
    """Cases of the replay geometry of ``layout`` (``REPLAY_ROWS``)."""
    row = REPLAY_ROWS[layout]
    if (flavors is not None and row["flavor"] not in flavors) or (dtypes is not None and row["dtype"] not in dtypes):
        raise ValueError(f"replay {layout}: its geometry is {row['flavor']}/{row['dtype']}, not in {flavors} / {dtypes}")
    runtime = _thd_runtime if layout == "thd" else _dense_runtime

    @st.composite
    def draw_case(draw) -> Case:
        return case_of(row, runtime(draw, row))

    return draw_case()


# ------------------------------------------------------------------ sizes
def reference_pairs(case: Case) -> int:
    """(row, key) pairs the float64 reference and its error model compute
    (dense: every physical row against every physical key)."""
    if case.is_thd:
        return case.h_q * sum(q * kv for q, kv in zip(case.q_lens, case.kv_lens))
    return case.batch * case.h_q * case.s_q * case.s_kv


def input_bytes(case: Case) -> int:
    """Bytes of Q, K, V and O on the device (capacities included)."""
    size = 2
    if case.is_thd:
        return size * (case.t_q * case.h_q * (case.d_qk + case.d_v) + case.t_kv * case.h_kv * (case.d_qk + case.d_v))
    return size * case.batch * (case.s_q * case.h_q * (case.d_qk + case.d_v) + case.s_kv * case.h_kv * (case.d_qk + case.d_v))
