"""Dependency caches and retention, told through the doors people and agents use: runs
through the API (a real Celery worker, runner agent and Docker engine), the caches API
and page, and the beat jobs' functions on real volumes and files."""

import contextlib
import functools
from collections.abc import Callable, Iterator
from datetime import timedelta

import docker
import pytest
from django.conf import settings
from django.core.management import call_command
from django.utils import timezone

from accounts.access import Actor
from accounts.models import Activity
from core.ids import new_id
from logs import logstore
from runs import artifacts, caches, retention
from runs.models import DepCache, Run, RunState
from sandbox.engine import engine
from tests.support.api import bearer
from tests.support.runs import Agent, approve_contract
from tests.support.servers import wait_for
from workspaces import actions as workspace_actions
from workspaces.changes import Change
from workspaces.models import Workspace

pytestmark = pytest.mark.docker

SETUP = """[setup]
command = "mkdir -p /deps/lib && echo v1 > /deps/lib/marker"
cache_key = ["requirements.txt"]

[artifacts]
paths = ["report.txt"]
"""
CACHES = "/workspaces/shop/caches"
PAGE = "/t/team-a/w/shop/caches/"


@pytest.fixture
def shop(cast) -> Iterator[Workspace]:
    shop = workspace_actions.create_workspace(
        cast.team_a, Actor(cast.carol), "Shop", "shop", "python-http"
    )
    write(shop, cast, {"workspace.toml": SETUP, "requirements.txt": "requests==2.32.3\n"})
    yield shop
    # Cache volumes outlive the rows the test database drops after the test: remove
    # them here, once the agent has removed the last run's containers (the engine
    # refuses while a container mounts one). Best effort: the agent's reconcile at its
    # next start removes any left.
    for volume in DepCache.objects.filter(workspace=shop).values_list("volume", flat=True):
        with contextlib.suppress(AssertionError):
            wait_for(
                functools.partial(caches.remove_volume, volume),
                timeout=20,
                interval=0.2,
                what=f"volume {volume} to be removable",
            )


def write(shop: Workspace, cast, files: dict[str, str]) -> None:
    # By the admin, signed in: a contract she writes is approved (workspaces.reviews).
    workspace_actions.commit_changes(
        shop,
        Actor(cast.alice),
        [Change("write", p, c.encode()) for p, c in files.items()],
        "change " + ", ".join(files),
    )


@pytest.fixture
def agent(client, cast, shop, run_stack) -> Agent:
    """carol's agent: read, write and run, as a member of team A."""
    _, secret = cast.token(cast.carol, ["workspace:read", "workspace:write", "run"])
    return Agent(client, secret)


@pytest.fixture
def admin(client, cast) -> Agent:
    _, secret = cast.token(cast.alice, ["workspace:read", "workspace:write", "run"])
    return Agent(client, secret)


def delete(who: Agent, path: str):
    return who.client.delete(f"/api/v1{path}", **who.headers)


def volume_gone(name: str) -> bool:
    try:
        engine().volumes.get(name)
    except docker.errors.NotFound:
        return True
    return False


def error_code(response) -> str:
    return response.json()["error"]["code"]


# -- the setup step and its cache, through real runs -------------------------------------


def test_setup_fills_a_cache_that_later_runs_mount_read_only_until_the_key_changes(
    agent, shop, cast
):
    first = agent.wait(agent.run("cat /deps/lib/marker"))
    assert first["state"] == "succeeded", (first, agent.log(first))
    assert first["setup"]["skipped"] is False and agent.output(first) == ["v1"]
    assert first["timings"]["setup_done_at"]

    listing = agent.get(CACHES).json()
    [cache] = listing["caches"]
    assert cache["size_bytes"] > 0 and cache["built_by"] == first["id"]
    assert cache["key"] == first["setup"]["key"] and cache["in_use"] is False
    assert cache["last_used_at"] and cache["created_at"]
    assert listing["limit_bytes"] == settings.DEPS_CACHE_MAX_BYTES
    assert listing["total_bytes"] >= listing["workspace_bytes"] == cache["size_bytes"]

    second = agent.wait(agent.run("cat /deps/lib/marker"))
    assert second["state"] == "succeeded", agent.log(second)
    assert second["setup"]["skipped"] is True and second["setup"]["cache"] == cache["id"]
    assert agent.output(second) == ["v1"]
    assert agent.get(CACHES).json()["caches"][0]["last_used_at"] > cache["last_used_at"]

    # What a run finds in /deps is what setup left: no run may change it for the next.
    tamper = agent.wait(agent.run("touch /deps/x"))
    assert (tamper["state"], tamper["exit_code"]) == ("failed", 1)
    assert tamper["setup"]["skipped"] is True
    assert any("Read-only file system" in line for line in agent.output(tamper))

    write(shop, cast, {"requirements.txt": "requests==2.32.4\n"})
    third = agent.wait(agent.run("cat /deps/lib/marker"))
    assert third["state"] == "succeeded", agent.log(third)
    assert third["setup"]["skipped"] is False and third["setup"]["key"] != cache["key"]
    assert agent.output(third) == ["v1"]
    keys = {c["key"] for c in agent.get(CACHES).json()["caches"]}
    assert keys == {cache["key"], third["setup"]["key"]}


