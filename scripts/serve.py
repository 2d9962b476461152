"""Run Berth's processes in the foreground with prefixed output; Ctrl-C stops them all.

daphne (HTTP + WebSocket), the preview gateway (preview and release hosts, on
PREVIEW_PORT), a Celery worker, Celery beat and the runner agent. If one of them dies,
the others are stopped too, so a half-running Berth never lingers.
"""

import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
HOST = os.environ.get("BERTH_HOST", "127.0.0.1")
PORT = os.environ.get("BERTH_PORT", "8000")
# Preview URLs name this port: every process must agree on it (settings.PREVIEW_PORT).
PREVIEW_PORT = os.environ.setdefault("PREVIEW_PORT", str(int(PORT) + 1))
APP_HOST = "127.0.0.1" if HOST in ("0.0.0.0", "127.0.0.1") else HOST  # noqa: S104
DATA_DIR = Path(os.environ.get("DATA_DIR", ROOT / "var")).resolve()

PROCESSES = {
    "web": [str(BIN / "daphne"), "-b", HOST, "-p", PORT, "config.asgi:application"],
    "gateway": [sys.executable, "manage.py", "preview_gateway", "--bind", HOST, "--port",
                PREVIEW_PORT, "--app", f"{APP_HOST}:{PORT}"],
    "worker": [str(BIN / "celery"), "-A", "config", "worker", "-Q", "celery,runner",
               "--concurrency", "2", "--loglevel", "INFO"],
    "beat": [str(BIN / "celery"), "-A", "config", "beat", "--loglevel", "INFO",
             "--schedule", str(DATA_DIR / "celerybeat-schedule")],
    "agent": [sys.executable, "manage.py", "runner_agent"],
}
COLOURS = {"web": 36, "gateway": 34, "worker": 33, "beat": 35, "agent": 32}
print_lock = threading.Lock()


def say(name: str, line: str) -> None:
    prefix = f"\033[{COLOURS.get(name, 37)}m{name:>7} |\033[0m " if sys.stdout.isatty() \
        else f"{name:>7} | "
    with print_lock:
        sys.stdout.write(prefix + line.rstrip("\n") + "\n")
        sys.stdout.flush()


def pump(name: str, proc: subprocess.Popen[str]) -> None:
    assert proc.stdout is not None
    for line in proc.stdout:
        say(name, line)


def wait_until_serving(deadline: float) -> bool:
    local = HOST in ("127.0.0.1", "0.0.0.0")  # noqa: S104 (a comparison, not a bind)
    url = f"http://{'localhost' if local else HOST}:{PORT}/healthz"
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=1) as r:
                return r.status == 200
        except OSError:
            time.sleep(0.2)
    return False


def main() -> int:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "DJANGO_SETTINGS_MODULE":
           os.environ.get("DJANGO_SETTINGS_MODULE", "config.settings")}
    procs: dict[str, subprocess.Popen[str]] = {}
    stopping = threading.Event()
    signal.signal(signal.SIGINT, lambda *_: stopping.set())
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())

    def start(name: str) -> None:
        # A session of its own: Ctrl-C reaches only us, and we stop each child in order.
        procs[name] = subprocess.Popen(PROCESSES[name], cwd=ROOT, env=env,
                                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                       text=True, start_new_session=True)
        threading.Thread(target=pump, args=(name, procs[name]), daemon=True).start()

    # The web server first: on a small machine four Django processes starting at once
    # would slow each other, and the page is what a person waits for.
    started = time.monotonic()
    start("web")
    if wait_until_serving(started + 60):
        say("berth", f"serving on http://localhost:{PORT}, previews on "
                     f"http://<id>.preview.localhost:{PREVIEW_PORT}  (ready in "
                     f"{time.monotonic() - started:.1f} s; Ctrl-C stops everything)")
    for name in PROCESSES:
        if name not in procs and not stopping.is_set():
            start(name)
    exit_code = 0
    while not stopping.is_set():
        dead = [n for n, p in procs.items() if p.poll() is not None]
        if dead:
            say("berth", f"{', '.join(dead)} exited; stopping the rest")
            exit_code = 1
            break
        stopping.wait(0.5)
    say("berth", "stopping…")
    for p in procs.values():
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 15
    for name, p in procs.items():
        try:
            p.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            say("berth", f"{name} did not stop in time; killing it")
            p.kill()
            p.wait()
    say("berth", "stopped")
    return exit_code


if __name__ == "__main__":
    sys.exit(main())
