"""The mutant catalogue: plausible bugs planted in the kernels under test.

Data only. Each ``Mutant`` is a few ``kernels.source.Rewrite`` s (exact text
-> replacement, each matching exactly once in the installed file) applied at
load time to ``prefill_f16.py`` (``f16``: gptoss/llama/dsv3),
``prefill_d256_f16.py`` (``d256``: qwen) or ``prepared_host.py`` (``host``).
A bug that would live in both templates is planted in both. ``probe`` is a
small Case (fields) that reaches the mutated code: the CPU compile test
compiles it, and it is the kind of case that should expose the bug.
``expected_killer`` names a property kind of ``conformance.kill.kinds.KINDS``.
``conformance.kill_rate`` runs them; docs/mutants.md explains the results.
``MUTANTS`` is the SM80 family's catalogue; the sm90 family's
(kernels/mutants_sm90.py) is ``SM90_MUTANTS``; ``CATALOGUE``
holds both.
"""

from __future__ import annotations

from typing import Optional, Tuple

from kernels.mutant import Mutant
from kernels.mutants_sm90 import SM90_MUTANTS
from kernels.source import Rewrite

# The bug classes the catalogue covers (seen in this kernel family and its peers).
BUG_CLASSES = {
    "bias": "bias indexing or scaling (batch-0 bias broadcast: see NOT_PLANTED)",
    "off_envelope": "off-envelope head dims bound with the unpadded stride / width",
    "compile_key": "a compile key that sees runtime facts (packed token totals)",
    "cu_seqlens": "cu_seqlens_k ignored or taken from Q, or a sequence's origin off by a row (a neighbour's key read)",
    "causal_diagonal": "causal diagonal off by one",
    "sliding_window": "sliding-window bound off by one",
    "bottom_right": "bottom-right alignment from the padded maxima instead of the live lengths",
    "kv_zero_fill": "out-of-range K/V rows not zero-filled (0 x NaN leaks)",
    "lse_units": "LSE in log2 units where natural log is expected",
    "sink_units": "sink logits in the wrong units",
    "last_partial_tile": "last partial tile predicate wrong",
    "gqa_mapping": "GQA head mapping wrong",
    "output_tail": "output tail left unwritten or over-written",
    "right_band": "causal right band ignored (beyond the list: a mask-family bug)",
    "large_offsets": "an element offset computed in 32 bits (wraps past 2^31 elements)",
    # The sm90 family's (kernels.mutants_sm90).
    "pack_gqa": "PackGQA's packed row -> (token, head) mapping wrong",
    "head_dim_tail": "loads or stores past the real head dim (the fixed-width D tile's tail columns)",
    "length_clamp": "device sequence lengths clamped to the wrong envelope",
    # The schema-3 feature families.
    "rope": "fused RoPE applied at the wrong positions or convention",
    "scheduler": "a tile scheduler that drops or repeats (q tile, head, batch) work items",
    "lse_layout": "Stats stored ignoring their declared strides",
    "prefix_dtype": "cu_seqlens read in the wrong integer width",
    "precision": "an arithmetic slip the error model must see: an intermediate rounded to the I/O dtype, a constant "
    "a few digits short, a scale held in the I/O dtype, a key lost from long rows",
    # The backward: dQ/dK/dV/dBias/dSink of the SM80 backward chain.
    "bwd_gqa_accumulation": "backward: dK/dV not summed over the q heads of a kv head (GQA fold)",
    "bwd_dq_relay": "backward: the deterministic dQ relay not ordering the atomics",
    "bwd_mask": "backward: the causal / sliding-window mask missing when P is recomputed",
    "bwd_dbias_reduction": "backward: dBias reduced over the wrong batch entries",
    "bwd_dsink_units": "backward: dSink computed in the wrong log units",
    "bwd_d64_kernel": "backward: a bug in the dedicated d=64 MHA kernel alone",
    "bwd_thd_kv_bound": "backward: THD KV tiles bounded from an undersized hint (last partial tile dropped)",
    "bwd_compile_key": "backward: a compile key that sees the THD token totals",
    # Faults (FAULTS below): what the run's isolation must contain, not what a property judges.
    "illegal_address": "a global-memory address far out of bounds: a sticky CUDA error that kills the context",
    "hang": "a KV loop that never ends: the launch never completes",
}

# Bugs of the list that cannot be planted in this build, and why.
NOT_PLANTED = {
    "bias of batch 0 applied to every batch": "the installed kernel never reads a bias batch: build_spec declares the "
    "bias [1, H, SQ, SKV] and the kernel indexes head * SQ * SKV from the base pointer, so every batch already sees "
    "batch 0's bias (the contract rule bias_batch_mismatch covers it); the bias mutants plant scaling and head bugs",
}

