"""Upstream parity: what cudnn-frontend's own SM80 tests check, as properties
on the spine: GQA groups 8:4, 8:2 and 8:1, padded-row LSE for tile-aligned
and unaligned S_q at d 64 and 256, CUDA-graph capture and replay after the
inputs changed in place, and a launch without host synchronization or
allocation (properties/launch.py).

Declared in properties.matrix (shapes, budgets, markers)."""

from conformance.testgen import matrix_test

test_gqa_groups = matrix_test("test_gqa_groups")
test_padded_row_lse = matrix_test("test_padded_row_lse")
test_graph_replay = matrix_test("test_graph_replay")
test_launch_hygiene = matrix_test("test_launch_hygiene")
