from django.urls import path

from runs import cache_views, run_views, secrets_views, usage_views, views

W = "t/<slug:team>/w/<slug:slug>/"

urlpatterns = [
    path("t/<slug:team>/usage/", usage_views.usage_page, name="usage"),
    path(W + "runs/", views.runs_page, name="workspace-runs"),
    path(W + "runs/<str:run_id>/", views.run_page, name="workspace-run"),
    path(W + "runs/<str:run_id>/cancel/", views.cancel, name="workspace-run-cancel"),
    path(W + "runs/<str:run_id>/rerun/", run_views.rerun, name="workspace-run-rerun"),
    path(
        W + "runs/<str:run_id>/commit-changes/",
        run_views.commit_changes,
        name="workspace-run-commit-changes",
    ),
    path(
        W + "runs/<str:run_id>/artifacts/<path:path>",
        run_views.artifact,
        name="workspace-run-artifact",
    ),
    path(W + "caches/", cache_views.caches_page, name="workspace-caches"),
    path(W + "caches/<str:cache_id>/drop/", cache_views.drop, name="workspace-cache-drop"),
    path(W + "secrets/", secrets_views.secrets_page, name="workspace-secrets"),
    path(
        W + "secrets/<str:name>/delete/",
        secrets_views.delete_secret,
        name="workspace-secret-delete",
    ),
]
