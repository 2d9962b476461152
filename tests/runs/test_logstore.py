"""The run log store: what the agent writes is what every reader reads, whatever happens."""

import os
import threading
import tracemalloc

import pytest

from logs import logstore
from logs.logstore import LogWriter


@pytest.fixture(autouse=True)
def data_dir(settings, tmp_path):
    settings.DATA_DIR = tmp_path
    return tmp_path


def texts(run_id: str, after: int = 0) -> list[str]:
    return [e["text"] for e in logstore.read(run_id, after, limit=1_000_000)]


def test_it_reads_back_what_was_written_and_resumes_after_a_restart():
    assert logstore.read("run1", 0) == [] and logstore.count("run1") == 0
    with LogWriter("run1") as w:
        assert w.append("stdout", b"hello\n", "2025-01-01T00:00:00.1Z") == 1
        assert w.append("stderr", b"oops\n", "2025-01-01T00:00:00.2Z") == 2
        assert w.append_system("exited with 1") == 3
        assert (w.count, w.last_ts, w.total_bytes) == (3, "2025-01-01T00:00:00.2Z", 9)
    assert logstore.read("run1", 0) == [
        {"seq": 1, "stream": "stdout", "text": "hello", "ts": "2025-01-01T00:00:00.1Z"},
        {"seq": 2, "stream": "stderr", "text": "oops", "ts": "2025-01-01T00:00:00.2Z"},
        {"seq": 3, "stream": "system", "text": "exited with 1", "ts": None},
    ]
    odd = 'say "hi" \\ \t \x00 \u2028 ✓ </script>'
    with LogWriter("run1") as w:
        w.append("stdout", odd.encode())
    assert texts("run1", 3) == [odd]  # JSON-escaped on disk, exact when read
    with LogWriter("run1") as again:
        # Entries 3 and 4 have no timestamp: Docker resumes after the last that had one.
        assert (again.count, again.last_ts) == (4, "2025-01-01T00:00:00.2Z")
        assert again.total_bytes == 9 + len(odd.encode())
        assert again.append("stdout", b"more\n") == 5
    assert logstore.count("run1") == 5
    assert texts("run1", 4) == ["more"]


def test_the_files_sit_under_the_data_dir_by_id_prefix(data_dir):
    with LogWriter("abcdef") as w:
        w.append("stdout", b"x\n")
    assert (data_dir / "logs" / "ab" / "abcdef.log").stat().st_size > 0
    assert (data_dir / "logs" / "ab" / "abcdef.idx").stat().st_size == 8
    with pytest.raises(ValueError):
        logstore.read("../etc", 0)


def test_after_is_exclusive_and_limit_exact():
    with LogWriter("run2") as w:
        for n in range(1, 51):
            w.append("stdout", f"line {n}\n".encode())
    for after in range(0, 53):
        for limit in (1, 7, 1000):
            seqs = [e["seq"] for e in logstore.read("run2", after, limit)]
            assert seqs == list(range(after + 1, min(after + limit, 50) + 1))
    assert texts("run2", 49) == ["line 50"]
    # A byte budget shortens a page but never below one entry.
    assert len(logstore.read("run2", 0, 50, max_bytes=1)) == 1


def test_a_chunk_longer_than_the_line_cap_becomes_several_entries(settings):
    settings.RUN_LOG_MAX_LINE = 10
    with LogWriter("run3") as w:
        w.append("stdout", b"abcdefghijklmnopqrstuvwxy\n")
        w.append("stdout", "é".encode() * 8 + b"\n")  # 16 bytes: never cut inside a character
        w.append("stdout", b"\n")
    assert texts("run3") == ["abcdefghij", "klmnopqrst", "uvwxy", "ééééé", "ééé", ""]


def test_a_default_docker_piece_fits_one_entry():
    piece = b"x" * 16384  # Docker splits long lines into 16 KB messages
    with LogWriter("run4") as w:
        w.append("stdout", piece)
        w.append("stdout", piece + b"y" * 100 + b"\n")
    assert [len(t) for t in texts("run4")] == [16384, 16384, 100]