MASK_INDENT = " " * 32  # the per-element mask terms sit this deep in both templates


def _both(pattern: str, replacement: str, d256_pattern: str = None, d256_replacement: str = None) -> Tuple[Rewrite, ...]:
    """The same change in both templates (the d256 text where it differs)."""
    return (
        Rewrite("f16", pattern, replacement),
        Rewrite("d256", d256_pattern or pattern, d256_replacement or replacement),
    )


_V_LOAD = "valid_rows=kv_valid_rows,\n{i}valid_cols=None,  # V is always the full compile-time d_v wide (asserted)\n{i}row_base={row},"
_V_LOAD_UNFILLED = "valid_rows=None,\n{i}valid_cols=None,  # V is always the full compile-time d_v wide (asserted)\n{i}row_base={row},"


def _v_load(row: str, indent: int, unfilled: bool) -> str:
    return (_V_LOAD_UNFILLED if unfilled else _V_LOAD).format(i=" " * indent, row=row)


DENSE_BIAS = dict(s_q=65, s_kv=70, h_q=2, h_kv=1, bias="float16")
THD = dict(layout="thd", q_lens=(5, 70), kv_lens=(9, 66), h_q=2, h_kv=1, kv_slack=8)
THD_LONG = dict(layout="thd", q_lens=(5, 300), kv_lens=(9, 300), h_q=2, h_kv=1)
# Precision mutants rewrite arithmetic both templates share line for line.
_ROW_SUM = "row_sum[row_state_{s}] = row_sum[row_state_{s}] * alpha_{r} + l_{r}_iter"
_ROW_SUM_IO = "row_sum[row_state_{s}] = (row_sum[row_state_{s}] * alpha_{r} + l_{r}_iter).to(io_dtype).to(cutlass.Float32)"

