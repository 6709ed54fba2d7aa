"""The dBias diagnosis on the GPU: a few fixed backward Cases with a bias
(fp16 / bf16, broadcast / per-batch bias, fp32 / I/O-dtype bias, fp32 /
I/O-dtype dBias buffer) through the prepared adapter, one line each:

    python3 tools/gpu_dbias_probe.py              # the real kernel, one CUDA GPU (< 60 s)
    python3 tools/gpu_dbias_probe.py --emulate    # the CPU emulation (tests/kernel_emulation.py)
    python3 tools/gpu_dbias_probe.py --emulate --plant dbias_io   # ... with a planted dBias bug

Per Case: max |dBias_kernel - dBias_ref| and its bound (the model's
``backward_bounds``), max error/bound, the same against the reference
rounded to the I/O dtype, the share of dBias cells exactly representable in
the I/O dtype, and max |dBias_kernel - H| / bound for each arithmetic H the
kernel could be doing (tests/kernel_emulation.py: "kernel" = bprop_f16.py as
read, fp32 dS' from the fp32 P, atom.add.f32 flushing subnormals; the BwdPlant variants dbias_io, dbias_p_io,
dbias_from_ds, dbias_scaled, dbias_per_batch): the H with a ratio << 1 is
what the kernel computes. A last line reruns one Case with an I/O-dtype dBias
after its fp32 one (same shapes): the kernel's compile key omits the dBias
dtype, so it runs the fp32 artifact (docs/backward.md "dBias"). Exit status
0 when every Case of the table is within the model.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

# (Case facts, dBias buffer dtype): small; no two share the kernel's compile key (it omits the dBias dtype).
CASES = [
    (dict(batch=2, h_q=2, h_kv=2, s_q=64, s_kv=128, bias="float32", bias_batch=1), "float32"),
    (dict(batch=2, h_q=2, h_kv=1, s_q=70, s_kv=130, bias="float16", bias_batch=2, scale=0.3), "float32"),
    (dict(batch=3, h_q=2, h_kv=2, s_q=64, s_kv=64, bias="float16", bias_batch=1, causal=True, d_qk=128, d_v=128), "float32"),
    (dict(dtype="bfloat16", batch=2, h_q=2, h_kv=2, s_q=64, s_kv=128, bias="float32", bias_batch=2), "float32"),
    (dict(dtype="bfloat16", batch=3, h_q=2, h_kv=2, s_q=96, s_kv=64, bias="bfloat16", bias_batch=1, scale=-0.7), "float32"),
    (dict(dtype="bfloat16", batch=2, h_q=4, h_kv=2, s_q=64, s_kv=128, bias="float32", bias_batch=1, d_qk=128, d_v=128), "float32"),
    (dict(batch=2, h_q=2, h_kv=2, s_q=64, s_kv=128, bias="float16", bias_batch=1), "float16"),
    (dict(dtype="bfloat16", batch=2, h_q=2, h_kv=2, s_q=48, s_kv=128, bias="float32", bias_batch=2), "bfloat16"),
    # scale 8: tiny P, dS' below 2^-126 where atom.add.f32 flushes (the H200's failures: dBias 0, exact ~1e-39)
    (dict(dtype="bfloat16", batch=1, h_q=2, h_kv=2, s_q=256, s_kv=65, d_qk=192, d_v=128, bias="bfloat16", causal=True, scale=8.0), "float32"),
    (dict(batch=2, h_q=2, h_kv=2, s_q=64, s_kv=65, bias="float32", bias_batch=1, scale=8.0), "float32"),
]
HYPOTHESES = ("kernel", "dbias_io", "dbias_p_io", "dbias_from_ds", "dbias_scaled", "dbias_per_batch")


def probe(case, adapter, dbias_dtype: str, dev) -> dict:
    from ground.data import FINITE_PAD, TORCH_DTYPES, make_grad_output, make_grad_outputs, make_inputs
    from ground.tolerances import backward_bounds
    from properties.backward import handed_inputs
    from reference.backward import backward_for_case, structural_zeros
    from tests.kernel_emulation import BwdPlant, emulate_backward

    inputs = make_inputs(case, dev, poison=True, pad_fill=FINITE_PAD)
    do = make_grad_output(case, dev, poison=True, pad_fill=FINITE_PAD)
    o, lse, _ = handed_inputs(case, adapter, inputs, dev)
    grads = make_grad_outputs(case, dev, dbias_dtype=dbias_dtype)
    got = adapter.backward(case, inputs, o, lse, do, grads).grads["dbias"].double()

    def extra(it, g, o_given, lse_given):
        return {
            "bound": backward_bounds(it, g, case.dtype, o_given=o_given, lse_given=lse_given, dbias_dtype=dbias_dtype)["dbias"],
            "zero": structural_zeros(it, g)["dbias"],
        }

    ref = backward_for_case(case, inputs, do, extra=extra, o=o.double(), lse=lse.double())
    want, bound = ref["dbias"], ref["bound"]
    judged = (ref["zero"] != 1.0) & (bound > 0)
    io = TORCH_DTYPES[case.dtype]
    out_dt = TORCH_DTYPES[dbias_dtype]

    def worst(x):
        return float(((x - got).abs() / bound)[judged].max())

    err = (got - want).abs()
    nonzero = judged & (got != 0)
    row = {
        "max_err": float(err[judged].max()),
        "bound_there": float(bound[judged][err[judged].argmax()]),
        "ratio": worst(want),
        "ratio_vs_ref_io": worst(want.to(io).double()),
        "io_exact": float((got.to(io).double() == got)[nonzero].double().mean()),
        "zero_cells_ok": bool((got[ref["zero"] == 1.0] == 0).all()),
        "flushed": int((judged & (got == 0) & (want != 0)).sum()),
    }
    cpu = inputs.to("cpu")
    for name in HYPOTHESES:
        plant = BwdPlant() if name == "kernel" else BwdPlant(**{name: True})
        h = emulate_backward(case, cpu, o.cpu(), lse.cpu(), do.cpu(), plant)["dbias"].to(out_dt).to(dev).double()
        row[name] = worst(h)
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--emulate", action="store_true", help="the CPU emulation instead of the kernel")
    ap.add_argument("--plant", default=None, help="with --emulate: a BwdPlant field set in the emulated kernel")
    args = ap.parse_args(argv)
    # A private compile cache: the stale-artifact row below must not reach later runs' cache.
    os.environ["CUDNN_FRONTEND_COMPILED_CACHE"] = tempfile.mkdtemp(prefix="dbias-probe-")
    from ground.case import Case

    if args.emulate:
        from tests.kernel_emulation import BwdPlant, EmulatedBackward

        adapter, dev = EmulatedBackward(bwd=BwdPlant(**({args.plant: True} if args.plant else {}))), torch.device("cpu")
    else:
        from kernels import get_adapter

        adapter, dev = get_adapter("prepared"), torch.device("cuda", torch.cuda.current_device())
    bad = 0
    print("case | dBias dtype | max|err| | bound there | err/bound | vs ref rounded to I/O | I/O-exact share | flushed cells | " + " | ".join(HYPOTHESES))
    for facts, dbias_dtype in CASES:
        case = Case(direction="bwd", **{"d_qk": 64, "d_v": 64, "seed": 11, **facts})
        start = time.perf_counter()
        r = probe(case, adapter, dbias_dtype, dev)
        bad += r["ratio"] > 1.0 or not r["zero_cells_ok"]
        hyp = " | ".join(f"{r[h]:.3g}" for h in HYPOTHESES)
        print(
            f"{case.describe()} | {dbias_dtype} | {r['max_err']:.3g} | {r['bound_there']:.3g} | {r['ratio']:.3g} | {r['ratio_vs_ref_io']:.3g} | "
            f"{r['io_exact']:.3f} | {r['flushed']} | {hyp} | zeros {'ok' if r['zero_cells_ok'] else 'NOT 0'} | {time.perf_counter() - start:.1f} s",
            flush=True,
        )
    # The kernel's compile key omits the dBias dtype (docs/backward.md "dBias"): an I/O-dtype
    # dBias plan after an fp32 one of the same shapes runs the fp32 artifact. Not counted above.
    facts, _ = CASES[3]
    case = Case(direction="bwd", **{"d_qk": 64, "d_v": 64, "seed": 11, **facts})
    stale = probe(case, adapter, case.dtype, dev)
    print(
        f"compile key: {case.describe()} with a {case.dtype} dBias after the fp32 one: err/bound {stale['ratio']:.3g} "
        f"(> 1: the fp32 plan's artifact ran; the key omits the dBias dtype)"
    )
    print(f"dbias probe: {len(CASES) - bad} of {len(CASES)} within the model")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
