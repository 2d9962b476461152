"""What runs under an approval that lapsed (workspaces.reviews: superseded by a
reviewer's narrower contract, or revoked) and is no longer admitted is stopped.

The choice (docs/security.md 29): a reviewer who narrows or revokes means "not any
more", and a session, a preview or a release can run for days; keeping the old proxy
policy until it stops would keep the wider egress open for as long as nobody stops it.
So each is checked as a new ask would be, and stopped unless today's approvals admit
it; one that asks for no more than they allow goes on. Each app stops its own
(sessions, previews: their receivers of `contract_lapsed`); runs and release builds
are stopped here.
"""

from typing import Any

from django.db import transaction

from runs.actions import load_config, recorded_contract
from runs.models import ACTIVE_STATES, Purpose, Run, RunState
from runs.outcomes import describe
from workspaces import reviews
from workspaces.models import Workspace

REASON = "contract_lapsed"


def contract_of(run: Run) -> dict[str, Any]:
    """The contract a live run asked for, as recorded (a release runs the image its
    build made: the image asked for is its commit's)."""
    network = run.network
    values = recorded_contract(run, list(network.get("requested", network.get("egress", []))))
    if run.purpose == Purpose.RELEASE:
        values["image"] = load_config(run.workspace, run.commit).sandbox.image
    return values


def unadmitted(workspace: Workspace, review_ids: list[int], purposes: tuple[str, ...]) -> list[Run]:
    """The live runs of `purposes` in the workspace that today's approvals would not
    admit. Every live one, not only those recorded under a lapsed review (`review_ids`,
    kept for the receivers' logs): a release's process records none (its build was
    admitted), and a run admitted against the creation-time baseline (Berth's default
    limits) is recorded under that approval however a narrowing compares with it."""
    live = Run.objects.filter(
        workspace=workspace,
        purpose__in=purposes,
        state__in=ACTIVE_STATES,
    ).select_related("workspace__team")
    return [run for run in live if not reviews.admits(workspace, contract_of(run))]


def on_contract_lapsed(
    sender: object, workspace: Workspace, review_ids: list[int], who: str, **_: object
) -> None:
    """Runs and release builds: stopped, their state saying why."""
    for run in unadmitted(workspace, review_ids, (Purpose.RUN, Purpose.BUILD)):
        with transaction.atomic():
            run.ask_to_stop(REASON, who)
            if run.state in (RunState.QUEUED, RunState.PREPARING):
                state, message = describe(REASON, who=who)
                run.finish(state, REASON, message)
