"""--kernels-source gates a kernel change: the suite runs against a
cudnn-frontend ``python/`` tree instead of the wheel, says so, and fails
when that tree breaks a contract.

The tree is the installed package, hard-linked into a temporary checkout
(nothing is copied into the repository), with one validator broken the way
a kernel PR might break it.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BROKEN_CHECK = "if p.tile_n not in _SM80_SEQ_TILES_N:"


def _checkout(tmp_path: Path, broken: bool) -> Path:
    import cudnn

    tree = tmp_path / "python"
    shutil.copytree(Path(cudnn.__file__).parent, tree / "cudnn", copy_function=os.link, ignore=shutil.ignore_patterns("__pycache__"))
    if broken:
        cfg = tree / "cudnn" / "sdpa" / "fwd" / "config_sm80.py"
        text = cfg.read_text()
        assert text.count(BROKEN_CHECK) == 1
        cfg.unlink()  # a hard link: never write through it into the wheel
        cfg.write_text(text.replace(BROKEN_CHECK, "if False:"))
    return tree


def _suite(tree: Path, tmp_path: Path):
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "no:xdist",
        "-p",
        "no:cacheprovider",
        "-q",
        f"--kernels-source={tree}",
        f"--report-dir={tmp_path / 'report'}",
        "conformance/test_contracts.py",
        "-k",
        "config_rejects and params_tile_n",
        "--hypothesis-profile=dev",
    ]
    env = {k: v for k, v in os.environ.items() if k != "SDPA_KERNELS_SOURCE"}
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("broken", [False, True], ids=["pristine-checkout", "broken-validator"])
def test_kernels_source_is_what_the_suite_tests(broken, tmp_path):
    tree = _checkout(tmp_path, broken)
    done = _suite(tree, tmp_path)
    out = done.stdout + done.stderr
    assert done.returncode == (1 if broken else 0), out[-3000:]
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    assert json.dumps(report).count(f"checkout {tree / 'cudnn'}") >= 1, "the report does not name the checkout under test"
