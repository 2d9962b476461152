"""Every link Berth hands an agent is one it can follow from wherever it runs
(docs/security.md 38): a full URL under APP_URL in API and MCP answers, in a refusal's
review, in `git push`'s remote: lines and in Activity, which stores paths and renders
them under the APP_URL of the moment.

No sandbox runs here: a link is in the answer whatever the state (the rows are queued
for a worker that is not there), so these tests need no engine."""

import asyncio
import json
import re
import urllib.request
from typing import Any
from urllib.parse import urlsplit

import pytest
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.test import Client

from accounts.access import Actor
from accounts.models import Activity
from config.asgi import application
from tests.support import servers
from tests.support.api import Api, assert_error
from tests.support.git import git
from tests.support.git import url as git_url
from tests.support.logs import session_cookie
from tests.support.mcp import Agent, connect
from workspaces import actions as workspace_actions
from workspaces.models import ContractReview

ELSEWHERE = "https://berth.example.test:8443"
WIDENED = "[sandbox]\nmemory_mb = 2048\n"
SCOPES = ["workspace:read", "workspace:write", "run", "preview", "deploy:request"]


def links(answer: Any, key: str = "") -> list[tuple[str, str]]:
    """Every (key, value) of an answer whose key names a link (`url`, `log_url`, ...)."""
    if isinstance(answer, dict):
        return [pair for k, v in answer.items() for pair in links(v, k)]
    if isinstance(answer, list):
        return [pair for item in answer for pair in links(item, key)]
    if isinstance(answer, str) and (key == "url" or key.endswith("_url")):
        return [(key, answer)]
    return []


def assert_under(base: str, answer: Any) -> int:
    """Every link of the answer is a full URL; Berth's own are under `base`, a
    preview's or a release's on its own host. The number of links seen."""
    found = links(answer)
    for key, value in found:
        host = urlsplit(value).hostname or ""
        if host.endswith((f".{settings.PREVIEW_DOMAIN}", f".{settings.APPS_DOMAIN}")):
            assert urlsplit(value).scheme == "http", (key, value)
        else:
            assert value.startswith(base + "/"), (key, value)
    return len(found)


@pytest.fixture
def shop(cast):
    return workspace_actions.create_workspace(
        cast.team_a, Actor(cast.carol), "Shop", "shop", "python-http"
    )


def test_api_answers_and_a_refusal_link_under_app_url(client, cast, shop, settings):
    settings.APP_URL = ELSEWHERE
    _, secret = cast.token(cast.carol, SCOPES)
    api = Api(client, secret)
    seen = 0
    workspace = api.get("/workspaces/shop").json()
    assert workspace["git_url"] == f"{ELSEWHERE}/git/team-a/shop.git"
    assert workspace["web_url"] == f"{ELSEWHERE}/t/team-a/w/shop/"

    run = api.post("/workspaces/shop/runs", {"command": "true"})
    assert run.status_code == 202, run.content
    assert run.json()["log_url"] == f"{ELSEWHERE}/api/v1/runs/{run.json()['id']}/logs"
    preview = api.post("/workspaces/shop/previews", {})
    assert preview.status_code in (201, 202), preview.content
    session = api.post("/workspaces/shop/sessions", {})
    assert session.status_code == 201, session.content
    sid = session.json()["id"]
    assert session.json()["web_url"] == f"{ELSEWHERE}/t/team-a/w/shop/sessions/{sid}/"
    deploy = api.post("/workspaces/shop/deploys", {"note": "go"})
    assert deploy.status_code == 201, deploy.content
    for answer in (workspace, run.json(), preview.json(), session.json(), deploy.json()):
        seen += assert_under(ELSEWHERE, answer)
    assert seen >= 7
    assert deploy.json()["url"] == f"{ELSEWHERE}/t/team-a/w/shop/deploys/{deploy.json()['id']}/"

    # A refusal names its review as a full URL, in its details and its message.
    assert api.put("/workspaces/shop/files/workspace.toml", {"content": WIDENED}).status_code == 200
    error = assert_error(
        api.post("/workspaces/shop/runs", {"command": "true"}), 409, "contract_change_pending"
    )
    review = f"{ELSEWHERE}/t/team-a/w/shop/contract-reviews/{error['details']['review']}/"
    assert error["details"]["url"] == review and review in error["message"]
    seen_review = api.get(f"/contract-reviews/{error['details']['review']}").json()
    assert seen_review["url"] == review and review in seen_review["next"]


