from django import forms
from django.contrib.auth.forms import AuthenticationForm

from accounts.models import ApiToken, Role


class SignInForm(AuthenticationForm):
    pass


class CreateUserForm(forms.Form):
    username = forms.CharField(max_length=150)
    role = forms.ChoiceField(choices=Role.choices)
    password = forms.CharField(
        required=False,
        widget=forms.PasswordInput,
        help_text="Leave empty to generate one; it is shown once.",
    )


class InviteForm(forms.Form):
    role = forms.ChoiceField(choices=Role.choices)
    note = forms.CharField(
        max_length=100, required=False, help_text="Who it is for, to recognise it in the list."
    )


class AcceptInvitationForm(forms.Form):
    username = forms.CharField(max_length=150)
    password = forms.CharField(widget=forms.PasswordInput)


class RoleForm(forms.Form):
    role = forms.ChoiceField(choices=Role.choices)


class TokenForm(forms.Form):
    name = forms.CharField(max_length=100, help_text="What uses it, e.g. “my laptop agent”.")
    scopes = forms.MultipleChoiceField(
        choices=[(s, s) for s in ApiToken.SCOPES], widget=forms.CheckboxSelectMultiple
    )
    workspaces = forms.CharField(
        required=False, help_text="Comma-separated workspace slugs; empty means all."
    )
    secret_names = forms.CharField(
        required=False, help_text="Comma-separated secret names it may grant to runs."
    )
    expires_days = forms.IntegerField(min_value=1, initial=30)

    def split(self, field: str) -> list[str]:
        return [v.strip() for v in self.cleaned_data[field].split(",") if v.strip()]