def test_the_caches_of_a_workspace_are_only_its_teams(agent, client, cast):
    agent.wait(agent.run("true"))
    _, charlies = cast.token(cast.charlie)
    r = client.get(f"/api/v1{CACHES}", **bearer(charlies))
    assert r.status_code == 404 and error_code(r) == "not_found"
    _, run_only = cast.token(cast.carol, ["run"])
    r = client.get(f"/api/v1{CACHES}", **bearer(run_only))
    assert r.status_code == 403 and error_code(r) == "missing_scope"


# -- branches: a cache holds only what its key names -------------------------------------
# A cache is shared by every branch whose key inputs match, and `main`'s runs with secrets
# mount it: a branch's setup must never put into it anything its key does not name.

# `ls` of a volume's folder says "Invalid argument" under gVisor (its statx): list in Python.
LS = "python3 -c 'import os, sys; [print(n) for n in sorted(os.listdir(sys.argv[1]))]'"
# A setup that would run whatever hook a branch adds, and that records what it saw: a
# stand-in for `pip install .` reading a setup.py, or a .pth, outside the key.
HOOKED = f"""[setup]
command = "{LS} . > /deps/seen; [ ! -f tools/hook.sh ] || sh tools/hook.sh; \
python3 setup.py 2>/dev/null; mkdir -p /deps/lib && cp -r requirements.txt vendor /deps/lib/"
cache_key = ["requirements.txt", "vendor"]
"""
POISON = (
    "mkdir -p /deps/lib; echo POISONED > /deps/lib/poison; "
    "echo POISONED >> /deps/lib/requirements.txt\n"
)
SETUP_PY = "open('/deps/lib/poison', 'w').write('POISONED')\n"


def branch(shop, cast, name: str, files: dict[str, str]) -> None:
    workspace_actions.create_branch(shop, Actor(cast.carol), name, "main")
    workspace_actions.commit_changes(
        shop,
        Actor(cast.alice),
        [Change("write", p, c.encode()) for p, c in files.items()],
        "a branch's change",
        branch=name,
    )


@pytest.mark.parametrize("runtime", ["runc", "gvisor"])
def test_a_branch_setup_sees_only_the_key_files_and_main_gets_a_clean_cache(
    agent, shop, cast, runtime
):
    write(shop, cast, {"workspace.toml": HOOKED, "vendor/pkg.py": "VERSION = 1\n"})
    branch(shop, cast, "evil", {"tools/hook.sh": POISON, "setup.py": SETUP_PY})

    # The branch's setup runs first and fills the cache for its key...
    evil = agent.wait(
        agent.run(f"cat tools/hook.sh; {LS} /deps/lib; cat /deps/seen", ref="evil", runtime=runtime)
    )
    assert evil["state"] == "succeeded", (evil, agent.log(evil))
    assert evil["setup"]["skipped"] is False
    # ...seeing nothing but the files its key names (not the hook, not setup.py), while
    # the command itself has the whole tree.
    assert agent.output(evil) == [
        POISON.strip(),
        "requirements.txt",
        "vendor",  # in /deps/lib
        "requirements.txt",
        "vendor",
    ]  # what setup saw

    # main's key inputs are the same files: it mounts that cache, and what is in it
    # derives from them alone.
    clean = agent.wait(
        agent.run(
            f"{LS} /deps/lib; cat /deps/lib/requirements.txt; grep -r POISONED /deps || echo clean",
            runtime=runtime,
        )
    )
    assert clean["state"] == "succeeded", agent.log(clean)
    assert clean["setup"]["skipped"] is True and clean["setup"]["key"] == evil["setup"]["key"]
    assert agent.output(clean) == ["requirements.txt", "vendor", "requests==2.32.3", "clean"]
    [cache] = agent.get(CACHES).json()["caches"]
    assert cache["built_by"] == evil["id"]
    assert cache["built_from"] == {"ref": "evil", "commit": evil["commit"]}


