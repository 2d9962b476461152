"""The runner agent's disk watch: each running sandbox's bytes and inodes, counted on the
host off the agent's tick.

A count walks a sandbox's files (sandbox.usage), which takes time in proportion
to how many there are (up to the cap, where it stops): it runs on threads of its own,
one count per run at a time, so the tick that ends every team's runs on time never
waits for it.
1. Every ROUND_S, each running sandbox whose next count is due gets one: /workspace,
   plus /deps while its setup step may write it, or a release build's writable layer.
2. The next count is due after half the time the run would take to reach a cap at the
   rate it grew since the last one, and otherwise after four times what the last count
   took (counting a big, still tree costs at most a fifth of a core); never sooner than
   MIN_EVERY_S nor later than MAX_EVERY_S. A flood of empty files is seen in well under
   a second, however big the cap.
3. Past a cap, or when a count fails (a folder swapped for a link, too deep, too slow),
   the run's stop reason is set and its sandbox is killed at once: SIGKILL, since one
   that ignored SIGTERM would go on writing through the grace period. What was counted
   goes into the run's log by its end, after its output (`note_for`).
"""

import asyncio
import concurrent.futures
import logging
import math
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.utils import timezone

from runs.models import Purpose, Run, RunState
from sandbox import backend
from sandbox.usage import WalkFailed

log = logging.getLogger("berth.runner_agent")

ROUND_S = 0.25
MIN_EVERY_S = 0.25
MAX_EVERY_S = 2.0
COUNTERS = 2  # threads counting at once: one big tree never holds up every other run


@dataclass
class Watched:
    phase: str
    roots: list[str] | None = None  # resolved once per phase (engine calls)
    due: float = 0.0
    counting: bool = False
    killed: bool = False  # stopped by this watch: nothing left to count
    last: tuple[float, backend.Usage] | None = None  # (loop time, what was counted)


def caps(run: Run) -> tuple[int, int]:
    """(inodes, bytes) the run may hold on the engine's disk."""
    return (
        int(run.limits.get("inodes") or settings.SANDBOX_MAX_INODES),
        int(run.limits["disk_mb"]) * 1024 * 1024,
    )


def roots_of(run: Run) -> list[str]:
    """Where the run's writable storage is on this host: a release build's writable
    root layer; else its /workspace volume, and while its setup step runs, that step's
    own /workspace and /deps."""
    if run.purpose == Purpose.BUILD:
        layer = backend.writable_layer_path(run.container_name)
        return [layer] if layer else []
    names = [run.container_name] + (
        [run.setup_container_name, run.deps_volume_name] if run.phase == "setup" else []
    )
    return [p for p in map(backend.volume_path, names) if p]


def count_run(run: Run) -> tuple[list[str], backend.Usage]:
    try:
        roots = roots_of(run)
    except WalkFailed as e:
        return [], backend.Usage(failed=e.why)
    return roots, backend.count(roots, *caps(run))


def next_in(
    usage: backend.Usage, last: tuple[float, backend.Usage] | None, now: float, run: Run
) -> float:
    """Seconds until the run's next count (see the module's step 2)."""
    soon = 4 * usage.seconds
    if last is not None and now > last[0]:
        max_inodes, max_bytes = caps(run)
        for used, before, cap in (
            (usage.inodes, last[1].inodes, max_inodes),
            (usage.bytes, last[1].bytes, max_bytes),
        ):
            rate = (used - before) / (now - last[0])
            if rate > 0:
                soon = min(soon, (cap - used) / rate / 2)
    return min(MAX_EVERY_S, max(MIN_EVERY_S, soon if math.isfinite(soon) else MAX_EVERY_S))


