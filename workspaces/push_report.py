"""What a `git push`'s answer says once its refs moved, as progress lines before the
closing flush (git prints them as `remote: …`, as it does a post-receive hook's
output): each session following a pushed branch, with its page, and each pushed branch
whose `workspace.toml` asks for more than the approved sandbox contract, with the page
of the review it waits for. A remote: line is plain text read wherever the pusher
runs, so every link in it is a full URL under APP_URL (docs/security.md 38).
"""

from dulwich.protocol import SIDE_BAND_CHANNEL_PROGRESS, pkt_line

from accounts.access import Actor
from core.links import absolute
from workspaces import config as workspace_config
from workspaces import contract, reviews
from workspaces.models import Workspace
from workspaces.signals import Follower
from workspaces.store import open_store

LINE_MAX = 900  # within the 1000-byte packets of the older side-band too


def follower_line(f: Follower) -> str:
    return f"{f.kind} {f.id}: {f.message}" + (f" ({absolute(f.url)})" if f.url else "")


def held_contract(workspace: Workspace, actor: Actor, branch: str, sha: str) -> str | None:
    """The line for a pushed branch whose contract is held, or None. The review is
    opened now, as the branch's first run would open it (reviews.admit: once per
    contract), so a reviewer can decide it before anyone asks to run it."""
    with open_store(workspace) as store:
        text = contract.text_at(store, sha)
    try:
        config = workspace_config.parse(text) if text else workspace_config.WorkspaceConfig()
    except workspace_config.ConfigError:
        return None  # the branch's first run names the broken line
    try:
        reviews.admit(
            workspace,
            actor,
            contract.asked(config),
            commit=sha,
            ref=branch,
            asked_for=f"a push to {branch}",
        )
    except reviews.ContractHeld as e:
        widened = ", ".join(w["key"] for w in e.details.get("widened", []))
        verb = "was rejected" if e.code == "contract_change_rejected" else "waits for review"
        return (
            f"contract {e.details['review']}: workspace.toml on {branch} asks for more than "
            f"the approved sandbox contract ({widened}); it {verb}: runs, previews and "
            f"sessions of it are refused until a reviewer or admin approves it at "
            f"{e.details['url']}"
        )
    return None


def with_report(content: bytes, lines: list[str]) -> bytes:
    """The push's answer with `lines` as progress before its closing flush."""
    if not lines or not content.endswith(b"0000"):
        return content
    packets = [
        pkt_line(bytes([SIDE_BAND_CHANNEL_PROGRESS]) + line[:LINE_MAX].encode() + b"\n")
        for line in lines
    ]
    return content[:-4] + b"".join(packets) + b"0000"
