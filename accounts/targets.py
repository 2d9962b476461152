"""Where an Activity row's target is seen: the path of its page, stored on the row
(`Activity.path`) when it is recorded and rendered absolute under APP_URL
(docs/security.md 38).

The pages belong to rooms above accounts; their URL names are the only thing known of
them here (no import goes up). A target with no page of its own (a token, a user, a
team) has no path; a page whose name is not routed (a trimmed URLconf) has none either.
"""

from django.urls import NoReverseMatch, reverse

# kind → (URL name, whether the page takes the target's id after team and workspace).
PAGES: dict[str, tuple[str, bool]] = {
    "workspace": ("workspace", False),
    "run": ("workspace-run", True),
    "session": ("workspace-session", True),
    "deploy": ("workspace-deploy", True),
    "contract-review": ("workspace-contract-review", True),
    "commit": ("workspace-commit", True),
    "cache": ("workspace-caches", False),
    "secret": ("workspace-secrets", False),
}


def path_of(team_slug: str, workspace: str, target: str) -> str:
    """The page of `target` ("run:<id>", ...) in `workspace` of the team, or ""."""
    kind, _, ident = target.partition(":")
    if kind == "preview" and ident:
        return _reverse("preview", [ident])
    page = PAGES.get(kind)
    if page is None or not workspace or not ident:
        return ""
    name, with_id = page
    return _reverse(name, [team_slug, workspace, ident] if with_id else [team_slug, workspace])


def _reverse(name: str, args: list[str]) -> str:
    try:
        return reverse(name, args=args)
    except NoReverseMatch:  # an id a URL cannot hold (a 200-character branch's start)
        return ""
