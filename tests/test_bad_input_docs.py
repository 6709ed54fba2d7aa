"""What kernels/README.md, kernels/environment.py and the mutants options
say exists does: the names a reader would look up resolve."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import ground.tables
import kernels
from conformance.kill import cli as kill_cli
from kernels import environment

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "kernels" / "README.md").read_text()


def test_pinned_versions_are_named_where_they_live():
    assert "conformance.PINNED" not in README and "conformance.PINNED" not in inspect.getsource(environment)
    assert "ground.tables.PINNED" in README and environment.PINNED is ground.tables.PINNED


def test_the_module_table_lists_every_module():
    listed = set(re.findall(r"^\| `(\w+)\.py` \|", README, re.M))
    modules = {p.stem for p in (ROOT / "kernels").glob("*.py") if p.stem != "__init__"}
    assert modules <= listed, sorted(modules - listed)


def test_get_adapter_is_given_with_its_signature():
    assert "family" in inspect.signature(kernels.get_adapter).parameters
    assert "get_adapter(name=None, *, family=None, **options)" in " ".join(README.split())


def test_mutants_options_describe_only_options_that_exist():
    source = inspect.getsource(kill_cli.add_arguments)
    assert "still accepted (and ignored)" not in source
