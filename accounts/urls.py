from django.contrib.auth.views import LogoutView
from django.urls import path

from accounts import views

urlpatterns = [
    path("signin/", views.SignInView.as_view(), name="login"),
    path("signout/", LogoutView.as_view(), name="logout"),
    path("invite/<str:secret>/", views.invitation_accept, name="invitation-accept"),
    path("", views.home, name="home"),
    path("t/<slug:team>/activity/", views.activity, name="activity"),
    path("t/<slug:team>/members/", views.members, name="members"),
    path("t/<slug:team>/members/new/", views.member_create, name="member-create"),
    path("t/<slug:team>/members/<str:username>/role/", views.member_role, name="member-role"),
    path("t/<slug:team>/members/<str:username>/remove/", views.member_remove, name="member-remove"),
    path("t/<slug:team>/policies/gvisor/", views.gvisor_policy, name="team-gvisor-policy"),
    path("t/<slug:team>/policies/approvals/", views.approvals_policy, name="team-approvals-policy"),
    path("t/<slug:team>/policies/egress/", views.egress_policy, name="team-egress-policy"),
    path("t/<slug:team>/invitations/", views.invitation_create, name="invitation-create"),
    path(
        "t/<slug:team>/invitations/<str:public_id>/revoke/",
        views.invitation_revoke,
        name="invitation-revoke",
    ),
    path("t/<slug:team>/tokens/", views.tokens, name="tokens"),
    path("t/<slug:team>/tokens/<str:public_id>/revoke/", views.token_revoke, name="token-revoke"),
]
