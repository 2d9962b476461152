"""The exec channel's orphan reaper (sandbox/in_image/berth_session.reap_orphans) never
takes an exec's own child: one that exited before its pid was recorded was reaped as an
orphan, and asyncio then reported its exit as 255 (an `echo hi` exec ended
`exit_nonzero` under load). The module as baked into the image, run in a process of its
own (its reaper waits on any child), with the reaper looking at every turn of the loop
rather than once a second, so the window is hit at once where it is open."""

import json
import subprocess
import sys
from pathlib import Path

IN_IMAGE = Path(__file__).resolve().parents[2] / "sandbox" / "in_image"

SCRIPT = """
import asyncio, importlib.util, io, json, sys
sys.path.insert(0, sys.argv[1])
spec = importlib.util.spec_from_file_location("berth_session", sys.argv[1] + "/berth_session.py")
channel = importlib.util.module_from_spec(spec)
spec.loader.exec_module(channel)
channel.OUT = io.BytesIO()
channel.REAP_EVERY_S = 0
# A loaded machine: the channel resumes after its child has already exited.
spawn = asyncio.create_subprocess_exec

async def slow_spawn(*args, **kwargs):
    proc = await spawn(*args, **kwargs)
    await asyncio.sleep(0.02)
    return proc

channel.asyncio.create_subprocess_exec = slow_spawn

async def main():
    reaper = asyncio.ensure_future(channel.reap_orphans())
    codes = []
    for i in range(int(sys.argv[2])):
        answer = await channel.start({"id": f"e{i}", "command": "exit 0", "cwd": "/tmp"})
        assert answer["ok"], answer
        await channel.EXECS[f"e{i}"].carrier
        codes.append(channel.ENDED[f"e{i}"]["exit_code"])
    reaper.cancel()
    print(json.dumps(codes))

asyncio.run(main())
"""


def test_an_exec_that_exits_at_once_keeps_its_exit_code():
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(IN_IMAGE), "50"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    codes = json.loads(done.stdout)
    assert len(codes) == 50 and set(codes) == {0}, sorted(set(codes))
