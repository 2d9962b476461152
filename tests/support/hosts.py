"""The test database's hosts (sandbox.hosts): the machine's own, as a runner agent of it
would have beaten before the test's rows were written."""

from django.conf import settings

from sandbox.hosts import Host, HostState


def local_host(slots: int | None = None) -> Host:
    """This machine's host row with both runtimes, `slots` (else RUNNER_SLOTS) run slots
    and no heartbeat yet: the test's agent, where it runs one, beats over it. Its token
    is the one the test's worker and agent present (config.settings_test)."""
    host, _ = Host.objects.update_or_create(
        name=settings.SANDBOX_HOST,
        defaults={
            "state": HostState.READY,
            "runtimes": {"runc": [], "runsc": ["--network=host", "--oci-seccomp"]},
            "slots": settings.RUNNER_SLOTS if slots is None else slots,
        },
    )
    host.keep_token(settings.BERTH_HOST_TOKEN)
    return host
