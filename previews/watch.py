"""The runner agent's part of previews: health checks, readiness and idleness.

Every tick it looks at the live previews whose process runs: a starting one is
probed until GET health_path answers 2xx/3xx (ready) or the start deadline passes
(not_listening, or health_failed with the last status); once WRONG_PORT_AFTER_S have
passed with nothing on its port while something listens on another one, it fails at
once (listening_on_other_port, naming them); a ready one is probed every
PREVIEW_HEALTH_EVERY_S and stopped once idle past its timeout. Probes connect from
inside the sandbox's network namespace (previews.probe). Crashes need no
polling: the process's exit ends its run, and previews.lifecycle.on_run_finished follows.

A preview of a session (previews.of_sessions) is probed only while its session is
ready: a freezing or frozen session's processes are paused, and a probe would hang on
them (nor is a probe activity: it never keeps a session from freezing).
"""

import asyncio
import logging
from datetime import timedelta

from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from previews import actions, lifecycle
from previews.models import LIVE_STATES, Preview, PreviewState
from previews.probe import probe
from runs.models import Run, RunState
from sandbox import backend
from sandbox.egress.policy import PROXY_PORT
from sandbox.loop import db as _db
from sandbox.models import this_host
from sandbox.netns import Namespace, NamespaceGone, listening_ports
from sessions.models import SessionState

log = logging.getLogger("berth.runner_agent")

# An app still binding its port gets this long before another port it listens on is
# taken for a mistake in workspace.toml (servers bind within milliseconds of starting;
# one that opens an admin port first and its main port later gets 3 s to do so).
WRONG_PORT_AFTER_S = 3.0


