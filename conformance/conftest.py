"""Fixtures for the properties that need a specific entry point."""

import pytest


@pytest.fixture(scope="session")
def prepared_adapter():
    from properties import entry_adapter

    return entry_adapter("prepared")


@pytest.fixture(scope="session")
def wrapper_adapter():
    """The public wrapper for contract checks (SM80-compatibility mode off SM80)."""
    from properties import entry_adapter

    return entry_adapter("wrapper")
