"""Run inside a sandbox: asks the kernel for what a hostile tenant would try, and prints
one JSON line `{"probe": <label>, <call>: <errno name or "ok">, ...}`.

Standard library only (ctypes). x86_64 syscall numbers: io_uring_setup 425, clone3 435.
"""

import ctypes
import errno
import json
import os
import subprocess
import sys
import threading

CLONE_NEWUSER = 0x10000000
SIGCHLD = 17
libc = ctypes.CDLL(None, use_errno=True)


def outcome(result: int) -> str:
    return "ok" if result >= 0 else errno.errorcode.get(ctypes.get_errno(), "?")


def io_uring_setup() -> str:
    params = ctypes.create_string_buffer(120)  # struct io_uring_params
    fd = libc.syscall(425, 8, params)
    if fd >= 0:
        os.close(fd)
    return outcome(fd)


def unshare_user() -> str:
    # In a child: a successful unshare must not change the probe itself.
    pid = os.fork()
    if pid == 0:
        os._exit(0 if libc.unshare(CLONE_NEWUSER) == 0 else ctypes.get_errno())
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    return "ok" if code == 0 else errno.errorcode.get(code, str(code))


class CloneArgs(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_uint64)
        for name in (
            "flags",
            "pidfd",
            "child_tid",
            "parent_tid",
            "exit_signal",
            "stack",
            "stack_size",
            "tls",
        )
    ]


def clone3_user() -> str:
    args = CloneArgs(flags=CLONE_NEWUSER, exit_signal=SIGCHLD)
    pid = libc.syscall(435, ctypes.byref(args), ctypes.sizeof(args))
    if pid == 0:
        os._exit(0)
    if pid > 0:
        os.waitpid(pid, 0)
    return outcome(pid)


def a_thread() -> str:
    done: list[int] = []
    thread = threading.Thread(target=done.append, args=(1,))
    thread.start()
    thread.join()
    return "ok" if done else "failed"


def everyday_calls() -> str:
    """What ordinary programs do must still work: wait on sockets (Python's
    select.select is pselect6), make a pipe, stat a file."""
    import select
    import socket

    try:
        a, b = socket.socketpair()
        b.send(b"x")
        ready, _, _ = select.select([a], [], [], 1)
        a.close()
        b.close()
        os.pipe()
        os.stat("/")
    except OSError as e:
        return errno.errorcode.get(e.errno or 0, str(e))
    return "ok" if ready else "not ready"


def unshare_command() -> str:
    """`unshare -Ur id`, as a person would try it."""
    result = subprocess.run(["unshare", "-Ur", "id"], capture_output=True, text=True)
    return result.stdout.strip() if result.returncode == 0 else "refused"


print(
    json.dumps(
        {
            "probe": sys.argv[1] if len(sys.argv) > 1 else "run",
            "io_uring_setup": io_uring_setup(),
            "unshare_user": unshare_user(),
            "clone3_user": clone3_user(),
            "thread": a_thread(),
            "everyday": everyday_calls(),
            "unshare_Ur": unshare_command(),
        }
    ),
    flush=True,
)
