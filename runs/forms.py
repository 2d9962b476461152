from typing import Any

from django import forms

from runs.models import Secret
from workspaces.models import Workspace


class RunForm(forms.Form):
    command = forms.CharField(max_length=100_000, strip=True)
    ref = forms.CharField(max_length=200, required=False, strip=True)
    runtime = forms.ChoiceField(
        required=False,
        choices=[("", "As workspace.toml says"), ("runc", "runc"), ("gvisor", "gVisor (runsc)")],
    )
    timeout_s = forms.IntegerField(required=False, min_value=1)
    # Choices are the workspace's secret names: a name typed here that is not one is a
    # form error, before `start_run` would refuse it.
    secrets = forms.MultipleChoiceField(required=False)
    commit_changes = forms.BooleanField(required=False)

    def __init__(self, workspace: Workspace, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        names = Secret.objects.filter(workspace=workspace).values_list("name", flat=True)
        self.fields["secrets"].choices = [(n, n) for n in names]  # type: ignore[attr-defined]


def rerun_env(env_names: list[str], data: Any) -> dict[str, str]:
    """The env values typed for a re-run (`env_<NAME>` fields). A blank box is left out,
    so the action names it as missing rather than run with an empty value by accident."""
    env = {}
    for name in env_names:
        value = data.get(f"env_{name}", "")
        if value != "":
            env[name] = value
    return env
