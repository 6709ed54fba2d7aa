"""The launch properties of upstream parity (properties/launch.py) on the sm90
family through its compile entry (``Sm90Adapter.prepare``: ``launch()`` is the
planner's ``execute()`` alone, on the caller's buffers):

- graph_replay: one launch captured in a CUDA graph, every runtime input
  changed in place (``replay_variant``: new data and sinks, padding lengths
  reversed across the batch, THD sequences reordered keeping totals and the
  longest of each side, so the plan the capture froze is the variant's),
  the replay equal to an eager launch bit for bit, nothing compiled;
- launch_hygiene: a warm launch does no host synchronization, host read or
  device allocation (the THD workspace is allocated by ``prepare``, once)
  and still writes the eager launch's result.

Cases: the pooled sm90 rows whose lengths a replay can move
(``strategies.sm90.replay_cases``), dense and THD, at the parity budget
(``strategies.profiles`` kind "parity", as test_graph_replay). They launch on
a Hopper GPU (SM 9.0) only; elsewhere they skip, saying so. The CPU half
(arguments bound to the caller's buffers, the variant's plan equal to the
captured one) is tests/test_sm90_launch_cpu.py.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conformance.test_sm90_numerics import _judged, sm90  # noqa: F401  (the Hopper-gated adapter fixture)
from strategies.profiles import examples
from strategies.sm90 import replay_cases

pytestmark = pytest.mark.family("sm90")
LAYOUTS = ("dense", "thd")


@pytest.mark.gpu
@pytest.mark.property("graph_replay")
@pytest.mark.parametrize("layout", LAYOUTS)
@settings(max_examples=examples("parity"), deadline=None)
@given(data=st.data())
def test_sm90_graph_replay(sm90, layout, data):  # noqa: F811
    from properties.launch import check_graph_replay

    _judged(check_graph_replay, data.draw(replay_cases(layout), label="case"), sm90)


@pytest.mark.gpu
@pytest.mark.property("launch_hygiene")
@pytest.mark.parametrize("layout", LAYOUTS)
@settings(max_examples=examples("parity"), deadline=None)
@given(data=st.data())
def test_sm90_launch_hygiene(sm90, layout, data):  # noqa: F811
    from properties.launch import check_launch_hygiene

    _judged(check_launch_hygiene, data.draw(replay_cases(layout), label="case"), sm90)
