"""How the engine loop tells a sandbox's owner what became of it.

The sandbox layer knows nothing of runs, previews or releases: each kind of owner
registers a handler under its `owner_kind` (the runner agent process wires them, see
agent.loop), and the loop calls it with the Sandbox row.
"""

from typing import Any, Protocol

from sandbox.models import Sandbox


class Owner(Protocol):
    async def started(self, sandbox: Sandbox) -> None:
        """Its container runs (again, after an agent restart): follow its output."""

    async def exited(
        self, sandbox: Sandbox, facts: dict[str, Any] | None, note: str | None
    ) -> None:
        """Its container exited (`facts`: exit code and OOM flag; None when it is gone
        before they were read). The loop removes the sandbox after this returns, unless
        the owner removed it already. `note`: what the disk watch has to say of it."""

    def present(self, owner_ids: set[str]) -> set[str]:
        """Those of `owner_ids` that still exist (sync, on a thread): a sandbox whose
        owner is gone is removed by the reconcile, whatever state it is in."""

    async def reconciled(self, carried: set[str]) -> None:
        """After a reconcile: `carried` holds the owner ids with a started container."""

    def cpu_used(self, sandbox: Sandbox, grew: float) -> None:
        """CPU seconds the sandbox used since the last sample (sync, on a thread)."""

    def egress_used(self, sandbox: Sandbox) -> int:
        """Bytes the owner's sandboxes moved through egress proxies before this one."""

    def egress_offered(self, sandbox: Sandbox) -> None:
        """Its egress proxy listens now."""

    def egress_attempts(self, sandbox: Sandbox, attempts: list[Any]) -> None:
        """Connections its egress proxy saw, in order (sandbox.egress.attempts.Attempt)."""


_owners: dict[str, Owner] = {}


def register(owner_kind: str, owner: Owner) -> None:
    _owners[owner_kind] = owner


def owner_of(sandbox: Sandbox) -> Owner | None:
    return _owners.get(sandbox.owner_kind)


def all_owners() -> list[Owner]:
    return list(_owners.values())


def registered_kinds() -> dict[str, Owner]:
    return dict(_owners)
