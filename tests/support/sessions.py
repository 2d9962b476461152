"""Sessions as the tests drive them: an agent through the API, and what the engine
holds for a session (its container, its volume), looked at directly."""

import docker

from sandbox.engine import engine
from sessions.models import Session
from tests.support.api import bearer
from tests.support.servers import wait_for

SETTLED = {"ready", "failed", "stopped", "lost", "deleted"}

# Out of the exec's process group (setsid), so it lives on after the exec ends: a
# detached exec would be activity while it runs, and the session would never freeze.
# The exec waits until it listens: its group is killed at its end, and a child not yet
# out of it would go with it.
SERVE = (
    "echo hello from the session > /workspace/hi.txt && cd /workspace && "
    "setsid -f python3 -m http.server 8080 --bind 127.0.0.1 >/dev/null 2>&1 && "
    "until python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", 8080))' "
    "2>/dev/null; do sleep 0.1; done"
)


class SessionAgent:
    """An API client acting as an agent in sessions of the workspace `shop`."""

    def __init__(self, client, secret: str, workspace: str = "shop") -> None:
        self.client, self.headers, self.workspace = client, bearer(secret), workspace

    def post(self, path: str, body: dict | None = None):
        return self.client.post(
            f"/api/v1{path}", body or {}, content_type="application/json", **self.headers
        )

    def get(self, path: str):
        return self.client.get(f"/api/v1{path}", **self.headers)

    def open(self, **body) -> dict:
        r = self.post(f"/workspaces/{self.workspace}/sessions", body)
        assert r.status_code == 201, r.content
        return r.json()

    def session(self, session: dict | str) -> dict:
        sid = session if isinstance(session, str) else session["id"]
        r = self.get(f"/sessions/{sid}")
        assert r.status_code == 200, r.content
        return r.json()

    def wait_state(self, session: dict, *states: str, timeout: float = 120) -> dict:
        return wait_for(
            lambda: self.session(session),
            timeout,
            interval=0.1,
            what=f"session {session['id']} to be {' or '.join(states)}",
            until=lambda s: s["state"] in states,
        )

    def ready(self, **body) -> dict:
        session = self.open(**body)
        done = self.wait_state(session, *SETTLED)
        assert done["state"] == "ready", (done["reason"], done["message"], done["times"])
        return done

    def exec(self, session: dict, command: str, status: int | None = 200, **body) -> dict:
        r = self.post(f"/sessions/{session['id']}/exec", {"command": command, **body})
        if status is not None:
            assert r.status_code == status, r.content
        return r.json()

    def wait_exec(self, row: dict, timeout: float = 120) -> dict:
        return wait_for(
            lambda: self.get(f"/execs/{row['id']}").json(),
            timeout,
            interval=0.1,
            what=f"exec {row['id']} to end",
            until=lambda e: e["state"] == "ended",
        )

    def put(self, path: str, body: dict):
        return self.client.put(
            f"/api/v1{path}", body, content_type="application/json", **self.headers
        )

    def write(self, path: str, text: str) -> dict:
        """One file written on the default branch through the API: its commit, with
        what each session following the branch says of it."""
        r = self.put(f"/workspaces/{self.workspace}/files/{path}", {"content": text})
        assert r.status_code == 200, r.content
        return r.json()

    def branch_file(self, path: str) -> str:
        r = self.get(f"/workspaces/{self.workspace}/files/{path}")
        assert r.status_code == 200, r.content
        return r.json()["content"]

    def cat(self, session: dict, path: str) -> str:
        """A file as the session sees it ("" and exit 1 when absent)."""
        done = self.exec(session, f"cat {path}")
        return "\n".join(lines(done)) if done["exit_code"] == 0 else "<absent>"

    def log(self, row: dict) -> list[dict]:
        entries, after = [], 0
        while True:
            page = self.get(f"/execs/{row['id']}/logs?after={after}&limit=5000").json()
            entries.extend(page["entries"])
            after = page["next"]
            if not page["entries"]:
                return entries


def lines(row: dict, stream: str = "stdout") -> list[str]:
    return [e["text"] for e in row["output"] if e["stream"] == stream]


def container_of(run_id: str):
    """The engine's container of a session's current run (None when there is none, or
    once it is gone: one removed between the engine's list and its inspect is gone)."""
    listed = engine().api.containers(
        all=True, quiet=True, filters={"label": f"berth.owner={run_id}"}
    )
    for entry in listed:
        try:
            return engine().containers.get(entry["Id"])
        except docker.errors.NotFound:
            continue
    return None


def volume_exists(name: str) -> bool:
    return any(v.name == name for v in engine().volumes.list())


def session_volume(session: dict) -> str:
    return Session.objects.get(public_id=session["id"]).volume


def tiny_wheel() -> tuple[str, bytes]:
    """A pure-Python wheel made here (no index, no network): `tinyhello.hello()`."""
    import base64
    import hashlib
    import io
    import zipfile

    files = {
        "tinyhello/__init__.py": b'def hello():\n    return "hello from a wheel"\n',
        "tinyhello-0.1.dist-info/METADATA": b"Metadata-Version: 2.1\nName: tinyhello\n"
        b"Version: 0.1\n",
        "tinyhello-0.1.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: berth-tests\n"
        b"Root-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(
        f"{path},sha256="
        f"{base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},"
        f"{len(data)}\n"
        for path, data in files.items()
    )
    files["tinyhello-0.1.dist-info/RECORD"] = (
        record + "tinyhello-0.1.dist-info/RECORD,,\n"
    ).encode()
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as wheel:
        for path, data in files.items():
            wheel.writestr(path, data)
    return "tinyhello-0.1-py3-none-any.whl", out.getvalue()


def follower(answer: dict, session: dict) -> dict:
    """What a write's answer says of one session."""
    found = [f for f in answer["followers"] if f["id"] == session["id"]]
    assert len(found) == 1, answer["followers"]
    return found[0]


def session_row(workspace, **fields) -> Session:
    """A session's row as a test needs it, written directly (no container: for the
    doors and rules that read rows alone): on `main` with the default timers."""
    return Session.objects.create(
        **{
            "workspace": workspace,
            "ref": "main",
            "base_commit": "0" * 40,
            "runtime": "runc",
            "idle_freeze_s": 300,
            "idle_stop_s": 1800,
            "lifetime_s": 3600,
            "retention_s": 86400,
            **fields,
        }
    )
