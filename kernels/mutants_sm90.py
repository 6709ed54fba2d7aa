"""The sm90 family's mutants: plausible bugs planted in the native Hopper D512
forward (ground.families.FAMILIES["sm90"]).

Data only, like ``kernels.mutants`` (which includes them as ``SM90_MUTANTS``).
Targets (``kernels.source.TARGETS``): ``sm90`` the template
(prefill_d512_f16.py), ``sm90_host`` its pointer host (prepared_host.py),
``sm90_common`` its helpers (_common_hopper.py). ``kernels.source.sm90_sources``
loads them wherever the kernels load the template (``Sm90Adapter(rewrites)``).
``probe``: an sm90 Case the planner accepts that compiles the mutated code in
(tests/test_mutants_sm90.py compiles it for sm_90a and checks that the
kernel, device PTX or host code, differs from the pristine one). ``expected_killer``: the sm90
property kind that should kill it (``conformance.kill_sm90``; ``PENDING`` there
names those that cannot run yet). ``sdpa-conformance mutants --family sm90``
runs them on a Hopper GPU; their kill table: docs/mutants.md.
"""

from __future__ import annotations

from typing import Tuple

from kernels.mutant import Mutant
from kernels.source import Rewrite

SM90 = dict(family="sm90")
# The probes, shared so that the CPU test compiles one pristine kernel per probe.
# MASK: padded dense GQA with a bottom-right causal band, a left window and a right
# band, S_q past S_kv, two batch entries and three q heads under LPT.
MASK = dict(
    SM90,
    batch=2,
    h_q=3,
    h_kv=1,
    s_q=130,
    s_kv=70,
    causal=True,
    bottom_right=True,
    window_left=16,
    window_right=4,
    seq_q_lens=(130, 65),
    seq_kv_lens=(70, 40),
    sched="lpt",
)
# PACK: PackGQA (4 q heads per KV head), causal, LPT_L2, sinks, Stats with a row pad.
PACK = dict(SM90, h_q=8, h_kv=2, pack_gqa=True, s_q=70, s_kv=130, causal=True, sched="lpt_l2", sinks=True, lse_layout="padded")
# THD: two sequences whose Q and KV origins differ.
THD = dict(SM90, layout="thd", q_lens=(5, 70), kv_lens=(9, 66), h_q=2, h_kv=1)


def _sm90(name, bug_class, rewrites, expected_killer, why, probe) -> Mutant:
    return Mutant(name, bug_class, tuple(rewrites), expected_killer, why, probe, scope="the sm90 family's own sources", family="sm90")


