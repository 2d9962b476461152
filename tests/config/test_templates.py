"""Every template of Berth's own is free of a mistake that prints on the page: Django's
`{# … #}` comment ends at the end of its line, so one spread over lines is shown as text
(every run page ended with one); a comment of several lines needs {% comment %}."""

from pathlib import Path

from django.conf import settings


def own_templates() -> list[Path]:
    roots = [Path(settings.BASE_DIR) / "templates"]
    roots += [p for p in Path(settings.BASE_DIR).glob("*/templates") if p.is_dir()]
    return sorted(p for root in roots for p in root.rglob("*.html"))


def test_no_template_has_a_comment_of_several_lines_in_braces():
    templates = own_templates()
    assert len(templates) > 30  # the scan found the templates
    unclosed = [
        f"{path.relative_to(settings.BASE_DIR)}:{number}"
        for path in templates
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if "{#" in line and "#}" not in line.split("{#", 1)[1]
    ]
    assert unclosed == []