def test_past_the_total_cap_there_is_exactly_one_marker(settings):
    settings.RUN_LOG_MAX_BYTES = 100
    with LogWriter("run5") as w:
        for n in range(30):
            w.append("stdout", b"%09d\n" % n)
        w.append_system("killed: timeout")
        w.append("stderr", b"late\n")
        assert w.truncated and w.total_bytes == 100
    entries = logstore.read("run5", 0, 1000)
    output = [e["text"] for e in entries if e["stream"] != "system"]
    assert "".join(output) == "".join(f"{n:09d}" for n in range(12))[:100]
    assert [e["text"] for e in entries if e["stream"] == "system"] == [
        "[output truncated after 100 bytes]",
        "killed: timeout",
    ]
    with LogWriter("run5") as again:  # the agent restarted: still truncated, no second marker
        assert again.truncated
        again.append("stdout", b"after restart\n")
    assert logstore.count("run5") == len(entries)


def test_invalid_utf8_is_replaced_and_terminal_bytes_are_kept():
    with LogWriter("run6") as w:
        w.append("stdout", b"ok \xff\xfe end\n")
        w.append("stdout", b"\x1b[31mred\x1b[0m\r\n")
        w.append("stdout", b"\xe2\x82")  # a character cut by the sender
    assert texts("run6") == ["ok \ufffd\ufffd end", "\x1b[31mred\x1b[0m\r", "\ufffd"]


def test_it_recovers_from_a_crash_between_the_data_and_index_writes(data_dir):
    with LogWriter("run7") as w:
        for n in range(3):
            w.append("stdout", f"{n}\n".encode(), f"2025-01-01T00:00:0{n}Z")
    data, index = logstore.paths("run7")
    good = data.stat().st_size
    with open(data, "ab") as f:
        f.write(b'{"seq":4,"stream":"stdout","te')  # the data half of a torn append
    with open(index, "ab") as f:
        f.write(b"\x01\x02\x03")  # and a torn index slot
    assert texts("run7") == ["0", "1", "2"]  # readers never saw it
    with LogWriter("run7") as w:
        assert (w.count, w.last_ts) == (3, "2025-01-01T00:00:02Z")
        assert data.stat().st_size == good and index.stat().st_size == 24
        assert w.append("stdout", b"3\n") == 4
    assert [e["seq"] for e in logstore.read("run7", 0)] == [1, 2, 3, 4]
    assert texts("run7") == ["0", "1", "2", "3"]


def test_index_slots_past_the_data_are_dropped_on_open():
    with LogWriter("run8") as w:
        for n in range(3):
            w.append("stdout", f"{n}\n".encode())
    data, _ = logstore.paths("run8")
    os.truncate(data, data.stat().st_size - 3)  # lost data, kept index (a power cut)
    with LogWriter("run8") as w:
        assert w.count == 2
        w.append("stdout", b"again\n")
    assert texts("run8") == ["0", "1", "again"]


def test_a_200_mb_line_in_16_kb_chunks_keeps_memory_flat(settings, data_dir):
    settings.RUN_LOG_MAX_BYTES = 300 * 1024 * 1024  # write all of it, not just the cap
    chunk = b"x" * 16384
    chunks = 200 * 1024 * 1024 // len(chunk)
    tracemalloc.start()
    try:
        with LogWriter("run9") as w:
            for _ in range(chunks):
                w.append("stdout", chunk)
        with LogWriter("run9") as again:  # recovery reads it all, in blocks
            assert again.total_bytes == 200 * 1024 * 1024
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert logstore.count("run9") == chunks
    assert peak < 4 * 1024 * 1024, f"peak {peak} bytes"
    for path in logstore.paths("run9"):
        path.unlink()  # 200 MB: do not leave it in pytest's kept temp dirs


def test_a_reader_beside_the_writer_never_sees_half_an_entry(settings):
    settings.RUN_LOG_MAX_BYTES = 100 * 1024 * 1024  # ~30 MB of varied lengths, uncut
    total = 20_000

    def write() -> None:
        with LogWriter("runa") as w:
            for n in range(1, total + 1):
                w.append("stdout" if n % 3 else "stderr", (f"{n}:" + "z" * (n % 3000)).encode())

    writer = threading.Thread(target=write)
    writer.start()
    cursor, reads = 0, 0
    try:
        while cursor < total:
            for e in logstore.read("runa", cursor, 500):
                n = cursor + 1
                assert e["seq"] == n and e["text"] == f"{n}:" + "z" * (n % 3000)
                cursor = n
            reads += 1
            assert logstore.count("runa") >= cursor
    finally:
        writer.join()
    assert reads > 1  # it really read while the writer wrote
