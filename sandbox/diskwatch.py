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
3. A due count waits, until MAX_EVERY_S after the last one, while the sandbox's cgroup
   has used less than STILL_CPU_S of CPU since that count: nothing in it can have made a
   file without being charged for the syscall, so its tree is as it was. One file read
   per sandbox, all in one thread hop, instead of a walk each: an idle sandbox was walked
   about three times a second, most of what twenty idle ones cost the agent (issue 32).
4. Past a cap, or when a count fails (a folder swapped for a link, too deep, too slow),
   the sandbox's stop reason is set and it is killed at once: SIGKILL, since one
   that ignored SIGTERM would go on writing through the grace period. What was counted
   goes to its owner with its end (`note_for`).
"""

import asyncio
import concurrent.futures
import logging
import math
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import models

from sandbox import backend
from sandbox.models import Sandbox, SandboxKind, SandboxState, this_host
from sandbox.usage import WalkFailed

log = logging.getLogger("berth.runner_agent")

ROUND_S = 0.25
MIN_EVERY_S = 0.25
MAX_EVERY_S = 2.0
COUNTERS = 2  # threads counting at once: one big tree never holds up every other run
# Less CPU than this since the last count (an idle session's channel uses under 1 ms a
# second) and the count waits (step 3). What it could make meanwhile is bounded by this
# much CPU: a few hundred empty files; an fallocate of any size costs one syscall,
# which no count could have seen before it was done either.
STILL_CPU_S = 0.002


@dataclass
class Watched:
    sandbox: Sandbox  # as first seen: what the watch reads of it never changes while it runs
    roots: list[str] | None = None  # resolved once (engine calls)
    due: float = 0.0
    counting: bool = False
    killed: bool = False  # stopped by this watch: nothing left to count
    last: tuple[float, backend.Usage] | None = None  # (loop time, what was counted)
    cpu: float | None = None  # its CPU time just before that count, if its cgroup was known


def caps(sandbox: Sandbox) -> tuple[int, int]:
    """(inodes, bytes) the sandbox may hold on the engine's disk."""
    return (
        int(sandbox.limits.get("inodes") or settings.SANDBOX_MAX_INODES),
        int(sandbox.limits["disk_mb"]) * 1024 * 1024,
    )


def roots_of(sandbox: Sandbox) -> list[str]:
    """Where the sandbox's writable storage is on this host: a release build's writable
    root layer; else its /workspace volume and the volumes it writes besides (a setup
    step: the run's /workspace and /deps)."""
    if sandbox.kind == SandboxKind.BUILD:
        layer = backend.writable_layer_path(sandbox.name)
        return [layer] if layer else []
    return [p for p in map(backend.volume_path, [sandbox.name, *sandbox.volumes]) if p]


def count_sandbox(sandbox: Sandbox) -> tuple[list[str], backend.Usage]:
    try:
        roots = roots_of(sandbox)
    except WalkFailed as e:
        return [], backend.Usage(failed=e.why)
    return roots, backend.count(roots, *caps(sandbox))


def next_in(
    usage: backend.Usage, last: tuple[float, backend.Usage] | None, now: float, sandbox: Sandbox
) -> float:
    """Seconds until the sandbox's next count (see the module's step 2)."""
    soon = 4 * usage.seconds
    if last is not None and now > last[0]:
        max_inodes, max_bytes = caps(sandbox)
        for used, before, cap in (
            (usage.inodes, last[1].inodes, max_inodes),
            (usage.bytes, last[1].bytes, max_bytes),
        ):
            rate = (used - before) / (now - last[0])
            if rate > 0:
                soon = min(soon, (cap - used) / rate / 2)
    return min(MAX_EVERY_S, max(MIN_EVERY_S, soon if math.isfinite(soon) else MAX_EVERY_S))