def verdict(usage: backend.Usage, run: Run) -> tuple[str, str] | None:
    """(stop reason, the log's line) when the run is past a cap or its count failed."""
    max_inodes, max_bytes = caps(run)
    where = (
        "its writable layer (/app and the rest of the root)"
        if run.purpose == Purpose.BUILD
        else "/workspace" + (" and /deps" if run.phase == "setup" else "")
    )
    if usage.failed:
        return "inode_quota_exceeded", (
            f"[disk] stopped: the files in {where} could not be counted safely "
            f"({usage.failed}); a count that fails counts as over the limit"
        )
    if usage.over == "inodes":
        return "inode_quota_exceeded", (
            f"[disk] stopped: more than {max_inodes:,} files and folders in {where} (the "
            f"limit); {usage.bytes / 1e6:.1f} MB counted so far"
        )
    if usage.over == "bytes":
        return "disk_quota_exceeded", (
            f"[disk] stopped: more than {max_bytes // (1024 * 1024)} MB in {where} (the "
            f"limit of [sandbox].disk_mb); {usage.inodes:,} files and folders counted"
        )
    return None


class DiskWatch:
    def __init__(self, db: Any) -> None:
        self.db = db  # the agent's way to run ORM code off the event loop
        self.pool = concurrent.futures.ThreadPoolExecutor(COUNTERS, thread_name_prefix="disk-count")
        self.watched: dict[str, Watched] = {}
        self.notes: dict[str, str] = {}
        self.background: set[asyncio.Future[None]] = set()

    def note_for(self, run_id: str) -> str | None:
        """The line to add to the run's log about its stop, once (after its output)."""
        return self.notes.pop(run_id, None)

    async def round(self) -> None:
        loop = asyncio.get_running_loop()
        running = await self.db(
            lambda: list(
                Run.objects.filter(state=RunState.RUNNING).exclude(purpose=Purpose.RELEASE)
            )
        )()
        ids = {run.public_id for run in running}
        for gone in set(self.watched) - ids:
            if not self.watched[gone].counting:
                del self.watched[gone]
        for ended in set(self.notes) - ids:  # its end is written: taken, or not wanted
            del self.notes[ended]
        now = loop.time()
        for run in running:
            watched = self.watched.get(run.public_id)
            if watched is None or watched.phase != run.phase:
                watched = self.watched[run.public_id] = Watched(run.phase)
            if watched.counting or watched.killed or now < watched.due:
                continue
            watched.counting = True
            task = asyncio.ensure_future(self._count(run, watched))
            self.background.add(task)
            task.add_done_callback(self.background.discard)

    async def _count(self, run: Run, watched: Watched) -> None:
        loop = asyncio.get_running_loop()
        try:
            if watched.roots is None:
                roots, usage = await loop.run_in_executor(self.pool, count_run, run)
                watched.roots = roots or None  # not there yet: asked again next time
            else:
                usage = await loop.run_in_executor(
                    self.pool, lambda: backend.count(watched.roots or [], *caps(run))
                )
            now = loop.time()
            watched.due = now + next_in(usage, watched.last, now, run)
            watched.last = (now, usage)
            found = verdict(usage, run)
            if found is not None:
                watched.killed = True
                await self._stop(run, *found)
        except Exception:
            log.exception("counting the disk use of run %s failed", run.public_id)
            watched.due = loop.time() + MAX_EVERY_S
        finally:
            watched.counting = False

    async def _stop(self, run: Run, reason: str, line: str) -> None:
        def request() -> None:
            # A stop asked for before (a timeout, a cancel) keeps its reason.
            Run.objects.filter(pk=run.pk, stop_reason="").update(stop_reason=reason)
            Run.objects.filter(pk=run.pk, stop_signalled_at=None).update(
                stop_signalled_at=timezone.now()
            )

        # Kept before the stop reason is: the end, which may be written as soon as
        # that is, looks for it then.
        self.notes.setdefault(run.public_id, line)
        await self.db(request)()
        target = run.setup_container_name if run.phase == "setup" else run.container_name
        log.info("run %s: %s", run.public_id, line)
        await asyncio.to_thread(backend.signal_sandbox, target, "SIGKILL")
