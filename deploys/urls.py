from django.urls import path

from deploys import views

W = "t/<slug:team>/w/<slug:slug>/"

urlpatterns = [
    path(W + "deploys/", views.deploys_page, name="workspace-deploys"),
    path(W + "deploys/new/", views.ask, name="workspace-deploy-request"),
    path(W + "deploys/<str:deploy_id>/", views.review_page, name="workspace-deploy"),
    path(W + "deploys/<str:deploy_id>/<str:action>/", views.decide, name="workspace-deploy-decide"),
    path(W + "releases/visibility/", views.visibility, name="workspace-release-visibility"),
    path(W + "releases/<int:number>/rollback/", views.rollback, name="workspace-release-rollback"),
]
