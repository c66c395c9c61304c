"""Policy sets compiled once per test session: compiling is the slow part."""

from __future__ import annotations

import pytest

from sunk.policy import PolicyEngine, load_directory, load_sources, read_directory

from .pods import EXAMPLES, POLICIES


@pytest.fixture(scope="session")
def defaults() -> PolicyEngine:
    """The default policies, with the reference product's default KillWait of 30 s."""
    return load_directory(POLICIES, settings={"killWaitSeconds": 30})


@pytest.fixture(scope="session")
def with_examples() -> PolicyEngine:
    """The default policies and the three operator examples."""
    sources = read_directory(POLICIES) | read_directory(EXAMPLES)
    return load_sources(sources, settings={"killWaitSeconds": 30})