def test_the_pages_clone_url_is_under_app_url_not_the_requests_host(
    cast, shop, signed_in, settings
):
    settings.APP_URL = ELSEWHERE
    carol = signed_in(cast.carol)
    for page in ("/t/team-a/w/shop/", "/t/team-a/w/shop/settings/", "/t/team-a/w/shop/history/"):
        r = carol.get(page, HTTP_HOST="127.0.0.1")
        assert r.status_code == 200, (page, r.status_code)
        text = r.content.decode()
        assert f"git clone {ELSEWHERE}/git/team-a/shop.git" in text or (
            f"<code>{ELSEWHERE}/git/team-a/shop.git</code>" in text
        ), page
        assert "//127.0.0.1/git/" not in text, page


def test_an_invitation_link_is_under_app_url_and_lets_its_holder_join(signed_in, cast, settings):
    settings.APP_URL = ELSEWHERE
    r = signed_in(cast.alice).post(
        "/t/team-a/invitations/", {"role": "member", "note": "for erin"}, HTTP_HOST="127.0.0.1"
    )
    assert r.status_code == 200, r.content
    (link,) = re.findall(r'value="([^"]*/invite/[^"]+)"', r.content.decode())
    assert link.startswith(f"{ELSEWHERE}/invite/"), link
    # The path under APP_URL is the invitation's: erin joins by it.
    path = link.removeprefix(ELSEWHERE)
    joined = Client().post(path, {"username": "erin", "password": "erin-password-1"})
    assert joined.status_code == 302 and joined["Location"] == "/t/team-a/"


def test_activity_stores_paths_and_renders_them_under_the_app_url_of_the_moment(
    client, cast, shop, settings
):
    settings.APP_URL = ELSEWHERE
    _, secret = cast.token(cast.carol, SCOPES)
    run = Api(client, secret).post("/workspaces/shop/runs", {"command": "true"}).json()
    row = Activity.objects.get(verb="run.started", target=f"run:{run['id']}")
    path = f"/t/team-a/w/shop/runs/{run['id']}/"
    assert row.path == path  # stored as a path: APP_URL may change later

    carol = Client()
    carol.force_login(cast.carol)
    page = carol.get("/t/team-a/activity/").content.decode()
    assert f'<a href="{ELSEWHERE}{path}">run:{run["id"]}</a>' in page
    workspace_page = carol.get("/t/team-a/w/shop/").content.decode()
    assert f'href="{ELSEWHERE}{path}"' in workspace_page

    settings.APP_URL = "https://moved.example.test"
    page = carol.get("/t/team-a/activity/").content.decode()
    assert f'<a href="https://moved.example.test{path}">' in page


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("fresh_channel_layer")
def test_the_activity_socket_sends_each_rows_link_under_app_url(cast, shop, client, settings):
    settings.APP_URL = ELSEWHERE
    _, secret = cast.token(cast.carol, SCOPES)
    run = Api(client, secret).post("/workspaces/shop/runs", {"command": "true"}).json()
    cookie = session_cookie(cast.carol)

    async def entries() -> list[dict]:
        ws = WebsocketCommunicator(
            application,
            "/ws/t/team-a/activity?after=0",
            headers=[
                (b"origin", b"http://localhost"),
                (b"host", b"localhost"),
                (b"cookie", cookie.encode()),
            ],
        )
        connected, _ = await ws.connect(timeout=5)
        assert connected
        try:
            message = await ws.receive_json_from(timeout=10)
        finally:
            await ws.disconnect()
        assert message["type"] == "entries"
        return message["entries"]

    told = {e["target"]: e["url"] for e in asyncio.run(entries())}
    assert told[f"run:{run['id']}"] == f"{ELSEWHERE}/t/team-a/w/shop/runs/{run['id']}/"
    assert told["workspace:shop"] == f"{ELSEWHERE}/t/team-a/w/shop/"


