"""The fixtures come from fixture modules, never from test files: the shared ones from
tests/support/fixtures.py (below), a folder's own from its conftest.py."""

import pytest
from django.conf import settings

# Helpers assert too: their failures read like a test's own. (Before any import of them.)
pytest.register_assert_rewrite("tests.support")

from tests.support import marks  # noqa: E402

pytest_plugins = ["tests.support.fixtures"]


def pytest_configure(config: pytest.Config) -> None:
    # The test DATA_DIR holds the SQLite test database and the servers' logs; importing
    # the settings no longer makes it.
    settings.DATA_DIR.mkdir(parents=True, exist_ok=True)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """`docker` on every test that starts the runner agent or a stack (through a fixture)
    or a browser (whose pages daphne serves), `servers` on one that starts daphne alone,
    whether or not its module says so."""
    for item in items:
        uses = set(getattr(item, "fixturenames", ()))
        if uses & marks.ENGINE or item.get_closest_marker("browser"):
            item.add_marker(pytest.mark.docker)
        elif uses & marks.SERVERS:
            item.add_marker(pytest.mark.servers)


def pytest_runtest_setup(item: pytest.Item) -> None:
    # Before any of the test's fixtures: a module's stack is set up by its first test.
    marks.enter({m.name for m in item.iter_markers()})
