"""One sandbox's output has a budget on the runner agent (logs/follow.py, Budget): a
session exec's lines travel in frames of many lines and come back one entry a line, in
order; past the budget, lines are dropped and a counted note says so, and the run or
exec still ends as it should. Through the API's log doors, with a real Celery worker
and runner agent on the real Docker engine; the exec under both runtimes.

The budget tests restart the suite's runner agent with a small budget (its settings
come from the environment), and give it back its own at the end.
"""

import re

import pytest

from tests.support import servers
from tests.support.fixtures import Restartable
from tests.support.runs import Agent
from tests.support.sessions import lines

pytestmark = pytest.mark.docker

LINES_PER_S = 2000  # the small budget: a flood of 30,000 lines passes it at once
FLOOD = 30_000
NOTE = re.compile(r"^(\d+) lines dropped: output over the budget")

# Lines of many lengths (whole chunks of the channel hold several hundred), a CRLF line,
# a line longer than a chunk (8192 bytes), and a last line with no newline (a prompt):
# all written at once, under a pipe's capacity, so no line waits on the writer.
SHAPES = (
    "import os\n"
    "lines = ['%d:' % i + 'y' * (i % 23) for i in range(2000)]\n"
    "text = '\\n'.join(lines[:1000]) + '\\ncarriage\\r\\n' + 'L' * 20000 + '\\n'\n"
    "text += '\\n'.join(lines[1000:]) + '\\nprompt> '\n"
    "data = text.encode()\n"
    "while data:\n"
    "    data = data[os.write(1, data):]\n"
)


def shapes() -> list[str]:
    """The entries SHAPES should leave: one a line, a long line in the channel's
    8192-byte pieces, `\\r` kept."""
    short = [f"{i}:" + "y" * (i % 23) for i in range(2000)]
    long = ["L" * 8192, "L" * 8192, "L" * (20000 - 2 * 8192)]
    return [*short[:1000], "carriage\r", *long, *short[1000:], "prompt> "]


@pytest.mark.parametrize("runtime", ["runc", "gvisor"])
def test_an_execs_lines_stay_one_entry_each_in_order_across_frames(agent, runtime):
    session = agent.ready(runtime=runtime)
    row = agent.exec(session, f'python3 -c "{SHAPES}"')
    done = agent.wait_exec(row)
    assert done["exit_code"] == 0, done
    log = agent.log(done)
    assert [e["text"] for e in log if e["stream"] == "stdout"] == shapes()
    assert [e["seq"] for e in log] == list(range(1, len(log) + 1))


@pytest.mark.parametrize("runtime", ["runc", "gvisor"])
def test_an_execs_flood_is_paced_by_the_channel_and_arrives_whole(agent, runtime):
    """Three times what the agent stores at once for a sandbox (a second's worth): the
    channel reads it no faster than the agent stores it, so none is dropped."""
    session = agent.ready(runtime=runtime)
    total = 300_000
    done = agent.wait_exec(agent.exec(session, f"seq 1 {total}", detach=True, status=202))
    assert done["reason"] == "exit_zero", done
    log = agent.log(done)
    assert [e["text"] for e in log] == [str(i) for i in range(1, total + 1)]


@pytest.fixture
def small_budget(run_stack):
    """The suite's runner agent, restarted with a budget of LINES_PER_S a sandbox."""
    run_stack.agent.stop()
    own = run_stack.agent
    run_stack.agent = Restartable(
        lambda: servers.runner_agent({"SANDBOX_LOG_LINES_PER_S": str(LINES_PER_S)})
    )
    try:
        yield
    finally:
        run_stack.agent.stop()
        own.start()
        run_stack.agent = own


def accounted(log: list[dict]) -> list[int]:
    """Checks that each note counts exactly the `seq` numbers missing where it stands
    (stored ones increase, each gap is said by the notes before the next stored line,
    and the end's by the last notes); returns the notes' counts."""
    counts, expected, said = [], 1, 0
    for entry in log:
        note = NOTE.match(entry["text"]) if entry["stream"] == "system" else None
        if note:
            counts.append(int(note.group(1)))
            said += counts[-1]
        elif entry["stream"] == "stdout":
            number = int(entry["text"])
            assert number - expected == said, (number, expected, said)
            expected, said = number + 1, 0
    assert FLOOD + 1 - expected == said, (expected, said)
    return counts


def test_a_runs_flood_past_the_budget_ends_with_a_counted_note(client, cast, shop, small_budget):
    _, secret = cast.token(cast.carol, ["workspace:read", "workspace:write", "run"])
    runs = Agent(client, secret)
    done = runs.wait(runs.run(f"seq 1 {FLOOD}"), timeout=180)
    assert done["state"] == "succeeded", done
    log = runs.log(done)
    counts = accounted(log)
    assert counts and sum(counts) < FLOOD - LINES_PER_S + 1
    assert [e["seq"] for e in log] == list(range(1, len(log) + 1))


@pytest.mark.parametrize("runtime", ["runc", "gvisor"])
def test_an_execs_flood_past_the_budget_ends_with_a_counted_note(agent, runtime, small_budget):
    session = agent.ready(runtime=runtime)
    row = agent.exec(session, f"seq 1 {FLOOD}")
    done = agent.wait_exec(row, timeout=180)
    assert (done["exit_code"], done["reason"]) == (0, "exit_zero"), done
    log = agent.log(done)
    counts = accounted(log)
    assert counts and sum(counts) < FLOOD - LINES_PER_S + 1
    # The session still answers: the next exec's output is whole.
    assert lines(agent.exec(session, "echo after")) == ["after"]
