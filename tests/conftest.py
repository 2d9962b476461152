"""The fixtures come from fixture modules, never from test files: the shared ones from
tests/support/fixtures.py (below), a folder's own from its conftest.py."""

import pytest
from django.conf import settings

# Helpers assert too: their failures read like a test's own.
pytest.register_assert_rewrite("tests.support")

pytest_plugins = ["tests.support.fixtures"]


def pytest_configure(config: pytest.Config) -> None:
    # The test DATA_DIR holds the SQLite test database and the servers' logs; importing
    # the settings no longer makes it.
    settings.DATA_DIR.mkdir(parents=True, exist_ok=True)
