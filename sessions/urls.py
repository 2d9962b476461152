from django.urls import path

from sessions import editor_views, terminal_views, views

W = "t/<slug:team>/w/<slug:slug>/"
S = W + "sessions/<str:session_id>/"

urlpatterns = [
    path(W + "sessions/", views.sessions_page, name="workspace-sessions"),
    path(S, views.session_page, name="workspace-session"),
    path(S + "exec/", views.exec_command, name="workspace-session-exec"),
    path(S + "terminals/", terminal_views.new_terminal, name="workspace-session-terminal"),
    path(W + "terminal/", terminal_views.workspace_terminal, name="workspace-terminal"),
    path(S + "execs/<str:exec_id>/", views.exec_item, name="workspace-session-exec-item"),
    # Before the actions' catch-all below.
    path(S + "marks/", editor_views.session_marks, name="workspace-session-marks"),
    path(S + "copy/", editor_views.session_copy, name="workspace-session-copy"),
    path(S + "<str:action>/", views.act, name="workspace-session-act"),
    path("t/<slug:team>/policies/sessions/", views.policy_page, name="team-session-policy"),
]
