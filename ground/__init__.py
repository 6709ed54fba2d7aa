"""The ground layer: the Case model (its facts declared once), the coverage
vocabulary, data generation, tolerances, outcomes, the shared tables, the
contract table and the known-findings model.

Imports nothing else of the project (an import-linter contract in
pyproject.toml keeps it so); every other layer builds on it.
"""
