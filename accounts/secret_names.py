"""Secret names: a token may be limited to them, a workspace stores values under them, a
run is granted them. Each becomes an environment variable inside the sandbox."""

import re

from core.errors import Invalid

NAME = re.compile(r"^[A-Z_][A-Z0-9_]{0,63}$")


def check_name(name: str) -> str:
    if not NAME.match(name):
        raise Invalid(
            f"{name!r} is not a secret name: use upper-case letters, digits and _, "
            "starting with a letter or _ (it becomes an environment variable).",
            {"field": "name"},
        )
    return name
