from django import forms

from workspaces import starters

SHA = r"^[0-9a-f]{40}$"


class NewWorkspaceForm(forms.Form):
    name = forms.CharField(max_length=100)
    slug = forms.CharField(
        max_length=30,
        required=False,
        help_text="In URLs and the clone address; empty makes one from the name.",
    )
    template = forms.ChoiceField(
        required=False,
        widget=forms.RadioSelect,
        initial="",
        choices=[("", "Empty — one first commit, no files")]
        + [(name, f"{name} — {starters.DESCRIPTIONS[name]}") for name in starters.NAMES],
    )

    # The action names fields its own way ("workspace slug"); map back to form fields.
    ERROR_FIELDS = {
        "name": "name",
        "slug": "slug",
        "workspace slug": "slug",
        "template": "template",
    }


class FileActionForm(forms.Form):
    """New file, rename and delete: each is one commit on `branch`, made only if the
    branch is still at `base_commit` (the commit the page showed)."""

    path = forms.CharField(max_length=4096)
    to = forms.CharField(max_length=4096, required=False)
    branch = forms.CharField(max_length=200)
    base_commit = forms.RegexField(SHA)
    message = forms.CharField(max_length=10_000, required=False)


class NewBranchForm(forms.Form):
    name = forms.CharField(max_length=200)
    from_ref = forms.CharField(max_length=200)


class DeleteWorkspaceForm(forms.Form):
    confirm = forms.CharField(max_length=30, required=False)
