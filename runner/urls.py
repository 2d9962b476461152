from django.urls import path

from runner import views

W = "t/<slug:team>/w/<slug:slug>/"

urlpatterns = [
    path(W + "runs/", views.runs_page, name="workspace-runs"),
    path(W + "runs/<str:run_id>/", views.run_page, name="workspace-run"),
    path(W + "runs/<str:run_id>/cancel/", views.cancel, name="workspace-run-cancel"),
]
