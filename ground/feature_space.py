"""The kernels' degrees of freedom, each mapped to the Case facts that draw it
or declared out of scope with the reason: ONE table.

The entries are the fields of ``cudnn.sdpa.fwd.config_sm80.TemplateParams``
(the compile-time identity of an SM80 forward kernel), the parameters of the
public ``sdpa_fwd_wrapper_sm80`` and of the compile entry points
``prepared_host.compile_host`` / ``compile_thd_host``. tests/test_feature_space.py
derives the names from those objects themselves (dataclass fields,
``inspect.signature``), so a field or argument added upstream fails it until
it is drawn (a fact here) or declared out of scope (a reason here). The
report's kernel-field coverage table (reports/coverage.py) reads the same
table: field -> the values of its facts' coverage axes -> examples.
"""

from __future__ import annotations

from typing import Dict, Iterable, List, Tuple

from .case import AUTO, FACTS

# Where a degree of freedom is declared.
SOURCES = {
    "TemplateParams": "cudnn.sdpa.fwd.config_sm80.TemplateParams (dataclass fields)",
    "wrapper": "cudnn.sdpa.fwd.sdpa_fwd_wrapper_sm80 (parameters)",
    "compile_host": "cudnn.sdpa.fwd.kernels.sm80.prepared_host.compile_host (parameters)",
    "compile_thd_host": "cudnn.sdpa.fwd.kernels.sm80.prepared_host.compile_thd_host (parameters)",
}

# (source, name) -> the Case facts that draw it.
DRAWN: Dict[Tuple[str, str], Tuple[str, ...]] = {
    ("TemplateParams", "io_bf16"): ("dtype",),
    ("TemplateParams", "d_qk"): ("d_qk",),
    ("TemplateParams", "d_v"): ("d_v",),
    ("TemplateParams", "is_causal"): ("causal",),
    ("TemplateParams", "has_swa"): ("window_left",),
    ("TemplateParams", "causal_bottom_right"): ("bottom_right",),
    ("TemplateParams", "has_seq_kv_lens"): ("seq_kv_lens",),
    ("TemplateParams", "has_seq_q_lens"): ("seq_q_lens",),
    ("TemplateParams", "has_sink"): ("sinks",),
    ("TemplateParams", "stats_log2"): ("lse_log2",),
    ("TemplateParams", "has_bias"): ("bias",),
    ("TemplateParams", "bias_is_fp32"): ("bias",),
    ("TemplateParams", "has_rope"): ("rope",),
    ("TemplateParams", "thd_varlen"): ("layout",),
    ("TemplateParams", "sched_policy"): ("sched",),
    ("TemplateParams", "sched_l2_mib"): ("sched_l2_mib",),
    ("TemplateParams", "has_lse"): ("has_lse",),
    ("TemplateParams", "sink_natural"): ("sink_log2",),
    ("TemplateParams", "score_sign"): ("scale",),
    ("wrapper", "q_tensor"): ("layout", "batch", "h_q", "d_qk", "s_q", "memory"),
    ("wrapper", "k_tensor"): ("h_kv", "s_kv", "memory"),
    ("wrapper", "v_tensor"): ("d_v", "memory"),
    ("wrapper", "is_causal"): ("causal",),
    ("wrapper", "window_size"): ("window_left", "window_right"),
    ("wrapper", "scale_softmax"): ("scale",),
    ("wrapper", "scheduler"): ("sched",),
    ("wrapper", "causal_bottom_right"): ("bottom_right",),
    ("wrapper", "seq_kv_lens"): ("seq_kv_lens",),
    ("wrapper", "seq_len_q"): ("seq_q_lens",),
    ("wrapper", "bias_tensor"): ("bias", "bias_batch"),
    ("wrapper", "sinks"): ("sinks",),
    ("wrapper", "cum_seqlen_q_tensor"): ("q_lens", "q_base", "q_slack"),
    ("wrapper", "cum_seqlen_k_tensor"): ("kv_lens", "kv_base", "kv_slack"),
    ("wrapper", "max_s_q"): ("q_lens",),
    ("wrapper", "rope_freqs"): ("rope",),
    ("compile_host", "geometry"): ("memory", "lse_layout", "has_lse", "sink_layout", "rope", "bias", "seq_q_lens", "seq_kv_lens"),
    ("compile_host", "swa_window"): ("window_left",),
    ("compile_host", "right_bound"): ("window_right",),
    ("compile_thd_host", "h"): ("h_q",),
    ("compile_thd_host", "h_kv"): ("h_kv",),
    ("compile_thd_host", "n_seq"): ("q_lens",),
    ("compile_thd_host", "swa_window"): ("window_left",),
    ("compile_thd_host", "prefix_dtypes"): ("prefix_dtype",),
    ("compile_thd_host", "sink_dtype"): ("sink_dtype",),
    ("compile_thd_host", "lse_stride"): ("lse_layout",),
}

# (source, name) -> why no Case fact draws it.
OUT_OF_SCOPE: Dict[Tuple[str, str], str] = {
    ("TemplateParams", "tile_m"): "fixed per flavor (api_dsl._SM80_FLAVOR_KNOBS); neither public entry takes it: the flavor (head dims) draws it",
    ("TemplateParams", "num_warps"): "fixed per flavor (api_dsl._SM80_FLAVOR_KNOBS); neither public entry takes it: the flavor (head dims) draws it",
    ("TemplateParams", "tile_n"): "fixed per flavor (api_dsl._SM80_FLAVOR_KNOBS); neither public entry takes it: the flavor (head dims) draws it",
    ("wrapper", "scale_output"): "anything but 1.0 raises NotImplementedError: a contract rule (contracts.py scale_output_not_one), not a computation",
    ("wrapper", "current_stream"): "which stream the launch is queued on, not what it computes (the adapters launch on torch's current stream)",
    ("compile_host", "module"): "the template module specialized from TemplateParams (its fields are the TemplateParams rows)",
    ("compile_host", "params"): "the TemplateParams themselves (their fields are the TemplateParams rows)",
    ("compile_host", "cache_key"): "the compiled cache's key, derived from the other arguments (the disk_reuse property judges it)",
    ("compile_thd_host", "module"): "the template module specialized from TemplateParams (its fields are the TemplateParams rows)",
    ("compile_thd_host", "initialize_outputs"): "a property parameter, not a Case fact: the tails test runs both modes (initialize_outputs=True/False)",
}


def unaccounted(source: str, names: Iterable[str]) -> List[str]:
    """The names of ``source`` that are neither drawn nor declared out of scope."""
    return [n for n in names if (source, n) not in DRAWN and (source, n) not in OUT_OF_SCOPE]


def axes_of(fact_names: Iterable[str]) -> Tuple[str, ...]:
    """The coverage axes that show these facts (an AUTO fact's own axis, or
    the derived axes it names), in order, without repeats."""
    out: List[str] = []
    for name in fact_names:
        f = FACTS[name]
        for axis in (name,) if f.coverage == AUTO else (f.coverage or ()):
            if axis not in out:
                out.append(axis)
    return tuple(out)


def field_axes() -> Dict[str, Tuple[str, ...]]:
    """ "source.name" -> the coverage axes of the facts drawing it (the
    report's field x value table)."""
    return {f"{src}.{name}": axes_of(facts) for (src, name), facts in DRAWN.items()}


assert not set(DRAWN) & set(OUT_OF_SCOPE), "a degree of freedom is drawn or out of scope, not both"
assert all(f in FACTS for facts in DRAWN.values() for f in facts), "DRAWN names declared Case facts"
