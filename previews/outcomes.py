"""What a preview's (or a release's process's) end means, and what to do next: the
message each typed reason carries, with the process's last lines of output."""

from typing import Any

from django.conf import settings

from logs import anywhere
from previews.models import Preview
from runs.models import Run

LAST_LINES = 5  # of the process's own output, in the message of an exit


def last_lines(run: Run) -> list[str]:
    """The process's last lines of output (Berth's own notes left out)."""
    entries = anywhere.tail(run.public_id, 50)  # on_run_finished: on a runner host too
    return [e["text"][:300] for e in entries if e["stream"] != "system"][-LAST_LINES:]


def describe(reason: str, preview: Preview, **f: Any) -> str:
    """What a preview's end means, and what to do next."""
    port, deadline = preview.port, settings.PREVIEW_START_DEADLINE_S
    idle_min = max(1, round(preview.idle_timeout_s / 60))
    # A release runs [deploy] of its commit; its fix needs a new deploy, not a restart.
    section = "[deploy]" if preview.kind == "release" else "[preview]"
    again = "ask for a deploy again" if preview.kind == "release" else "restart"
    ports = [str(p) for p in f.get("ports") or []]
    lines = f.get("last_lines") or []
    where = " while it was serving" if f.get("crashed") else f" before it answered on port {port}"
    if preview.kind == "session":
        return _of_session(reason, preview, **f)
    offline = f.get("network_failure")
    table = {
        "setup_failed": (
            "The [setup] command failed on the network, so the app never started (the "
            f"log says “{offline['evidence']}”): the sandbox reaches only what [network] "
            f"egress lists. {offline['how_to_allow']} Then {again}."
            if offline
            else "The [setup] command failed, so the app never started; the log says "
            "why. Fix [setup] in workspace.toml, then restart."
        ),
        "process_exited": (
            f"The app exited with code {f.get('exit_code')}{where}"
            + (
                ". Its last lines of output:\n" + "\n".join(lines) + "\n"
                if lines
                else ", with no output. "
            )
            + f"Fix it, then {again}."
        ),
        "listening_on_other_port": (
            f"Nothing listens on port {port}, the port {section} names in workspace.toml, "
            f"but the app listens on {'ports' if len(ports) > 1 else 'port'} "
            f"{', '.join(ports)}. Change the line `port = {port}` under {section} in "
            f"workspace.toml to `port = {ports[0] if ports else port}` (or make the app "
            f"listen on {port}), then {again}."
        ),
        "not_listening": f"The process runs, but nothing listened on port {port} within "
        f"{deadline} s. Make {section}.command listen on 127.0.0.1:{port} "
        f"(or 0.0.0.0), or set {section}.port to the port it uses; then "
        f"{again}.",
        "health_failed": f"GET {preview.health_path} kept answering "
        + (f"{f['status']} (not 2xx or 3xx)" if f.get("status") else "with no valid HTTP response")
        + f" for {deadline} s. Fix the app or {section}.health_path, then "
        f"{again}.",
        "idle": f"Stopped after {idle_min} min with no request, to free its resources. "
        "Restart it to use it again.",
        "stopped_by_user": f"Stopped by {f.get('who', 'a user')}. Restart it to use it again.",
        "contract_lapsed": "Stopped by Berth: the approval of its sandbox contract lapsed "
        f"({f.get('by', 'a reviewer')} narrowed or revoked it), and today's approved "
        f"contract does not cover what it ran with. {again.capitalize()} (a wider "
        "contract waits for a review).",
        "superseded": "A newer release took over; this process was stopped once requests "
        "to it had drained.",
        "stopped_for_quota": "Stopped to make room: the team reached its limit of "
        f"{f.get('limit', 'its')} live previews and this one had gone "
        "longest without a request"
        + (f" when preview {f['for_preview']} started" if f.get("for_preview") else "")
        + ". Restart it when you need it (another idle one makes room).",
    }
    return table.get(reason) or str(f.get("run_message") or reason)


# How a session's end reads in its previews' messages (previews.of_sessions).
ENDED_WORDS = {
    "stopping": "stopped",
    "stopped": "stopped",
    "deleted": "was deleted",
    "failed": "failed",
    "lost": "was lost",
}


def _of_session(reason: str, preview: Preview, **f: Any) -> str:
    """The same ends, for a preview of an app a session runs (no command of Berth's)."""
    port, deadline = preview.port, settings.PREVIEW_START_DEADLINE_S
    session = f.get("session") or (preview.session.public_id if preview.session else "")
    ports = [str(p) for p in f.get("ports") or []]
    again = f"then preview the session again (POST /api/v1/sessions/{session}/preview)"
    table = {
        "not_listening": f"Nothing listened on port {port} in session {session} within "
        f"{deadline} s. Start the app there with a detached exec, listening on "
        f"127.0.0.1:{port} or 0.0.0.0:{port}, {again}.",
        "listening_on_other_port": f"Nothing listens on port {port} in session {session}, "
        f"but something listens on {', '.join(ports)}: preview that port instead.",
        "health_failed": f"GET {preview.health_path} kept answering "
        + (f"{f['status']} (not 2xx or 3xx)" if f.get("status") else "with no valid HTTP response")
        + f" for {deadline} s. Fix the app or give another health_path, {again}.",
        "session_ended": f"Session {session} "
        + ENDED_WORDS.get(str(f.get("session_state")), str(f.get("session_state")))
        + (f" ({f['session_reason']})" if f.get("session_reason") else "")
        + ": the app ran in its container, and its processes are gone. Start the session "
        f"again, start the app, {again}.",
        "stopped_by_user": f"Stopped by {f.get('who', 'a user')}; the app goes on running in "
        f"the session. Preview it again to serve it (POST /api/v1/sessions/{session}/preview).",
    }
    return table.get(reason) or str(f.get("run_message") or reason)