# Backward probes (direction "bwd"): small Cases that reach each mutated line.
BWD = dict(direction="bwd", d_qk=128, d_v=128)
BWD_THD = dict(BWD, layout="thd", q_lens=(5, 70), kv_lens=(9, 100), h_q=2, h_kv=1)
BWD_MUTANTS: Tuple[Mutant, ...] = (
    Mutant(
        "bwd_gqa_fold_first_head",
        "bwd_gqa_accumulation",
        (
            Rewrite(
                "bwd_f16",
                "        acc = cutlass.Float32(0.0)\n        for g in cutlass.range_constexpr(ratio):",
                "        acc = cutlass.Float32(0.0)\n        for g in cutlass.range_constexpr(1):",
            ),
        ),
        "backward_dense",
        "The dense GQA fold (_dkv_reduce_kernel) keeps the first q head's dK/dV partial instead of summing the group: "
        "each kv head's gradient misses the other q heads that read it.",
        dict(BWD, s_q=65, s_kv=70, h_q=4, h_kv=2),
        scope="bwd_f16 only: the backward has one generic template (the d=64 kernel serves MHA only)",
    ),
    Mutant(
        "bwd_dq_relay_no_acquire",
        "bwd_dq_relay",
        (Rewrite("bwd_f16", "                _dq_sem_wait(sem_ptr, relay_turn)", "                pass  # mutant: no acquire"),),
        "backward_thd",
        "deterministic=True still releases the dQ token but never waits for its turn: the fp32 dQ atomics of a q tile "
        "land in whatever order the KV tiles finish, so two launches may differ in the last bits (caught when three or more KV tiles contend for a q tile: "
        "strategies.backward.contended stretches deterministic THD draws for it).",
        dict(BWD, s_q=64, s_kv=1024, h_q=2, h_kv=2, deterministic=True),
        scope="bwd_f16 only: the relay lives in the generic template",
    ),
    Mutant(
        "bwd_causal_mask_dropped",
        "bwd_mask",
        (Rewrite("bwd_host", "mask = (MASK_CAUSAL if params.is_causal else MASK_NONE)", "mask = (MASK_NONE)"),),
        "backward_dense",
        "The backward host compiles the generic kernel without the causal flag: P is recomputed for keys above the "
        "diagonal (exp of their logit minus the row's LSE), so masked keys get dK/dV and pollute dQ.",
        dict(BWD, s_q=65, s_kv=70, causal=True),
        scope="bwd_host only: the mask flags are chosen by the pointer host",
    ),
    Mutant(
        "bwd_window_mask_dropped",
        "bwd_mask",
        (Rewrite("bwd_host", "(MASK_SWA if params.has_swa else 0)", "(0)"),),
        "backward_dense",
        "The backward host drops the sliding-window flag: keys left of the window get gradients.",
        dict(BWD, s_q=65, s_kv=70, window_left=8),
        scope="bwd_host only: the mask flags are chosen by the pointer host",
    ),
    Mutant(
        "bwd_dbias_broadcast_per_batch",
        "bwd_dbias_reduction",
        (Rewrite("bwd_host", "cutlass.Int64(0 if params.bias_broadcast else h * sq * skv)", "cutlass.Int64(h * sq * skv)"),),
        "backward_dense",
        "A broadcast [1, H, SQ, SKV] bias is addressed with a per-batch stride: batch entries past 0 read bias past the "
        "buffer and their dBias lands outside the accumulator instead of being reduced over the batch.",
        dict(BWD, batch=2, s_q=17, s_kv=33, bias="float32", bias_batch=1),
        scope="bwd_host only: the host passes the bias batch stride",
    ),
    Mutant(
        "bwd_dbias_batch_term_dropped",
        "bwd_dbias_reduction",
        (Rewrite("bwd_f16", "bias_base = cutlass.Int64(batch) * cutlass.Int64(bias_bstride)", "bias_base = cutlass.Int64(0) * cutlass.Int64(bias_bstride)"),),
        "backward_dense",
        "A per-batch [B, H, SQ, SKV] bias and its dBias are indexed without the batch term: every batch entry reads "
        "batch 0's bias and all dBias sums into batch 0's slice.",
        dict(BWD, batch=2, s_q=17, s_kv=33, bias="float32", bias_batch=2),
        scope="bwd_f16 only: the bias address is the generic template's",
    ),
    Mutant(
        "bwd_dsink_log2_units",
        "bwd_dsink_units",
        (
            Rewrite(
                "bwd_f16",
                "term = cute.math.exp2((sink_h - lse_q) * cutlass.Float32(_LOG2E), fastmath=True) * dd_q",
                "term = cute.math.exp2((sink_h - lse_q), fastmath=True) * dd_q",
            ),
        ),
        "backward_dense",
        "The dSink reduction exponentiates the natural-log sink minus LSE in base 2 (the log2 e factor lost): the sink's "
        "softmax weight, hence dSink, is wrong.",
        dict(BWD, s_q=33, s_kv=20, h_q=2, h_kv=2, sinks=True),
        scope="bwd_f16 only: the dSink kernel lives in the generic template file",
    ),
    Mutant(
        "bwd_d64_ds_unscaled",
        "bwd_d64_kernel",
        (Rewrite("bwd_d64", "ds0 = attn_scale * (acc_dP[off + 0] - dd_t) * p_f[off + 0]", "ds0 = (acc_dP[off + 0] - dd_t) * p_f[off + 0]"),),
        "backward_dense",
        "The dedicated d=64 MHA kernel drops the softmax scale from one of its four dS fragments: dQ and dK of the "
        "plain dense d=64 case (the only one it serves) come out wrong; no other case reaches the kernel.",
        dict(direction="bwd", d_qk=64, d_v=64, s_q=128, s_kv=128, h_q=2, h_kv=2),
        scope="bwd_d64 only: the d=64 kernel alone",
    ),
    Mutant(
        "bwd_thd_kv_tiles_floor",
        "bwd_thd_kv_bound",
        (
            Rewrite(
                "bwd_host",
                "cutlass.Int32((max_skv + params.tile_kv - 1) // params.tile_kv if params.thd_varlen else 0)",
                "cutlass.Int32(max_skv // params.tile_kv if params.thd_varlen else 0)",
            ),
        ),
        "backward_thd",
        "The THD grid's KV-tile count rounds the longest-sequence bound down, as an undersized max_s_kv hint does: the "
        "last partial KV tile of the longest sequences is never run (its dK/dV never written, its dQ terms missing).",
        BWD_THD,
        scope="bwd_host only: the host sizes the THD grid",
    ),
    Mutant(
        "bwd_thd_key_token_totals",
        "bwd_compile_key",
        (
            Rewrite(
                "bwd_spec",
                "thd=(api.batch_size, api._thd_lse_token_major) if api.thd else None",
                "thd=(api.batch_size, api._thd_lse_token_major, api._t_q_cap) if api.thd else None",
            ),
        ),
        "backward_compile_reuse_thd",
        "The packed backward's compile key carries the Q token capacity (the lesson of cudnn-frontend#604 undone): every new token "
        "total recompiles the chain (4-9 s each on the H200).",
        BWD_THD,
        scope="bwd_spec only: build_spec names the pointer chain's key",
    ),
)

