"""Signals accounts sends to the apps above it, which it may not import."""

import logging

from django.dispatch import Signal

log = logging.getLogger(__name__)

# Sent after the commit that revoked a token (kwargs: team_id, user_id, token_id) or
# removed a member (token_id None: the person's every token in the team went with it):
# what caches a holder's access (the preview gateways' viewer answers) drops it here.
access_lost = Signal()


def announce_access_lost(team_id: int, user_id: int, token_id: int | None) -> None:
    """Tell the receivers; a failure is logged, never allowed to undo the revocation."""
    for receiver, result in access_lost.send_robust(
        None, team_id=team_id, user_id=user_id, token_id=token_id
    ):
        if isinstance(result, Exception):
            log.error("%s failed after access was lost: %r", receiver, result)
