from django.urls import path

from previews import views

urlpatterns = [
    path("previews/<str:preview_id>/", views.preview_page, name="preview"),
    path("previews/<str:preview_id>/open", views.open_preview, name="preview-open"),
    path("previews/<str:preview_id>/<str:action>/", views.act, name="preview-act"),
    path("t/<slug:team>/w/<slug:slug>/previews/", views.start, name="workspace-preview-start"),
    path(
        "sessions/<str:session_id>/preview/",
        views.preview_of_session,
        name="session-preview",
    ),
]
