"""Starter templates are valid and their own tests pass, so later issues can run them."""

import shutil
import subprocess
import sys

import pytest

from workspaces import config, starters


@pytest.mark.parametrize("name", starters.NAMES)
def test_each_starter_has_a_valid_workspace_toml_with_a_preview(name):
    parsed = config.parse(starters.files(name)["workspace.toml"].decode())
    assert parsed.preview.command and parsed.preview.port == 8000
    assert parsed.deploy.command


def test_the_python_starter_tests_pass(tmp_path):
    for path, content in starters.files("python-http").items():
        (tmp_path / path).write_bytes(content)
    result = subprocess.run(
        [sys.executable, "-m", "unittest", "-v"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert "Ran 2 tests" in result.stderr


@pytest.mark.skipif(not shutil.which("node"), reason="node is not on this host")
def test_the_node_starter_tests_pass(tmp_path):
    for path, content in starters.files("node-http").items():
        (tmp_path / path).write_bytes(content)
    result = subprocess.run(
        ["node", "--test"], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "pass 2" in result.stdout


@pytest.mark.parametrize("name", starters.NAMES)
def test_each_starter_shows_the_network_block_commented_out(name):
    """A new workspace has no network, and its workspace.toml says where to allow one."""
    toml = starters.files(name)["workspace.toml"].decode()
    assert config.parse(toml).egress == ()
    assert "\n# [network]\n# egress = [" in toml and "egress ceiling" in toml
    uncommented = toml.replace("# [network]", "[network]").replace("# egress = ", "egress = ")
    assert config.parse(uncommented).egress