def test_a_branch_that_changes_a_key_file_fills_a_cache_main_never_mounts(agent, shop, cast):
    write(shop, cast, {"workspace.toml": HOOKED, "vendor/pkg.py": "VERSION = 1\n"})
    # A file deep in a key folder: the folder's own tree id changes with it.
    branch(shop, cast, "evil", {"vendor/pkg.py": "import os  # POISONED\n"})

    evil = agent.wait(agent.run("cat /deps/lib/vendor/pkg.py", ref="evil"))
    assert evil["state"] == "succeeded", agent.log(evil)
    assert agent.output(evil) == ["import os  # POISONED"]

    main = agent.wait(agent.run("cat /deps/lib/vendor/pkg.py"))
    assert main["setup"]["skipped"] is False and main["setup"]["key"] != evil["setup"]["key"]
    assert agent.output(main) == ["VERSION = 1"]
    built = {c["key"]: c["built_from"]["ref"] for c in agent.get(CACHES).json()["caches"]}
    assert built == {evil["setup"]["key"]: "evil", main["setup"]["key"]: "main"}


def test_a_branch_that_widens_egress_fills_a_cache_of_its_own(agent, shop, cast):
    """What setup could reach is part of what it could read."""
    cast.team_a.egress_ceiling = ["pypi.org"]
    cast.team_a.save()
    write(shop, cast, {"workspace.toml": HOOKED, "vendor/pkg.py": "VERSION = 1\n"})
    branch(shop, cast, "evil", {"workspace.toml": HOOKED + '\n[network]\negress = ["pypi.org"]\n'})
    approve_contract(shop, cast, "evil")  # a write approves nothing (docs/security.md 30)

    evil = agent.wait(agent.run("true", ref="evil"))
    main = agent.wait(agent.run("true"))
    assert evil["state"] == main["state"] == "succeeded", (agent.log(evil), agent.log(main))
    assert main["setup"]["skipped"] is False and main["setup"]["key"] != evil["setup"]["key"]


# -- dropping a cache --------------------------------------------------------------------


def test_an_admin_drops_a_cache_and_the_next_run_runs_setup_again(agent, admin, client, cast):
    filled = agent.wait(agent.run("true"))
    [cache] = agent.get(CACHES).json()["caches"]
    volume = DepCache.objects.get(public_id=cache["id"]).volume
    assert filled["setup"]["skipped"] is False and not volume_gone(volume)

    r = delete(agent, f"{CACHES}/{cache['id']}")
    assert r.status_code == 403 and error_code(r) == "admin_required"
    _, charlies = cast.token(cast.charlie)
    r = client.delete(f"/api/v1{CACHES}/{cache['id']}", **bearer(charlies))
    assert r.status_code == 404
    _, read_only = cast.token(cast.alice, ["workspace:read"])
    r = client.delete(f"/api/v1{CACHES}/{cache['id']}", **bearer(read_only))
    assert r.status_code == 403 and error_code(r) == "missing_scope"
    assert DepCache.objects.filter(public_id=cache["id"]).exists() and not volume_gone(volume)

    # Not while a run has it mounted: that run would lose its dependencies mid-way.
    busy = agent.run("echo started; sleep 120")
    wait_for(
        lambda: any(
            e["text"] == "started"
            for e in agent.get(f"/runs/{busy['id']}/logs?after=0").json()["entries"]
        ),
        timeout=60,
        interval=0.1,
        what="the busy run to start",
    )
    r = delete(admin, f"{CACHES}/{cache['id']}")
    assert r.status_code == 409 and error_code(r) == "conflict"
    assert agent.get(CACHES).json()["caches"][0]["in_use"] is True
    assert (
        agent.client.post(f"/api/v1/runs/{busy['id']}/cancel", **agent.headers).status_code == 202
    )
    agent.wait(busy, timeout=30)

    r = delete(admin, f"{CACHES}/{cache['id']}")
    assert r.status_code == 204, r.content
    assert not DepCache.objects.filter(public_id=cache["id"]).exists()
    # The engine may refuse while the cancelled run's container is still being removed;
    # the agent's reconcile removes the volume then (it is no cache any more).
    wait_for(lambda: volume_gone(volume), timeout=30, what=f"volume {volume} to go")
    activity = Activity.objects.get(verb="cache.dropped")
    assert activity.user == cast.alice and activity.token is not None
    assert (activity.workspace, activity.target) == ("shop", f"cache:{cache['id']}")
    assert agent.get(CACHES).json()["caches"] == []
    r = delete(admin, f"{CACHES}/{cache['id']}")
    assert r.status_code == 404

    again = agent.wait(agent.run("cat /deps/lib/marker"))
    assert again["setup"]["skipped"] is False and agent.output(again) == ["v1"]


