"""What reads as "no network" in a tool's output (runs.network_failure), on the lines
pip, npm, curl, wget, git, apt, Go and Berth's proxy print; and what does not."""

import pytest

from runs.network_failure import host_named, says_no_network

NO_NETWORK = [
    (
        "WARNING: Retrying (Retry(total=4, connect=None, read=None, redirect=None, status=None))"
        " after connection broken by 'NewConnectionError('<pip._vendor.urllib3.connection."
        "HTTPSConnection object at 0x7f>: Failed to establish a new connection: [Errno -3] "
        "Temporary failure in name resolution')': /simple/requests/",
        None,
    ),
    (
        "pip._vendor.urllib3.exceptions.MaxRetryError: HTTPSConnectionPool(host='pypi.org', "
        "port=443): Max retries exceeded (Caused by NewConnectionError('Failed to establish "
        "a new connection: [Errno -2] Name or service not known'))",
        "pypi.org",
    ),
    (
        "npm error request to https://registry.npmjs.org/left-pad failed, reason: getaddrinfo "
        "ENOTFOUND registry.npmjs.org",
        "registry.npmjs.org",
    ),
    ("npm ERR! errno EAI_AGAIN registry.npmjs.org", "registry.npmjs.org"),
    ("curl: (6) Could not resolve host: example.com", "example.com"),
    ("wget: unable to resolve host address 'example.com'", "example.com"),
    (
        "fatal: unable to access 'https://github.com/x/y/': Could not resolve host: github.com",
        "github.com",
    ),
    (
        "ssh: Could not resolve hostname github.com: Temporary failure in name resolution",
        "github.com",
    ),
    (
        "Err:1 http://deb.debian.org/debian bookworm InRelease Temporary failure resolving "
        "'deb.debian.org'",
        "deb.debian.org",
    ),
    (
        "go: downloading x: dial tcp: lookup proxy.golang.org on 127.0.0.11:53: no such host",
        "proxy.golang.org",
    ),
    ("OSError: [Errno 101] Network is unreachable", None),
    ("ConnectionRefusedError: [Errno 111] Connection refused", None),
    ("curl: (56) CONNECT tunnel failed, response 403", None),
    (
        'other.test:80 is not on this sandbox\'s egress allowlist; to allow it, add "other.test" '
        "to [network] egress in workspace.toml",
        "other.test",
    ),
]

NOT_THE_NETWORK = [
    "connect to 127.0.0.1:5432: Connection refused",
    "Error: connect ECONNREFUSED 127.0.0.1:3000",
    "requests.exceptions.ConnectionError: HTTPConnectionPool(host='localhost', port=8000): "
    "Failed to establish a new connection: [Errno 111] Connection refused",
    "AssertionError: 1 != 2",
    "ERROR: No matching distribution found for requests",
]


@pytest.mark.parametrize(("line", "host"), NO_NETWORK)
def test_a_tool_saying_it_had_no_network_is_read_so(line, host):
    assert says_no_network(line)
    assert host_named(line) == host


@pytest.mark.parametrize("line", NOT_THE_NETWORK)
def test_a_local_refusal_or_another_failure_is_not(line):
    assert not says_no_network(line)
