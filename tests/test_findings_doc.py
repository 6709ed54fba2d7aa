"""docs/findings.md is the list of known findings: it names every entry of
known_findings.toml by its id, so an entry added without its line fails here."""

from __future__ import annotations

from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10 (requires-python): tomllib's backport
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]


def test_every_known_finding_is_in_the_findings_doc():
    entries = tomllib.loads((ROOT / "known_findings.toml").read_text(encoding="utf-8"))["finding"]
    doc = (ROOT / "docs" / "findings.md").read_text(encoding="utf-8")
    missing = [entry["id"] for entry in entries if f"`{entry['id']}`" not in doc]
    assert not missing, f"docs/findings.md does not name these known_findings.toml entries: {missing}"
