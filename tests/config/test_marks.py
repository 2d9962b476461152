"""The marks tell the truth (tests/support/marks.py): a test without `docker` cannot
reach the engine or start servers, and the servers a test starts reach the engine the
run was given whatever the test's marks (a worker's daphne outlives the test that
started it)."""

import os

import docker.errors
import pytest

from sandbox.engine import engine
from tests.support import marks, servers


def test_a_test_without_the_docker_mark_cannot_reach_the_engine():
    with pytest.raises(docker.errors.DockerException):
        engine().ping()


def test_nor_start_a_server(tmp_path):
    with (
        pytest.raises(RuntimeError, match="needs the `docker` mark"),
        servers.running(["true"], tmp_path / "log", lambda: True, "a server"),
    ):
        pass


def test_a_server_it_may_start_still_gets_the_runs_engine():
    assert os.environ["DOCKER_HOST"] == marks.NO_ENGINE  # this test's own: the guard
    assert servers.subprocess_env().get("DOCKER_HOST") != marks.NO_ENGINE