@pytest.fixture
def labelled_volumes(transactional_db: None) -> Iterator[Callable[[], str]]:
    """Real /deps volumes labelled as this instance's, removed at the end whatever
    happened (the agent's reconcile keeps only those a DepCache row names)."""
    names: list[str] = []

    def make() -> str:
        name = f"berth-{settings.BERTH_INSTANCE}-deps-t{new_id(11)}"
        names.append(name)
        return name

    yield make
    for name in names:
        caches.remove_volume(name)


def add_cache(shop: Workspace, name: str, size: int, used_ago_s: int, host: str = "") -> DepCache:
    """A cache row first, then its volume: the row (committed) keeps a live agent's
    reconcile from taking the volume for a stray. `host`: the row says it is there
    (the volume is on this engine all the same)."""
    cache = DepCache.objects.create(
        workspace=shop,
        key=new_id(40),
        host=host or settings.SANDBOX_HOST,
        image_id="sha256:test",
        volume=name,
        size_bytes=size,
        last_used_at=timezone.now() - timedelta(seconds=used_ago_s),
    )
    engine().volumes.create(
        name,
        labels={
            "berth.instance": settings.BERTH_INSTANCE,
            "berth.kind": "deps",
            "berth.owner": "t",
        },
    )
    return cache


def mounting_run(shop: Workspace, cache: DepCache) -> Run:
    """An active run with the cache mounted: a row only (a running state without a
    process start is one a live agent's reconcile leaves alone)."""
    return Run.objects.create(
        workspace=shop,
        ref="main",
        commit="0" * 40,
        command="sleep 60",
        image=settings.SANDBOX_IMAGE,
        state=RunState.RUNNING,
        setup={"command": "x", "volume": cache.volume, "hit": True},
    )


def test_the_cache_page_lists_caches_and_only_admins_drop_them(
    shop, cast, signed_in, labelled_volumes
):
    cache = add_cache(shop, labelled_volumes(), 5 * 1024 * 1024, 90 * 60)

    settings_page = signed_in(cast.carol).get("/t/team-a/w/shop/settings/")
    assert PAGE in settings_page.content.decode()
    carol = signed_in(cast.carol)
    page = carol.get(PAGE)
    text = page.content.decode()
    assert page.status_code == 200
    assert "Dependency caches" in text and "5.0\xa0MB" in text and "1\xa0hour" in text
    assert cache.key[:12] in text and "Drop</button>" not in text
    r = carol.post(f"{PAGE}{cache.public_id}/drop/")
    assert r.status_code == 403 and "Only an admin" in r.content.decode()
    assert signed_in(cast.bob).post(f"{PAGE}{cache.public_id}/drop/").status_code == 403
    assert signed_in(cast.charlie).get(PAGE).status_code == 404
    assert signed_in(cast.charlie).post(f"{PAGE}{cache.public_id}/drop/").status_code == 404
    assert DepCache.objects.filter(pk=cache.pk).exists() and not volume_gone(cache.volume)

    alice = signed_in(cast.alice)
    assert "Drop</button>" in alice.get(PAGE).content.decode()
    busy = mounting_run(shop, cache)
    r = alice.post(f"{PAGE}{cache.public_id}/drop/", follow=True)
    assert "A run is using this cache right now" in r.content.decode()
    assert DepCache.objects.filter(pk=cache.pk).exists() and not volume_gone(cache.volume)
    Run.objects.filter(pk=busy.pk).update(state=RunState.SUCCEEDED)
    r = alice.post(f"{PAGE}{cache.public_id}/drop/", follow=True)
    assert r.redirect_chain == [(PAGE, 302)]
    assert "Dropped cache" in r.content.decode() and "No caches yet" in r.content.decode()
    assert not DepCache.objects.filter(pk=cache.pk).exists()
    # The page touches no engine (the cache may be another host's): its host's agent
    # takes the volume no cache row holds any more, at its reconcile.
    call_command("runner_agent", once=True)
    assert volume_gone(cache.volume)
    assert Activity.objects.get(verb="cache.dropped").user == cast.alice


