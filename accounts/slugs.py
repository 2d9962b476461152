import re

from core.errors import Invalid

SLUG_RE = re.compile(r"^[a-z0-9](?:[a-z0-9]|-(?=[a-z0-9])){0,29}$")


def validate_slug(value: str, what: str = "slug", reserved: tuple[str, ...] = ()) -> str:
    """Lowercase letters, digits and single hyphens, starting and ending with a letter
    or digit, 1–30 characters: safe in a URL path and in a hostname label."""
    if not isinstance(value, str) or not SLUG_RE.match(value):
        raise Invalid(
            f"The {what} {value!r} is not valid: use 1–30 lowercase letters, digits and "
            "single hyphens, starting and ending with a letter or digit.",
            {"field": what},
            code="invalid_slug",
        )
    if value in reserved:
        raise Invalid(
            f"The {what} {value!r} is reserved; choose another.",
            {"field": what},
            code="invalid_slug",
        )
    return value
