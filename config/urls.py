from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.urls import include, path, re_path

from config.api import api
from config.internal_api import internal
from core.errors import error_body
from workspaces.git_http import git_http

urlpatterns = [
    path("api/v1/", api.urls),
    path("internal/v1/", internal.urls),
    re_path(
        r"^git/(?P<team>[a-z0-9-]+)/(?P<slug>[a-z0-9-]+?)(?:\.git)?/(?P<rest>.*)$",
        git_http,
        name="git-http",
    ),
    path("healthz", lambda request: JsonResponse({"ok": True}), name="healthz"),
    # Before accounts: the team dashboard at /t/<team>/ is the workspaces list.
    path("", include("workspaces.urls")),
    path("", include("runs.urls")),
    path("", include("sessions.urls")),
    path("", include("previews.urls")),
    path("", include("deploys.urls")),
    path("", include("accounts.urls")),
]


def _wants_json(request: HttpRequest) -> bool:
    return request.path.startswith(("/api/", "/internal/", "/mcp", "/git/"))


def handler404(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    if _wants_json(request):
        return JsonResponse(error_body("not_found", "No such resource."), status=404)
    return render(request, "error.html", {"message": "Not found."}, status=404)


def handler500(request: HttpRequest) -> HttpResponse:
    if _wants_json(request):
        return JsonResponse(
            error_body(
                "internal_error", "Something went wrong on our side; it has been logged. Try again."
            ),
            status=500,
        )
    return render(request, "error.html", {"message": "Something went wrong."}, status=500)


def handler400(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    if _wants_json(request):
        return JsonResponse(error_body("bad_request", "The request could not be read."), status=400)
    return render(request, "error.html", {"message": "Bad request."}, status=400)
