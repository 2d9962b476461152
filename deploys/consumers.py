"""WebSocket door onto a deploy request's state: `/ws/deploys/<id>` sends
`{"type": "state", state, reason}` at once and again at each move (approved, building,
releasing, live, failed, ...), for the review page to update itself; at a state no move
leaves it closes. Its access is the review page's (deploys.access: another team's
closes 4404), checked again while open. Every move signals the deploy's group
(DeployRequest.move); a signal is only a wake-up, the row is read again.
"""

from collections.abc import Mapping
from typing import Any

from deploys.access import access_deploy
from deploys.models import FINAL_STATES, DeployRequest, moves_group
from runs.consumers import StateConsumer


class DeployStateConsumer(StateConsumer):
    final_states = FINAL_STATES

    def authorise(self) -> DeployRequest:
        actor = self.scope_actor()
        deploy = access_deploy(actor, self.scope["url_route"]["kwargs"]["deploy_id"])
        self.access_of = (deploy.workspace.team_id, actor)
        return deploy

    def group_for(self, public_id: str) -> str:
        return moves_group(public_id)

    async def deploy_moved(self, message: dict[str, Any]) -> None:
        self.wake.set()

    def state_now(self) -> Mapping[str, Any] | None:
        return (
            DeployRequest.objects.filter(public_id=self.followed_id)
            .values("state", "reason")
            .first()
        )
