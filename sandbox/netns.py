"""Sockets inside a sandbox's network namespace (docs/architecture.md, "Engine facts").

A sandbox has `network_mode="none"`: nothing outside can reach it. Berth's own
processes reach a preview's port by creating a socket *inside* its namespace: a
socket belongs to the namespace it was created in for its whole life, so only the
creation needs `setns`, and that happens on a short-lived thread of its own (setns
changes the calling thread only; a pooled thread left inside a sandbox would open
database or Redis sockets there). Connecting, reading and writing then happen
anywhere, for example on the asyncio loop.
"""

import asyncio
import logging
import os
import socket
import threading
from dataclasses import dataclass

from django.conf import settings

log = logging.getLogger("berth.netns")


class NamespaceGone(Exception):
    """The sandbox's process (and so its namespace) is not the one recorded any more."""


class OtherHost(NamespaceGone):
    """The namespace is on another host: its pid and inode name nothing here (or,
    worse, something else: another machine's pid may be reused by any process here)."""


@dataclass(frozen=True)
class Namespace:
    """A sandbox's network namespace: the host it is on, the pid of a process in it and
    the namespace's inode, checked at every use so a reused pid can never lead into
    another namespace (least of all the host's own, where Berth's database and Redis
    listen). The host is checked first and alone decides for another host's: a pid
    and an inode from another machine prove nothing here."""

    pid: int
    inode: int
    host: str

    @classmethod
    def of_pid(cls, pid: int) -> "Namespace":
        """A process's namespace on this host (its /proc is this host's)."""
        try:
            inode = os.stat(f"/proc/{pid}/ns/net").st_ino
        except OSError as e:
            raise NamespaceGone(f"process {pid} is gone") from e
        if inode == os.stat("/proc/self/ns/net").st_ino:
            raise NamespaceGone(f"process {pid} is in Berth's own namespace")
        return cls(pid, inode, settings.SANDBOX_HOST)


_refused = 0
_refused_lock = threading.Lock()


def refusals() -> int:
    """How many times this process refused to enter another host's namespace."""
    return _refused


def _here(ns: Namespace) -> None:
    """Refuse, counted and said, a namespace of another host."""
    global _refused
    if ns.host == settings.SANDBOX_HOST:
        return
    with _refused_lock:
        _refused += 1
    log.warning(
        "refused to enter the namespace of pid %d: it is on host %r, this is %r",
        ns.pid,
        ns.host,
        settings.SANDBOX_HOST,
    )
    raise OtherHost(f"the sandbox is on host {ns.host!r}, not this one")


def socket_in(ns: Namespace) -> socket.socket:
    """A new non-blocking TCP socket created inside namespace `ns`."""
    _here(ns)
    result: dict[str, object] = {}

    def body() -> None:
        own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
        try:
            target = os.open(f"/proc/{ns.pid}/ns/net", os.O_RDONLY)
        except OSError:
            os.close(own)
            result["error"] = NamespaceGone(f"process {ns.pid} is gone")
            return
        try:
            if os.fstat(target).st_ino != ns.inode:
                raise NamespaceGone(f"process {ns.pid} is in another namespace now")
            os.setns(target, os.CLONE_NEWNET)
            try:
                result["sock"] = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            finally:
                # If switching back failed, this thread ends here anyway: nothing else
                # ever runs on it.
                os.setns(own, os.CLONE_NEWNET)
        except BaseException as e:  # handed to the caller's thread
            result["error"] = e
        finally:
            os.close(target)
            os.close(own)

    thread = threading.Thread(target=body, name=f"netns-{ns.pid}", daemon=True)
    thread.start()
    thread.join()
    if "error" in result:
        raise result["error"]  # type: ignore[misc]
    sock = result["sock"]
    assert isinstance(sock, socket.socket)
    sock.setblocking(False)
    return sock


async def connect(ns: Namespace, port: int, timeout: float = 5.0) -> socket.socket:
    """A socket connected to 127.0.0.1:`port` inside the sandbox (loopback only: no
    other address exists there)."""
    sock = socket_in(ns)
    try:
        await asyncio.wait_for(
            asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port)), timeout
        )
    except BaseException:
        sock.close()
        raise
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


LISTEN = "0A"  # the TCP state "listen" in /proc/net/tcp{,6}
MAX_TABLE_BYTES = 1 << 20  # far more than a sandbox's listening sockets take


def listening_ports(ns: Namespace) -> set[int]:
    """The TCP ports something listens on inside the sandbox, read from the kernel's
    tables of its namespace (/proc/<pid>/net/tcp and tcp6) from the host: under runc
    they hold the app's sockets, and under runsc as Berth registers it (host network
    inside the sandbox's own namespace) gVisor's sockets are kernel sockets there too.
    Berth's own sockets in the namespace (the egress listener) are listed as well.
    The namespace is checked after reading, so a reused pid never shows another's."""
    _here(ns)
    ports: set[int] = set()
    for table in ("tcp", "tcp6"):
        try:
            with open(f"/proc/{ns.pid}/net/{table}", "rb") as f:
                text = f.read(MAX_TABLE_BYTES).decode("ascii", "replace")
        except FileNotFoundError:
            continue  # no IPv6 in this kernel
        except OSError as e:
            raise NamespaceGone(f"process {ns.pid} is gone") from e
        for line in text.splitlines()[1:]:
            fields = line.split()
            if len(fields) > 3 and fields[3] == LISTEN and ":" in fields[1]:
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    try:
        same = os.stat(f"/proc/{ns.pid}/ns/net").st_ino == ns.inode
    except OSError:
        same = False
    if not same:
        raise NamespaceGone(f"process {ns.pid} is not in the sandbox's namespace any more")
    return ports
