from collections.abc import Callable
from functools import wraps
from typing import Any

from django.conf import settings
from django.contrib import messages
from django.contrib.auth import login
from django.contrib.auth.decorators import login_required
from django.contrib.auth.views import LoginView
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from accounts import actions
from accounts.access import Actor, access_team, access_token
from accounts.forms import (
    AcceptInvitationForm,
    CreateUserForm,
    InviteForm,
    RoleForm,
    SignInForm,
    TokenForm,
)
from accounts.models import ApiToken, Invitation, Membership, Role, SignInThrottle
from accounts.secret_names import check_name
from core.errors import BerthError, Forbidden, Invalid, NotFound
from core.links import absolute


def team_page(need: str = Role.MEMBER) -> Callable[..., Callable[..., HttpResponse]]:
    """Resolve `team` from the URL into the signed-in user's membership, or 404/403."""

    def decorator(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
        @login_required
        @wraps(view)
        def wrapper(request: HttpRequest, team: str, *args: Any, **kwargs: Any) -> HttpResponse:
            try:
                membership = access_team(request.user, team, need)
            except NotFound as e:
                raise Http404(e.message) from e
            except Forbidden as e:
                return render(request, "error.html", {"message": e.message}, status=403)
            return view(request, membership, *args, **kwargs)

        return wrapper

    return decorator


class SignInView(LoginView):
    """Django's sign-in, with failed attempts throttled per username and per address."""

    form_class = SignInForm
    template_name = "accounts/login.html"
    redirect_authenticated_user = True

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        keys = self._keys(request)
        if any(SignInThrottle.is_locked(k) for k in keys):
            minutes = settings.SIGNIN_WINDOW_S // 60
            form = self.get_form()
            form.errors.clear()
            form.add_error(
                None,
                f"Too many failed sign-ins. Wait {minutes} minutes and try "
                "again, or ask an admin to reset your password.",
            )
            return self.render_to_response(self.get_context_data(form=form), status=429)
        response = super().post(request, *args, **kwargs)
        if request.user.is_authenticated:
            for k in keys:
                SignInThrottle.clear(k)
        else:
            for k in keys:
                SignInThrottle.record_failure(k)
        return response

    def _keys(self, request: HttpRequest) -> list[str]:
        username = request.POST.get("username", "").strip().lower()[:150]
        return [f"user:{username}", f"addr:{request.META.get('REMOTE_ADDR', '')}"]


@login_required
def home(request: HttpRequest) -> HttpResponse:
    memberships = Membership.objects.filter(user__username=request.user.get_username())
    membership = memberships.select_related("team").first()
    if membership is None:
        return render(request, "accounts/no_team.html")
    return redirect("team", team=membership.team.slug)


@team_page()
def activity(request: HttpRequest, membership: Membership) -> HttpResponse:
    rows = membership.team.activity.select_related("user", "token")[:200]
    return render(request, "accounts/activity.html", {"membership": membership, "rows": rows})


@team_page()
def members(request: HttpRequest, membership: Membership) -> HttpResponse:
    team = membership.team
    ctx = {
        "membership": membership,
        "members": team.memberships.select_related("user"),
        "invitations": [i for i in team.invitations.select_related("created_by") if i.is_open],
        "create_form": CreateUserForm(initial={"role": Role.MEMBER}),
        "invite_form": InviteForm(initial={"role": Role.MEMBER}),
        "roles": Role.choices,
        # Reviewers and admins: one who wrote a widening cannot approve it, so with no
        # more of them than the approvals needed, nobody's own widening can pass.
        "deciders": team.memberships.filter(role__in=(Role.REVIEWER, Role.ADMIN)).count(),
    }
    return render(request, "accounts/members.html", ctx)


@require_POST
@team_page(Role.ADMIN)
def member_create(request: HttpRequest, membership: Membership) -> HttpResponse:
    form = CreateUserForm(request.POST)
    if form.is_valid():
        try:
            user, password = actions.create_user(
                membership.team,
                form.cleaned_data["username"],
                form.cleaned_data["role"],
                Actor(membership.user),
                form.cleaned_data["password"] or None,
            )
        except BerthError as e:
            messages.error(request, e.message)
        else:
            if password:
                messages.success(request, f"Created {user}. Their password, shown once: {password}")
            else:
                messages.success(request, f"Added {user} to the team.")
    else:
        messages.error(request, "Give a username and a role.")
    return redirect("members", team=membership.team.slug)


@require_POST
@team_page(Role.ADMIN)
def member_role(request: HttpRequest, membership: Membership, username: str) -> HttpResponse:
    target = membership.team.memberships.filter(user__username=username).first()
    form = RoleForm(request.POST)
    if target is None:
        raise Http404("No such member.")
    if form.is_valid():
        try:
            actions.change_role(target, form.cleaned_data["role"], Actor(membership.user))
            messages.success(request, f"{username} is now {form.cleaned_data['role']}.")
        except BerthError as e:
            messages.error(request, e.message)
    return redirect("members", team=membership.team.slug)


@require_POST
@team_page(Role.ADMIN)
def member_remove(request: HttpRequest, membership: Membership, username: str) -> HttpResponse:
    target = membership.team.memberships.filter(user__username=username).first()
    if target is None:
        raise Http404("No such member.")
    try:
        actions.remove_member(target, Actor(membership.user))
        messages.success(request, f"Removed {username}; their tokens for this team are revoked.")
    except BerthError as e:
        messages.error(request, e.message)
    return redirect("members", team=membership.team.slug)


@require_POST
@team_page(Role.ADMIN)
def gvisor_policy(request: HttpRequest, membership: Membership) -> HttpResponse:
    required = request.POST.get("require_gvisor") == "on"
    actions.set_team_gvisor_policy(membership.team, Actor(membership.user), required)
    if required:
        messages.success(request, "Every run of every workspace of this team now uses gVisor.")
    else:
        messages.success(
            request,
            "The team no longer requires gVisor; workspaces that require it themselves still do.",
        )
    return redirect("members", team=membership.team.slug)


@require_POST
@team_page(Role.ADMIN)
def approvals_policy(request: HttpRequest, membership: Membership) -> HttpResponse:
    raw = request.POST.get("approvals_required", "")
    try:
        team = actions.set_approvals_required(
            membership.team,
            Actor(membership.user),
            int(raw) if raw.isdigit() else 0,
            request.POST.get("allow_self_approval") == "on",
        )
    except Invalid as e:
        messages.error(request, f"Not saved: {e.message}")
    else:
        messages.success(
            request,
            f"Each deploy now needs {team.approvals_required} "
            f"approval{'s' if team.approvals_required > 1 else ''}. "
            + (
                "Whoever asked for a deploy or a sandbox contract may approve it, confirming it."
                if team.allow_self_approval
                else "Nobody approves a deploy or a sandbox contract they asked for."
            ),
        )
    return redirect("members", team=membership.team.slug)


@require_POST
@team_page(Role.ADMIN)
def egress_policy(request: HttpRequest, membership: Membership) -> HttpResponse:
    entries = request.POST.get("egress_ceiling", "").replace(",", "\n").splitlines()
    try:
        team = actions.set_egress_ceiling(membership.team, Actor(membership.user), entries)
    except Invalid as e:
        messages.error(request, f"Egress ceiling not saved: {e.message}")
    else:
        messages.success(
            request,
            "Egress ceiling saved: "
            + (", ".join(team.egress_ceiling) or "no workspace of this team may reach anything")
            + ". Runs started from now on use it.",
        )
    return redirect("members", team=membership.team.slug)


@require_POST
@team_page(Role.ADMIN)
def invitation_create(request: HttpRequest, membership: Membership) -> HttpResponse:
    form = InviteForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Choose a role for the invitation.")
        return redirect("members", team=membership.team.slug)
    invitation, secret = actions.create_invitation(
        membership.team,
        form.cleaned_data["role"],
        Actor(membership.user),
        form.cleaned_data["note"],
    )
    # Under APP_URL, not the request's Host (a client's choice): the link is sent on
    # to someone else, who must land on Berth (docs/security.md 38).
    link = absolute(reverse("invitation-accept", args=[secret]))
    return render(
        request,
        "accounts/invitation_created.html",
        {"membership": membership, "invitation": invitation, "link": link},
    )


@require_POST
@team_page(Role.ADMIN)
def invitation_revoke(request: HttpRequest, membership: Membership, public_id: str) -> HttpResponse:
    invitation = membership.team.invitations.filter(public_id=public_id).first()
    if invitation is None:
        raise Http404("No such invitation.")
    actions.revoke_invitation(invitation, Actor(membership.user))
    messages.success(request, "Invitation revoked.")
    return redirect("members", team=membership.team.slug)


def invitation_accept(request: HttpRequest, secret: str) -> HttpResponse:
    invitation = Invitation.find_open(secret)
    if invitation is None:
        return render(
            request,
            "error.html",
            {"message": "This invitation link is used, expired or revoked. Ask for a new one."},
            status=404,
        )
    form = AcceptInvitationForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            user = actions.accept_invitation(
                secret, form.cleaned_data["username"], form.cleaned_data["password"]
            )
        except BerthError as e:
            form.add_error(None, e.message)
        else:
            login(request, user, backend="django.contrib.auth.backends.ModelBackend")
            return redirect("team", team=invitation.team.slug)
    return render(
        request, "accounts/invitation_accept.html", {"invitation": invitation, "form": form}
    )


@team_page()
def tokens(request: HttpRequest, membership: Membership) -> HttpResponse:
    team_tokens = ApiToken.objects.filter(team=membership.team).select_related("user")
    if not membership.is_admin:
        team_tokens = team_tokens.filter(user=membership.user)
    form = TokenForm(request.POST or None, initial={"expires_days": settings.TOKEN_DEFAULT_DAYS})
    if request.method == "POST" and form.is_valid():
        try:
            secret_names = [check_name(n) for n in dict.fromkeys(form.split("secret_names"))]
            token, secret = actions.create_token(
                membership.team,
                membership.user,
                form.cleaned_data["name"],
                form.cleaned_data["scopes"],
                Actor(membership.user),
                workspaces=form.split("workspaces"),
                secret_names=secret_names,
                expires_days=form.cleaned_data["expires_days"],
            )
        except BerthError as e:
            form.add_error(None, e.message)
        else:
            # The plaintext is rendered into this one response and never again.
            response = render(
                request,
                "accounts/token_created.html",
                {"membership": membership, "token": token, "secret": secret},
            )
            response["Cache-Control"] = "no-store"
            return response
    return render(
        request,
        "accounts/tokens.html",
        {"membership": membership, "tokens": team_tokens, "form": form},
        status=422 if form.errors else 200,
    )


@require_POST
@team_page()
def token_revoke(request: HttpRequest, membership: Membership, public_id: str) -> HttpResponse:
    try:
        token = access_token(membership, public_id)
    except NotFound as e:
        raise Http404(e.message) from e
    actions.revoke_token(token, Actor(membership.user))
    messages.success(request, f"Revoked {token.name}; it stopped working at once.")
    return redirect("tokens", team=membership.team.slug)
