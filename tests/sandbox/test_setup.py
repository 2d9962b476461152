"""The floor everything stands on: a real engine, runc and gVisor, the sandbox image,
Redis and a Celery worker."""

import platform

import pytest
import redis
from django.conf import settings

from sandbox.engine import engine, instance_label, resource_name

pytestmark = pytest.mark.docker

HARDENED = dict(
    user="1000:1000",
    cap_drop=["ALL"],
    security_opt=["no-new-privileges"],
    read_only=True,
    network_mode="none",
    init=True,
    mem_limit="256m",
    memswap_limit="256m",
    pids_limit=128,
    ipc_mode="private",
    tmpfs={"/tmp": "rw,noexec,nosuid,nodev,size=64m"},
)


def run_in_sandbox(command: str, runtime: str) -> tuple[int, str]:
    """Run `command` in the sandbox image under `runtime`; always remove the container."""
    container = engine().containers.create(
        settings.SANDBOX_IMAGE,
        ["sh", "-c", command],
        runtime=runtime,
        name=resource_name("setup-test", runtime, docker_safe_suffix()),
        labels=instance_label(),
        **HARDENED,
    )
    try:
        container.start()
        status = container.wait(timeout=120)["StatusCode"]
        return status, container.logs().decode()
    finally:
        container.remove(force=True)


def docker_safe_suffix() -> str:
    from core.ids import new_id

    return new_id(6)


def test_the_engine_answers():
    assert engine().ping() is True
    runtimes = engine().info()["Runtimes"]
    assert "runsc" in runtimes and "runc" in runtimes


@pytest.mark.parametrize("runtime", ["runc", "runsc"])
def test_true_runs_in_the_sandbox_image(runtime):
    status, _ = run_in_sandbox("true", runtime)
    assert status == 0


def test_runsc_really_is_gvisor():
    # gVisor's own boot line (dmesg would need syslog, which seccomp denies under
    # runsc --oci-seccomp as under runc).
    status, out = run_in_sandbox("uname -r; cat /proc/cmdline", "runsc")
    assert status == 0
    kernel = out.splitlines()[0]
    assert kernel != platform.release()
    assert "gvisor" in out


def test_runc_shares_the_host_kernel_but_no_capabilities():
    status, out = run_in_sandbox(
        "uname -r; grep -E '^(CapEff|NoNewPrivs)' /proc/self/status", "runc"
    )
    assert status == 0
    assert out.splitlines()[0] == platform.release()
    assert "CapEff:\t0000000000000000" in out and "NoNewPrivs:\t1" in out


@pytest.mark.parametrize("runtime", ["runc", "runsc"])
def test_the_sandbox_has_no_network_but_loopback(runtime):
    script = 'python3 -c "import socket; print(sorted(n for _, n in socket.if_nameindex()))"'
    status, out = run_in_sandbox(script, runtime)
    assert status == 0
    assert out.strip() == "['lo']"


def test_the_sandbox_image_runs_as_uid_1000_who_owns_workspace_and_deps():
    status, out = run_in_sandbox(
        "id -u; stat -c '%u %n' /workspace /deps; python3 --version; node --version; git --version",
        "runc",
    )
    assert status == 0, out
    lines = out.splitlines()
    assert lines[0] == "1000"
    assert "1000 /workspace" in lines and "1000 /deps" in lines
    assert lines[3].startswith("Python 3.11") and lines[4].startswith("v")


def test_the_sandbox_image_carries_its_recipe_hash_in_a_tag():
    image = engine().images.get(settings.SANDBOX_IMAGE)
    recipe = image.labels["berth.recipe"]
    assert f"berth-sandbox:bookworm-{recipe}" in image.tags


def test_redis_answers():
    assert redis.Redis.from_url(settings.REDIS_URL).ping() is True


def test_a_real_celery_worker_answers(celery_worker):
    from config.celery import app

    replies = app.control.ping(timeout=2)
    assert replies, "no Celery worker answered"