MUTANTS: Tuple[Mutant, ...] = (
    Mutant(
        "bias_not_unscaled",
        "bias",
        _both(
            "S_acc[s_base + j] = S_acc[s_base + j] + bias_frag[s_base + j]",
            "S_acc[s_base + j] = S_acc[s_base + j] + bias_frag[s_base + j] / inv_softmax_scale",
        ),
        "numerics_dense",
        "Bias added to the raw scores without the 1/scale compensation, so the kernel computes softmax(s*(QK + bias)) "
        "instead of softmax(s*QK + bias): the classic pre-scale bias bug.",
        DENSE_BIAS,
    ),
    Mutant(
        "bias_head_from_kv_head",
        "bias",
        _both(
            "bias_head_e = cutlass.Int64(head_idx)",
            "bias_head_e = cutlass.Int64(kv_head_idx)",
        ),
        "numerics_dense",
        "Per-head bias indexed with the KV head under GQA/MQA (the index the K/V loads use), so Q heads of a group "
        "share one head's bias: a head-index bug like the batch-0 broadcast.",
        dict(DENSE_BIAS, h_q=4, h_kv=2),
    ),
    Mutant(
        "off_envelope_full_width",
        "off_envelope",
        (Rewrite("host", "        d == params.d_qk,", "        d <= params.d_qk,"),),
        "numerics_dense",
        "The dense host calls every head dim under the envelope 'even' (is_even_k), so Q/K rows of an off-envelope "
        "d_qk are read envelope-wide through the unpadded row pitch: the columns past d come from the next head "
        "instead of zeros (off-envelope dims bound as if padded to the envelope).",
        dict(d_qk=32, d_v=32, s_q=5, s_kv=7, h_q=2, h_kv=2),
        scope="host only: the dense pointer host decides is_even_k for both templates",
    ),
    Mutant(
        "thd_key_per_launch",
        "compile_key",
        (
            Rewrite("host", "@lru_cache(maxsize=128)", "@lru_cache(maxsize=0)"),
            Rewrite(
                "host",
                "from functools import lru_cache\n",
                "from functools import lru_cache\nfrom itertools import count as _launches\n\n_LAUNCH = _launches()\n",
            ),
            Rewrite("host", "packed_init=_INIT_DIGEST,", "packed_init=_INIT_DIGEST + str(next(_LAUNCH)),"),
        ),
        "compile_reuse_thd",
        "A THD compile key that changes with every launch of the same head/mask contract, as one carrying the packed "
        "token totals T_q/T_kv does (the packed shapes entering the key): runtime-only changes recompile. "
        "compile_thd_host never sees the totals, so the mutant keys on a launch counter of its module (not the lru's "
        "statistics, which the cache_clear before each compile_reuse call resets) and disables its lru.",
        THD,
        scope="host only: compile_thd_host serves both templates",
    ),
    Mutant(
        "cu_seqlens_k_from_q",
        "cu_seqlens",
        _both(
            "_cuk = Pointer(cutlass.make_array_view(cu_k).data_ptr(), dtype=cu_k.element_type)",
            "_cuk = Pointer(cutlass.make_array_view(cu_q).data_ptr(), dtype=cu_q.element_type)",
        ),
        "numerics_thd",
        "K/V sequence offsets and lengths read from cu_seqlens_q: right whenever the Q and KV packings agree, wrong "
        "for cross-attention-like packings and different first offsets.",
        THD,
    ),
    Mutant(
        "thd_neighbour_key",
        "cu_seqlens",
        _both(
            "        kv_seq_origin = cutlass.Int64(cu_k_b)\n",
            "        kv_seq_origin = cutlass.Int64(cu_k_b) - cutlass.Int64(cutlass.Int32(s_kv_b > cutlass.Int32(4 * tile_n)) * "
            "cutlass.Int32(batch_idx > cutlass.Int32(0)))\n",
        ),
        "metamorphic_thd_seq_perm",
        "The K/V origin of a long THD sequence (more than four KV tiles) after the first is one row early: every row "
        "reads the previous sequence's last key and loses its own last one. One key of hundreds or thousands: in a "
        "flat softmax its effect on O sits inside the reference bound, while changing the neighbour's data (isolation) "
        "or the packing order (seq_perm: the likelier draw, any order that gives the long sequence another predecessor) moves "
        "this sequence's outputs, which must not move at all.",
        THD_LONG,
    ),
    Mutant(
        "causal_diagonal_excluded",
        "causal_diagonal",
        _both(MASK_INDENT + "t = col > q_lim", MASK_INDENT + "t = col >= q_lim"),
        "numerics_dense",
        "The causal mask drops the diagonal (k < q instead of k <= q): row 0 sees no key, every row loses itself.",
        dict(s_q=70, s_kv=70, causal=True),
    ),
    Mutant(
        "window_bound_off_by_one",
        "sliding_window",
        _both(MASK_INDENT + "t = col < q_mw", MASK_INDENT + "t = col <= q_mw"),
        "numerics_dense",
        "The sliding window keeps W keys to the left instead of W + 1 (k > q - W instead of k >= q - W).",
        dict(s_q=70, s_kv=70, window_left=16),
    ),
    Mutant(
        "bottom_right_from_physical",
        "bottom_right",
        _both(
            "br_base = (eff_skv - eff_sq) if",
            "br_base = (cutlass.Int32(skv_runtime) - cutlass.Int32(sq_runtime)) if",
            "br_base = (cutlass.Int32(eff_skv) - cutlass.Int32(eff_sq)) if",
            "br_base = (cutlass.Int32(skv_runtime) - cutlass.Int32(sq_runtime)) if",
        ),
        "numerics_dense",
        "Bottom-right alignment from the physical / packed maxima (SKV - SQ, T_kv - T_q) instead of each batch's live "
        "lengths: right without padding, wrong under seq_lens padding and for every THD packing.",
        dict(s_q=70, s_kv=90, causal=True, bottom_right=True, seq_q_lens=(60,), seq_kv_lens=(90,)),
    ),
    Mutant(
        "v_tail_rows_unfilled",
        "kv_zero_fill",
        (
            Rewrite("f16", _v_load("kv_row_base_cur", 12, False), _v_load("kv_row_base_cur", 12, True)),
            Rewrite("d256", _v_load("kv_prologue_row_abs", 8, False), _v_load("kv_prologue_row_abs", 8, True)),
            Rewrite("d256", _v_load("kv_row_base_prev", 12, False), _v_load("kv_row_base_prev", 12, True)),
        ),
        "numerics_thd",
        "V rows past the sequence's KV length are loaded from memory instead of zero-filled. The scores there are "
        "masked (P = 0), so finite garbage is harmless, but 0 x NaN = NaN leaks whenever those rows hold NaN "
        "(packed capacity slack, a freed buffer).",
        THD,
    ),
    Mutant(
        "lse_in_log2_units",
        "lse_units",
        _both("if cutlass.const_expr(PARAMS.stats_log2):", "if cutlass.const_expr(not PARAMS.stats_log2):"),
        "numerics_dense",
        "Stats written in log2 units (LSE * log2 e) where the contract (and the backward pass) expects natural log.",
        dict(s_q=5, s_kv=7),
    ),
    Mutant(
        "sink_units_not_converted",
        "sink_units",
        _both("if cutlass.const_expr(PARAMS.sink_natural):", "if cutlass.const_expr(not PARAMS.sink_natural):"),
        "numerics_dense",
        "Natural-log sink logits used as log2 units (the sink_natural * log2 e conversion dropped): every sink is weighted exp2(s) instead of exp(s).",
        dict(s_q=5, s_kv=7, sinks=True),
    ),
    Mutant(
        "kv_tail_mask_off_by_one",
        "last_partial_tile",
        _both(MASK_INDENT + "t = col >= eff_skv", MASK_INDENT + "t = col > eff_skv"),
        "numerics_dense",
        "The last partial KV tile's column predicate lets key eff_skv through (> instead of >=): one zero-filled or padded key joins every row's softmax.",
        dict(s_q=5, s_kv=70),
    ),
    Mutant(
        "gqa_heads_interleaved",
        "gqa_mapping",
        _both(
            "kv_head_idx = head_idx if heads_per_kv == 1 else (head_idx // cutlass.Int32(heads_per_kv))",
            "kv_head_idx = head_idx if heads_per_kv == 1 else (head_idx % cutlass.Int32(H_kv))",
        ),
        "numerics_dense",
        "Q head h reads KV head h % H_kv (repeat) instead of h // group (repeat_interleave): right for MHA and MQA, wrong for GQA with more than one KV head.",
        dict(s_q=5, s_kv=7, h_q=4, h_kv=2),
    ),
    Mutant(
        "thd_store_past_sequence",
        "output_tail",
        _both(
            "sq_store_bound = eff_sq if cutlass.const_expr(THD_VARLEN) else sq_runtime",
            "sq_store_bound = sq_runtime",
        ),
        "numerics_thd",
        "THD O/LSE stores bounded by the packed capacity instead of the sequence's length: each sequence's last Q "
        "tile (and every over-provisioned tile) over-writes the next sequence's rows (a race numerics may see) and "
        "the capacity tail (which the tails properties see).",
        THD,
    ),
    Mutant(
        "dense_store_past_s_q",
        "output_tail",
        _both(
            "sq_store_bound = eff_sq if cutlass.const_expr(THD_VARLEN) else sq_runtime",
            "sq_store_bound = eff_sq if cutlass.const_expr(THD_VARLEN) else sq_runtime + cutlass.Int32(64)",
        ),
        "tails_dense",
        "Dense O/LSE stores of the last partial Q tile bounded one tile past S_q: the rows past S_q land in the next "
        "head's or batch entry's rows and, for the last one, past the end of O and LSE: an out-of-bounds write the "
        "guard bands must report with its address range (not a crash, not a silent corruption).",
        dict(s_q=65, s_kv=70, h_q=1, h_kv=1, memory="bshd_padded"),
    ),
    Mutant(
        "thd_outputs_not_initialized",
        "output_tail",
        (Rewrite("host", "if t_q > 0:", "if t_q < 0:"),),
        "numerics_thd",
        "The THD host skips zero_outputs although initialize_outputs is set: the holes and tails the wrapper promises as zeros keep the caller's bytes.",
        THD,
        scope="host only: thd_host initializes outputs for both templates",
    ),
    Mutant(
        "precision_row_sum_in_io_dtype",
        "precision",
        tuple(
            Rewrite(t, _ROW_SUM.format(s=side, r=row), _ROW_SUM_IO.format(s=side, r=row))
            for t in ("f16", "d256")
            for side, row in (("lo", "top"), ("hi", "bot"))
        ),
        "numerics_dense",
        "The running row sum kept in the I/O dtype (a half-precision accumulator): every tile's sum is rounded to "
        "fp16/bf16, so the normalizer and the LSE are off by up to u_io per tile; O by the same relative amount.",
        dict(s_q=65, s_kv=129),
    ),
    Mutant(
        "precision_ln2_four_digits",
        "precision",
        _both("LN2 = cutlass.Float32(0.6931471805599453)", "LN2 = cutlass.Float32(0.6931)"),
        "numerics_dense",
        "ln 2 typed to four digits in the LSE conversion: LSE off by 7e-5 relative (a few 1e-4 absolute), far below "
        "what a same-dtype framework run errs by, far above the kernel's fp32 arithmetic.",
        dict(s_q=5, s_kv=7),
    ),
    Mutant(
        "precision_scale_in_io_dtype",
        "precision",
        _both(
            "    m_per_warp = tile_m // num_warps",
            "    softmax_scale_log2 = softmax_scale_log2.to(io_dtype).to(cutlass.Float32)\n    m_per_warp = tile_m // num_warps",
        ),
        "numerics_dense",
        "The folded softmax scale (scale * log2 e) held in the I/O dtype: every logit scaled by a factor off by up to "
        "2^-11 (fp16) / 2^-8 (bf16), a 0.05-0.4% scale error.",
        dict(s_q=5, s_kv=7),
    ),
    Mutant(
        "precision_long_row_drops_last_key",
        "precision",
        _both(MASK_INDENT + "t = col >= eff_skv", MASK_INDENT + "t = col >= eff_skv - cutlass.Int32(eff_skv > cutlass.Int32(2 * tile_n))"),
        "numerics_thd",
        "The last key of rows longer than two KV tiles is masked (a length bound off by one on a path only long rows "
        "take): one key of hundreds, a 1/n change of the softmax.",
        THD_LONG,
    ),
    Mutant(
        "rope_k_tile_local_positions",
        "rope",
        (
            Rewrite("f16", "sK_cur, rope_cs_ptr, kv_row_base_cur", "sK_cur, rope_cs_ptr, cutlass.Int32(0)"),
            Rewrite(
                "d256",
                "                rope_cs_ptr,\n                kv_iter * cutlass.Int32(tile_n),\n",
                "                rope_cs_ptr,\n                cutlass.Int32(0),\n",
            ),
        ),
        "numerics_dense",
        "K rows are rotated with their position inside the KV tile instead of in the sequence (the tile base dropped): "
        "right for the first 64 keys, wrong relative positions past them.",
        dict(s_q=70, s_kv=130, h_q=2, h_kv=1, rope=True),
    ),
    Mutant(
        "sched_lpt_decode_drops_batch",
        "scheduler",
        _both("row_rank = bx // HB", "row_rank = bx // H_i32"),
        "numerics_dense",
        "The LPT decode divides the linear CTA index by the head count where it should divide by heads x batch: with "
        "B > 1 some (q tile, head, batch) items are computed twice and others never (their O left as poisoned).",
        dict(batch=2, s_q=200, s_kv=70, h_q=2, h_kv=1, sched="lpt"),
    ),
    Mutant(
        "sched_lpt_l2_full_last_block",
        "scheduler",
        _both(
            "row_rank = within_blk // (agroup_eff * cutlass.Int32(heads_per_kv_decode))",
            "row_rank = within_blk // (active_groups * cutlass.Int32(heads_per_kv_decode))",
        )
        + _both(
            "in_rank = within_blk % (agroup_eff * cutlass.Int32(heads_per_kv_decode))",
            "in_rank = within_blk % (active_groups * cutlass.Int32(heads_per_kv_decode))",
        ),
        "numerics_dense",
        "LPT-L2 decodes the last, partial block of (batch, kv head) groups as if it were full: when the groups do not "
        "divide into L2 blocks, tiles of the last block are repeated or dropped (B*H_kv = 6 groups, 4 per 1 MiB block at "
        "S_kv * (D_QK + D_V) * 2 = 256 KiB, two q tiles per group: strategies.geometry.l2_split_lengths).",
        dict(batch=3, h_q=4, h_kv=2, s_q=129, s_kv=1024, sched="lpt_l2", sched_l2_mib=1),
    ),
    Mutant(
        "lse_row_stride_assumed_one",
        "lse_layout",
        _both("LSE_S_STRIDE_E = cutlass.Int64(LSE.stride[2])", "LSE_S_STRIDE_E = cutlass.Int64(1)"),
        "numerics_thd",
        "The Stats token stride is taken as 1 (the compact head-major layout) whatever the tensor says: a token-major "
        "LSE (dense (B,S,H) or THD lse_stride (0, 1, H)) is written over the wrong elements.",
        dict(THD, lse_layout="token_major"),
    ),
    Mutant(
        "thd_lse_stride_ignored",
        "lse_layout",
        (Rewrite("host", "(0, t_q, 1) if lse_stride is None else lse_stride)", "(0, t_q, 1))"),),
        "numerics_thd",
        "compile_thd_host's lse_stride is dropped: Stats always go head-major with pitch T_q, whatever layout the "
        "caller compiled (a padded head pitch or token-major).",
        dict(THD, lse_layout="padded"),
        scope="host only: thd_host builds the Stats view for both templates",
    ),
    Mutant(
        "sink_log2_converted_again",
        "sink_units",
        _both("if cutlass.const_expr(PARAMS.sink_natural):", "if cutlass.const_expr(True):"),
        "numerics_dense",
        "Base-2 sinks (sink_natural=False, the legacy tensor hosts' ABI) are multiplied by log2(e) as if natural.",
        dict(s_q=33, s_kv=40, h_q=2, h_kv=1, sinks=True, sink_log2=True),
    ),
    Mutant(
        "prefix_int64_read_as_int32",
        "prefix_dtype",
        (Rewrite("host", '"torch.int64": cutlass.Int64,', '"torch.int64": cutlass.Int32,'),),
        "numerics_thd",
        "int64 cu_seqlens are bound as int32 pointers: the kernel reads the low and high words of the first offsets "
        "as consecutive offsets, so every sequence past the first is misplaced.",
        dict(THD, prefix_dtype="int64"),
        scope="host only: compile_thd_host binds the cu_seqlens pointers for both templates",
    ),
    Mutant(
        "right_band_ignored",
        "right_band",
        _both("causal_diag = br_base + cutlass.Int32(causal_band_right)", "causal_diag = br_base"),
        "numerics_dense",
        "The runtime causal right band (window_right) is dropped: a banded causal mask degrades to plain causal.",
        dict(s_q=70, s_kv=70, causal=True, window_left=16, window_right=5),
    ),
    Mutant(
        "kv_offset_int32",
        "large_offsets",
        _both(
            "        K_BATCH_OFF = kv_seq_origin * K_ROW_STRIDE_E\n        V_BATCH_OFF = kv_seq_origin * V_ROW_STRIDE_E\n",
            "        K_BATCH_OFF = cutlass.Int64(cutlass.Int32(kv_seq_origin) * cutlass.Int32(K_ROW_STRIDE_E))\n"
            "        V_BATCH_OFF = cutlass.Int64(cutlass.Int32(kv_seq_origin) * cutlass.Int32(V_ROW_STRIDE_E))\n",
        ),
        "numerics_large_offsets",
        "The THD K/V sequence offset (first token x row stride) computed in 32 bits: past 2^31 elements it wraps, so "
        "packed K/V beyond 4 GiB (fp16) are read from the wrapped address (the decoys 2^32 elements lower) or from "
        "before the allocation: the classic int32 index overflow of varlen attention at production scale.",
        dict(layout="thd", h_q=1, h_kv=1, q_lens=(3, 5), kv_lens=(4, 6), kv_base=8),
    ),
) + BWD_MUTANTS