SM90_MUTANTS: Tuple[Mutant, ...] = (
    _sm90(
        "sm90_bottom_right_from_maxima",
        "bottom_right",
        [Rewrite("sm90", "diagonal = q_token + work.kv_len - work.q_len if", "diagonal = q_token + cutlass.Int32(self.s_kv) - cutlass.Int32(self.s_q) if")],
        "sm90_numerics_dense",
        "The bottom-right diagonal aligned from the declared S_kv - S_q instead of the live lengths: padded batch "
        "entries see keys shifted by the padding (the KV loop bounds still use the live lengths, only the element mask moves).",
        MASK,
    ),
    _sm90(
        "sm90_causal_diagonal_excluded",
        "causal_diagonal",
        [
            Rewrite(
                "sm90",
                "score_prefix_mask(diagonal + cutlass.Int32(self.window_right), column_base, inclusive=True)",
                "score_prefix_mask(diagonal + cutlass.Int32(self.window_right), column_base, inclusive=False)",
            )
        ],
        "sm90_numerics_dense",
        "The causal bound made exclusive: each row loses its diagonal key (the right band's last key); a row whose only "
        "visible key was the diagonal gets none.",
        MASK,
    ),
    _sm90(
        "sm90_right_band_ignored",
        "right_band",
        [
            Rewrite(
                "sm90",
                "score_prefix_mask(diagonal + cutlass.Int32(self.window_right), column_base, inclusive=True)",
                "score_prefix_mask(diagonal, column_base, inclusive=True)",
            )
        ],
        "sm90_numerics_dense",
        "The element mask drops the widened right band R: keys diagonal+1 .. diagonal+R are masked although the KV "
        "loop walks their tile (plain causal instead of the band).",
        MASK,
    ),
    _sm90(
        "sm90_window_bound_off_by_one",
        "sliding_window",
        [
            Rewrite(
                "sm90",
                "~score_prefix_mask(diagonal - cutlass.Int32(self.window_left), column_base)",
                "~score_prefix_mask(diagonal - cutlass.Int32(self.window_left) + 1, column_base)",
            )
        ],
        "sm90_numerics_dense",
        "The sliding window's left bound off by one: key q + delta - W, the window's first, is masked (W keys left of the diagonal instead of W + 1).",
        MASK,
    ),
    _sm90(
        "sm90_pack_gqa_row_as_token",
        "pack_gqa",
        [
            Rewrite(
                "sm90",
                "q_token = work.q_base + owned_row(local_tid, row_half) // self.heads_per_tile",
                "q_token = work.q_base + owned_row(local_tid, row_half)",
            )
        ],
        "sm90_numerics_dense",
        "PackGQA's packed row index taken as the token in the mask: row r is token r // G, head r % G, but the causal "
        "diagonal and the row validity use r, so every packed head but the first sees keys of a later token.",
        PACK,
    ),
    _sm90(
        "sm90_lpt_heads_batch_swapped",
        "scheduler",
        [
            Rewrite(
                "sm90",
                "tile, head, batch = lpt_tile_coords(tile, cutlass.Int32(self.heads), cutlass.Int32(self.b), cutlass.Int32(self.q_tiles))",
                "tile, head, batch = lpt_tile_coords(tile, cutlass.Int32(self.b), cutlass.Int32(self.heads), cutlass.Int32(self.q_tiles))",
            )
        ],
        "sm90_numerics_dense",
        "The LPT unflatten is handed (batch, heads) for (heads, batch): with H != B some heads are never computed and "
        "batch indices past B are addressed (the grid size, their product, is unchanged).",
        MASK,
    ),
    _sm90(
        "sm90_lpt_l2_unpacked_head_count",
        "scheduler",
        [
            Rewrite(
                "sm90",
                "cutlass.Int32(self.heads),\n                cutlass.Int32(self.b),\n                cutlass.Int32(self.q_tiles),\n",
                "cutlass.Int32(self.h_q),\n                cutlass.Int32(self.b),\n                cutlass.Int32(self.q_tiles),\n",
            )
        ],
        "sm90_numerics_dense",
        "The LPT_L2 unflatten is handed H_q where the grid has H_q / G packed head tiles under PackGQA: the decoded "
        "(tile, head, batch) run past the launched heads, so some work tiles repeat and others are never computed.",
        PACK,
    ),
    _sm90(
        "sm90_lse_in_log2_units",
        "lse_units",
        [
            Rewrite(
                "sm90_common",
                "value = (anchor * scale_log2 + cute.math.log2(total, fastmath=True)) * cutlass.Float32(LN2)",
                "value = anchor * scale_log2 + cute.math.log2(total, fastmath=True)",
            )
        ],
        "sm90_numerics_dense",
        "The positive-scale LSE left in log2 units (the ln 2 factor lost on the narrow path) where Stats are natural log; O is unaffected.",
        MASK,
    ),
    _sm90(
        "sm90_lse_head_stride_compact",
        "lse_layout",
        [Rewrite("sm90", "cutlass.Int64(q_head) * cutlass.Int64(lse.stride[1])", "cutlass.Int64(q_head) * cutlass.Int64(self.s_q)")],
        "sm90_numerics_dense",
        "Stats addressed with the compact head stride S_q instead of the declared one: a padded or token-major Stats "
        "declaration gets rows of one head written into another's (and its own left unwritten).",
        PACK,
    ),
    _sm90(
        "sm90_sink_as_log2_logit",
        "sink_units",
        [Rewrite("sm90_common", "logit = cutlass.Float64(row_sink)", "logit = cutlass.Float64(row_sink) * cutlass.Float64(LOG2_E)")],
        "sm90_numerics_dense",
        "The natural-log sink logit lifted to log2 units (as the SM80 family's log2-domain softmax does) while the "
        "row's peak stays natural: the sink's weight in the denominator, hence O and LSE, is wrong.",
        PACK,
    ),
    _sm90(
        "sm90_thd_kv_origin_from_q",
        "cu_seqlens",
        [Rewrite("sm90", "kv_offset = cutlass.Int32(meta[2 * self.b + 1 + batch])", "kv_offset = cutlass.Int32(meta[self.b + batch])")],
        "sm90_numerics_thd",
        "THD K/V sequence origins taken from the Q prefix (cu_seqlens_q for cu_seqlens_k): every sequence after the "
        "first reads its keys from another sequence's rows.",
        THD,
    ),
    _sm90(
        "sm90_stats_store_past_q_len",
        "output_tail",
        [Rewrite("sm90", "if token < work.q_output_limit:", "if token < work.q_output_limit + cutlass.Int32(self.tokens_per_tile):")],
        "sm90_numerics_thd",
        "The Stats store's row predicate one tile past the sequence end: the last tile of each sequence writes Stats "
        "rows its sequence does not own, into the next sequence's rows, the capacity past the last one, or past the "
        "buffer.",
        THD,
    ),
    _sm90(
        "sm90_o_store_past_d_v",
        "head_dim_tail",
        [Rewrite("sm90_host", "o = bhsd(o_ptr, kernel.h_q, sq, d_v, o_strides)", "o = bhsd(o_ptr, kernel.h_q, sq, 512, o_strides)")],
        "sm90_tails_dense",
        "The O map built the D tile wide (512) instead of the real d_v: the store stops clipping at d_v and writes the "
        "tile's zero columns over the next head's (or token's) outputs and past the end of O.",
        MASK,
    ),
    _sm90(
        "sm90_qk_loads_past_d_qk",
        "head_dim_tail",
        [
            Rewrite("sm90_host", "q = bhsd(q_ptr, kernel.h_q, sq, d_qk, q_strides)", "q = bhsd(q_ptr, kernel.h_q, sq, 512, q_strides)"),
            Rewrite("sm90_host", "k = bhsd(k_ptr, kernel.h_kv, skv, d_qk, k_strides)", "k = bhsd(k_ptr, kernel.h_kv, skv, 512, k_strides)"),
        ],
        "sm90_numerics_dense",
        "The Q and K maps built the D tile wide instead of the real d_qk: loads stop zero-filling past d_qk, so S sums "
        "products of the neighbouring heads' (or tokens') columns, and the last rows read past the buffers.",
        MASK,
    ),
    _sm90(
        "sm90_batch_stride_int32",
        "large_offsets",
        [Rewrite("sm90_host", "stride=(bs, hs, ss, 1)", "stride=(cutlass.Int32(bs), hs, ss, 1)")],
        "sm90_numerics_large_offsets",
        "The batch stride of Q/K/V/O narrowed to 32 bits on its way into the tensor maps: past 2^31 elements per batch "
        "entry (4 GiB of fp16) it wraps, and batch entries past 0 are read and written at the wrapped address.",
        MASK,
    ),
    _sm90(
        "sm90_q_len_clamped_to_s_kv",
        "length_clamp",
        [Rewrite("sm90", "[batch]), cutlass.Int32(0)), cutlass.Int32(self.s_q))", "[batch]), cutlass.Int32(0)), cutlass.Int32(self.s_kv))")],
        "sm90_numerics_dense",
        "The dense Q length clamped to the KV envelope S_kv (a copy of the KV clamp): with S_q > S_kv the live rows past "
        "S_kv are trimmed (O = 0, Stats = -inf).",
        MASK,
    ),
)
