from typing import Any

from django import forms

from sessions.policy import FLOORS


class SessionForm(forms.Form):
    """Open a session: the branch it follows (one of the workspace's), its runtime."""

    ref = forms.ChoiceField(required=False, label="Branch")
    runtime = forms.ChoiceField(
        required=False,
        choices=[("", "As workspace.toml says"), ("runc", "runc"), ("gvisor", "gVisor (runsc)")],
    )

    def __init__(self, branches: list[str], *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["ref"].choices = [(b, b) for b in branches]  # type: ignore[attr-defined]


class PolicyForm(forms.Form):
    """A team's session maxima; their ceilings are checked by sessions.policy, which
    names the operator's."""

    max_sessions = forms.IntegerField(min_value=FLOORS["max_sessions"])
    idle_freeze_s = forms.IntegerField(min_value=FLOORS["idle_freeze_s"])
    idle_stop_s = forms.IntegerField(min_value=FLOORS["idle_stop_s"])
    lifetime_s = forms.IntegerField(min_value=FLOORS["lifetime_s"])
    retention_s = forms.IntegerField(min_value=FLOORS["retention_s"])