def test_mcp_answers_link_under_app_url(berth_server, cast, shop):
    # The server is a daphne of its own, with the APP_URL of this process's environment.
    base = settings.APP_URL
    _, secret = cast.token(cast.carol, SCOPES)

    async def body(agent: Agent) -> list[Any]:
        answers: list[Any] = [await agent("list_workspaces")]
        answers.append(await agent("run_command", workspace="shop", command="true", wait_seconds=0))
        answers.append(await agent("start_preview", workspace="shop", wait_seconds=0))
        answers.append(await agent("request_deploy", workspace="shop", note="go"))
        widen = {"op": "write", "path": "workspace.toml", "content": WIDENED}
        await agent("write_files", workspace="shop", changes=[widen], message="more memory")
        error = await agent.error("run_command", workspace="shop", command="true", wait_seconds=0)
        assert error["code"] == "contract_change_pending", error
        answers.append(error)
        answers.append(await agent("get_contract_review", id=error["details"]["review"]))
        return answers

    answers = connect(berth_server, secret, body)
    assert sum(assert_under(base, a) for a in answers[:4]) >= 6
    error, review = answers[4:]
    page = f"{base}/t/team-a/w/shop/contract-reviews/{error['details']['review']}/"
    assert error["details"]["url"] == page and page in error["message"]
    assert review["url"] == page
    assert answers[3]["review_url"].startswith(f"{base}/t/team-a/w/shop/deploys/")


def test_a_pushed_widening_names_its_review_as_a_full_url(berth_server, cast, shop, tmp_path):
    _, secret = cast.token(cast.carol, SCOPES)
    work = tmp_path / "work"
    git("clone", "-q", git_url(berth_server, secret), str(work), cwd=tmp_path)
    (work / "workspace.toml").write_text(WIDENED)
    git("commit", "-qam", "more memory", cwd=work)
    pushed = git("push", "origin", "main", cwd=work)
    head = git("rev-parse", "HEAD", cwd=work).stdout.strip()
    review = ContractReview.objects.get(workspace=shop, commit=head)
    page = f"{settings.APP_URL}/t/team-a/w/shop/contract-reviews/{review.public_id}/"
    line = next(line for line in pushed.stderr.splitlines() if line.startswith("remote: contract"))
    assert line.rstrip().endswith(page), pushed.stderr  # git pads remote: lines
    assert "memory_mb" in line and "workspace.toml on main" in line
    assert review.asked_for == "a push to main"
    # Pushed again unchanged: the same review, named again.
    (work / "README.md").write_text("more\n")
    git("add", "README.md", cwd=work)
    git("commit", "-qm", "readme", cwd=work)
    again = git("push", "origin", "main", cwd=work)
    assert page in again.stderr
    assert ContractReview.objects.filter(workspace=shop, state="pending").count() == 1


def test_an_agent_follows_a_link_of_an_mcp_answer(berth_server, cast, shop):
    """On a Berth whose APP_URL is where it serves, the link in an answer is one the
    agent fetches as it is, with nothing of the answer's origin to add."""
    _, secret = cast.token(cast.carol, SCOPES)
    port = servers.free_port()
    with servers.daphne(
        env={"APP_URL": f"http://localhost:{port}"},
        port=port,
        gateway_port=servers.free_port(),
        name="daphne-links",
    ) as server:

        async def body(agent: Agent) -> dict:
            return await agent("run_command", workspace="shop", command="true", wait_seconds=0)

        run = connect(server, secret, body)
        assert run["log_url"] == f"{server.url}/api/v1/runs/{run['id']}/logs"
        asked = urllib.request.Request(
            run["log_url"], headers={"Authorization": f"Bearer {secret}"}
        )
        with urllib.request.urlopen(asked, timeout=30) as r:
            assert r.status == 200 and "entries" in json.loads(r.read())
