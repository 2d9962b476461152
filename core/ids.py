"""Public ids: short random lowercase strings that are safe in a hostname.

Never auto-increment integers (no enumeration, no collisions between Berth
instances sharing one Docker engine).
"""

import base64
import secrets

ID_LENGTH = 12


def new_id(length: int = ID_LENGTH) -> str:
    """`length` characters of lowercase base32 (a-z, 2-7): 5 bits of randomness each."""
    raw = secrets.token_bytes((length * 5 + 7) // 8)
    return base64.b32encode(raw).decode().lower()[:length]
