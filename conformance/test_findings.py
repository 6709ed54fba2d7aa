"""Each recorded finding still reproduces from its saved case file.

A finding is a real kernel discrepancy kept as an expected failure
(known_findings.toml); its shrunk case lives in findings/. When the kernel
is fixed this test fails, and the finding (entry and file) must go.
"""

import glob
import os

import pytest

from conformance.ground.case import load_case_file
from conformance.ground.outcome import PropertyFailure
from conformance.properties import PROPERTIES

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FILES = sorted(glob.glob(os.path.join(ROOT, "findings", "*.json")))


@pytest.mark.gpu
@pytest.mark.parametrize("path", FILES, ids=[os.path.basename(p)[:-5] for p in FILES])
def test_finding_reproduces(path, gpu):
    from kernels import get_adapter

    case, doc = load_case_file(path)
    with pytest.raises(PropertyFailure) as failure:
        PROPERTIES[doc["property"]](case, get_adapter(doc["adapter"]), **doc["params"])
    print(f"{doc['finding']}: {failure.value.summary}")