# The sm90 family's mutants (kernels/mutants_sm90.py; family "sm90"): not in MUTANTS, the
# SM80 catalogue a kill-harness run measures by default; `--family sm90` (or all) measures
# them, on a Hopper GPU, with the sm90 properties' kinds (conformance.kill_sm90).
CATALOGUE: Tuple[Mutant, ...] = MUTANTS + SM90_MUTANTS


# Planted faults, for proving the run's fault and hang isolation
# (conformance.isolation) on a GPU: not part of the kill-rate catalogue (a
# fault is caught by the harness, not judged by a property). Both live in
# prefill_f16.py only (gptoss/llama/dsv3), so the qwen (d256) strata and the
# wrapper adapter's tests of the same run stay clean: the gate must be red
# exactly for the tests whose examples reached the fault.
_KV_LOOP = "    iter_count = kv_right - kv_left\n"
_KV_ADVANCE = "        v_cur_gmem = v_cur_gmem - V_STRIDE_64\n        k_next_gmem = k_next_gmem - K_STRIDE_64\n"
FAULT_SCOPE = "f16 only: the qwen (d256) strata of the same run must stay green"

FAULTS: Tuple[Mutant, ...] = (
    Mutant(
        "fault_v_stride_out_of_bounds",
        "illegal_address",
        (
            Rewrite(
                "f16", "    V_STRIDE_64 = V_TILE_STRIDE_E.to(cutlass.Int64)\n", "    V_STRIDE_64 = V_TILE_STRIDE_E.to(cutlass.Int64) * cutlass.Int64(1 << 32)\n"
            ),
        ),
        "numerics_dense",
        "The V running pointer steps 2^32 tiles per KV iteration instead of one (a tile stride in the wrong units): "
        "every CTA with two or more KV tiles (s_kv > 64 in its window) loads V terabytes below its buffer, an illegal "
        "address that kills the CUDA context. One-tile cases run clean.",
        dict(s_q=5, s_kv=130),
        scope=FAULT_SCOPE,
    ),
    Mutant(
        "fault_kv_loop_never_ends",
        "hang",
        (
            Rewrite(
                "f16",
                _KV_LOOP,
                _KV_LOOP + "    kv_stuck = cutlass.Int32(iter_count > cutlass.Int32(2))\n"
                "    kv_step = cutlass.Int32(1) - kv_stuck\n"
                "    iter_count = iter_count * kv_step + kv_stuck * cutlass.Int32(2147483647)\n",
            ),
            Rewrite("f16", "        kv_iter = prologue_kv_iter - i\n", "        kv_iter = prologue_kv_iter - i * kv_step\n"),
            Rewrite(
                "f16",
                _KV_ADVANCE,
                "        v_cur_gmem = v_cur_gmem - V_STRIDE_64 * kv_step.to(cutlass.Int64)\n"
                "        k_next_gmem = k_next_gmem - K_STRIDE_64 * kv_step.to(cutlass.Int64)\n",
            ),
        ),
        "numerics_dense",
        "A CTA with more than two KV tiles (s_kv > 128 in its window) re-reads its first KV tile 2^31 - 1 times (the "
        "loop's bound and step come from a stuck flag): every load stays in bounds, so the launch never errors; it just "
        "does not finish (tens of minutes per CTA at the least, far past any bound). Up to two KV tiles run clean.",
        dict(s_q=5, s_kv=200),
        scope=FAULT_SCOPE,
    ),
)

# $SDPA_PLANT_MUTANT=<name>: the prepared adapter of a pytest run (or of
# `sdpa-conformance repro`) loads the kernels with that mutant planted.
# For demonstrations on a GPU (the run's header says so loudly); refused
# where $CI is set.
PLANT_ENV = "SDPA_PLANT_MUTANT"


def by_name(name: str) -> Mutant:
    for m in MUTANTS + FAULTS:
        if m.name == name:
            return m
    if name in {m.name for m in SM90_MUTANTS}:
        raise ValueError(f"{PLANT_ENV}={name!r}: an sm90 mutant; the SM80 adapters cannot plant it (kernels.sm90.adapter.Sm90Adapter(rewrites) does)")
    raise ValueError(f"{PLANT_ENV}={name!r}: no such mutant (catalogue: {', '.join(m.name for m in MUTANTS)}; faults: {', '.join(m.name for m in FAULTS)})")


def planted() -> Optional[Mutant]:
    """The mutant $SDPA_PLANT_MUTANT names (None when unset or empty)."""
    import os

    name = os.environ.get(PLANT_ENV, "").strip()
    return by_name(name) if name else None
