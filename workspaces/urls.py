from django.urls import path

from workspaces import branch_watch, edits, find_views, history_views, review_views, uploads, views

W = "t/<slug:team>/w/<slug:slug>/"

urlpatterns = [
    path("t/<slug:team>/", views.dashboard, name="team"),
    path(W, views.workspace, name="workspace"),
    path(W + "tree/", views.tree, name="workspace-tree"),
    path(W + "save/", edits.save, name="workspace-save"),
    path(W + "files/new/", edits.new_file, name="workspace-new-file"),
    path(W + "files/rename/", edits.rename_file, name="workspace-rename-file"),
    path(W + "files/delete/", edits.delete_file, name="workspace-delete-file"),
    path(W + "files/upload/", uploads.upload, name="workspace-upload"),
    path(W + "folders/rename/", edits.rename_folder, name="workspace-rename-folder"),
    path(W + "folders/delete/", edits.delete_folder, name="workspace-delete-folder"),
    path(W + "files/state/", branch_watch.branch_state, name="workspace-branch-state"),
    path(W + "files/all/", find_views.file_paths, name="workspace-file-paths"),
    path(W + "search/", find_views.search_page, name="workspace-search"),
    path(W + "branches/new/", edits.new_branch, name="workspace-new-branch"),
    path(W + "history/", history_views.history_page, name="workspace-history"),
    path(W + "commits/<str:sha>/", history_views.commit_page, name="workspace-commit"),
    path(W + "compare/", history_views.compare_page, name="workspace-compare"),
    path(W + "contract-reviews/", review_views.reviews_page, name="workspace-contract-reviews"),
    path(
        W + "contract-reviews/<str:review_id>/",
        review_views.review_page,
        name="workspace-contract-review",
    ),
    path(
        W + "contract-reviews/<str:review_id>/<str:action>/",
        review_views.decide,
        name="workspace-contract-review-decide",
    ),
    path(W + "settings/", views.settings_page, name="workspace-settings"),
    path(W + "settings/push-policy/", views.force_push_policy, name="workspace-push-policy"),
    path(W + "settings/gvisor-policy/", views.gvisor_policy, name="workspace-gvisor-policy"),
    path(W + "settings/delete/", views.delete_workspace, name="workspace-delete"),
]
