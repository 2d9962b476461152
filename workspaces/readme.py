"""A folder's README.md, rendered as Markdown on the workspace page.

The README is the workspace's content, written by anyone with write access (a person, an
agent's token, a push), and it is shown on Berth's own origin to everyone of the team. So
it is rendered as untrusted input (docs/security.md, "A README on Berth's origin"):

1. Only a regular file named exactly README.md is read (a link is never followed), and
   only up to WORKSPACE_README_MAX_BYTES: past that the page says so and renders nothing.
2. markdown-it-py renders CommonMark with raw HTML disabled: `<script>` and any other tag
   in the text come out as text. Images are never loaded: each becomes its alt text
   marked as an image, so a README cannot make a viewer's browser fetch anything.
3. nh3 (ammonia) then keeps only the tags and attributes Markdown makes. Links keep
   http, https and mailto targets (with rel="noopener noreferrer nofollow"); a relative
   link is resolved against the README's folder and, when it is a valid workspace path
   (workspaces.paths), becomes a link to that path on the workspace page; anything else
   loses its target.
"""

import html
import posixpath
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit

import nh3
from django.conf import settings
from markdown_it import MarkdownIt
from markdown_it.token import Token
from markdown_it.utils import EnvType, OptionsDict

from core.errors import Invalid
from workspaces.gitstore import GitStore
from workspaces.paths import clean_path

NAME = "README.md"
TAGS = {
    *("p", "br", "hr", "h1", "h2", "h3", "h4", "h5", "h6", "blockquote", "pre", "code"),
    *("em", "strong", "s", "del", "ul", "ol", "li", "a", "span"),
    *("table", "thead", "tbody", "tr", "th", "td"),
}
ATTRIBUTES = {
    "a": {"href", "title"},
    "ol": {"start"},
    "th": {"style"},
    "td": {"style"},
    "span": {"class"},
}
SCHEMES = {"http", "https", "mailto"}
ALIGNMENTS = {"text-align:left", "text-align:center", "text-align:right"}
Link = Callable[[str], str]


@dataclass
class Readme:
    path: str
    html: str | None  # None when too large to show
    size: int


def _image_as_text(
    self: Any, tokens: list[Token], idx: int, options: OptionsDict, env: EnvType
) -> str:
    alt = self.renderInlineAsText(tokens[idx].children or [], options, env)
    return f'<span class="readme-image">[image: {html.escape(alt)}]</span>'


# The commonmark preset bounds nesting (maxNesting), so a pathological README costs at
# most its size times a small factor.
_markdown = MarkdownIt("commonmark", {"html": False, "linkify": False}).enable(
    ["table", "strikethrough"]
)
_markdown.add_render_rule("image", _image_as_text)


def find(store: GitStore, folder: str, entries: list[dict], link: Link) -> Readme | None:
    """The README.md among `entries` (the listing of `folder`), rendered; None if none.
    `link(path)` is the page URL of a workspace path."""
    entry = next((e for e in entries if e["name"] == NAME and e["type"] == "file"), None)
    if entry is None:
        return None
    path, size = entry["path"], entry["size"] or 0
    if size > settings.WORKSPACE_README_MAX_BYTES:
        return Readme(path, None, size)
    text = store.blob(entry["sha"].encode()).decode("utf-8", "replace")
    return Readme(path, render(text, folder, link), size)


def render(text: str, folder: str, link: Link) -> str:
    """Markdown to safe HTML (the module's steps 2 and 3)."""

    def keep(tag: str, attribute: str, value: str) -> str | None:
        if attribute == "href":
            return safe_href(value, folder, link)
        if attribute == "style":  # a table cell's alignment, nothing else
            return value if value in ALIGNMENTS else None
        if attribute == "class":
            return value if value == "readme-image" else None
        return value

    return nh3.clean(
        _markdown.render(text),
        tags=TAGS,
        attributes=ATTRIBUTES,
        attribute_filter=keep,
        url_schemes=SCHEMES,
        link_rel="noopener noreferrer nofollow",
        strip_comments=True,
    )


def safe_href(value: str, folder: str, link: Link) -> str | None:
    if value.startswith("#"):
        return value
    parts = urlsplit(value)
    if parts.scheme:
        return value if parts.scheme.lower() in SCHEMES else None
    if parts.netloc or not parts.path:
        return None
    target = unquote(parts.path)
    joined = target.lstrip("/") if target.startswith("/") else posixpath.join(folder, target)
    normal = posixpath.normpath(joined)
    if normal in ("", "."):
        return link("")
    try:
        return link(clean_path(normal))
    except Invalid:
        return None
