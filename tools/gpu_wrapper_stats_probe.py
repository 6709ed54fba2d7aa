"""Which THD Stats tensors sdpa_bwd_wrapper_sm80 refuses (finding
wrapper-bwd-thd-stats-strides): one launch per (H, T_q, strides) of a
[1, H, T_q] Stats, one line each with the Stats facts the wrapper bound and
the plan's declared operand. One CUDA GPU, from the repository root:

    python3 tools/gpu_wrapper_stats_probe.py

Seen on the H200 (2026-12-03): H=1 T_q=1 strides (1, 1, 1) runs, a
(5, 5, 1) view raises "THD stats must match the declared packed layout";
H=1 T_q=2, 3 and H=2, 4 (compact) run.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import cudnn.sdpa.bwd.prepared_sm80 as prepared_sm80  # noqa: E402
import torch  # noqa: E402
from cudnn.sdpa.bwd import sdpa_bwd_wrapper_sm80  # noqa: E402

from kernels.backward import sm80_answer  # noqa: E402

seen = {}
_execute = prepared_sm80.execute_tensors


def _spy(api, tensors, *args, **kwargs):
    """Record the Stats facts and the plan's operand, then run as usual."""
    from cudnn.sdpa.fwd.prepared import facts_of_tensor

    facts, op = facts_of_tensor(tensors[5]), api._prepared.operands[5]
    seen.update(stats=(facts.shape, facts.strides) if facts else None, op=(op.shape, op.strides), token_major=getattr(api, "_thd_lse_token_major", None))
    return _execute(api, tensors, *args, **kwargs)


def run(h: int, t: int, pitch: int = 0, d: int = 64) -> None:
    dev = torch.device("cuda")
    torch.manual_seed(0)
    q, k, v, o, do = (torch.randn(1, t, h, d, device=dev, dtype=torch.float16) for _ in range(5))
    lse = torch.zeros(1, h, t + pitch, device=dev)[:, :, :t]  # pitch > 0: a view with a longer stride
    cu = torch.tensor([0, t], dtype=torch.int32, device=dev)
    seen.clear()
    try:
        with sm80_answer():
            sdpa_bwd_wrapper_sm80(
                q,
                k,
                v,
                o,
                do,
                lse,
                is_causal=False,
                window_size=(-1, -1),
                scale_softmax=None,
                causal_bottom_right=False,
                sinks=None,
                deterministic=False,
                cum_seqlen_q_tensor=cu,
                cum_seqlen_k_tensor=cu,
                max_s_q=t,
                max_s_kv=t,
            )
        torch.cuda.synchronize()
        verdict = "ok"
    except Exception as e:  # noqa: BLE001 - the verdict is the exception
        verdict = f"{type(e).__name__}: {str(e)[:120]}"
    print(f"H={h} T_q={t} lse shape {tuple(lse.shape)} strides {lse.stride()} -> {verdict} | {seen}", flush=True)


def main() -> int:
    if not torch.cuda.is_available():
        print("gpu_wrapper_stats_probe: no CUDA GPU found", file=sys.stderr)
        return 2
    prepared_sm80.execute_tensors = _spy
    for h, t, pitch in [(1, 1, 0), (1, 1, 4), (1, 2, 0), (2, 1, 0), (2, 2, 0), (1, 3, 0), (4, 1, 0)]:
        run(h, t, pitch)
    return 0


if __name__ == "__main__":
    sys.exit(main())