def test_the_drop_form_needs_its_csrf_token(shop, cast, labelled_volumes):
    from django.test import Client

    cache = add_cache(shop, labelled_volumes(), 1024, 0)
    alice = Client(enforce_csrf_checks=True)
    alice.force_login(cast.alice)
    assert alice.post(f"{PAGE}{cache.public_id}/drop/").status_code == 403
    assert DepCache.objects.filter(pk=cache.pk).exists()


# -- eviction ----------------------------------------------------------------------------


def test_eviction_takes_the_least_recently_used_first_and_spares_one_in_use(
    shop, cast, labelled_volumes
):
    oldest_in_use = add_cache(shop, labelled_volumes(), 100, 4000)
    old = add_cache(shop, labelled_volumes(), 200, 3000)
    older_than_last = add_cache(shop, labelled_volumes(), 300, 2000)
    newest = add_cache(shop, labelled_volumes(), 50, 10)
    mounting_run(shop, oldest_in_use)

    evicted = caches.evict(max_bytes=400)  # 650 in all

    assert evicted == [old.public_id, older_than_last.public_id]
    assert set(DepCache.objects.values_list("pk", flat=True)) == {oldest_in_use.pk, newest.pk}
    assert volume_gone(old.volume) and volume_gone(older_than_last.volume)
    assert not volume_gone(oldest_in_use.volume) and not volume_gone(newest.volume)
    assert caches.evict(max_bytes=400) == []  # under the limit: nothing more goes


def test_eviction_takes_this_hosts_caches_alone(shop, cast, labelled_volumes):
    """Another host's caches are its own worker's to evict: however old, and however
    far over the limit, none of its rows goes here (their volumes are on its engine:
    not finding them here is no reason to drop them)."""
    theirs = add_cache(shop, labelled_volumes(), 500, 9000, host="b")
    mine = add_cache(shop, labelled_volumes(), 100, 10)
    assert caches.evict(max_bytes=0) == [mine.public_id]
    assert list(DepCache.objects.values_list("pk", flat=True)) == [theirs.pk]
    assert not volume_gone(theirs.volume)


# -- retention ---------------------------------------------------------------------------


def test_retention_removes_logs_and_artifacts_of_old_runs_and_says_so(agent, cast):
    old = agent.wait(agent.run("echo hello; echo data > report.txt"))
    recent = agent.wait(agent.run("echo still here; echo more > report.txt"))
    assert old["state"] == "succeeded" and [a["path"] for a in old["artifacts"]] == ["report.txt"]
    download = agent.get(f"/runs/{old['id']}/artifacts/report.txt")
    assert download.status_code == 200 and b"".join(download) == b"data\n"
    Run.objects.filter(public_id=old["id"]).update(
        finished_at=timezone.now() - timedelta(days=settings.RUN_RETENTION_DAYS, hours=1)
    )

    assert retention.apply() == [old["id"]]

    assert not any(p.exists() for p in logstore.paths(old["id"]))
    assert not artifacts.storage().exists(artifacts.folder_of(old["id"]))
    logs = agent.get(f"/runs/{old['id']}/logs?after=0").json()
    assert (logs["entries"], logs["complete"]) == ([], True)
    expired = agent.get(f"/runs/{old['id']}").json()
    assert expired["outputs_expired_at"] and expired["artifacts"] == []
    assert expired["state"] == "succeeded" and expired["commit"] == old["commit"]
    r = agent.get(f"/runs/{old['id']}/artifacts/report.txt")
    assert r.status_code == 404 and error_code(r) == "artifact_expired"
    listing = agent.get(f"/runs/{old['id']}/artifacts").json()
    assert listing["artifacts"] == [] and listing["expired_at"]

    # A run inside the retention window keeps its log and artifacts.
    assert agent.output(recent) == ["still here"]
    assert agent.get(f"/runs/{recent['id']}/artifacts/report.txt").status_code == 200
    assert retention.apply() == []


def test_cache_key_paths_are_read_as_a_person_writes_them(agent, shop, cast):
    """`./requirements.txt` and `vendor/` name the same entries as without the dot and
    the slash: setup, which sees only its key's entries, finds them."""
    write(
        shop,
        cast,
        {
            "vendor/pkg.py": "VERSION = 1\n",
            "workspace.toml": f"""[setup]
command = "{LS} . > /deps/seen && cat vendor/pkg.py >> /deps/seen"
cache_key = ["./requirements.txt", "vendor/"]
""",
        },
    )
    done = agent.wait(agent.run("cat /deps/seen"))
    assert done["state"] == "succeeded", (done, agent.log(done))
    assert agent.output(done) == ["requirements.txt", "vendor", "VERSION = 1"]
    assert done["setup"]["cache_key"] == ["requirements.txt", "vendor"]
