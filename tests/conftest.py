"""Shared fixtures. Tests may use seeded randomness: enable it for the whole run.

Seeded sources are enabled by calling ``gpframe.testing.enable_seeded()`` (there is no environment
variable); a child process started by a test must call it itself if it uses ``seeded_rng``.
"""

import pytest

import gpframe.testing

gpframe.testing.enable_seeded()  # for collection-time use (module-level seeded draws)


@pytest.fixture(autouse=True)
def _seeded_sources_enabled():
    """Every test starts, and leaves the process, with seeded sources enabled.

    A test that checks the refusal disables them (``gpframe.testing.seeded_disabled()``); this
    fixture restores them so later tests and doctests are unaffected.
    """
    gpframe.testing.enable_seeded()
    yield
    gpframe.testing.enable_seeded()


@pytest.fixture
def no_seeded():
    """As outside tests: seeded sources are refused in this test (enabled again afterwards)."""
    with gpframe.testing.seeded_disabled():
        yield