def verdict(usage: backend.Usage, sandbox: Sandbox) -> tuple[str, str] | None:
    """(stop reason, the log's line) when it is past a cap or its count failed."""
    max_inodes, max_bytes = caps(sandbox)
    where = (
        "its writable layer (/app and the rest of the root)"
        if sandbox.kind == SandboxKind.BUILD
        else "/workspace" + (" and /deps" if sandbox.kind == SandboxKind.SETUP else "")
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


def _running() -> "models.QuerySet[Sandbox]":
    # A release's process has no /workspace and no writable root to count; another
    # host's volumes are on its own engine, counted by its own agent.
    return Sandbox.objects.filter(host=this_host(), state=SandboxState.RUNNING).exclude(
        kind=SandboxKind.SERVICE, workdir="/app"
    )


class DiskWatch:
    def __init__(self, db: Any) -> None:
        self.db = db  # the loop's way to run ORM code off the event loop
        self.pool = concurrent.futures.ThreadPoolExecutor(COUNTERS, thread_name_prefix="disk-count")
        self.watched: dict[str, Watched] = {}  # by sandbox id
        self.notes: dict[str, str] = {}
        self.background: set[asyncio.Future[None]] = set()

    def note_for(self, sandbox_id: str) -> str | None:
        """The line for the owner about the sandbox's stop, once (with its end)."""
        return self.notes.pop(sandbox_id, None)

    async def round(self) -> None:
        loop = asyncio.get_running_loop()
        # The running ids alone, four times a second; a row is loaded once, when first
        # seen (its name, kind, volumes and limits never change while it runs).
        ids = await self.db(lambda: set(_running().values_list("public_id", flat=True)))()
        for gone in set(self.watched) - ids:
            if not self.watched[gone].counting:
                del self.watched[gone]
        new = ids - set(self.watched)
        if new:
            for sandbox in await self.db(lambda: list(_running().filter(public_id__in=new)))():
                self.watched[sandbox.public_id] = Watched(sandbox)
        now = loop.time()
        due: list[tuple[Sandbox, Watched]] = []
        for watched in self.watched.values():
            if watched.sandbox.public_id not in ids:
                continue  # gone, but still being counted
            if not (watched.counting or watched.killed or now < watched.due):
                due.append((watched.sandbox, watched))
        for sandbox, watched in await self._not_still(due, now):
            watched.counting = True
            task = asyncio.ensure_future(self._count(sandbox, watched))
            self.background.add(task)
            task.add_done_callback(self.background.discard)

    async def _not_still(
        self, due: list[tuple[Sandbox, Watched]], now: float
    ) -> list[tuple[Sandbox, Watched]]:
        """Of the sandboxes due a count, those that may have written since their last
        one (step 3). Read on a thread of the default pool: the counters' may be busy
        with a big tree, which must not hold up this round."""
        asked = [
            (s, w)
            for s, w in due
            if w.cpu is not None and w.last is not None and now - w.last[0] < MAX_EVERY_S
        ]
        if not asked:
            return due
        used = await asyncio.to_thread(
            lambda: [backend.cpu_seconds_known(s.name) for s, _ in asked]
        )
        still = {
            id(w)
            for (_, w), cpu in zip(asked, used, strict=True)
            if cpu is not None and w.cpu is not None and 0 <= cpu - w.cpu < STILL_CPU_S
        }
        return [(s, w) for s, w in due if id(w) not in still]

    async def _count(self, sandbox: Sandbox, watched: Watched) -> None:
        loop = asyncio.get_running_loop()

        def measure() -> tuple[float | None, backend.Usage]:
            # Its CPU read first: what it does while counted shows at the next look.
            cpu = backend.cpu_seconds_known(sandbox.name)
            if watched.roots is None:
                roots, usage = count_sandbox(sandbox)
                watched.roots = roots or None  # not there yet: asked again next time
                return cpu, usage
            return cpu, backend.count(watched.roots, *caps(sandbox))

        try:
            watched.cpu, usage = await loop.run_in_executor(self.pool, measure)
            now = loop.time()
            watched.due = now + next_in(usage, watched.last, now, sandbox)
            watched.last = (now, usage)
            found = verdict(usage, sandbox)
            if found is not None:
                watched.killed = True
                await self._stop(sandbox, *found)
        except Exception:
            log.exception("counting the disk use of sandbox %s failed", sandbox.public_id)
            watched.due = loop.time() + MAX_EVERY_S
        finally:
            watched.counting = False

    async def _stop(self, sandbox: Sandbox, reason: str, line: str) -> None:
        def request() -> None:
            # A stop asked for before (a timeout, a cancel) keeps its reason.
            sandbox.request_stop(reason)
            sandbox.mark_signalled()

        # Kept before the stop reason is: the end, which may be written as soon as
        # that is, looks for it then.
        self.notes.setdefault(sandbox.public_id, line)
        await self.db(request)()
        log.info("sandbox %s of %s: %s", sandbox.public_id, sandbox.owner_id, line)
        await asyncio.to_thread(backend.signal_sandbox, sandbox.name, "SIGKILL")
