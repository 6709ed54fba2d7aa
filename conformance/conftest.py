"""Fixtures for the properties that need a specific entry point."""

import pytest


@pytest.fixture(scope="session")
def prepared_adapter():
    from kernels import get_adapter

    return get_adapter("prepared")


@pytest.fixture(scope="session")
def wrapper_adapter():
    """The public wrapper for contract checks. Off SM80 its dense path refuses
    the device before reading any other contract, which would make every
    dense rejection pass or fail for the wrong reason; so off SM80 it runs in
    the explicit SM80-compatibility mode (kernels.wrapper), and every
    observation records the mode in its notes."""
    from kernels import get_adapter
    from kernels.environment import detect

    return get_adapter("wrapper", sm80_compat=not detect().native)
