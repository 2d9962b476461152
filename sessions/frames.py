"""An exec's frames as the exec channel writes them (sandbox/in_image/berth_session.py).

    \\x1e<exec id> <kind> <seq> <mac> <data>

Kinds: o/e a piece of a stdout/stderr line, O/E whole stdout/stderr lines (several, each
ending in a newline: one frame per read of a flood, split back into one entry a line),
x the exec's end.

Each exec gets a key of its own, derived here from the server's secret and the exec's
id, handed to the channel with the exec and never stored. The channel numbers the
exec's frames from 1 and signs each. A line a process in the sandbox writes to the
channel's stdout itself (gVisor lets the sandbox user open /proc/1/fd/1 for writing,
though not for reading, nor the channel's memory) carries no valid mac, and a signed
frame written again repeats a number already taken: neither is anybody's output
(docs/security.md, 18).
"""

import base64
import hashlib
import hmac
from dataclasses import dataclass

from core import keys

MARK = b"\x1e"
KINDS = (b"o", b"e", b"O", b"E", b"x")
LINES = {b"o": "stdout", b"e": "stderr", b"O": "stdout", b"E": "stderr"}
# The channel's own lines, signed with the channel's key once it has one
# (sessions.channel.channel_key): no exec's id, those are alphanumeric.
OWN_ID = "_"
MAC_BYTES = 16
# This host's own secret (core.keys.host_key): its session channels' keys and its exec
# frames' keys both derive from it (sessions.channel), each under its own label.
HOST_SECRET_STEM = "session-channel"


def frame_key(exec_id: str) -> bytes:
    """The exec's key: only its host can make it (from the host's own channel secret,
    core.keys.host_key; the same agent makes and checks it)."""
    secret = keys.host_key(keys.host_key_file(HOST_SECRET_STEM))
    return hmac.new(secret, b"berth.sessions.frames " + exec_id.encode(), "sha256").digest()


def mac_of(key: bytes, head: bytes, data: bytes) -> bytes:
    """As the channel signs: `head` is b"<exec id> <kind> <seq> "."""
    return base64.b64encode(hmac.new(key, head + data, hashlib.sha256).digest()[:MAC_BYTES])


@dataclass(frozen=True)
class Frame:
    exec_id: str
    kind: bytes
    seq: int
    mac: bytes
    data: bytes

    def signed_by(self, key: bytes) -> bool:
        head = b"%s %s %d " % (self.exec_id.encode(), self.kind, self.seq)
        return hmac.compare_digest(mac_of(key, head, self.data), self.mac)


def parse(line: bytes) -> Frame | None:
    """A frame's parts (after its MARK), or None for a line that is no signed frame."""
    parts = line.rstrip(b"\n").split(b" ", 4)
    if len(parts) != 5:
        return None
    exec_id, kind, seq, mac, data = parts
    named = exec_id.isalnum() or exec_id == OWN_ID.encode()
    if not named or kind not in KINDS or not seq.isdigit() or len(seq) > 18:
        return None
    return Frame(exec_id.decode("ascii"), kind, int(seq), mac, data)