class Watcher:
    # Ready previews' health and idleness; a starting one is looked at as soon as its
    # container starts (the agent wakes the watcher on that event).
    TICK_S = 1.0
    STARTING_PROBE_S = 0.01  # how often a starting preview is probed: time until usable

    def __init__(self) -> None:
        self.busy: set[str] = set()
        self.next_check: dict[str, float] = {}
        self.background: set[asyncio.Task[None]] = set()

    async def tick(self) -> None:
        previews = await _db(_watched)()
        loop = asyncio.get_running_loop()
        live = {p.public_id for p in previews}
        for key in set(self.next_check) - live:
            del self.next_check[key]
        for preview in previews:
            if preview.public_id in self.busy or _process(preview) is None:
                continue
            if preview.state == PreviewState.READY:
                if await _db(self._stop_if_idle)(preview):
                    continue
                if loop.time() < self.next_check.get(preview.public_id, 0):
                    continue
            self.busy.add(preview.public_id)
            task = asyncio.create_task(self._check(preview))
            self.background.add(task)
            task.add_done_callback(self.background.discard)

    async def _check(self, preview: Preview) -> None:
        """One probe of a ready preview; a starting one is probed every
        STARTING_PROBE_S until it is ready or its deadline passes."""
        try:
            seen: object = "none yet"
            while True:
                ns = await self._namespace(preview)
                status = (
                    await probe(ns, preview.port, preview.host, preview.health_path) if ns else None
                )
                # While starting, the database hears only of changes and of the clock:
                # a probe every 10 ms must not be a write every 10 ms.
                if (
                    status != seen
                    or preview.state != PreviewState.STARTING
                    or asyncio.get_running_loop().time()
                    >= self.next_check.get(preview.public_id, 0)
                ):
                    seen = status
                    self.next_check[preview.public_id] = asyncio.get_running_loop().time() + 0.5
                    ports = (
                        await self._ports(ns)
                        if ns and status is None and preview.state == PreviewState.STARTING
                        else None
                    )
                    if not await _db(self._record)(preview, status, ports):
                        break
                await asyncio.sleep(self.STARTING_PROBE_S)
            self.next_check[preview.public_id] = (
                asyncio.get_running_loop().time() + settings.PREVIEW_HEALTH_EVERY_S
            )
        except Exception:
            log.exception("health check of preview %s failed", preview.public_id)
        finally:
            self.busy.discard(preview.public_id)

    async def _namespace(self, preview: Preview) -> Namespace | None:
        """The sandbox's namespace, found once per process and recorded for the proxy."""
        if preview.sandbox_pid and preview.sandbox_netns:
            return Namespace(preview.sandbox_pid, preview.sandbox_netns, preview.process_host)
        process = _process(preview)
        assert process is not None
        pid = await asyncio.to_thread(backend.sandbox_pid, process.container_name)
        if pid is None:
            return None
        try:
            ns = Namespace.of_pid(pid)
        except NamespaceGone:
            return None
        if process.sandbox is not None:
            await _db(process.sandbox.record_pid)(ns.pid, ns.inode)
        # A preview of a session has no run of its own (run_id None).
        await _db(preview.record_namespace)(preview.run_id, ns.pid, ns.inode)
        return ns

    @staticmethod
    async def _ports(ns: Namespace) -> set[int] | None:
        try:
            return await asyncio.to_thread(listening_ports, ns)
        except NamespaceGone:
            return None

    @staticmethod
    def _record(preview: Preview, status: int | None, ports: set[int] | None = None) -> bool:
        """Write what a probe saw (and, while nothing answers, the ports something
        listens on); True while the preview is still starting."""
        preview.refresh_from_db()
        process = _process(preview)
        if process is None or not preview.is_live:
            return False
        healthy = status is not None and 200 <= status < 400
        if preview.state == PreviewState.STARTING:
            if healthy and lifecycle.mark_ready(preview, status or 0):
                return False
            # A session's app was started by an exec of its own: timed from the ask.
            started = preview.started_at if preview.session_id else process.process_started_at
            if ports and started and preview.port not in ports:
                if process.network.get("mode") == "proxy":
                    ports = ports - {PROXY_PORT}  # Berth's egress listener, not the app
                if ports and timezone.now() > started + timedelta(seconds=WRONG_PORT_AFTER_S):
                    log.info(
                        "preview %s listens on %s, not on %s",
                        preview.public_id,
                        sorted(ports),
                        preview.port,
                    )
                    lifecycle.fail_start(preview, "listening_on_other_port", ports=sorted(ports))
                    return False
            if started and timezone.now() > started + timedelta(
                seconds=settings.PREVIEW_START_DEADLINE_S
            ):
                lifecycle.fail_start(
                    preview, "not_listening" if status is None else "health_failed", status
                )
                return False
            if not process.is_active:
                return False  # it ended: on_run_finished (or the session's move) says how
        preview.record_health(status)
        return preview.state == PreviewState.STARTING

    @staticmethod
    def _stop_if_idle(preview: Preview) -> bool:
        if preview.kind in ("release", "session"):
            # A release serves until a deploy replaces it; a session's preview lives as
            # long as its session, whose own clocks freeze and stop it.
            return False
        idle = preview.idle_for()
        if idle is None or idle < timedelta(seconds=preview.idle_timeout_s):
            return False
        # The proxy may have just recorded a request: decide on the stored time.
        preview.refresh_from_db()
        idle = preview.idle_for()
        if idle is None or idle < timedelta(seconds=preview.idle_timeout_s):
            return False
        actions.stop_preview(preview, None, "idle")
        return True


def _watched() -> list[Preview]:
    """The live previews whose process runs, from the moment the source is in (the
    process may be starting this instant): probes before it listens just find nothing
    yet. Asked first whether any preview is live at all: building this query of five
    joined tables, every second, was most of the agent's database work at rest (issue
    32), and with no preview live it finds nothing."""
    if not Preview.objects.filter(state__in=LIVE_STATES).exists():
        return []
    return list(
        Preview.objects.select_related(
            "run__sandbox", "workspace__team", "session__run__sandbox"
        ).filter(
            Q(
                run__state__in=(RunState.PREPARING, RunState.RUNNING),
                run__phase="main",
                run__hydrated_at__isnull=False,
            )
            | Q(kind="session", session__state=SessionState.READY),
            # This host's alone: another's pids name processes of another machine.
            Q(session=None, run__runner_host=this_host()) | Q(session__runner_host=this_host()),
            state__in=LIVE_STATES,
        )
    )


def _process(preview: Preview) -> Run | None:
    """The run whose container serves the preview: its own, or its session's."""
    if preview.session_id is not None:
        return preview.session.run if preview.session else None
    return preview.run
