"""The README's commands: exactly two to set up and run (install; the suite),
one test command, both run verbatim by .ci/run; the install wording says
which torch build each kind of machine gets; the README stays a short
reference card (what it names must exist: tests/test_docs.py)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def _section(title: str) -> str:
    return README.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]


def _blocks(text: str) -> list:
    return [[line for line in b.strip().splitlines() if line.strip()] for b in re.findall(r"```\n(.*?)```", text, re.S)]


def test_two_setup_commands_and_one_test_command():
    install_and_run, test = _blocks(_section("Install and run").split("### ", 1)[0])
    assert len(install_and_run) == 2 and install_and_run[0].startswith("python3 -m pip install ") and install_and_run[1].startswith("python3 -m pytest")
    assert len(test) == 1 and test[0].startswith("python3 -m pytest")
    # No other set-up command anywhere: one pip install in the whole README.
    assert README.count("pip install") == 1


def test_ci_runs_the_readme_commands_verbatim():
    (install, _run), (test,) = _blocks(_section("Install and run").split("### ", 1)[0])
    ci = [line.strip().replace(" -q ", " ") for line in (ROOT / ".ci" / "run").read_text().splitlines()]  # -q: quieter, same install
    assert install in ci and test in ci


def test_the_install_wording_holds_for_cpu_and_gpu_machines():
    text = " ".join(_section("Install and run").split())
    assert "PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu" in text  # a fresh CPU-only machine
    assert "`find-links`" in text and "`pip config list`" in text  # a machine with the CPU wheel on disk (CI)
    assert "GPU runner: a torch 2.13.0 you already have" in text and "is kept" in text
    assert "avoids" not in text  # the old claim that pinning torch alone avoids a CUDA build


def test_the_readme_is_a_reference_card():
    assert len(README.splitlines()) <= 150, "README.md: at most 150 lines; reference detail goes to docs/"
    # The GPU gate is one command, with the example workflow beside it.
    gate = _section("The GPU gate")
    assert "sdpa-conformance gate" in gate and ".github/workflows/gpu-conformance.yml" in gate
