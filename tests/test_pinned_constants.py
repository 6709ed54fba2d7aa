"""A test's draws depend on the test and its seed alone, not on which modules
the process imported before it (strategies.profiles.pin_local_constants):
importing a module full of new literals between two derandomized searches
leaves the second's examples equal to the first's. Without the pin,
Hypothesis draws the module's literals into the second."""

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LITERAL = 987654321

SCRIPT = textwrap.dedent(
    """
    import sys
    if sys.argv[1] == "pinned":
        import strategies  # the suite's strategies pin Hypothesis' local constants on import
    from hypothesis import Phase, given, settings, strategies as st

    seen = []

    @settings(derandomize=True, database=None, max_examples=1000, phases=[Phase.generate])
    @given(st.integers())
    def search(x):
        seen.append(x)

    search()
    first, seen[:] = list(seen), []
    sys.path.insert(0, sys.argv[2])
    import planted_literals  # a local module that only now joins the process
    search()
    print(first == seen, {LITERAL} in first, {LITERAL} in seen)
    """
).replace("{LITERAL}", str(LITERAL))


def _search(tmp_path, mode: str) -> str:
    (tmp_path / "planted_literals.py").write_text(f"A = {LITERAL}\nB = -{LITERAL}\n")
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, mode, str(tmp_path)], cwd=tmp_path, env={"PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.split()


def test_a_module_imported_between_two_searches_changes_nothing_they_draw(tmp_path):
    assert _search(tmp_path, "pinned") == ["True", "False", "False"]


def test_without_the_pin_the_new_modules_literals_are_drawn(tmp_path):
    # the property's power: Hypothesis as it comes draws the planted literal once the module is imported
    assert _search(tmp_path, "unpinned") == ["False", "False", "True"]
