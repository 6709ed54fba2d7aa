"""The schema-3 features are judged with power: the numerics property passes
the faithful CPU emulation of each feature and fails a planted bug of it
(tests/kernel_emulation.py Plant). The schedulers have no emulation (they
only map tiles to CTAs): their mutants (kernels/mutants.py sched_*) are
killed on the GPU."""

from __future__ import annotations

import math
from unittest import mock

import pytest
import torch

from ground.case import Case
from ground.outcome import PropertyFailure
from properties import numerics as properties
from reference.attention import rotate
from tests.kernel_emulation import EmulatedAdapter, Plant

DENSE = dict(layout="dense", d_qk=64, d_v=64, batch=1, h_q=2, h_kv=1, s_q=40, s_kv=70, seed=5)
THD = dict(layout="thd", d_qk=64, d_v=64, h_q=2, h_kv=1, q_lens=(9, 70), kv_lens=(33, 66), q_base=3, kv_slack=5, seed=7)

# (case, the planted bug of its feature)
POWER = {
    "rope half split": (Case(**DENSE, rope=True, causal=True), Plant(rope_interleaved=True)),
    "rope on K": (Case(**DENSE, rope=True), Plant(rope_q_only=True)),
    "sinks in base 2": (Case(**DENSE, sinks=True, sink_log2=True), Plant(sink_units_flipped=True)),
    "sinks natural": (Case(**THD, sinks=True, sink_dtype="float16"), Plant(sink_units_flipped=True)),
    "strided sinks": (Case(**THD, sinks=True, sink_layout="strided", sink_dtype="bfloat16"), Plant(sink_stride_ignored=True)),
    "broadcast sinks": (Case(**DENSE, sinks=True, sink_layout="broadcast"), Plant(sink_stride_ignored=True)),
    "no stats output (dense)": (Case(**DENSE, has_lse=False), Plant(lse_store_without_stats=True)),
    "no stats output (thd)": (Case(**THD, has_lse=False), Plant(lse_store_without_stats=True)),
    "token-major THD LSE": (Case(**THD, lse_layout="token_major"), Plant(lse_compact_store=True)),
    "padded THD LSE": (Case(**THD, lse_layout="padded"), Plant(lse_compact_store=True)),
    "int64 prefixes": (Case(**THD, prefix_dtype="int64"), Plant(prefix_as_int32=True)),
}


@pytest.mark.parametrize("name", sorted(POWER))
def test_feature_judged_with_power(name):
    case, plant = POWER[name]
    assert case.structural_problem() is None
    with mock.patch.object(properties, "device", lambda: torch.device("cpu")):
        properties.check_numerics(case, EmulatedAdapter())  # the faithful emulation passes
        with pytest.raises(PropertyFailure):
            properties.check_numerics(case, EmulatedAdapter(plant=plant))


def test_rope_is_the_half_split_rotation():
    """reference.attention.rotate against an independent statement of the
    convention: each pair (x_i, x_{i+D/2}) is the complex number x_i + i x_{i+D/2}
    multiplied by exp(i angle[pos, i]); and q.k of rotated rows depends only on
    the position difference (the property RoPE exists for)."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(1, 1, 6, 8, generator=g, dtype=torch.float64)
    angles = torch.randn(6, 4, generator=g, dtype=torch.float32)
    got = rotate(x, angles)
    z = torch.complex(x[..., :4], x[..., 4:]) * torch.exp(1j * angles.to(torch.float64))
    want = torch.cat((z.real, z.imag), -1)
    assert torch.allclose(got, want, atol=1e-6)
    pos = torch.arange(6, dtype=torch.float32)[:, None] * torch.tensor([1.0, 0.1, 0.01, 0.001])
    q = torch.randn(1, 1, 1, 8, generator=g, dtype=torch.float64).expand(1, 1, 6, 8)
    k = torch.randn(1, 1, 1, 8, generator=g, dtype=torch.float64).expand(1, 1, 6, 8)
    rq, rk = rotate(q, pos)[0, 0], rotate(k, pos)[0, 0]
    assert math.isclose(float(rq[3] @ rk[1]), float(rq[4] @ rk[2]), rel_tol=1e-5)


def test_lse_layouts_read_back_through_their_strides():
    """make_outputs' LSE views address distinct storage in their layout's order."""
    from ground.data import body_storage, make_outputs, thd_lse_pitch

    dense = Case(**DENSE, lse_layout="token_major")
    _, lse = make_outputs(dense)
    assert lse.shape == (1, 2, 40) and lse.stride() == (80, 1, 2)
    thd = Case(**THD, lse_layout="padded")
    _, lse = make_outputs(thd)
    assert lse.shape == (2, thd.t_q) and lse.stride() == (thd_lse_pitch(thd), 1)
    assert body_storage(lse).numel() == 2 * thd_lse_pitch(thd)
